"""The FCFS scheduler step and the workload driver."""

from __future__ import annotations

import pytest
from runtime_helpers import check_runtime, chunked, full, kv_config, mamba

from kvverify import flaws
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec, run_workload
from kvverify.errors import KVVerifyError
from kvverify.reference.planner import plan_kv_cache
from kvverify.reference.request import Request, RequestStatus, fake_output_token
from kvverify.reference.scheduler import Scheduler


def seed_config(**kw) -> VllmConfig:
    base = {"block_size": 16, "max_model_len": 512, "max_num_batched_tokens": 512}
    base.update(kw)
    return VllmConfig(**base)


def spec_req(rid: str, prompt: int, max_tokens: int, arrival: int = 0, offset: int = 0):
    return WorkloadSpec(rid, tuple(range(offset, offset + prompt)), max_tokens, arrival)


# --- the seed scenario (#35541 / #47272) -----------------------------------------------------


@pytest.mark.parametrize("prompt", [500, 256, 100])
def test_seed_32_blocks_stalls_33_blocks_finishes(prompt: int) -> None:
    """B=16, L=512: a request reaching 512 tokens needs 32 usable blocks. With 32 blocks
    (31 usable, the null block is kept) it ends at the head of the waiting queue with
    nothing running - 0 tok/s forever; with 33 blocks it finishes."""
    workload = [spec_req("r0", prompt, 512 - prompt)]
    stalled = run_workload(seed_config(), kv_config(32, full(16)), workload)
    assert stalled.stalled and stalled.stall_reason == "head_of_line"
    assert (stalled.running, stalled.waiting) == (0, 1)
    assert stalled.stalled_request_ids == ("r0",) and stalled.finished == ()
    assert stalled.trace[-1][1:3] == (0, 1) and stalled.trace[-1][4] == 0
    done = run_workload(seed_config(), kv_config(33, full(16)), workload)
    assert done.completed and done.finished == ("r0",)
    assert done.num_output_tokens == 512 - prompt
    assert min(row[3] for row in done.trace) == 0  # it really used all 32 usable blocks


def test_seed_scenario_through_the_startup_plan() -> None:
    """The planner refuses 32 blocks and accepts 33; the accepted plan serves L."""
    specs = [{"layer.0": full(16)}]
    assert not plan_kv_cache(seed_config(num_gpu_blocks_override=32), specs).starts
    plan = plan_kv_cache(seed_config(num_gpu_blocks_override=33), specs)
    assert plan.starts
    result = run_workload(plan.vllm_config, plan.kv_cache_config, [spec_req("r", 256, 256)])
    assert result.completed


# --- FCFS mechanics --------------------------------------------------------------------------


def make_sched(num_blocks: int, *specs, **kw) -> Scheduler:
    specs = specs or (full(16),)
    vc = seed_config(**{"block_size": specs[0].block_size, **kw})
    return Scheduler(vc, kv_config(num_blocks, *specs))


def add(sched: Scheduler, rid: str, prompt: int, max_tokens: int, offset: int = 0) -> Request:
    r = Request(rid, list(range(offset, offset + prompt)), max_tokens)
    sched.add_request(r)
    return r


def test_chunked_prefill_then_one_token_per_step() -> None:
    sched = make_sched(20, max_num_batched_tokens=32)
    r = add(sched, "r", 100, 3)
    chunks = [sched.step()[0].num_scheduled_tokens["r"] for _ in range(6)]
    assert chunks == [32, 32, 32, 4, 1, 1]
    assert r.status is RequestStatus.FINISHED_LENGTH_CAPPED and r.num_output_tokens == 3
    assert r.output_token_ids == [fake_output_token("r", n) for n in (100, 101, 102)]
    assert sched.kv_cache_manager.get_num_free_blocks() == 19


def test_last_running_request_is_preempted_to_front_of_waiting() -> None:
    sched = make_sched(5, full(4), max_model_len=64, max_num_batched_tokens=64)
    add(sched, "a", 6, 20)          # 2 blocks
    b = add(sched, "b", 7, 20, offset=100)  # 2 blocks -> pool (4 usable) is full
    sched.step()
    assert [r.request_id for r in sched.running] == ["a", "b"]
    for _ in range(3):
        out, _ = sched.step()
        if out.preempted_reqs:
            break
    assert out.preempted_reqs == ["b"]  # FCFS: the last one goes
    assert sched.waiting[0] is b and b.status is RequestStatus.PREEMPTED
    assert b.num_computed_tokens == 0 and b.num_preemptions == 1
    assert sched.kv_cache_manager.get_blocks("b").num_blocks == 0
    assert out.scheduled_new_reqs == [] and "a" in out.num_scheduled_tokens
    check_runtime(sched.kv_cache_manager)


