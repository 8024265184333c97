# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F6: the public estimate_max_model_len and
check_enough_kv_cache_memory disagree with get_kv_cache_configs.

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
    check_enough_kv_cache_memory,
    estimate_max_model_len,
    get_global_kv_cache_groups,
    get_kv_cache_configs,
)
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec


def make_vllm_config(max_model_len: int, max_num_batched_tokens: int = 2048) -> VllmConfig:
    vllm_config = VllmConfig(
        cache_config=CacheConfig(block_size=16),
        scheduler_config=SchedulerConfig(
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=min(128, max_num_batched_tokens),
        ),
    )
    vllm_config.model_config = SimpleNamespace(
        max_model_len=max_model_len,
        original_max_model_len=max_model_len,
        runner_type="generate",
        supports_kv_cache_grouping=False,
        uses_mrope=False,
        is_encoder_decoder=False,
        is_diffusion=False,
        supports_multimodal_inputs=False,
        multimodal_config=None,
    )
    register_all_kvcache_specs(vllm_config)
    layouts = [layout.name for layout in get_supported_kv_cache_layouts([])]
    resolve_kv_cache_layout(vllm_config, [layouts])
    return vllm_config


def engine_starts(vllm_config: VllmConfig, kv_cache_specs: dict, available_memory: int) -> bool:
    groups = get_global_kv_cache_groups(vllm_config, [dict(kv_cache_specs)])
    try:
        get_kv_cache_configs(vllm_config, [dict(kv_cache_specs)], [available_memory], groups)
    except ValueError:
        return False
    return True


def full(**kwargs) -> FullAttentionSpec:
    return FullAttentionSpec(
        block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float16, **kwargs
    )


def swa() -> SlidingWindowSpec:
    return SlidingWindowSpec(
        block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float16, sliding_window=64
    )


@pytest.mark.parametrize("num_pages", [10, 50, 128, 129])
def test_estimate_max_model_len_is_accepted_by_check_and_engine(num_pages):
    kv_cache_specs = {"layer": full()}
    available_memory = num_pages * kv_cache_specs["layer"].page_size_bytes
    estimate = estimate_max_model_len(make_vllm_config(4096), kv_cache_specs, available_memory)
    # 0.33.0 forgets the null block (128 pages -> 2048), so the check and the
    # engine refuse the estimate for the same memory.
    vllm_config = make_vllm_config(estimate)
    check_enough_kv_cache_memory(vllm_config, kv_cache_specs, available_memory)
    assert engine_starts(make_vllm_config(estimate), kv_cache_specs, available_memory)
    assert not engine_starts(make_vllm_config(estimate + 1), kv_cache_specs, available_memory)


@pytest.mark.parametrize("num_pages", [157, 165, 166])
def test_check_enough_kv_cache_memory_agrees_with_engine(num_pages):
    # Layers F F S S S: grouping pads the 3 sliding-window layers into 2 groups
    # of 2 next to the full-attention group, so the engine needs 82 usable
    # blocks of 2 pages (166 pages with the null block), not the 155 + 2 pages
    # of the per-layer sum.
    kv_cache_specs = {"f0": full(), "f1": full(), "s0": swa(), "s1": swa(), "s2": swa()}
    available_memory = num_pages * kv_cache_specs["f0"].page_size_bytes
    vllm_config = make_vllm_config(1024, max_num_batched_tokens=64)
    starts = engine_starts(make_vllm_config(1024, max_num_batched_tokens=64), kv_cache_specs, available_memory)
    assert starts == (num_pages >= 166)
    if starts:
        check_enough_kv_cache_memory(vllm_config, kv_cache_specs, available_memory)
    else:
        # 0.33.0 passes 157..165 pages
        with pytest.raises(ValueError, match="max seq len"):
            check_enough_kv_cache_memory(vllm_config, kv_cache_specs, available_memory)
