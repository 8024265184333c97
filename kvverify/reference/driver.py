"""Run a workload through the scheduler to completion, or report a stall.

Always bounded: a step limit, plus three stall detectors that fire long before it:

* ``head_of_line``: nothing runs, the head of the waiting queue was not admitted on
  the (now idle) pool, so it never will be (the hang of #35541/#39734/#52520:
  ``running = 0, waiting >= 1``, 0 tok/s);
* ``no_tokens_scheduled``: requests are unfinished, no more will arrive, and a step
  scheduled nothing — the deterministic state repeats forever (e.g. #34445);
* ``no_progress``: no output token for ``progress_window`` steps (e.g. endless
  preempt/re-prefill);
* ``max_steps``: the hard limit (should never be the first to fire).

A :class:`~kvverify.errors.PoolExhaustedError` escaping a step (an admitted step that
the pool could not serve) is reported as ``error``, not raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from kvverify.reference.config import VllmConfig
from kvverify.errors import ConfigError, PoolExhaustedError, require_int
from kvverify.reference.ops import cdiv
from kvverify.reference.request import Request
from kvverify.reference.scheduler import Scheduler

TraceRow = tuple[int, int, int, int, int]
"""``(step, running, waiting, free_blocks, scheduled_tokens)`` after the step."""


@dataclass(frozen=True)
class WorkloadSpec:
    """One request of a workload: its prompt, output budget and arrival step."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    arrival_step: int = 0
    num_encoder_tokens: int = 0

    def to_request(self) -> Request:
        return Request(self.request_id, self.prompt_token_ids, self.max_tokens,
                       num_encoder_tokens=self.num_encoder_tokens,
                       arrival_step=self.arrival_step)


@dataclass(frozen=True)
class WorkloadResult:
    """Compact outcome of :func:`run_workload`; ``trace`` has one row per step."""

    finished: tuple[str, ...]
    stalled: bool
    stall_reason: str | None
    stalled_request_ids: tuple[str, ...]
    steps: int
    preemptions: int
    num_output_tokens: int
    running: int
    waiting: int
    free_blocks: int
    trace: tuple[TraceRow, ...]
    error: str | None = None

    @property
    def completed(self) -> bool:
        """Every request finished, no stall, no error."""
        return not self.stalled and self.error is None


def _default_max_steps(requests: Sequence[Request], max_model_len: int) -> int:
    total = sum(min(r.num_prompt_tokens + r.max_tokens, max_model_len) for r in requests)
    last_arrival = max((r.arrival_step for r in requests), default=0)
    return 4 * total + last_arrival + 64


def _default_progress_window(num_requests: int, max_model_len: int, budget: int) -> int:
    return (num_requests + 2) * (cdiv(max_model_len, budget) + 2)


def run_workload(vllm_config: VllmConfig, kv_cache_config: Any,
                 requests: Sequence[Request | WorkloadSpec], *,
                 arrival_steps: Sequence[int] | None = None,
                 max_steps: int | None = None, progress_window: int | None = None,
                 scheduler_block_size: int | None = None, hash_block_size: int | None = None,
                 full_sequence_must_fit: bool = True, keep_trace: bool = True,
                 scheduler: Scheduler | None = None,
                 on_step: Callable[[Scheduler, int], None] | None = None) -> WorkloadResult:
    """Run ``requests`` (arriving at ``arrival_steps``, default their own ``arrival_step``)
    until all finish or a stall is detected. Deterministic; never hangs.

    ``on_step(scheduler, step)`` runs after every step (invariant checks); whatever it
    raises propagates to the caller.
    """
    reqs = [r.to_request() if isinstance(r, WorkloadSpec) else r for r in requests]
    if arrival_steps is not None:
        if len(arrival_steps) != len(reqs):
            raise ConfigError("arrival_steps", list(arrival_steps),
                              f"must give one step per request ({len(reqs)})")
        arrivals = [require_int("arrival_steps[i]", a, minimum=0) for a in arrival_steps]
    else:
        arrivals = [r.arrival_step for r in reqs]
    sched = scheduler or Scheduler(vllm_config, kv_cache_config,
                                   scheduler_block_size=scheduler_block_size,
                                   hash_block_size=hash_block_size,
                                   full_sequence_must_fit=full_sequence_must_fit)
    max_model_len = sched.max_model_len
    if max_steps is None:
        max_steps = _default_max_steps(reqs, max_model_len) + max(arrivals, default=0)
    require_int("max_steps", max_steps, minimum=1)
    if progress_window is None:
        progress_window = _default_progress_window(len(reqs), max_model_len,
                                                   sched.max_num_scheduled_tokens)
    require_int("progress_window", progress_window, minimum=1)

    pending = sorted(range(len(reqs)), key=lambda i: (arrivals[i], i))
    next_arrival = 0
    kvm = sched.kv_cache_manager
    trace: list[TraceRow] = []
    stall_reason: str | None = None
    stalled_ids: tuple[str, ...] = ()
    error: str | None = None
    num_outputs = 0
    last_progress_step = 0
    step = 0
    while True:
        # admit arrivals due by this step
        while next_arrival < len(pending) and arrivals[pending[next_arrival]] <= step:
            sched.add_request(reqs[pending[next_arrival]])
            next_arrival += 1
        more_arrivals = next_arrival < len(pending)
        if not sched.has_unfinished_requests():
            if not more_arrivals:
                break
            step = arrivals[pending[next_arrival]]  # idle: jump to the next arrival
            last_progress_step = step  # idle time is not a lack of progress
            continue
        if step >= max_steps:
            stall_reason, stalled_ids = "max_steps", _unfinished(sched)
            break
        try:
            out, finished = sched.step()
        except PoolExhaustedError as exc:
            error = f"{type(exc).__name__}: {exc}"
            stalled_ids = _unfinished(sched)
            break
        step += 1
        if on_step is not None:
            on_step(sched, step)
        produced = len(out.sampled_reqs)
        scheduled_tokens = out.total_num_scheduled_tokens
        running, waiting = sched.get_request_counts()
        if keep_trace:
            trace.append((step, running, waiting, kvm.get_num_free_blocks(), scheduled_tokens))
        if produced or finished:
            num_outputs += produced
            last_progress_step = step
        if scheduled_tokens == 0 and not out.preempted_reqs and sched.has_unfinished_requests():
            if running == 0 and waiting >= 1:
                stall_reason = "head_of_line"
                stalled_ids = (sched.waiting[0].request_id,)
                break
            if not more_arrivals:
                stall_reason, stalled_ids = "no_tokens_scheduled", _unfinished(sched)
                break
        if step - last_progress_step >= progress_window and sched.has_unfinished_requests():
            stall_reason, stalled_ids = "no_progress", _unfinished(sched)
            break
    running, waiting = sched.get_request_counts()
    return WorkloadResult(
        finished=tuple(sched.finished), stalled=stall_reason is not None,
        stall_reason=stall_reason, stalled_request_ids=stalled_ids, steps=step,
        preemptions=sched.num_preemptions, num_output_tokens=num_outputs, running=running,
        waiting=waiting, free_blocks=kvm.get_num_free_blocks(), trace=tuple(trace),
        error=error)


def _unfinished(sched: Scheduler) -> tuple[str, ...]:
    return tuple(r.request_id for r in sched.running) + tuple(r.request_id for r in sched.waiting)
