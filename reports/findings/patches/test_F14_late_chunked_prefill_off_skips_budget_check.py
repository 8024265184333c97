# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F14: the engine core turns chunked prefill off after
SchedulerConfig.verify_max_model_len ran with it on (non-causal attention
layers; a model without KV cache groups) and never checks the token budget
again, so an engine with max_num_batched_tokens < max_model_len starts and a
longer prompt is never scheduled.

Belongs in tests/v1/engine/test_engine_core_init.py. Runs offline on CPU
(VLLM_TARGET_DEVICE=cpu): it drives the real EngineCore._initialize_kv_caches
and EngineCore.__init__ with stand-in executors, and stops each right after
the hook (the rest needs a model and a device).
"""

from types import SimpleNamespace

import pytest
import torch

import vllm.v1.engine.core as core_mod
from vllm.config import SchedulerConfig
from vllm.v1.engine.core import EngineCore
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig

MAX_MODEL_LEN = 4096
BUDGET_ERROR = r"max_num_batched_tokens \(2048\) is smaller than max_model_len \(4096\)"


class _PastTheHook(Exception):
    """Raised by the stand-ins where startup would need a real model."""


def make_vllm_config(max_num_batched_tokens: int):
    scheduler_config = SchedulerConfig(
        max_model_len=MAX_MODEL_LEN,
        is_encoder_decoder=False,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=8,
        enable_chunked_prefill=True,
    )
    return SimpleNamespace(
        scheduler_config=scheduler_config,
        cache_config=SimpleNamespace(enable_prefix_caching=True),
        model_config=SimpleNamespace(max_model_len=MAX_MODEL_LEN),
        parallel_config=SimpleNamespace(data_parallel_rank_local=0),
    )


class NonCausalExecutor:
    """One prefix-LM attention layer (the HRM-Text shape)."""

    def get_kv_cache_specs(self):
        spec = FullAttentionSpec(
            block_size=16,
            num_kv_heads=1,
            head_size=8,
            dtype=torch.bfloat16,
            non_causal=True,
        )
        return [{"model.layers.0.attn": spec}]

    def get_supported_kv_cache_layouts(self):
        raise _PastTheHook


def initialize_kv_caches(vllm_config):
    engine_core = EngineCore.__new__(EngineCore)
    engine_core.model_executor = NonCausalExecutor()
    engine_core._initialize_kv_caches(vllm_config)


def test_non_causal_late_disable_rechecks_token_budget():
    # 0.33.0 goes on to plan the KV cache (here: _PastTheHook) and starts.
    vllm_config = make_vllm_config(max_num_batched_tokens=2048)
    with pytest.raises(ValueError, match=BUDGET_ERROR):
        initialize_kv_caches(vllm_config)
    assert not vllm_config.scheduler_config.enable_chunked_prefill


def test_non_causal_late_disable_accepts_a_budget_that_fits():
    vllm_config = make_vllm_config(max_num_batched_tokens=MAX_MODEL_LEN)
    with pytest.raises(_PastTheHook):  # reaches the KV cache layout, past the hook
        initialize_kv_caches(vllm_config)
    assert not vllm_config.scheduler_config.enable_chunked_prefill
    assert not vllm_config.cache_config.enable_prefix_caching


def start_without_kv_cache_groups(monkeypatch, vllm_config):
    monkeypatch.setattr(core_mod, "measure_encoder_output_widths", lambda *a, **k: None)
    monkeypatch.setattr(core_mod, "StructuredOutputManager", lambda vllm_config: None)
    monkeypatch.setattr(
        EngineCore,
        "_initialize_kv_caches",
        lambda self, vllm_config: KVCacheConfig(
            num_blocks=1, kv_cache_tensors=[], kv_cache_groups=[]
        ),
    )

    def past_the_hook(*args, **kwargs):
        raise _PastTheHook

    monkeypatch.setattr(core_mod, "resolve_kv_cache_block_sizes", past_the_hook)
    EngineCore(vllm_config, executor_class=lambda vllm_config: object(), log_stats=False)


def test_no_kv_cache_groups_late_disable_rechecks_token_budget(monkeypatch):
    vllm_config = make_vllm_config(max_num_batched_tokens=2048)
    with pytest.raises(ValueError, match=BUDGET_ERROR):
        start_without_kv_cache_groups(monkeypatch, vllm_config)


def test_no_kv_cache_groups_late_disable_accepts_a_budget_that_fits(monkeypatch):
    vllm_config = make_vllm_config(max_num_batched_tokens=MAX_MODEL_LEN)
    with pytest.raises(_PastTheHook):
        start_without_kv_cache_groups(monkeypatch, vllm_config)
    assert not vllm_config.scheduler_config.enable_chunked_prefill
