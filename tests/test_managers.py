"""Per-type managers, the coordinator and ``KVCacheManager.allocate_slots``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runtime_helpers import check_runtime, chunked, cross, full, kv_config, mamba, swa

from kvverify import flaws
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec, run_workload
from kvverify.errors import KVVerifyError
from kvverify.reference.kv_cache_manager import KVCacheManager
from kvverify.reference.managers.chunked_local import ChunkedLocalAttentionManager
from kvverify.reference.managers.cross_attention import CrossAttentionManager
from kvverify.reference.managers.full_attention import FullAttentionManager
from kvverify.reference.managers.mamba import MambaManager
from kvverify.reference.managers.sliding_window import SlidingWindowManager
from kvverify.reference.planner import plan_kv_cache
from kvverify.reference.request import Request
from kvverify.reference.scheduler import Scheduler


def make_kvm(num_blocks: int, *specs, max_model_len: int = 1024, caching: bool = False,
             max_in_flight: int = 64, watermark: float = 0.0) -> KVCacheManager:
    sizes = [s.block_size for s in specs]
    return KVCacheManager(kv_config(num_blocks, *specs), max_model_len, max(sizes), min(sizes),
                          max_in_flight_tokens=max_in_flight, enable_caching=caching,
                          watermark=watermark)


def req(rid: str, n: int, max_tokens: int = 8, kvm: KVCacheManager | None = None,
        offset: int = 0) -> Request:
    r = Request(rid, list(range(offset, offset + n)), max_tokens)
    if kvm is not None:
        r.set_block_hasher(kvm.request_block_hasher)
    return r


# --- the two admission examples of the brief ------------------------------------------


def _gemma_like_plan(num_blocks: int):
    """Full + SWA hybrid, L=1024, B=16, W=128, M=F=64: startup bound 64 + 13 blocks."""
    specs = {"full.0": full(), "swa.0": swa(128)}
    vc = VllmConfig(block_size=16, max_model_len=1024, max_num_batched_tokens=64,
                    num_gpu_blocks_override=num_blocks)
    return plan_kv_cache(vc, [specs])


def test_swa_long_prompt_admitted_on_startup_sized_pool() -> None:
    """PR #40946: a pool of exactly the startup bound (64 + 13 + 1 null) admits a prompt
    far longer than the window, and the request completes."""
    plan = _gemma_like_plan(64 + 13 + 1)
    assert plan.starts and plan.blocks_per_group == (64, 13) and plan.num_blocks == 78
    workload = [WorkloadSpec("long", tuple(range(1000)), 24)]  # 1000 + 24 = L
    result = run_workload(plan.vllm_config, plan.kv_cache_config, workload)
    assert result.completed and result.finished == ("long",) and result.preemptions == 0
    assert min(row[3] for row in result.trace) >= 0
    # one block less and the startup check refuses: the bound is tight for this config
    assert not _gemma_like_plan(77).starts


def test_swa_long_prompt_gate_charges_the_cap_not_the_prompt() -> None:
    plan = _gemma_like_plan(78)
    kvm = KVCacheManager.from_config(plan.kv_cache_config, plan.vllm_config)
    r = req("long", 1000, kvm=kvm)
    # full group 63 blocks (1000 tokens) + SWA group capped at 13 = 76 <= 77 free
    assert kvm.get_num_blocks_to_allocate_full(r) == 63 + 13
    assert kvm.allocate_slots(r, 64, full_sequence_must_fit=True) is not None
    with flaws.enabled("swa_admission_uncapped"):
        kvm2 = KVCacheManager.from_config(plan.kv_cache_config, plan.vllm_config)
        assert kvm2.allocate_slots(req("long", 1000, kvm=kvm2), 64,
                                   full_sequence_must_fit=True) is None


def test_pure_swa_pool_serves_prompt_far_longer_than_window() -> None:
    vc = VllmConfig(block_size=16, max_model_len=4096, max_num_batched_tokens=64,
                    num_gpu_blocks_override=14)
    plan = plan_kv_cache(vc, [{"swa.0": swa(128)}])
    assert plan.starts and plan.blocks_per_group == (13,)
    result = run_workload(plan.vllm_config, plan.kv_cache_config,
                          [WorkloadSpec("r", tuple(range(4000)), 16)])
    assert result.completed and result.finished == ("r",)
    assert min(row[3] for row in result.trace) >= 0


def test_full_attention_rejects_oversized_request_on_five_block_pool() -> None:
    kvm = make_kvm(5, full(16), max_model_len=512)
    big = req("big", 100)  # 7 blocks > 4 usable
    assert kvm.allocate_slots(big, 16, full_sequence_must_fit=True) is None
    assert kvm.get_num_free_blocks() == 4 and kvm.get_blocks("big").num_blocks == 0
    fits = req("fits", 64)  # exactly 4 blocks
    blocks = kvm.allocate_slots(fits, 64, full_sequence_must_fit=True)
    assert blocks is not None and blocks.num_blocks == 4 and kvm.get_num_free_blocks() == 0
    check_runtime(kvm)


# --- admission cap: only on the full-sequence gate --------------------------------------


@pytest.mark.parametrize("spec, cap", [(swa(128), 13), (chunked(256), 20)])
def test_admission_cap_applies_only_when_asked(spec, cap: int) -> None:
    kvm = make_kvm(100, spec, max_in_flight=64)
    manager = kvm.coordinator.single_type_managers[0]
    assert manager.max_admission_blocks_per_request == cap
    assert manager.get_num_blocks_to_allocate("r", 1000, [], 0, apply_admission_cap=True) == cap
    assert manager.get_num_blocks_to_allocate("r", 1000, [], 0, apply_admission_cap=False) == 63
    with flaws.enabled("swa_cap_on_allocation"):
        assert manager.get_num_blocks_to_allocate("r", 1000, [], 0) == cap


def test_full_attention_has_no_cap() -> None:
    kvm = make_kvm(100, full())
    manager = kvm.coordinator.single_type_managers[0]
    assert manager.max_admission_blocks_per_request is None
    assert manager.get_num_blocks_to_allocate("r", 1000, [], 0, apply_admission_cap=True) == 63


# --- recycling: skipped tokens and null placeholders --------------------------------------


def test_manager_types_from_specs() -> None:
    kvm = make_kvm(10, full(), swa(32), chunked(64), mamba(16, "align"), cross())
    types = [type(m) for m in kvm.coordinator.single_type_managers]
    assert types == [FullAttentionManager, SlidingWindowManager, ChunkedLocalAttentionManager,
                     MambaManager, CrossAttentionManager]


@pytest.mark.parametrize("n, expected", [(0, 0), (31, 0), (32, 1), (100, 69)])
def test_sliding_window_skipped_tokens(n: int, expected: int) -> None:
    manager = make_kvm(4, swa(32)).coordinator.single_type_managers[0]
    assert manager.get_num_skipped_tokens(n) == expected


@pytest.mark.parametrize("n, expected", [(0, 0), (63, 0), (64, 64), (130, 128)])
def test_chunked_local_skipped_tokens(n: int, expected: int) -> None:
    manager = make_kvm(4, chunked(64)).coordinator.single_type_managers[0]
    assert manager.get_num_skipped_tokens(n) == expected


def test_remove_skipped_blocks_puts_null_blocks_in_place() -> None:
    kvm = make_kvm(20, swa(32), max_model_len=512)
    r = req("r", 100)
    assert kvm.allocate_slots(r, 100) is not None
    r.num_computed_tokens = 100
    free_before = kvm.get_num_free_blocks()
    kvm.remove_skipped_blocks("r", 100)  # skipped 69 tokens -> 4 whole blocks
    table = kvm.get_blocks("r").blocks[0]
    assert [b.is_null for b in table] == [True] * 4 + [False] * 3
    assert kvm.get_num_free_blocks() == free_before + 4
    check_runtime(kvm)
    kvm.free(r)
    assert kvm.get_num_free_blocks() == 19


def test_chunked_local_recycles_finished_chunks() -> None:
    kvm = make_kvm(20, chunked(64), max_model_len=512)
    r = req("r", 200)
    assert kvm.allocate_slots(r, 130) is not None
    r.num_computed_tokens = 130
    assert kvm.allocate_slots(r, 16) is not None  # removes floor(130/64)*64 = 128 tokens
    table = kvm.get_blocks("r").blocks[0]
    assert [b.is_null for b in table] == [True] * 8 + [False] * 2
    check_runtime(kvm)


def test_mamba_none_holds_one_plus_speculative_blocks() -> None:
    kvm = make_kvm(10, mamba(512, "none", spec_blocks=2), max_model_len=512)
    r = req("r", 300)
    assert kvm.allocate_slots(r, 200).num_blocks == 3
    r.num_computed_tokens = 200
    assert kvm.allocate_slots(r, 100).num_blocks == 0
    assert kvm.num_held_blocks("r") == 3
    check_runtime(kvm)


def test_mamba_align_keeps_only_running_states() -> None:
    """Row is position-indexed over the whole sequence, real blocks stay <= 2 + S."""
    kvm = make_kvm(20, mamba(16, "align", spec_blocks=1), max_model_len=512)
    r = req("r", 200, max_tokens=50)
    computed = 0
    peak = 0
    for chunk in (32, 32, 48, 16, 64, 8):
        assert kvm.allocate_slots(r, chunk) is not None
        computed += chunk
        r.num_computed_tokens = computed
        peak = max(peak, kvm.num_held_blocks("r"))
        check_runtime(kvm)
    table = kvm.get_blocks("r").blocks[0]
    assert len(table) == 200 // 16 + 1 + 1  # cdiv(200, 16) + S
    assert peak <= 2 + 1
    kvm.free(r)
    assert kvm.get_num_free_blocks() == 19


def test_cross_attention_allocates_encoder_blocks_once() -> None:
    kvm = make_kvm(20, full(), cross())
    r = req("r", 20)
    blocks = kvm.allocate_slots(r, 20, num_encoder_tokens=100)
    assert [len(g) for g in blocks.blocks] == [2, 7]  # cdiv(20,16), cdiv(100,16)
    r.num_computed_tokens = 20
    r.append_output_token_ids(1)
    blocks = kvm.allocate_slots(r, 1)
    assert [len(g) for g in blocks.blocks] == [0, 0]
    check_runtime(kvm)


def test_free_releases_tail_first_per_group() -> None:
    kvm = make_kvm(10, full(4), max_model_len=64, caching=False)
    r = req("r", 12)
    ids = kvm.allocate_slots(r, 12).get_block_ids()[0]
    kvm.free(r)
    assert kvm.block_pool.free_block_ids()[:3] == list(reversed(ids))


# --- watermark and prefix hits -----------------------------------------------------------


def test_watermark_applies_only_when_something_runs() -> None:
    kvm = make_kvm(11, full(16), max_model_len=512, watermark=0.2)  # int(0.2 * 11) = 2
    assert kvm.watermark_blocks == 2
    r = req("r", 160)  # 10 blocks == all usable
    assert kvm.allocate_slots(r, 160, full_sequence_must_fit=True,
                              has_scheduled_reqs=True) is None
    assert kvm.allocate_slots(r, 160, full_sequence_must_fit=True,
                              has_scheduled_reqs=False) is not None


def test_prefix_hit_counts_evictable_blocks_and_touches_them() -> None:
    kvm = make_kvm(8, full(4), max_model_len=64, caching=True)
    a = req("a", 13, kvm=kvm)
    assert kvm.allocate_slots(a, 13) is not None
    a.num_computed_tokens = 13
    kvm.free(a)  # 3 full hashed blocks now sit in the free queue
    b = req("b", 13, kvm=kvm)
    hit_blocks, hit, _ = kvm.get_computed_blocks(b)
    assert hit == 12 and hit_blocks.num_blocks == 3
    # the 3 hits are evictable: they cost 3 free blocks, plus 1 for the 13th token
    full_need = kvm.get_num_blocks_to_allocate_full(b, hit_blocks, hit)
    assert full_need == 4
    assert kvm.allocate_slots(b, 1, num_new_computed_tokens=hit,
                              new_computed_blocks=hit_blocks) is not None
    assert kvm.last_allocation == (4, 4)
    check_runtime(kvm)
    with flaws.enabled("evictable_hits_not_counted"):
        assert kvm.coordinator.get_num_blocks_to_allocate(
            "c", 13, hit_blocks.blocks, 0, 12, 13) == 1


# --- bad input ------------------------------------------------------------------------------


def test_bad_manager_inputs_are_clear_errors() -> None:
    with pytest.raises(KVVerifyError, match="watermark"):
        make_kvm(4, full(), watermark=1.5)
    with pytest.raises(KVVerifyError, match="num_gpu_blocks"):
        make_kvm(0, full())
    with pytest.raises(KVVerifyError, match="max_model_len"):
        make_kvm(4, full(), max_model_len=0)
    kvm = make_kvm(4, full())
    with pytest.raises(KVVerifyError, match="num_new_tokens"):
        kvm.allocate_slots(req("r", 4), -1)
    with pytest.raises(KVVerifyError, match="num_new_tokens"):
        kvm.allocate_slots(req("r", 4), 0)
    with pytest.raises(KVVerifyError, match="divisible by hash_block_size"):
        KVCacheManager(kv_config(8, full(16), swa(32, 24)), 512, 48, 16)


# --- predictor == allocator, on random workloads -----------------------------------------

SPEC_MIXES = {
    "full": lambda: [full()],
    "swa": lambda: [swa(48)],
    "chunked": lambda: [chunked(64)],
    "full+swa": lambda: [full(), swa(40)],
    "full+swa32": lambda: [full(16), swa(64, 32)],
    "full+chunked": lambda: [full(), chunked(32)],
    "mamba_none": lambda: [full(), mamba(256, "none", 1)],
    "mamba_align": lambda: [full(), mamba(16, "align", 0)],
    "mamba_align_spec": lambda: [full(), mamba(16, "align", 2)],
}


@st.composite
def runtime_cases(draw):
    mix = draw(st.sampled_from(sorted(SPEC_MIXES)))
    specs = SPEC_MIXES[mix]()
    align = "align" in mix
    caching = False if mix == "mamba_none" else (True if align else draw(st.booleans()))
    num_blocks = draw(st.integers(2, 48))
    budget = draw(st.sampled_from([8, 16, 24, 64]))
    lookahead = 0 if align else draw(st.integers(0, 3))
    n_req = draw(st.integers(1, 4))
    base = draw(st.integers(0, 3))
    workload = []
    for i in range(n_req):
        shared = draw(st.integers(0, 80))
        own = draw(st.integers(1, 120))
        prompt = tuple(range(base, base + shared)) + tuple(1000 * (i + 1) + j for j in range(own))
        workload.append(WorkloadSpec(f"r{i}", prompt, draw(st.integers(1, 40)),
                                     draw(st.integers(0, 6))))
    vc = VllmConfig(block_size=16, max_model_len=256, max_num_batched_tokens=budget,
                    max_num_seqs=draw(st.integers(1, 4)), enable_prefix_caching=caching,
                    mamba_cache_mode="align" if align else "none",
                    num_lookahead_tokens=lookahead,
                    watermark=draw(st.sampled_from([0.0, 0.0, 0.1])))
    return vc, kv_config(num_blocks, *specs), workload


@given(runtime_cases())
def test_predictor_equals_allocator_on_random_steps(case) -> None:
    """Every successful allocate_slots pulls exactly the blocks its per-step prediction
    counted; no admitted step raises; block conservation holds after every step."""
    vc, kv_cache_config, workload = case
    sched = Scheduler(vc, kv_cache_config)
    kvm = sched.kv_cache_manager
    original = kvm.allocate_slots
    checked = []

    def checked_allocate(*args, **kwargs):
        result = original(*args, **kwargs)
        if result is not None:
            predicted, pulled = kvm.last_allocation
            assert predicted == pulled, (predicted, pulled)
            checked.append(pulled)
        check_runtime(kvm)
        return result

    kvm.allocate_slots = checked_allocate  # type: ignore[method-assign]
    result = run_workload(vc, kv_cache_config, workload, scheduler=sched)
    assert result.error is None
    check_runtime(kvm)
    if result.completed:
        assert set(result.finished) == {w.request_id for w in workload}
        assert kvm.get_num_free_blocks() == kv_cache_config.num_blocks - 1
    else:
        assert result.stall_reason in {"head_of_line", "no_tokens_scheduled", "no_progress"}
