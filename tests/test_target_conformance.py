"""Every target honours the Target contract (kvverify.targets.conformance.check_target).

Like Hypothesis's ``run_conformance_test`` for backends: the same calls against the
reference, the reference with each bug-zoo flaw on, a fake offering a subset of the
capabilities, the vLLM adapter when vLLM is importable — and broken fakes, which the
check must reject (so it is seen to fail).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvverify import flaws
from kvverify.targets import Capability, Target, TargetUnsupported, get_target
from kvverify.targets import base
from kvverify.targets.conformance import check_target, probe_config, probe_specs
from kvverify.targets.reference import ReferenceTarget


def test_reference_conforms() -> None:
    assert check_target(ReferenceTarget()) == []
    assert check_target(get_target("reference")) == []


@pytest.mark.parametrize("flaw", sorted(flaws.CATALOG))
def test_flawed_reference_conforms(flaw: str) -> None:
    """A flaw changes behaviour at the boundary, never the contract (the probe is roomy)."""
    with flaws.enabled(flaw):
        assert check_target(ReferenceTarget()) == []


class PlannerOnly:
    """A fake target: the reference's planner and block sizes, nothing else."""

    name = "planner-only"
    capabilities = frozenset({Capability.PLANNER, Capability.BLOCK_SIZES})

    def __init__(self) -> None:
        self._ref = ReferenceTarget()

    def __getattr__(self, name: str) -> Any:
        if name in base.capability_methods(Capability.PLANNER) + base.capability_methods(Capability.BLOCK_SIZES):
            return getattr(self._ref, name)
        raise AttributeError(name)


def test_fake_with_a_capability_subset_conforms() -> None:
    assert check_target(PlannerOnly()) == []


def test_every_capability_has_methods_and_target_is_their_union() -> None:
    assert set(base.CAPABILITY_PROTOCOLS) == set(Capability)
    union: list[str] = []
    for cap in Capability:
        assert base.capability_methods(cap), cap
        union += base.capability_methods(cap)
    assert len(union) == len(set(union))
    calls = {"plan", "max_concurrency", "estimate_max_model_len", "check_enough_kv_cache_memory",
             "resolve_block_sizes", "coordinator_accepts", "kv_cache_manager", "admit_on_empty_pool",
             "scheduler", "run_workload", "connector_scheduler", "run_connector_workload"}
    assert set(union) == calls
    assert all(callable(getattr(ReferenceTarget, m)) for m in union)


def test_target_unsupported_is_exported() -> None:
    assert issubclass(TargetUnsupported, NotImplementedError)
    assert base.TargetUnsupported is TargetUnsupported
    assert Target is base.Target


class _Broken(ReferenceTarget):
    name = "broken"


class WrongPlanType(_Broken):
    def plan(self, *args: Any, **kwargs: Any) -> Any:
        return {"num_blocks": 32}


class NoNullBlock(_Broken):
    def kv_cache_manager(self, plan: Any) -> Any:
        kvm = super().kv_cache_manager(plan)
        kvm.get_num_free_blocks = lambda: plan.num_blocks  # type: ignore[method-assign]  # planted defect
        return kvm


class ThreeBlockSizes(_Broken):
    def resolve_block_sizes(self, kv_cache_config: Any, vllm_config: Any) -> Any:
        return (16, 16, 16)


class RefusesEverything(_Broken):
    def admit_on_empty_pool(self, plan: Any, num_tokens: int) -> tuple[bool, dict[str, int]]:
        return False, {"gate_charged_blocks": 1, "free_blocks": 0}


class RaisesOnRun(_Broken):
    def run_workload(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")


class MissingMethod:
    name = "missing"
    capabilities = frozenset({Capability.SCHEDULER})

    def run_workload(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("never called")


class BadCapabilities(_Broken):
    capabilities = frozenset({"planner"})  # type: ignore[assignment]  # planted defect: strings, not Capability


class RefusalNotReported(_Broken):
    def check_enough_kv_cache_memory(self, *args: Any, **kwargs: Any) -> str | None:
        return None


@pytest.mark.parametrize("fake, expect", [
    (WrongPlanType(), "plan: expected a StartupPlan"),
    (NoNullBlock(), "kv_cache_manager: an empty pool has 31 free blocks"),
    (ThreeBlockSizes(), "resolve_block_sizes: expected"),
    (RefusesEverything(), "admit_on_empty_pool: a one-block prompt"),
    (RaisesOnRun(), "run_workload: raised RuntimeError: boom"),
    (MissingMethod(), "scheduler: scheduler() missing"),
    (BadCapabilities(), "capabilities: expected a frozenset of Capability"),
    (RefusalNotReported(), "check_enough_kv_cache_memory: a one-block budget must be refused"),
], ids=lambda x: type(x).__name__ if not isinstance(x, str) else "")
def test_broken_targets_are_rejected(fake: Any, expect: str) -> None:
    problems = check_target(fake)
    assert any(p.startswith(expect) for p in problems), problems


def test_probe_inputs_are_valid_for_the_reference() -> None:
    plan = ReferenceTarget().plan(probe_config(), [probe_specs()])
    assert plan.starts and plan.num_blocks == 32 and plan.blocks_needed_per_request == 4


def test_vllm_conforms() -> None:
    pytest.importorskip("vllm", reason="vLLM is not installed (see docs/vllm-target.md)")
    assert check_target(get_target("vllm")) == []


def test_cli_check_goes_through_the_target(monkeypatch) -> None:
    """``kvverify check`` plans, reads concurrency and runs the requests on the target it names."""
    import kvverify.targets as targets
    from kvverify import catalog
    from kvverify.cli.check import run_check
    from kvverify.errors import ConfigError

    calls: list[str] = []

    class Counting(ReferenceTarget):
        name = "counting"

        def plan(self, *a: Any, **k: Any) -> Any:
            calls.append("plan")
            return super().plan(*a, **k)

        def max_concurrency(self, plan: Any) -> float:
            calls.append("max_concurrency")
            return 7.0

        def run_workload(self, *a: Any, **k: Any) -> Any:
            calls.append("run_workload")
            return super().run_workload(*a, **k)

    monkeypatch.setattr(targets, "get_target", lambda name: Counting())
    r = run_check(catalog.load_model("llama-3.1-8b"), max_model_len=512, num_gpu_blocks_override=64,
                  target="counting")
    assert r["target"] == "counting" and r["max_concurrency"] == 7.0
    assert {"plan", "max_concurrency", "run_workload"} <= set(calls)
    with pytest.raises(ConfigError, match="flaw"):
        run_check(catalog.load_model("llama-3.1-8b"), max_model_len=512, num_gpu_blocks_override=64,
                  flaw_names=["null_block_not_reserved"], target="vllm")
