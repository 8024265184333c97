"""Every flaw's shrunk counterexample, kept as an explicit regression case.

Each case passes on the faithful reference and fails with its flaw on, so the
deterministic CI gate always replays it (bug-zoo issue, item 4). The numbers are the
minimal boundaries the properties shrank to (see ``kvverify zoo``).
"""

from __future__ import annotations

import pytest

from kvverify import flaws
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec
from kvverify.errors import ConfigError
from kvverify.invariants.admission import check_admitted_on_empty_pool, check_workload_completes
from kvverify.invariants.allocation import AllocationRecorder, check_allocations
from kvverify.invariants.block_sizes import check_block_sizes
from kvverify.invariants.startup import check_auto_fit, check_startup_vs_runtime
from kvverify.props.validation import _pipeline
from kvverify.reference.scheduler import Scheduler
from kvverify.reference.specs import FullAttentionSpec, MambaSpec, SlidingWindowSpec
from kvverify.strategies import StartupCase
from kvverify.targets import get_target

T = get_target("reference")


def full(b: int = 16) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=b, num_kv_heads=1, head_size=8, dtype="float16")


def swa(w: int, b: int = 16) -> SlidingWindowSpec:
    return SlidingWindowSpec(block_size=b, num_kv_heads=1, head_size=8, dtype="float16", sliding_window=w)


def startup_violations(config: VllmConfig, specs: dict) -> list:
    return check_startup_vs_runtime(T, T.plan(config, [specs]), 1, check_strictness=False)


def allocation_violations(config: VllmConfig, specs: dict, workload: list) -> list:
    """Run ``workload``; predictor != allocator, or an allocator exception, is a violation."""
    plan = T.plan(config, [specs])
    sched = Scheduler(plan.vllm_config, plan.kv_cache_config)
    recorder = AllocationRecorder(sched.kv_cache_manager)
    result = T.run_workload(plan, workload, scheduler=sched)
    return check_allocations(recorder.records) + ([result.error] if result.error else [])


def both_ways(flaw: str, violations) -> None:
    assert violations() == [], "the faithful reference must pass"
    with flaws.enabled(flaw):
        assert violations(), f"{flaw} must be caught"


def test_seed_hang_end_to_end() -> None:
    """#35541: with the flaw the check passes for 32 blocks / L=512 / B=16, then 0 tok/s."""
    specs = {f"layer.{i}": full() for i in range(2)}
    config = VllmConfig(block_size=16, max_model_len=512, num_gpu_blocks_override=32)
    assert not T.plan(config, [specs]).starts
    with flaws.enabled("null_block_not_reserved"):
        plan = T.plan(config, [specs])
        assert plan.starts and plan.num_blocks == 32
        from kvverify.reference.workloads import full_length_request
        result = T.run_workload(plan, [full_length_request(512, 1)])
    assert result.stalled and result.stall_reason == "head_of_line"
    assert (result.running, result.waiting) == (0, 1) and result.free_blocks == 31


def test_override_ignored_in_check() -> None:
    config = VllmConfig(block_size=16, max_model_len=2, num_gpu_blocks_override=1,
                        kv_cache_memory_bytes=2**20)
    both_ways("override_ignored_in_check", lambda: startup_violations(config, {"l0": full()}))


def test_null_block_not_reserved() -> None:
    config = VllmConfig(block_size=16, max_model_len=2, gpu_memory_bytes=2 * 512, gpu_memory_utilization=0.5)
    both_ways("null_block_not_reserved", lambda: startup_violations(config, {"l0": full()}))


def test_autofit_ignores_null_block() -> None:
    specs = {f"layer.{i}": full() for i in range(2)}
    config = VllmConfig(block_size=16, max_model_len=-1, max_position_embeddings=4096,
                        kv_cache_memory_bytes=64 * 1024)
    assert T.plan(config, [specs]).vllm_config.max_model_len == 1008
    both_ways("autofit_ignores_null_block", lambda: check_auto_fit(T, T.plan(config, [specs]), [specs]))


