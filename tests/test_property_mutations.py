"""Properties the bug zoo does not cover are shown failing on a planted mutation.

Every property must earn its place by catching something: here a deliberately wrong
reference (monkeypatched for the test only) makes each one fail, while the faithful
reference passes the same property (``pytest properties/``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, settings

from kvverify.hypothesis_hooks import rebuild
from kvverify.targets import get_target

QUICK = settings(max_examples=150, derandomize=True, database=None, deadline=None,
                 suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                 phases=[Phase.explicit, Phase.generate])  # detection only: no shrinking


def fails(prop, **kw) -> str:
    with pytest.raises(AssertionError) as info:
        rebuild(prop, settings=QUICK)(target=get_target("reference"), **kw)
    return str(info.value)


def test_caps_property_catches_a_manager_that_never_recycles(monkeypatch) -> None:
    from kvverify.reference.managers.sliding_window import SlidingWindowManager
    from kvverify.props.runtime import test_held_blocks_within_admission_caps as prop
    monkeypatch.setattr(SlidingWindowManager, "get_num_skipped_tokens", lambda self, n: 0)
    assert "caps.held_exceeds_cap" in fails(prop)


def test_pool_machine_catches_a_pool_that_forgets_ref_counts(monkeypatch) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    from kvverify.reference.pool import BlockPool
    from kvverify.props.pool_machine import PoolMachine

    original = BlockPool.touch

    def touch_without_ref(self, blocks):  # a hit taken from the free queue keeps ref_cnt 0
        for b in blocks:
            if b.ref_cnt == 0 and not b.is_null:
                self.free_block_queue.remove(b)
            elif not b.is_null:
                b.ref_cnt += 1

    monkeypatch.setattr(BlockPool, "touch", touch_without_ref)
    with pytest.raises(AssertionError, match="pool\\."):
        run_state_machine_as_test(PoolMachine, settings=settings(QUICK, max_examples=300,
                                                                 stateful_step_count=30))
    monkeypatch.setattr(BlockPool, "touch", original)


def test_planned_block_sizes_property_catches_a_wrong_hash(monkeypatch) -> None:
    import kvverify.invariants.block_sizes as inv
    from kvverify.props.block_sizes import test_planned_block_sizes_are_consistent as prop
    real = inv.resolve_kv_cache_block_sizes
    monkeypatch.setattr(inv, "resolve_kv_cache_block_sizes",
                        lambda kc, vc: (lambda s_h: (s_h[0] * 2, s_h[1] * 2))(real(kc, vc)))
    assert "block_sizes." in fails(prop)


def test_tensor_plan_property_catches_a_short_tensor(monkeypatch) -> None:
    import kvverify.reference.planner as planner
    from kvverify.props.plan import test_tensor_plan_matches_block_count as prop
    real = planner.get_kv_cache_config_from_groups

    def short(groups, num_blocks):
        cfg = real(groups, num_blocks)
        if not cfg.kv_cache_tensors:
            return cfg
        first = cfg.kv_cache_tensors[0]
        return replace(cfg, kv_cache_tensors=(replace(first, size=first.size - 1),) + cfg.kv_cache_tensors[1:])

    monkeypatch.setattr(planner, "get_kv_cache_config_from_groups", short)
    assert "plan.tensor_size" in fails(prop)


def test_admission_completeness_catches_a_gate_without_cap(monkeypatch) -> None:
    """Independent of the flaw switch: a gate that ignores the cap is caught too."""
    import kvverify.reference.arith as arith
    from kvverify.props.admission import test_request_within_startup_bound_is_admitted as prop
    monkeypatch.setattr(arith, "capped_blocks", lambda required, cap, apply: required)
    assert "admission.false_rejection" in fails(prop)
