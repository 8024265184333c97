"""Every target honours the Target contract (kvverify.targets.conformance.check_target).

Like Hypothesis's ``run_conformance_test`` for backends: the same calls against the
reference, the reference with each bug-zoo flaw on, a fake offering a subset of the
capabilities, the vLLM adapter when vLLM is importable — and broken fakes, which the
check must reject (so it is seen to fail): one per member of the contract, generated from
the protocols, so a member added to ``kvverify/targets/base.py`` is not covered until the
check calls it and judges what comes back.
"""

from __future__ import annotations

from typing import Any, Protocol

import pytest

from kvverify import flaws
from kvverify.targets import Capability, Feature, Target, TargetUnsupported, get_target
from kvverify.targets import base
from kvverify.targets.conformance import check_target, missing_members, probe_config, probe_specs
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
    """A fake target: the reference's planner and block sizes, nothing else (and a feature less)."""

    name = "planner-only"
    version = "0.0.1"
    capabilities = frozenset({Capability.PLANNER, Capability.BLOCK_SIZES})
    reference_behaviours: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self._ref = ReferenceTarget()

    def lacks(self, feature: Feature) -> str | None:
        return "planner-only: no alignment" if feature is Feature.CACHE_HIT_ALIGNMENT else None

    def expects_finding(self, finding: str) -> bool:
        return True

    def finding_replay_masked(self, finding: str) -> str | None:
        return None

    def plan(self, *a: Any, **k: Any) -> Any:
        return self._ref.plan(*a, **k)

    def max_concurrency(self, plan: Any) -> float:
        return self._ref.max_concurrency(plan)

    def initialize_engine_core(self, *a: Any, **k: Any) -> Any:
        return self._ref.initialize_engine_core(*a, **k)

    def estimate_max_model_len(self, *a: Any) -> int:
        return self._ref.estimate_max_model_len(*a)

    def check_enough_kv_cache_memory(self, *a: Any) -> str | None:
        return self._ref.check_enough_kv_cache_memory(*a)

    def resolve_block_sizes(self, *a: Any) -> tuple[int, int]:
        return self._ref.resolve_block_sizes(*a)

    def coordinator_accepts(self, *a: Any) -> str | None:
        return self._ref.coordinator_accepts(*a)

    def resolve_cache_hit_alignment_tokens(self, *a: Any) -> int:
        raise AssertionError("never called: the fake lacks Feature.CACHE_HIT_ALIGNMENT")


def test_fake_with_a_capability_subset_conforms() -> None:
    assert check_target(PlannerOnly()) == []
    assert missing_members(PlannerOnly(), base.RuntimeTarget) == ["kv_cache_manager", "admit_on_empty_pool"]


def test_every_capability_has_methods_and_target_is_their_union() -> None:
    assert set(base.CAPABILITY_PROTOCOLS) == set(Capability)
    union: list[str] = []
    for cap in Capability:
        assert base.capability_methods(cap), cap
        union += base.capability_methods(cap)
    assert len(union) == len(set(union)) and not set(union) & set(base.BASE_MEMBERS)
    calls = {"plan", "max_concurrency", "estimate_max_model_len", "check_enough_kv_cache_memory", "initialize_engine_core",
             "resolve_block_sizes", "coordinator_accepts", "resolve_cache_hit_alignment_tokens",
             "kv_cache_manager", "admit_on_empty_pool", "scheduler", "run_workload",
             "connector_scheduler", "run_connector_workload"}
    assert set(union) == calls
    assert base.BASE_MEMBERS == ("name", "version", "capabilities", "lacks", "expects_finding",
                                 "finding_replay_masked", "reference_behaviours")
    # Target is exactly the base and the capability sub-protocols (it declares nothing of its own)
    assert set(Target.__bases__) - {Protocol} == {base.TargetBase, *base.CAPABILITY_PROTOCOLS.values()}
    assert base.protocol_members(Target) == {}
    assert all(missing_members(ReferenceTarget(), p) == [] for p in Target.__bases__)


def test_the_reference_has_every_feature_and_every_finding() -> None:
    ref = ReferenceTarget()
    assert all(ref.lacks(f) is None and base.has(ref, f) for f in Feature)
    assert ref.expects_finding("F3") and ref.finding_replay_masked("F2") is None
    base.require(ref, Feature.FIX_OPTIONS)  # no skip


def test_require_skips_with_the_targets_reason() -> None:
    with pytest.raises(pytest.skip.Exception, match="planner-only: no alignment"):
        base.require(PlannerOnly(), Feature.CACHE_HIT_ALIGNMENT)
    assert not base.has(PlannerOnly(), Feature.CACHE_HIT_ALIGNMENT)


def test_require_outside_pytest_raises_target_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    with pytest.raises(TargetUnsupported, match="planner-only: no alignment"):
        base.require(PlannerOnly(), Feature.CACHE_HIT_ALIGNMENT)


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


class AbortKeepsBlocks(_Broken):
    """Planted defect: an abort dequeues, marks and forgets the request but never frees its blocks."""

    def scheduler(self, plan: Any) -> Any:
        from kvverify.reference.request import RequestStatus

        sched = super().scheduler(plan)

        def abort_requests(request_ids: Any) -> list[str]:
            out = [rid for rid in request_ids if rid in sched.requests and not sched.requests[rid].is_finished()]
            for rid in out:
                sched.running = [r for r in sched.running if r.request_id != rid]
                sched.requests.pop(rid).status = RequestStatus.FINISHED_ABORTED
            sched.finished.extend(out)
            return out

        sched.abort_requests = abort_requests  # type: ignore[method-assign]
        return sched


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
    (AbortKeepsBlocks(), "scheduler.abort_requests: an aborted request must"),
    (BadCapabilities(), "capabilities: expected a frozenset of Capability"),
    (RefusalNotReported(), "check_enough_kv_cache_memory: a one-block budget must be refused"),
], ids=lambda x: type(x).__name__ if not isinstance(x, str) else "")
def test_broken_targets_are_rejected(fake: Any, expect: str) -> None:
    problems = check_target(fake)
    assert any(p.startswith(expect) for p in problems), problems


_WRONG = object()  # of no type any member may return


def _contract_members() -> list[tuple[str, str]]:
    protos = [base.TargetBase, *base.CAPABILITY_PROTOCOLS.values()]
    return [(name, kind) for proto in protos for name, kind in base.protocol_members(proto).items()]


@pytest.mark.parametrize("member, kind", _contract_members(), ids=[m for m, _ in _contract_members()])
def test_every_member_of_the_contract_is_checked(member: str, kind: str) -> None:
    """The reference with one member answering nonsense (a method returning, an attribute
    being, an object of no expected type) is rejected, with a problem naming the member."""
    value: Any = (lambda self, *a, **k: _WRONG) if kind == "method" else _WRONG
    broken = type(f"Broken_{member}", (ReferenceTarget,), {member: value})()
    problems = check_target(broken)
    assert any(p.startswith((f"{member}:", f"{member}(")) for p in problems), problems


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


def test_a_target_naming_an_unknown_release_rule_does_not_conform() -> None:
    """``reference_behaviours`` must name rules of kvverify/behaviours.py: a misspelled one would
    make every attribution replay fail with a ReportError instead of following the release."""
    class Misspelled(PlannerOnly):
        reference_behaviours = frozenset({"pad_behind_running"})

    problems = check_target(Misspelled())
    assert any(p.startswith("reference_behaviours:") for p in problems), problems
