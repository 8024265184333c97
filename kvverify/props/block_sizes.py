"""Guarantee 3 properties: hash_block_size divides every group size; coordinator accepts."""

from __future__ import annotations

from hypothesis import assume, event

from kvverify.hypothesis_hooks import given
from kvverify.invariants.base import assert_no_violations
from kvverify.invariants.block_sizes import check_block_sizes
from kvverify.props.recorder import recorded
from kvverify.strategies import BlockSizeCase, StartupCase, block_size_cases, startup_cases
from kvverify.targets.base import Target


@given(case=block_size_cases())
@recorded
def test_resolved_block_sizes_accepted_by_coordinator(target: Target, case: BlockSizeCase) -> None:
    """Whatever ``resolve_kv_cache_block_sizes`` returns, the coordinator accepts it."""
    sizes = sorted({g.kv_cache_spec.block_size for g in case.kv_cache_config.kv_cache_groups})
    event(f"distinct group sizes={min(len(sizes), 3)}")
    event(f"prefix_match_unit {'set' if case.vllm_config.prefix_match_unit else 'unset'}")
    assert_no_violations(check_block_sizes(case.kv_cache_config, case.vllm_config, target))


@given(case=startup_cases(allow_auto=False))
@recorded
def test_planned_block_sizes_are_consistent(target: Target, case: StartupCase) -> None:
    """The same for every plan the planner produces."""
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.groups)
    assert_no_violations(check_block_sizes(plan.kv_cache_config, plan.vllm_config, target))
