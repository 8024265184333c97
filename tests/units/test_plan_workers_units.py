"""``plan_kv_cache`` across workers and for a model without KV cache layers (docs/mutation.md).

Exact values from upstream 0.33.0's ``get_kv_cache_configs`` (``kv_cache_planning.py``:
a worker without groups gets ``KVCacheConfig(num_blocks=1, [], [])`` and its memory as given;
every worker is re-planned at the smallest worker's block count) and
``EngineCore._initialize_kv_caches`` (``cache_config.block_size`` becomes the smallest
prefix-cacheable group block size). The plans of the first two tests were also compared
with the pinned vLLM's planner through the vLLM target: the same memory, check memory,
block counts, tensor sizes and lengths.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvverify import fixes
from kvverify.reference.config import VllmConfig
from kvverify.reference.planner import KVCacheConfig, plan_kv_cache
from kvverify.reference.specs import FullAttentionSpec, SlidingWindowSpec

F16 = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)  # page 2*16*1*8*2 = 512 B
F32 = FullAttentionSpec(block_size=32, num_kv_heads=1, head_size=8)  # page 1024 B


def test_model_without_kv_cache_layers() -> None:
    """No groups: nothing to check, the memory as given (no null block), one placeholder block."""
    empty = KVCacheConfig(num_blocks=1, kv_cache_tensors=(), kv_cache_groups=())
    plan = plan_kv_cache(VllmConfig(block_size=16, max_model_len=64), ({},), (10**6,))
    assert plan.starts and plan.error is None
    assert plan.available_memory == (10**6,) and plan.check_memory == (10**6,)
    assert plan.kv_cache_configs == (empty,) and plan.groups == () and plan.bytes_per_block == 0
    assert plan.vllm_config.block_size == 16
    auto = plan_kv_cache(VllmConfig(block_size=16, max_model_len=-1, max_position_embeddings=64), ({},), (10**6,))
    assert auto.starts and auto.auto_fit_max_model_len == 64 and auto.vllm_config.max_model_len == 64
    assert auto.available_memory == (10**6,) and auto.check_memory == (10**6,)
    assert auto.kv_cache_configs == (empty,)
    for kw in ({"max_model_len": 64}, {"max_model_len": -1, "max_position_embeddings": 64}):
        # with num_gpu_blocks_override: the memory of a worker without groups is still the
        # memory given (not override x 0 bytes per block)
        over = plan_kv_cache(VllmConfig(block_size=16, num_gpu_blocks_override=5, **kw), ({},), (10**6,))
        assert over.starts and over.available_memory == (10**6,) and over.check_memory == (10**6,)
        assert over.vllm_config.max_model_len == 64 and over.kv_cache_configs == (empty,)


def test_workers_are_planned_at_the_smallest_block_count() -> None:
    """Two pipeline stages, 9 and 6 blocks of memory: both get 6 blocks and 6-block tensors
    (the first worker is re-planned, not just relabelled)."""
    memory = (512 * 9 + 5, 512 * 6)
    plan = plan_kv_cache(VllmConfig(block_size=16, max_model_len=64), ({"a": F16}, {"b": F16}), memory)
    assert plan.starts
    assert plan.available_memory == memory
    assert plan.check_memory == (512 * 8 + 5, 512 * 5)  # the check reserves the null block
    assert [c.num_blocks for c in plan.kv_cache_configs] == [6, 6]
    assert [[t.size for t in c.kv_cache_tensors] for c in plan.kv_cache_configs] == [[512 * 6], [512 * 6]]
    assert [[t.layers for t in c.kv_cache_tensors] for c in plan.kv_cache_configs] == [[("a",)], [("b",)]]


def test_engine_block_size_is_the_smallest_group_block_size() -> None:
    """``cache_config.block_size`` 16, the only group's block size 32: the engine runs at 32."""
    plan = plan_kv_cache(VllmConfig(block_size=16, max_model_len=64), ({"a": F32},), (1024 * 9,))
    assert plan.starts and plan.vllm_config.block_size == 32
    assert plan.kv_cache_configs[0].num_blocks == 9
    same = plan_kv_cache(VllmConfig(block_size=32, max_model_len=64), ({"a": F32},), (1024 * 9,))
    assert same.vllm_config.block_size == 32


@pytest.mark.parametrize("override", [None, 5])
def test_pipeline_stage_without_kv_cache_layers_divides_by_zero(override) -> None:
    """Finding F15: 0.33.0 probes the 0 bytes per block of a stage whose groups hold no layer
    (with an override at the override adjustment, without at the check memory)."""
    config = VllmConfig(block_size=16, max_model_len=64, num_gpu_blocks_override=override)
    with pytest.raises(ZeroDivisionError):
        plan_kv_cache(config, ({"l0": F16}, {}), (10240, 10**6))


def test_pipeline_stage_without_kv_cache_layers_under_the_fix() -> None:
    """Under ``kv_less_stage_planned`` the stage is planned as holding no KV cache: its memory as
    given, no check, no tensors, its empty group kept, the KV worker's block count (the same
    memory, check memory, block counts, tensor sizes and groups as the F15-patched 0.33.0
    planner through the vLLM target)."""
    config = VllmConfig(block_size=16, max_model_len=64)
    with fixes.enabled("kv_less_stage_planned"):
        plan = plan_kv_cache(config, ({"l0": F16}, {}), (10240, 10**6))
        over = plan_kv_cache(replace(config, num_gpu_blocks_override=5), ({}, {"l0": F16}), (10**6, 10240))
    assert plan.starts and over.starts
    assert plan.available_memory == (10240, 10**6) and plan.check_memory == (10240 - 512, 10**6)
    assert [c.num_blocks for c in plan.kv_cache_configs] == [20, 20]
    assert [[t.size for t in c.kv_cache_tensors] for c in plan.kv_cache_configs] == [[20 * 512], []]
    assert [[g.layer_names for g in c.kv_cache_groups] for c in plan.kv_cache_configs] == [[("l0",)], [()]]
    assert over.available_memory == (10**6, 5 * 512) and over.check_memory == (10**6, 4 * 512)
    assert [c.num_blocks for c in over.kv_cache_configs] == [5, 5]
    assert [[t.size for t in c.kv_cache_tensors] for c in over.kv_cache_configs] == [[], [5 * 512]]


def test_fix_leaves_a_stage_holding_one_groups_layers_alone() -> None:
    """A hybrid split (full attention on one stage, sliding window on the other): each stage's
    other group is empty, but the stage holds KV cache; the fix changes nothing."""
    window = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=8, sliding_window=32)
    config = VllmConfig(block_size=16, max_model_len=64, enable_prefix_caching=False)
    plain = plan_kv_cache(config, ({"l0": F16}, {"l1": window}), (10240, 10240))
    with fixes.enabled("kv_less_stage_planned"):
        assert plan_kv_cache(config, ({"l0": F16}, {"l1": window}), (10240, 10240)) == plain
    assert plain.starts and [c.num_blocks for c in plain.kv_cache_configs] == [20, 20]
