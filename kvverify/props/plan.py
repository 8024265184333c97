"""Plan properties: tensors match the block count; reported concurrency matches servability."""

from __future__ import annotations

from hypothesis import event, example

from kvverify.targets.base import Target
from kvverify.hypothesis_hooks import given
from kvverify.invariants.base import assert_no_violations
from kvverify.invariants.concurrency import check_concurrency
from kvverify.invariants.plan import check_plan
from kvverify.props.recorder import recorded
from kvverify.props import examples as ex
from kvverify.strategies import StartupCase, startup_cases


@given(case=startup_cases())
@recorded
def test_tensor_plan_matches_block_count(target: Target, case: StartupCase) -> None:
    """Tensor sizes = num_blocks x bytes per block, within memory, disjoint per group."""
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    event(f"groups={min(len(plan.groups), 4)}")
    assert_no_violations(check_plan(plan))


@given(case=startup_cases(allow_auto=False))
@example(case=ex.F1_CASE)
@recorded
def test_reported_concurrency_matches_servability(target: Target, case: StartupCase) -> None:
    """Reported max concurrency >= 1.00x <=> one full request is servable (finding F1)."""
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    gap = plan.num_blocks - plan.blocks_needed_per_request
    event("N == blocks per request" if gap == 0 else "N != blocks per request")
    assert_no_violations(check_concurrency(plan))