def test_autofit_first_group_only() -> None:
    specs = {"l0": full(), "l1": swa(16)}
    config = VllmConfig(block_size=16, max_model_len=-1, max_position_embeddings=2,
                        num_gpu_blocks_override=3, kv_cache_memory_bytes=1)
    both_ways("autofit_first_group_only", lambda: check_auto_fit(T, T.plan(config, [specs]), [specs]))


def test_swa_admission_uncapped() -> None:
    # cap = cdiv(min(16 - 1 + 8, 96), 16) + 1 = 3 blocks; startup passes with 4 blocks;
    # uncapped, a 95-token prompt is charged cdiv(95, 16) = 6 > 3 free: refused forever.
    config = VllmConfig(block_size=16, max_model_len=96, max_num_batched_tokens=8, num_gpu_blocks_override=4)
    specs = {"l0": swa(16)}
    both_ways("swa_admission_uncapped", lambda: check_admitted_on_empty_pool(T, T.plan(config, [specs]), 95))


def test_swa_cap_on_allocation() -> None:
    # window 1, B = 8, M = 8: the cap cdiv(min(0 + 8, 24), 8) + 1 = 2 clamps the third
    # prefill chunk's prediction to 0 while the allocator still pulls a block
    config = VllmConfig(block_size=8, max_model_len=24, max_num_batched_tokens=8, num_gpu_blocks_override=3,
                        enable_prefix_caching=False)
    specs = {"l0": swa(1, 8)}
    workload = [WorkloadSpec("r0", tuple(range(17)), 1)]

    both_ways("swa_cap_on_allocation", lambda: allocation_violations(config, specs, workload))


def test_mamba_hash_fallback_by_block_size() -> None:
    from kvverify.reference.grouping import KVCacheGroupSpec
    from kvverify.reference.planner import KVCacheConfig
    groups = (KVCacheGroupSpec(("attn",), full(16)),
              KVCacheGroupSpec(("mamba",), MambaSpec(block_size=544, shapes=((4, 4),), dtypes=("float32",),
                                                     mamba_cache_mode="align")))
    kc = KVCacheConfig(8, (), groups)
    config = VllmConfig(block_size=16, max_model_len=4096, mamba_cache_mode="align")
    both_ways("mamba_hash_fallback_by_block_size", lambda: check_block_sizes(kc, config))


def test_mamba_align_zero_chunk() -> None:
    # pure Mamba in align mode, block size 16 > budget 8: the aligned chunk must not round to 0
    spec = MambaSpec(block_size=16, shapes=((1, 4), (1,)), dtypes=("bfloat16", "float32"), mamba_cache_mode="align")
    config = VllmConfig(block_size=16, max_model_len=16, max_num_batched_tokens=8, num_gpu_blocks_override=3,
                        mamba_cache_mode="align")
    workload = [WorkloadSpec("r0", tuple(range(12)), 2)]
    both_ways("mamba_align_zero_chunk",
              lambda: check_workload_completes(T, T.plan(config, [{"m0": spec}]), workload))


def test_no_positive_validation() -> None:
    case = StartupCase(VllmConfig(block_size=16, max_model_len=2, num_gpu_blocks_override=2), ({"l0": full()},),
                       "override")
    with pytest.raises(ConfigError, match="block_size"):
        _pipeline(T, case, "block_size", 0)
    with flaws.enabled("no_positive_validation"), pytest.raises(ZeroDivisionError):
        _pipeline(T, case, "block_size", 0)


def test_evictable_hits_not_counted() -> None:
    # two requests share a 4-token prefix; the first finishes, its cached block sits in the
    # free queue; admitting the second must count touching it (3 blocks, B = 4).
    config = VllmConfig(block_size=4, max_model_len=8, num_gpu_blocks_override=3)
    specs = {"l0": full(4)}
    workload = [WorkloadSpec("r0", (1, 2, 3, 4, 5), 1), WorkloadSpec("r1", (1, 2, 3, 4, 9, 9), 1, 3)]

    both_ways("evictable_hits_not_counted", lambda: allocation_violations(config, specs, workload))
