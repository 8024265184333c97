"""Guarantee 1 properties: admission soundness and completeness, and liveness."""

from __future__ import annotations

from hypothesis import assume, event, note
from hypothesis import strategies as st

from kvverify.targets.base import Target
from kvverify.hypothesis_hooks import given
from kvverify.invariants.admission import check_admitted_on_empty_pool, check_workload_completes
from kvverify.invariants.base import assert_no_violations
from kvverify.props.known import check_or_known
from kvverify.props.recorder import recorded
from kvverify.strategies import StartupCase, lengths, startup_cases, workloads

@given(case=startup_cases(allow_auto=False, max_len=1024), data=st.data())
@recorded
def test_request_within_startup_bound_is_admitted(target: Target, case: StartupCase, data) -> None:
    """Any request with ``num_tokens <= L`` is admitted on an empty pool of a started engine."""
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.starts)
    length = plan.vllm_config.max_model_len
    assume(length >= 2)
    num_tokens = data.draw(st.one_of(st.just(length - 1), lengths(plan.vllm_config.block_size, low=1,
                                                                   high=length - 1)), label="num_tokens")
    event(f"kinds={sorted(set(case.layer_kinds))}")
    assert_no_violations(check_admitted_on_empty_pool(target, plan, num_tokens))


@given(case=startup_cases(allow_auto=False, max_len=256), data=st.data())
@recorded
def test_admitted_workload_completes(target: Target, case: StartupCase, data) -> None:
    """Admitted requests, with no new arrivals after the last, all finish (no stall, no raise)."""
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.starts and plan.vllm_config.max_model_len >= 2)
    workload = data.draw(workloads(plan.vllm_config.max_model_len), label="workload")
    note(f"num_blocks={plan.num_blocks} needed={plan.blocks_needed_per_request}")
    event(f"requests={len(workload)}")
    check_or_known(target, lambda t: check_workload_completes(
        t, t.plan(case.vllm_config, case.kv_cache_specs, case.available_memory), workload))
