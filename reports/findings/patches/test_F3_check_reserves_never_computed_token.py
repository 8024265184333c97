# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F3: the startup check reserves a block for the last
token of a generate request, whose KV is never written.

Belongs in tests/v1/core/test_kv_cache_utils.py. Runs offline on CPU
(VLLM_TARGET_DEVICE=cpu): a stand-in replaces ModelConfig (the planner reads
only the fields set below).
"""

from types import SimpleNamespace

import pytest
import torch

from vllm.config import CacheConfig, SchedulerConfig, VllmConfig
from vllm.v1.attention.backends.utils import (
    get_supported_kv_cache_layouts,
    resolve_kv_cache_layout,
)
from vllm.v1.core.kv_cache_planning import (
    get_global_kv_cache_groups,
    get_kv_cache_configs,
)
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.kv_cache_interface import FullAttentionSpec


def make_vllm_config(
    max_model_len: int, block_size: int, runner_type: str = "generate", **cache_kwargs
) -> VllmConfig:
    vllm_config = VllmConfig(
        cache_config=CacheConfig(block_size=block_size, **cache_kwargs),
        scheduler_config=SchedulerConfig(
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            max_num_batched_tokens=max(max_model_len, 8),
            max_num_seqs=8,
        ),
    )
    vllm_config.model_config = SimpleNamespace(
        max_model_len=max_model_len,
        original_max_model_len=max_model_len,
        runner_type=runner_type,
        supports_kv_cache_grouping=False,
        uses_mrope=False,
        is_encoder_decoder=False,
        is_diffusion=False,
        supports_multimodal_inputs=False,
        multimodal_config=None,
    )
    register_all_kvcache_specs(vllm_config)
    return vllm_config


def plan(vllm_config: VllmConfig, kv_cache_specs: dict, available_memory: int):
    layouts = [layout.name for layout in get_supported_kv_cache_layouts([])]
    resolve_kv_cache_layout(vllm_config, [layouts], kv_cache_specs.values())
    groups = get_global_kv_cache_groups(vllm_config, [kv_cache_specs])
    return get_kv_cache_configs(
        vllm_config, [kv_cache_specs], [available_memory], groups
    )[0]


def new_kv_cache_spec(block_size: int) -> FullAttentionSpec:
    return FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float32
    )


def test_check_plans_tokens_whose_kv_is_written():
    # max_model_len 2, block size 1: a generate request is at most 1 prompt
    # token + 1 sampled token, and the sampled token is never fed back, so it
    # writes KV for 1 token. 2 blocks = the null block + 1 usable block.
    spec = new_kv_cache_spec(block_size=1)
    vllm_config = make_vllm_config(
        max_model_len=2, block_size=1, num_gpu_blocks_override=2
    )
    # 0.33.0 refuses: "To serve at least one request with the model's max seq
    # len (2) ..."
    kv_cache_config = plan(vllm_config, {"layer": spec}, 1 << 20)
    assert kv_cache_config.num_blocks == 2
    assert spec.max_memory_usage_bytes(vllm_config) == spec.page_size_bytes


def test_check_plans_max_model_len_for_pooling():
    # A pooling prompt may fill all max_model_len tokens: keep the full bound.
    spec = new_kv_cache_spec(block_size=1)
    vllm_config = make_vllm_config(
        max_model_len=2, block_size=1, runner_type="pooling",
        num_gpu_blocks_override=2,
    )
    with pytest.raises(ValueError, match="max seq len"):
        plan(vllm_config, {"layer": spec}, 1 << 20)
    assert spec.max_memory_usage_bytes(vllm_config) == 2 * spec.page_size_bytes
