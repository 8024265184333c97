"""Runtime properties: predictor == allocator, caps hold, and the pool state machine."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import assume
from hypothesis import strategies as st

from kvverify.hypothesis_hooks import given
from kvverify.invariants.allocation import AllocationRecorder, check_allocations
from kvverify.invariants.base import Violation, assert_no_violations
from kvverify.invariants.caps import check_held_within_caps
from kvverify.invariants.pool import check_pool
from kvverify.invariants.scheduling import check_step_budgets, check_step_requests
from kvverify.props.known import check_or_known
from kvverify.props.recorder import recorded
from kvverify.reference.driver import SchedulerLike, WorkloadSpec
from kvverify.reference.planner import StartupPlan
from kvverify.strategies import StartupCase, fine_hash_cases, startup_cases, workloads
from kvverify.targets.base import Feature, Target, require



def allocation_violations(target: Target, plan: StartupPlan, workload: Sequence[WorkloadSpec]) -> list[Violation]:
    """Run ``workload`` on ``plan`` recording every ``allocate_slots``: predictor == allocator
    (:func:`check_allocations`), no admitted step raises from the pool, and every step keeps
    the scheduler's bounds (:mod:`kvverify.invariants.scheduling`)."""
    sched = target.scheduler(plan)
    recorder = AllocationRecorder(sched.kv_cache_manager)
    step_found: list[Violation] = []

    def on_step(s: SchedulerLike, step: int) -> None:  # the per-step scheduler bounds
        if not step_found:
            step_found.extend(check_step_requests(s, plan.vllm_config.max_num_seqs, step))

    result = target.run_workload(plan, workload, scheduler=sched, on_step=on_step)
    found = check_allocations(recorder.records) + step_found
    found += check_step_budgets(result.trace, plan.vllm_config.max_num_batched_tokens)
    if result.error:
        found.append(Violation("allocation.raised", "an admitted step raised from the pool",
                               {"error": result.error, "steps": result.steps}))
    return found

@given(case=startup_cases(allow_auto=False, max_len=256), data=st.data())
@recorded
def test_predictor_equals_allocator(target: Target, case: StartupCase, data) -> None:
    """Every admitted step pulls exactly the blocks it predicted; no admitted step raises."""
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.starts and plan.vllm_config.max_model_len >= 2)
    workload = data.draw(workloads(plan.vllm_config.max_model_len), label="workload")

    check_or_known(target, lambda t: allocation_violations(
        t, t.plan(case.vllm_config, case.kv_cache_specs, case.available_memory), workload))


@given(case=fine_hash_cases(), data=st.data())
@recorded
def test_fine_grained_prefix_hits_predictor_equals_allocator(target: Target, case: StartupCase, data) -> None:
    """The same with hashes finer than the block (``prefix_match_unit``) and prompts that continue
    earlier ones: a hit on a cached partial tail block takes one more block for its copy-on-write
    (``get_num_blocks_to_allocate`` must predict it)."""
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.starts and plan.vllm_config.max_model_len >= 2)
    workload = data.draw(workloads(plan.vllm_config.max_model_len, turns=True), label="workload")
    check_or_known(target, lambda t: allocation_violations(
        t, t.plan(case.vllm_config, case.kv_cache_specs, case.available_memory), workload))


def _held_within_caps(target: Target, case: StartupCase, data) -> None:
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.starts and plan.vllm_config.max_model_len >= 2)
    workload = data.draw(workloads(plan.vllm_config.max_model_len, max_outputs=32), label="workload")
    check_caps_on_workload(target, plan, workload)


def check_caps_on_workload(target: Target, plan: StartupPlan, workload: Sequence[WorkloadSpec]) -> None:
    """Run ``workload`` and check the caps and the pool after every step."""
    require(target, Feature.ADMISSION_CAPS)  # a vLLM release without SWA / chunked admission caps skips
    found: list[Violation] = []

    def on_step(sched: SchedulerLike, step: int) -> None:
        if not found:
            found.extend(check_held_within_caps(sched.kv_cache_manager, plan.vllm_config, step))
            found.extend(check_pool(sched.kv_cache_manager))

    target.run_workload(plan, workload, on_step=on_step)
    assert_no_violations(found)


@given(case=startup_cases(allow_auto=False, kinds=("sliding_window", "full"), allow_mamba=False,
                          max_len=512), data=st.data())
@recorded
def test_held_blocks_within_admission_caps(target: Target, case: StartupCase, data) -> None:
    """After every step, a sliding-window request holds at most its admission cap."""
    _held_within_caps(target, case, data)


@given(case=startup_cases(allow_auto=False, kinds=("chunked_local", "full"), allow_mamba=False,
                          max_len=512), data=st.data())
@recorded
def test_chunked_local_held_blocks_within_admission_caps(target: Target, case: StartupCase, data) -> None:
    """The same for chunked local attention (known finding F2 when ``C % B != 0``)."""
    _held_within_caps(target, case, data)