def test_request_preempting_itself_stops_the_running_pass() -> None:
    sched = make_sched(3, full(4), max_model_len=64)
    r = add(sched, "solo", 7, 10)  # 2 blocks = all usable; the 9th token needs a 3rd
    preempted = []
    for _ in range(4):
        out, _ = sched.step()
        preempted += out.preempted_reqs
    assert preempted == ["solo"]
    assert r.status is RequestStatus.PREEMPTED and sched.running == []


def test_head_of_line_blocking() -> None:
    sched = make_sched(9, full(16), max_model_len=512)
    add(sched, "small", 60, 50)                # 4 blocks, runs
    add(sched, "big", 100, 5, offset=1000)     # 7 blocks: does not fit beside it
    add(sched, "tiny", 10, 5, offset=2000)     # would fit, but is behind "big"
    out, _ = sched.step()
    assert out.scheduled_new_reqs == ["small"]
    assert [r.request_id for r in sched.waiting] == ["big", "tiny"]
    out, _ = sched.step()
    assert list(out.num_scheduled_tokens) == ["small"]


def test_max_num_seqs_caps_running() -> None:
    sched = make_sched(40, max_num_seqs=2)
    for i in range(4):
        add(sched, f"r{i}", 10, 5, offset=100 * i)
    sched.step()
    assert len(sched.running) == 2 and len(sched.waiting) == 2


def test_no_admission_in_a_step_with_preemption() -> None:
    sched = make_sched(5, full(4), max_model_len=64, max_num_batched_tokens=64)
    add(sched, "a", 6, 20)
    add(sched, "b", 7, 20, offset=100)
    sched.step()
    add(sched, "c", 1, 1, offset=200)  # trivially small
    for _ in range(3):
        out, _ = sched.step()
        if out.preempted_reqs:
            break
    assert out.preempted_reqs and "c" not in out.num_scheduled_tokens


def test_prompt_must_leave_room_for_one_output_token() -> None:
    sched = make_sched(40)
    with pytest.raises(KVVerifyError, match=r"prompt length must be in \[1, 511\]"):
        add(sched, "r", 512, 1)
    with pytest.raises(KVVerifyError, match="prompt"):
        Request("r", [], 1)
    with pytest.raises(KVVerifyError, match="max_tokens"):
        Request("r", [1], 0)
    add(sched, "ok", 5, 1)
    with pytest.raises(KVVerifyError, match="unique"):
        add(sched, "ok", 5, 1)


def test_length_cap_at_max_model_len() -> None:
    sched = make_sched(40, max_model_len=64)
    r = add(sched, "r", 60, 100)
    while sched.has_unfinished_requests():
        sched.step()
    assert r.num_tokens == 64 and r.num_output_tokens == 4


def test_prefix_cache_hit_skips_recompute() -> None:
    sched = make_sched(20, full(16), enable_prefix_caching=True)
    add(sched, "a", 64, 1)
    sched.step()
    b = add(sched, "b", 70, 1)  # shares the first 64 tokens
    out, _ = sched.step()
    assert out.num_scheduled_tokens["b"] == 70 - 64
    assert b.num_output_tokens == 1


# --- Mamba align chunking (#34445) ------------------------------------------------------------


def mamba_sched(block_size: int, budget: int, num_blocks: int = 40) -> Scheduler:
    vc = VllmConfig(block_size=block_size, max_model_len=512, max_num_batched_tokens=budget,
                    mamba_cache_mode="align", enable_prefix_caching=True)
    return Scheduler(vc, kv_config(num_blocks, full(block_size), mamba(block_size, "align")))


def test_mamba_align_chunks_end_on_block_boundaries() -> None:
    sched = mamba_sched(16, 40)
    r = add(sched, "r", 100, 2)
    assert sched._mamba_block_aligned_split(r, 40) == 32
    chunks = [sched.step()[0].num_scheduled_tokens["r"] for _ in range(4)]
    assert chunks == [32, 32, 32, 4]


