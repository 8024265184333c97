"""Conformance of an SGLang target: every capability it lists answers small valid inputs with
the contract's types and sane numbers (the SGLang counterpart of
:mod:`kvverify.targets.conformance`). Returns the problems found (empty: conforms)."""

from __future__ import annotations

from typing import Any

from kvverify.sglang.config import SglangConfig
from kvverify.sglang.driver import SglangRequestSpec, SglangWorkloadResult
from kvverify.targets.sglang_contract import (
    AdmissionProbe,
    DecodingReqSpec,
    PoolProbe,
    RetractProbe,
    SglangCapability,
    sglang_capability_methods,
)


def check_sglang_target(target: Any) -> list[str]:
    problems: list[str] = []
    caps = target.sglang_capabilities
    for cap in caps:
        for name in sglang_capability_methods(cap):
            if not callable(getattr(target, name, None)):
                problems.append(f"{cap.value}: no method {name}")
    p = 4 if SglangCapability.PAGED in caps else 1
    if SglangCapability.POOL in caps:
        pool = target.derive_pool(SglangConfig(page_size=p, available_bytes=64 * 1024, cell_size=64))
        if not isinstance(pool, PoolProbe) or pool.max_total_num_tokens != 1024 or pool.available_size != 1024:
            problems.append(f"derive_pool: expected a 1024-token pool, got {pool}")
        refused = target.derive_pool(SglangConfig(page_size=p, available_bytes=-1, cell_size=64))
        if refused.error is None:
            problems.append("derive_pool: a negative budget must be a startup error")
    if SglangCapability.ADMISSION in caps:
        a = target.probe_admission(SglangConfig(page_size=p, max_total_num_tokens=64 * p, context_len=4096), 8, 4)
        if not isinstance(a, AdmissionProbe) or not a.accepted or a.add_result != "admitted":
            problems.append(f"probe_admission: a short request on an empty pool must be admitted, got {a}")
        big = target.probe_admission(SglangConfig(page_size=p, max_total_num_tokens=64 * p, context_len=4096),
                                     64 * p, 4)
        if big.validation_error is None:
            problems.append("probe_admission: an input as long as the pool must be refused by validation")
    if SglangCapability.RETRACTION in caps:
        r = target.probe_retraction(SglangConfig(page_size=p, max_total_num_tokens=2 * p),
                                    [DecodingReqSpec(p, 1, 4), DecodingReqSpec(p, 1, 4)])
        if not isinstance(r, RetractProbe) or r.fits_before or r.retracted != ("d1",) or not r.decode_allocated:
            problems.append(f"probe_retraction: two full pages, both at a page boundary: d1 retracted, got {r}")
    if SglangCapability.SCHEDULER in caps:
        w = target.run_workload(SglangConfig(page_size=p, max_total_num_tokens=64 * p), [SglangRequestSpec(8, 4)])
        if not isinstance(w, SglangWorkloadResult) or not w.ok:
            problems.append(f"run_workload: one short request must complete, got {w}")
    return problems
