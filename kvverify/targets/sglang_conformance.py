"""Does an SGLang target honour the :class:`~kvverify.targets.sglang_contract.SglangTarget` contract?

The SGLang counterpart of :func:`kvverify.targets.conformance.check_target`, built the same
way: first the members the contract's protocols declare
(:class:`~kvverify.targets.sglang_contract.SglangTargetBase` and the sub-protocol of every
listed capability, :data:`~kvverify.targets.sglang_contract.SGLANG_CAPABILITY_PROTOCOLS`) are
compared with the target's class (:func:`~kvverify.targets.conformance.missing_members`, no
``getattr`` probing); then every base member and every method of every listed capability is
called with small valid inputs and what comes back is judged (types, and the facts every
faithful SGLang shares: a 1024-token pool is the allocator's, a negative budget is a startup
error, a short request is admitted and one as long as the pool refused, two full pages at a
page boundary retract the second request, one short request completes). Returns the problems
found, one line each; ``[]``: it conforms (``tests/test_sglang_target_conformance.py``,
``properties/test_sglang_conformance.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from kvverify.sglang.config import SglangConfig
from kvverify.sglang.driver import SglangRequestSpec, SglangSchedulerLike, SglangWorkloadResult
from kvverify.targets.conformance import missing_members
from kvverify.targets.sglang_contract import (
    SGLANG_CAPABILITY_PROTOCOLS,
    AdmissionProbe,
    DecodingReqSpec,
    PoolProbe,
    RetractProbe,
    SglangCapability,
    SglangTarget,
    SglangTargetBase,
)

Call = Callable[[str, Callable[[], Any]], Any]


def check_sglang_target(target: object) -> list[str]:
    """Every way ``target`` breaks SGLang's contract, one line each (``[]``: it conforms)."""
    missing = missing_members(target, SglangTargetBase)
    problems = [f"{m}: missing" for m in missing]
    if {"name", "sglang_capabilities"} & set(missing):
        return problems
    t = cast(SglangTarget, target)
    if not isinstance(t.name, str) or not t.name:
        problems.append(f"name: expected a non-empty str, got {t.name!r}")
    if "version" not in missing and (not isinstance(t.version, str) or not t.version):
        problems.append(f"version: expected a non-empty str, got {t.version!r}")
    caps = t.sglang_capabilities
    if not isinstance(caps, frozenset) or not all(isinstance(c, SglangCapability) for c in caps):
        problems.append(f"sglang_capabilities: expected a frozenset of SglangCapability, got {caps!r}")
        return problems
    for cap in sorted(caps, key=lambda c: c.value):
        problems += [f"{cap.value}: {m}() missing" for m in missing_members(target, SGLANG_CAPABILITY_PROTOCOLS[cap])]
    if problems:
        return problems

    def call(label: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - a raise on valid input is the finding
            problems.append(f"{label}: raised {type(e).__name__}: {e}")
            return None

    for cap in SglangCapability:
        why = call(f"lacks({cap.value})", lambda: t.lacks(cap))
        if cap in caps and why is not None:
            problems.append(f"lacks: {cap.value} is offered, so lacks must be None, got {why!r}")
        elif cap not in caps and (not isinstance(why, str) or not why):
            problems.append(f"lacks: {cap.value} is not offered, so lacks must give a reason, got {why!r}")
    if problems:
        return problems
    p = 4 if SglangCapability.PAGED in caps else 1
    if SglangCapability.POOL in caps:
        _check_pool(t, p, call, problems)
    if SglangCapability.ADMISSION in caps:
        _check_admission(t, p, call, problems)
    if SglangCapability.RETRACTION in caps:
        _check_retraction(t, p, call, problems)
    if SglangCapability.SCHEDULER in caps:
        _check_scheduler(t, p, call, problems)
    return problems


def _check_pool(target: SglangTarget, p: int, call: Call, problems: list[str]) -> None:
    pool = call("derive_pool", lambda: target.derive_pool(SglangConfig(page_size=p, available_bytes=64 * 1024,
                                                                       cell_size=64)))
    if pool is not None and (not isinstance(pool, PoolProbe) or pool.max_total_num_tokens != 1024
                             or pool.available_size != 1024):
        problems.append(f"derive_pool: expected a 1024-token pool, got {pool}")
    refused = call("derive_pool (refusal)",
                   lambda: target.derive_pool(SglangConfig(page_size=p, available_bytes=-1, cell_size=64)))
    if refused is not None and (not isinstance(refused, PoolProbe) or not isinstance(refused.error, str)):
        problems.append(f"derive_pool: a negative budget must be a startup error, got {refused}")


def _check_admission(target: SglangTarget, p: int, call: Call, problems: list[str]) -> None:
    cfg = SglangConfig(page_size=p, max_total_num_tokens=64 * p, context_len=4096)
    a = call("probe_admission", lambda: target.probe_admission(cfg, 8, 4))
    if a is not None and (not isinstance(a, AdmissionProbe) or not a.accepted or a.add_result != "admitted"):
        problems.append(f"probe_admission: a short request on an empty pool must be admitted, got {a}")
    big = call("probe_admission (refusal)", lambda: target.probe_admission(cfg, 64 * p, 4))
    if big is not None and (not isinstance(big, AdmissionProbe) or big.validation_error is None):
        problems.append(f"probe_admission: an input as long as the pool must be refused by validation, got {big}")


def _check_retraction(target: SglangTarget, p: int, call: Call, problems: list[str]) -> None:
    r = call("probe_retraction", lambda: target.probe_retraction(
        SglangConfig(page_size=p, max_total_num_tokens=2 * p), [DecodingReqSpec(p, 1, 4), DecodingReqSpec(p, 1, 4)]))
    if r is not None and (not isinstance(r, RetractProbe) or r.fits_before or r.retracted != ("d1",)
                          or not r.decode_allocated):
        problems.append(f"probe_retraction: two full pages, both at a page boundary: d1 retracted, got {r}")


def _check_scheduler(target: SglangTarget, p: int, call: Call, problems: list[str]) -> None:
    cfg = SglangConfig(page_size=p, max_total_num_tokens=64 * p)
    sched = call("scheduler", lambda: target.scheduler(cfg))
    if sched is not None:
        lacking = missing_members(sched, SglangSchedulerLike)
        if lacking:
            problems.append(f"scheduler: lacks {lacking}")
        elif call("scheduler.unfinished", sched.unfinished) != 0:
            problems.append("scheduler: a fresh scheduler has no unfinished requests")
    w = call("run_workload", lambda: target.run_workload(cfg, [SglangRequestSpec(8, 4)]))
    if w is not None and (not isinstance(w, SglangWorkloadResult) or not w.ok):
        problems.append(f"run_workload: one short request must complete, got {w}")
