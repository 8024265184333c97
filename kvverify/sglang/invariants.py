"""The SGLang checkers: one concern each, returning :class:`~kvverify.invariants.base.Violation` s."""

from __future__ import annotations

from kvverify.invariants.base import Violation
from kvverify.sglang.config import SglangConfig
from kvverify.sglang.driver import SglangWorkloadResult
from kvverify.targets.sglang_contract import AdmissionProbe, PoolProbe, RetractProbe


def check_validated_is_schedulable(probe: AdmissionProbe, input_len: int) -> list[Violation]:
    """Guarantee 1 for SGLang: validation accepted it, so ``PrefillAdder`` admits it on an
    empty pool (else it waits forever: #28530, #29249)."""
    if not probe.accepted or probe.add_result == "admitted":
        return []
    return [Violation("sglang_validated_not_schedulable",
                      "validation accepted the request but PrefillAdder refuses it on an empty pool: it waits forever",
                      {"input_len": input_len, "max_req_input_len": probe.max_req_input_len,
                       "max_new_tokens": probe.max_new_tokens, "add_result": probe.add_result,
                       "rem_total_tokens": probe.rem_total_tokens,
                       "max_total_num_tokens": probe.max_total_num_tokens})]


def check_retraction_frees_enough(probe: RetractProbe) -> list[Violation]:
    """After ``retract_decode`` the kept batch's decode step is allocated, and the pool's
    pages are all accounted for (#4602, #9982 / #6731, #14939)."""
    out = []
    if probe.error is not None and not probe.error.startswith(("AssertionError", "ValueError")):
        out.append(Violation("sglang_decode_oom_after_retract",
                             "the decode step failed after check_decode_mem / retract_decode said it fits",
                             {"error": probe.error, "retracted": len(probe.retracted), "kept": len(probe.kept)}))
    elif probe.error is None and probe.kept and not probe.decode_allocated:
        out.append(Violation("sglang_decode_not_allocated", "kept requests got no decode slots", {}))
    if probe.error is None and probe.available_after + probe.held_after != probe.pool_tokens:
        out.append(Violation("sglang_pages_leaked", "free + held pages != the pool after retraction",
                             {"available": probe.available_after, "held": probe.held_after,
                              "pool": probe.pool_tokens}))
    return out


def check_retraction_terminates(probe: RetractProbe) -> list[Violation]:
    """``retract_decode`` with nothing left to retract aborts the last request with a reason:
    never an assertion (#14948) nor a raise out of the scheduler (#19881)."""
    if probe.error is not None and probe.error.startswith(("AssertionError", "ValueError")):
        return [Violation("sglang_retract_crashes", "retract_decode raised instead of aborting with a reason",
                          {"error": probe.error})]
    for rid, reason in probe.aborted:
        if not reason:
            return [Violation("sglang_abort_without_reason", "a request was aborted without a reason", {"rid": rid})]
    return []


def check_pool_is_allocator_pool(probe: PoolProbe, config: SglangConfig) -> list[Violation]:
    """The derived ``max_total_num_tokens`` is positive, page-aligned, within the byte budget,
    and exactly what the allocator serves; no pool is a clear startup error (#7691)."""
    if probe.error is not None:
        return []
    tokens, avail = probe.max_total_num_tokens, probe.available_size
    ev = {"max_total_num_tokens": tokens, "allocator_available": avail, "page_size": config.page_size,
          "available_bytes": config.available_bytes, "cell_size": config.cell_size}
    if tokens is None or tokens <= 0:
        return [Violation("sglang_pool_not_positive", "the engine started with a pool of no tokens", ev)]
    if tokens % config.page_size:
        return [Violation("sglang_pool_not_page_aligned", "max_total_num_tokens is not a whole number of pages", ev)]
    if config.available_bytes is not None and config.cell_size is not None \
            and tokens * config.cell_size > max(config.available_bytes, 0):
        return [Violation("sglang_pool_exceeds_budget", "the pool needs more bytes than the budget", ev)]
    if avail != tokens:
        return [Violation("sglang_pool_is_not_allocator_pool", "the allocator serves another pool than derived", ev)]
    return []


def check_workload_finishes(result: SglangWorkloadResult) -> list[Violation]:
    """Every request finished or was aborted with a reason; no stall, no escaped exception."""
    if result.ok:
        missing = [rid for rid, (reason, _) in result.outcomes.items() if not reason]
        if missing:
            return [Violation("sglang_request_lost", "a request neither finished nor was aborted", {"rids": missing})]
        return []
    return [Violation(f"sglang_workload_{result.verdict}", result.error or result.detail or result.verdict,
                      {"steps": result.steps, "retractions": result.retractions,
                       "unfinished": [r for r, (reason, _) in result.outcomes.items() if not reason]})]
