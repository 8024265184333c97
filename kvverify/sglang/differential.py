"""Reference vs the installed SGLang, case by case: the same probe on both, the first field
that differs is reported (``properties/test_sglang_differential.py``)."""

from __future__ import annotations

from typing import Any

from hypothesis import note
from hypothesis import strategies as st

from kvverify.hypothesis_hooks import given
from kvverify.props.recorder import recorded
from kvverify.sglang.config import SglangConfig
from kvverify.sglang.props import _draw_retraction, require
from kvverify.sglang.strategies import AdmissionCase, admission_cases, pool_cases
from kvverify.targets.base import TargetUnsupported
from kvverify.targets.sglang_contract import AdmissionProbe, PoolProbe, RetractProbe, SglangCapability, SglangTarget


def _reference() -> SglangTarget:
    from kvverify.targets.sglang_reference import SglangReferenceTarget
    return SglangReferenceTarget()


def admission_view(p: AdmissionProbe) -> dict[str, Any]:
    """What must agree: the bound, the verdicts, the clamp (error texts differ in wording)."""
    return {"max_total_num_tokens": p.max_total_num_tokens if p.validation_error is None or
            not p.validation_error.startswith(("startup", "SglangStartupError")) else None,
            "refused_at_startup": bool(p.validation_error and p.validation_error.startswith(
                ("startup", "SglangStartupError"))),
            "max_req_input_len": p.max_req_input_len if p.max_total_num_tokens else None,
            "accepted": p.accepted, "max_new_tokens": p.max_new_tokens, "add_result": p.add_result}


def retraction_view(p: RetractProbe) -> dict[str, Any]:
    return {"fits_before": p.fits_before, "retracted": sorted(p.retracted),
            "aborted": sorted(r for r, _ in p.aborted), "kept": sorted(p.kept),
            "decode_allocated": p.decode_allocated, "available_after": p.available_after,
            "error": (p.error or "").split(":")[0]}


def pool_view(p: PoolProbe) -> dict[str, Any]:
    return {"max_total_num_tokens": p.max_total_num_tokens, "available_size": p.available_size,
            "refused": p.error is not None}


def first_difference(ref: dict[str, Any], real: dict[str, Any]) -> str | None:
    for k in ref:
        if ref[k] != real.get(k):
            return f"{k}: reference {ref[k]!r} != sglang {real.get(k)!r}"
    return None


def _real(target: SglangTarget) -> None:
    """(``properties/test_sglang_differential.py`` hands these the installed SGLang only.)"""
    require(target, SglangCapability.ADMISSION)


@given(case=admission_cases())
@recorded
def test_sglang_differential_admission(target: SglangTarget, case: AdmissionCase) -> None:
    """Validation bound, verdicts, the max_new clamp and PrefillAdder's answer agree."""
    _real(target)
    note(case.config.describe())
    ref = admission_view(_reference().probe_admission(case.config, case.input_len, case.max_new_tokens))
    real = admission_view(target.probe_admission(case.config, case.input_len, case.max_new_tokens))
    diff = first_difference(ref, real)
    assert diff is None, f"[sglang_differential_admission] {diff}"


@given(data=st.data())
@recorded
def test_sglang_differential_retraction(target: SglangTarget, data: Any) -> None:
    """check_decode_mem, who retract_decode retracts or aborts, and the pool after, agree."""
    _real(target)
    require(target, SglangCapability.RETRACTION)
    case = _draw_retraction(target, data, 1)
    note(case.config.describe())
    try:
        real = retraction_view(target.probe_retraction(case.config, case.batch))
    except TargetUnsupported:
        from hypothesis import assume
        assume(False)
        return
    ref = retraction_view(_reference().probe_retraction(case.config, case.batch))
    diff = first_difference(ref, real)
    assert diff is None, f"[sglang_differential_retraction] {diff}"


@given(config=pool_cases())
@recorded
def test_sglang_differential_pool(target: SglangTarget, config: SglangConfig) -> None:
    """The derived pool (or the startup refusal) agrees."""
    _real(target)
    require(target, SglangCapability.POOL)
    diff = first_difference(pool_view(_reference().derive_pool(config)), pool_view(target.derive_pool(config)))
    assert diff is None, f"[sglang_differential_pool] {diff}"
