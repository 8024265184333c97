"""The SGLang property bodies (pytest collects them from ``properties/test_sglang.py``; the
zoo and the CLI call the same code). ``target`` is an SGLang target
(:mod:`kvverify.targets.sglang_contract`); a property needing a capability the target does
not offer is skipped with the reason.

Finding SG1 (``reports/findings/SG1-*.md``), on SGLang 0.5.23 as on the reference: a request
the validation accepts can be one ``PrefillAdder`` never admits (page size >= 7, a pool
smaller than the context). The general properties re-run such a case on the reference under
the finding's fix and record ``event("explained by known finding SG1")``; the strict known
failure ``test_sglang_validated_request_is_schedulable_sg1`` shows it unexplained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import assume, event, note
from hypothesis import strategies as st

from kvverify.hypothesis_hooks import given
from kvverify.invariants.base import Violation, assert_no_violations
from kvverify.props.recorder import recorded
from kvverify.sglang import fixes as sglang_fixes
from kvverify.sglang.config import SglangConfig
from kvverify.sglang.driver import SglangRequestSpec
from kvverify.sglang.invariants import (
    check_pool_is_allocator_pool,
    check_retraction_frees_enough,
    check_retraction_terminates,
    check_validated_is_schedulable,
    check_workload_finishes,
)
from kvverify.sglang.strategies import AdmissionCase, RetractionCase, admission_cases, configs, pool_cases, \
    retraction_cases, workloads
from kvverify.targets.base import TargetUnsupported
from kvverify.targets.sglang_contract import (
    RetractProbe,
    SglangAdmissionTarget,
    SglangCapability,
    SglangRetractionTarget,
    SglangSchedulerTarget,
    SglangTarget,
    SglangTargetBase,
    require_capability,
)

#: known finding -> its fix option (``kvverify/sglang/fixes.py``)
KNOWN_FINDINGS = {"SG1": "sglang_input_bound_page_aware"}


require = require_capability  #: skip (with the target's reason) when it lacks a capability


def _reference() -> SglangTarget:
    from kvverify.targets.sglang_reference import SglangReferenceTarget
    return SglangReferenceTarget()


def explained_by_known(target: SglangTarget, rerun: Callable[[SglangTarget], list[Violation]],
                       violations: list[Violation], *, only: Sequence[str] | None = None) -> str | None:
    """The known finding ``violations`` are: the faithful reference shows the same ones, and
    under that finding's fix it shows none. (Flaws stay on: a flaw's own violation is not
    explained.) ``None`` if no known finding explains them."""
    if not violations:
        return None
    ref = _reference()
    if [v.name for v in rerun(ref)] != [v.name for v in violations]:
        return None
    for finding, fix in KNOWN_FINDINGS.items():
        if sglang_fixes.is_on(fix) or (only is not None and finding not in only):
            continue
        with sglang_fixes.enabled(fix):
            if not rerun(ref):
                return finding
    return None


def _admission_violations(target: SglangAdmissionTarget, case: AdmissionCase) -> list[Violation]:
    probe = target.probe_admission(case.config, case.input_len, case.max_new_tokens)
    return check_validated_is_schedulable(probe, case.input_len)


@given(case=admission_cases())
@recorded
def test_sglang_validated_request_is_schedulable(target: SglangTarget, case: AdmissionCase) -> None:
    """A request ``validate_input_length`` and ``init_req_max_new_tokens`` accept is admitted by
    ``PrefillAdder`` on an empty pool (#28530 / #25126, #29249)."""
    require(target, SglangCapability.ADMISSION)
    note(case.config.describe())
    violations = _admission_violations(target, case)
    if (known := explained_by_known(target, lambda t: _admission_violations(t, case), violations)) is not None:
        event(f"explained by known finding {known}")
        return
    assert_no_violations(violations)


@given(case=admission_cases())
@recorded
def test_sglang_validated_request_is_schedulable_sg1(target: SglangTarget, case: AdmissionCase) -> None:
    """The same, unexplained: fails on SGLang 0.5.23 and the reference (finding SG1, a strict
    known failure); passes under ``--fix sglang_input_bound_page_aware``."""
    require(target, SglangCapability.ADMISSION)
    assert_no_violations(_admission_violations(target, case))


def _retraction_probe(target: SglangRetractionTarget, case: RetractionCase) -> RetractProbe:
    try:
        return target.probe_retraction(case.config, case.batch)
    except TargetUnsupported as e:
        event(f"unsupported: {str(e)[:40]}")
        assume(False)


def _draw_retraction(target: SglangTargetBase, data: Any, tokens_per_step: int | None) -> RetractionCase:
    """A retraction case the target can run: page size 1 only without ``PAGED``."""
    paged = SglangCapability.PAGED in target.sglang_capabilities
    if not paged:
        event("page_size 1 only (the target has no paged allocation)")
    case: RetractionCase = data.draw(retraction_cases(tokens_per_step=tokens_per_step, paged=paged), label="case")
    return case


@given(data=st.data())
@recorded
def test_sglang_retraction_frees_enough(target: SglangTarget, data: Any) -> None:
    """After ``check_decode_mem`` / ``retract_decode`` the kept batch's decode step is allocated,
    and no page is lost (#4602, #9982 / #6731, #14939)."""
    require(target, SglangCapability.RETRACTION)
    case = _draw_retraction(target, data, None)
    note(case.config.describe())
    probe = _retraction_probe(target, case)
    event(f"retracted={len(probe.retracted)} aborted={len(probe.aborted)}")
    assert_no_violations(check_retraction_frees_enough(probe))


@given(data=st.data())
@recorded
def test_sglang_retraction_terminates_with_reason(target: SglangTarget, data: Any) -> None:
    """When even one request cannot take its next decode step, it is aborted with a reason:
    never an assertion (#14948) nor a raise (#19881)."""
    require(target, SglangCapability.RETRACTION)
    case = _draw_retraction(target, data, 1)
    note(case.config.describe())
    probe = _retraction_probe(target, case)
    event(f"aborted={len(probe.aborted)}")
    assert_no_violations(check_retraction_terminates(probe))


@given(config=pool_cases())
@recorded
def test_sglang_pool_size_is_allocator_pool(target: SglangTarget, config: SglangConfig) -> None:
    """The pool derived at startup is positive, page-aligned, within the budget, and the
    allocator's; a budget without a pool is a clear startup error (#7691)."""
    require(target, SglangCapability.POOL)
    probe = target.derive_pool(config)
    event("refused at startup" if probe.error else "starts")
    assert_no_violations(check_pool_is_allocator_pool(probe, config))


def _workload_violations(target: SglangSchedulerTarget, config: SglangConfig,
                         workload: Sequence[SglangRequestSpec]) -> list[Violation]:
    return check_workload_finishes(target.run_workload(config, workload))


@given(config=configs(max_pages=10), data=st.data())
@recorded
def test_sglang_admitted_workload_finishes(target: SglangTarget, config: SglangConfig, data: Any) -> None:
    """Under any workload every admitted request finishes or is aborted with a reason: no
    stall (by progress, not a step cap), no exception out of the scheduler."""
    require(target, SglangCapability.SCHEDULER)
    workload = data.draw(workloads(config), label="workload")
    note(config.describe())
    violations = _workload_violations(target, config, workload)
    if (known := explained_by_known(target, lambda t: _workload_violations(t, config, workload), violations)):
        event(f"explained by known finding {known}")
        return
    assert_no_violations(violations)