def test_mamba_align_block_larger_than_budget_still_progresses() -> None:
    """0.33.0: with block_size > max_num_batched_tokens the chunk advances sub-block and
    re-aligns at the next boundary, instead of rounding down to 0 (#34445)."""
    sched = mamba_sched(64, 48)
    r = add(sched, "r", 150, 2)
    assert sched._mamba_block_aligned_split(r, 48) == 48
    with flaws.enabled("mamba_align_zero_chunk"):
        assert sched._mamba_block_aligned_split(r, 48) == 0
    chunks = [sched.step()[0].num_scheduled_tokens["r"] for _ in range(5)]
    assert chunks == [48, 16, 48, 16, 22]  # stops at 64 and 128 (block ends), then the rest
    vc = sched.vllm_config
    workload = [spec_req("r", 300, 20)]
    assert run_workload(vc, kv_config(40, full(64), mamba(64, "align")), workload).completed
    with flaws.enabled("mamba_align_zero_chunk"):
        hung = run_workload(vc, kv_config(40, full(64), mamba(64, "align")), workload)
    assert hung.stalled and hung.stall_reason == "head_of_line"


# --- driver ------------------------------------------------------------------------------------


def test_driver_is_deterministic_and_bounded() -> None:
    workload = [spec_req(f"r{i}", 40 + 17 * i, 30 + i, arrival=2 * i, offset=50 * (i % 2))
                for i in range(6)]
    cfg = seed_config(max_num_batched_tokens=48, enable_prefix_caching=True)
    first = run_workload(cfg, kv_config(24, full(16)), workload)
    second = run_workload(cfg, kv_config(24, full(16)), workload)
    assert first == second
    assert first.completed and len(first.finished) == 6 and first.preemptions > 0
    assert all(len(row) == 5 for row in first.trace) and first.steps == len(first.trace)


def test_driver_respects_arrival_steps() -> None:
    workload = [spec_req("early", 10, 3), spec_req("late", 10, 3, arrival=50, offset=99)]
    result = run_workload(seed_config(), kv_config(10, full(16)), workload)
    assert result.finished == ("early", "late") and result.completed
    assert result.steps >= 50 + 3
    result = run_workload(seed_config(), kv_config(10, full(16)), workload,
                          arrival_steps=[5, 0])
    assert result.finished == ("late", "early")
    with pytest.raises(KVVerifyError, match="arrival_steps"):
        run_workload(seed_config(), kv_config(10, full(16)), workload, arrival_steps=[0])


def test_driver_reports_endless_preempt_reprefill_loop() -> None:
    """Found by kvverify: the chunked-local admission cap (and startup bound) ignores
    ``num_lookahead_tokens``. On a startup-sized pool the request is admitted, needs
    one block more than the pool has mid-prefill, preempts itself, is re-admitted...
    The driver reports it as ``no_progress`` within its bounded window."""
    vc = VllmConfig(block_size=32, max_model_len=512, max_num_batched_tokens=8,
                    num_lookahead_tokens=1, num_gpu_blocks_override=2,
                    enable_prefix_caching=False)
    plan = plan_kv_cache(vc, [{"layer.0": chunked(16, 32)}])
    assert plan.starts and plan.blocks_per_group == (1,)
    result = run_workload(plan.vllm_config, plan.kv_cache_config, [spec_req("r", 100, 50)])
    assert result.stalled and result.stall_reason == "no_progress"
    assert result.preemptions >= 10 and result.finished == ()
    # without lookahead slots the same pool serves it
    plan0 = plan_kv_cache(VllmConfig(**{**vc.__dict__, "num_lookahead_tokens": 0}),
                          [{"layer.0": chunked(16, 32)}])
    assert run_workload(plan0.vllm_config, plan0.kv_cache_config,
                        [spec_req("r", 100, 50)]).completed


def test_driver_step_limit_is_a_stall_not_a_hang() -> None:
    result = run_workload(seed_config(), kv_config(40, full(16)), [spec_req("r", 100, 50)],
                          max_steps=10)
    assert result.stalled and result.stall_reason == "max_steps" and result.steps == 10
