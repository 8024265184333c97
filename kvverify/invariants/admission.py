"""Guarantee 1: admission passes only if completion is possible — and never refuses forever.

* soundness: an admitted workload, run with no new arrivals, finishes: no stall, no
  endless preempt/re-prefill, no exception from the allocator (catches
  ``swa_cap_on_allocation`` #40027, ``evictable_hits_not_counted``,
  ``mamba_align_zero_chunk`` #34445);
* completeness: a request with ``num_tokens <= L`` that fits the startup bound is admitted
  on an empty pool — no false rejection, the SWA deadlock class
  (``swa_admission_uncapped`` #39734).
"""

from __future__ import annotations

from typing import Sequence

from kvverify.reference.driver import WorkloadResult, WorkloadSpec
from kvverify.errors import KVVerifyError, WorkerError
from kvverify.invariants.base import Violation
from kvverify.reference.planner import StartupPlan
from kvverify.targets.base import Target


def check_workload_completes(target: Target, plan: StartupPlan,
                             workload: Sequence[WorkloadSpec]) -> list[Violation]:
    """Every request of an admissible workload finishes (the engine never hangs)."""
    if not plan.starts or not plan.groups:
        return []
    return workload_violations(target.run_workload(plan, workload), plan, workload)


def workload_violations(result: WorkloadResult, plan: StartupPlan,
                        workload: Sequence[WorkloadSpec]) -> list[Violation]:
    """The violation of a run that did not complete (a stall verdict, the allocator raised, or
    the model runner refused a step: ``WorkerError``, a sampled token past ``max_model_len``)."""
    if result.completed:
        return []
    worker = result.error is not None and result.error.startswith(f"{WorkerError.__name__}:")
    if worker:
        name, what = "admission.worker_raised", "the model runner refused a step the scheduler produced"
    elif result.error:
        name, what = "admission.allocator_raised", "the allocator raised on a step the predictor said it could serve"
    else:
        name, what = f"admission.stall.{result.stall_reason}", "an admitted workload did not finish"
    return [Violation(name, what,
                      {"stall": result.stall_reason, "error": result.error, "steps": result.steps,
                       "stalled": result.stalled_request_ids, "running": result.running,
                       "waiting": result.waiting, "free_blocks": result.free_blocks,
                       "preemptions": result.preemptions, "finished": len(result.finished),
                       "requests": len(workload), "num_blocks": plan.num_blocks,
                       "blocks_needed": plan.blocks_needed_per_request,
                       "last_steps": result.trace[-3:]})]


def check_admitted_on_empty_pool(target: Target, plan: StartupPlan, num_tokens: int) -> list[Violation]:
    """A request of ``num_tokens <= L`` tokens passes the full-sequence gate on an empty pool."""
    if not plan.starts or not plan.groups:
        return []
    length = plan.vllm_config.max_model_len
    num_tokens = max(1, min(num_tokens, length - 1))
    try:
        admitted, evidence = target.admit_on_empty_pool(plan, num_tokens)
    except KVVerifyError as e:
        return [Violation("admission.raised", f"admission raised: {e}", {"num_tokens": num_tokens})]
    if not admitted:
        evidence.update(num_tokens=num_tokens, max_model_len=length, num_blocks=plan.num_blocks,
                        usable_blocks=plan.usable_blocks, startup_bound=plan.blocks_needed_per_request)
        return [Violation("admission.false_rejection",
                          "a request within the startup bound is refused on an empty pool "
                          "(it would wait at the head of the queue forever)", evidence)]
    return []


def check_started_engine_serves(target: Target, plan: StartupPlan, workload: Sequence[WorkloadSpec],
                                *, late: str | None = None) -> list[Violation]:
    """A started engine (after every startup hook, :mod:`kvverify.reference.engine_core`) serves
    a prompt it admits, with or without KV cache groups. ``late``: the startup hook that turned
    chunked prefill off after the budget was checked, for the evidence (finding F14)."""
    if not plan.starts:
        return []
    result = target.run_workload(plan, workload, keep_trace=False)
    if result.completed:
        return []
    cfg = plan.vllm_config
    return [Violation("admission.started_but_never_scheduled" if result.stall_reason else "admission.raised",
                      "the engine started, accepted the prompt, and never finished it",
                      {"stall": result.stall_reason, "error": result.error, "steps": result.steps,
                       "prompt_tokens": [len(w.prompt_token_ids) for w in workload],
                       "max_model_len": cfg.max_model_len, "max_num_batched_tokens": cfg.max_num_batched_tokens,
                       "enable_chunked_prefill": cfg.enable_chunked_prefill, "turned_off_late_by": late,
                       "waiting": result.waiting, "running": result.running})]
