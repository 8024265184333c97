"""Run a workload through an SGLang scheduler to a verdict: every request finishes or is
aborted with a reason — or a stall is reported, never a hang.

Liveness is judged by progress, as in :mod:`kvverify.reference.driver`: the step function is
deterministic, so between two output tokens a run either makes progress or returns to a
global state it was in before. Verdicts:

* ``completed`` — every request finished (``length``) or was aborted *with a reason*
  (a validation refusal at arrival, ``retract_decode``'s last-request abort);
* ``head_of_line`` — nothing runs, the waiting head is not admitted on the idle pool, no
  more requests arrive: it never will be (#29249 / #28530: 0 tok/s forever);
* ``no_progress`` — no output token while the state fingerprint (queues, each request's
  output and KV, free pages, cached pages, the new-token ratio) came back: an endless
  retract / re-prefill cycle;
* ``error`` — an exception escaped a step ("Decode out of memory", an assertion, a raise
  out of ``retract_decode``): the scheduler process would have died.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class SglangRequestSpec:
    """One request: ``prompt_len`` tokens, of which the first ``shared_prefix`` are common to
    every request with the same ``prefix_group`` (radix-cache hits), ``max_new_tokens`` asked."""

    prompt_len: int
    max_new_tokens: int
    arrival_step: int = 0
    prefix_group: int = 0
    shared_prefix: int = 0

    def input_ids(self, index: int) -> list[int]:
        shared = min(self.shared_prefix, self.prompt_len)
        head = [self.prefix_group * 1_000_003 + i for i in range(shared)]
        tail = [10**9 + index * 100_003 + i for i in range(self.prompt_len - shared)]
        return head + tail


class StepOutcomeLike(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def tokens(self) -> int: ...

    @property
    def finished(self) -> int: ...

    @property
    def aborted(self) -> int: ...

    @property
    def retracted(self) -> int: ...


class SglangSchedulerLike(Protocol):
    """What :func:`run_workload` drives: the SGLang reference's scheduler or a target's
    adapter over SGLang's real pieces."""

    def add_request(self, rid: str, input_ids: list[int], max_new_tokens: int) -> Any: ...

    def step(self) -> StepOutcomeLike: ...

    def outcomes(self) -> dict[str, tuple[str, int]]:
        """rid -> (finish reason or "", output tokens) for every request seen."""
        ...

    def unfinished(self) -> int: ...

    def num_running(self) -> int: ...

    def fingerprint(self) -> tuple: ...

    def snapshot(self) -> dict[str, int]:
        """Per-step numbers for the timeline: free / cached tokens, pool, running, waiting."""
        ...


@dataclass
class SglangWorkloadResult:
    verdict: str  # completed | refused (a clear startup error: nothing admitted) | head_of_line | no_progress | error
    steps: int
    outcomes: dict[str, tuple[str, int]] = field(default_factory=dict)
    retractions: int = 0
    error: str | None = None
    detail: str = ""
    #: per step (opt-in, ``record=True``): the scheduler's snapshot plus the step's outcome
    trace: list[dict[str, int | str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict in ("completed", "refused")


def run_workload(scheduler: SglangSchedulerLike, workload: Sequence[SglangRequestSpec], *,
                 record: bool = False) -> SglangWorkloadResult:
    """Feed ``workload`` (arrivals by step) to ``scheduler`` and step it to a verdict
    (``record``: keep the per-step trace the timeline picture draws)."""
    pending = sorted(range(len(workload)), key=lambda i: (workload[i].arrival_step, i))
    seen: set[tuple] = set()
    step, retractions = 0, 0
    trace: list[dict[str, int | str]] = []
    result = _run(scheduler, workload, pending, seen, trace if record else None)
    result.trace = trace
    return result


def _run(scheduler: SglangSchedulerLike, workload: Sequence[SglangRequestSpec], pending: list[int],
         seen: set[tuple], trace: list[dict[str, int | str]] | None) -> SglangWorkloadResult:
    step, retractions = 0, 0
    while True:
        while pending and workload[pending[0]].arrival_step <= step:
            i = pending.pop(0)
            spec = workload[i]
            scheduler.add_request(f"r{i}", spec.input_ids(i), spec.max_new_tokens)
        if not pending and scheduler.unfinished() == 0:
            return SglangWorkloadResult("completed", step, scheduler.outcomes(), retractions)
        try:
            out = scheduler.step()
        except Exception as e:  # noqa: BLE001 - an escaped exception is the verdict
            return SglangWorkloadResult("error", step, scheduler.outcomes(), retractions,
                                        error=f"{type(e).__name__}: {e}"[:400])
        step += 1
        retractions += out.retracted
        if trace is not None:
            trace.append({"step": step, "kind": out.kind, "tokens": out.tokens,
                          "retracted": out.retracted, "aborted": out.aborted, **scheduler.snapshot()})
        if out.tokens or out.finished or out.aborted:
            seen.clear()
            continue
        if pending:
            continue  # time moves on to the next arrival
        if scheduler.num_running() == 0 and out.retracted == 0:
            return SglangWorkloadResult("head_of_line", step, scheduler.outcomes(), retractions,
                                        detail=f"running=0, waiting={scheduler.unfinished()}: the head of "
                                               f"the queue is never admitted on the idle pool")
        fp = scheduler.fingerprint()
        if fp in seen:
            return SglangWorkloadResult("no_progress", step, scheduler.outcomes(), retractions,
                                        detail="the scheduler state recurred with no output token")
        seen.add(fp)
