"""Run a workload through the scheduler to completion, or report a stall.

Liveness is judged by progress, never by a step budget: a slower-but-live scheduling
policy is not a stall, however many steps it takes. The run is deterministic and, between
two output tokens, its state space is finite, so it either produces a token, finishes, or
returns to a state it was in before; the three stall verdicts are exactly those returns:

* ``head_of_line``: nothing runs, the head of the waiting queue was not admitted on
  the (now idle) pool, so it never will be (the hang of #35541/#39734/#52520:
  ``running = 0, waiting >= 1``, 0 tok/s);
* ``no_tokens_scheduled``: requests are unfinished, no more will arrive, and a step
  scheduled nothing: the state is a fixed point (e.g. #34445);
* ``no_progress``: no output token while the global state (queues, each request's
  tokens and progress, the pool's free queue, ref counts and prefix-cache map, the
  managers' per-request blocks; :func:`state_fingerprint`) came back for the
  ``state_repeats``-th time: an endless preempt/re-prefill cycle. Fingerprints are taken
  once ``progress_window`` steps passed without an output token, or at once on an idle step
  (nothing scheduled, preempted or finished: a live run schedules something every step), so
  live runs pay nothing for it; the window alone never decides a verdict.
* ``pending_transfer``: every request finished, but an external event stays pending (a
  finished request's delayed free whose send is never reported, a transfer that never lands)
  while the state returns for the ``state_repeats``-th time: the engine never goes idle and the
  blocks stay held (found on vLLM 0.19.1, where such a run used to loop until memory ran out);
* ``unbounded``: the backstop for a target whose state keeps changing without an output token
  (a real engine may leak state into what the fingerprint reads, so it never returns):
  ``UNBOUNDED_WINDOWS`` progress windows (the workload's own, or the caller's if larger) without
  an output token or a finished request. The
  reference's state between two tokens is finite, so it always reaches a verdict above first;
* ``max_steps``: only when the caller passes ``max_steps`` (a budget it chose; none by default).

An event outside the scheduling decision that is still pending — a batch in flight, a KV load
or a delayed free's send the connector has not reported (``has_pending_external_events``) — can
still change the state, so while one is pending a step that schedules nothing is no verdict;
the connector's countdowns, the parked requests, the fences and the batches in flight are part
of the fingerprint (``kv_transfer_state``), so a load counting down is not a returning state.

A :class:`~kvverify.errors.PoolExhaustedError` escaping a step (an admitted step that
the pool could not serve) or a :class:`~kvverify.errors.WorkerError` (a step the model runner
refuses: a sampled token past ``max_model_len``) is reported as ``error``, not raised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from kvverify.reference.config import VllmConfig
from kvverify.reference.connector import ConnectorScript
from kvverify.errors import ConfigError, PoolExhaustedError, WorkerError
from kvverify.reference.validation import require_int
from kvverify.reference.ops import cdiv
from kvverify.reference.request import Request
from kvverify.reference.scheduler import Scheduler
from kvverify.reference.steptrace import StepRecorder


class StepOutputLike(Protocol):
    """What the driver reads from one step's output (upstream ``SchedulerOutput``'s names)."""

    @property
    def total_num_scheduled_tokens(self) -> int: ...

    @property
    def preempted_reqs(self) -> Sequence[str]: ...

    @property
    def sampled_reqs(self) -> Sequence[str]: ...


class SchedulerLike(Protocol):
    """What :func:`run_workload` steps: the reference :class:`Scheduler`, or a target's adapter
    over upstream's ``Scheduler`` (upstream's attribute names)."""

    @property
    def max_model_len(self) -> int: ...

    @property
    def max_num_scheduled_tokens(self) -> int: ...

    @property
    def kv_cache_manager(self) -> Any: ...

    @property
    def running(self) -> Sequence[Any]: ...

    @property
    def waiting(self) -> Sequence[Any]: ...

    @property
    def kv_holding_waiting(self) -> Sequence[Any]: ...

    @property
    def finished(self) -> Sequence[str]: ...

    @property
    def num_preemptions(self) -> int: ...

    @property
    def requests(self) -> Mapping[str, Any]:
        """Every request the scheduler still knows: unfinished, or finished with its blocks still
        kept (a connector's delayed free); a freed request is forgotten (upstream ``requests``)."""
        ...

    def add_request(self, request: Any) -> None: ...

    def abort_requests(self, request_ids: Sequence[str]) -> list[str]:
        """Upstream ``EngineCore.abort_requests`` (``finish_requests(ids, FINISHED_ABORTED)``):
        the ids aborted, unknown and finished ones skipped; they join ``finished``."""
        ...

    def has_unfinished_requests(self) -> bool: ...

    def get_request_counts(self) -> tuple[int, int]: ...

    def step(self) -> tuple[StepOutputLike, list[str]]: ...

    def has_pending_external_events(self) -> bool: ...

    def kv_transfer_state(self) -> tuple[object, ...]: ...


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
    priority: int = 0

    def to_request(self) -> Request:
        return Request(self.request_id, self.prompt_token_ids, self.max_tokens,
                       num_encoder_tokens=self.num_encoder_tokens,
                       arrival_step=self.arrival_step, priority=self.priority)


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


def _status_name(status: Any) -> str:
    return str(getattr(status, "name", status))


def state_fingerprint(sched: SchedulerLike) -> int:
    """A hash of everything a step's outcome depends on, read through the surface both
    targets offer: the running and waiting queues in order (each request's id, status,
    tokens, computed tokens), the pool's free queue in order, its ref counts and
    prefix-cache map, and each manager's per-request blocks and bookkeeping.

    Two equal fingerprints with no output token in between mean the deterministic run is
    in a cycle (up to a hash collision, and up to state outside this surface; hence the
    driver asks for ``state_repeats`` sightings)."""
    def reqs(queue: Sequence[Any]) -> tuple[Any, ...]:
        return tuple((r.request_id, _status_name(r.status), r.num_tokens, r.num_computed_tokens)
                     for r in queue)

    kvm = sched.kv_cache_manager
    pool = kvm.block_pool
    parts: list[Any] = [reqs(sched.running), reqs(sched.waiting), sched.kv_transfer_state(),
                        tuple(pool.free_block_ids()),
                        tuple(sorted(pool.ref_counts().items())),
                        tuple(sorted((b.block_id, hash(k)) for k, b in pool.cached_entries()))]
    for manager in kvm.coordinator.single_type_managers:
        parts.append(tuple(sorted((rid, tuple(b.block_id for b in blocks))
                                  for rid, blocks in manager.req_to_blocks.items())))
        for name in _MANAGER_BOOKKEEPING:
            value = getattr(manager, name, None)
            if isinstance(value, dict):
                parts.append((name, tuple(sorted(value.items()))))
            elif isinstance(value, (set, frozenset)):
                parts.append((name, tuple(sorted(map(repr, value)))))
    return hash(tuple(parts))


#: per-request manager state beyond ``req_to_blocks`` that decides later steps
_MANAGER_BOOKKEEPING = ("num_cached_block", "last_state_block_idx", "_num_retired_blocks",
                        "_allocated_block_reqs")


#: progress windows without an output token or a finished request after which a run whose
#: state never returns is stopped as ``unbounded`` (a live policy produces a token per window)
UNBOUNDED_WINDOWS = 64


def _default_progress_window(num_requests: int, max_model_len: int, budget: int) -> int:
    return (num_requests + 2) * (cdiv(max_model_len, budget) + 2)


def run_workload(vllm_config: VllmConfig, kv_cache_config: Any,
                 requests: Sequence[Request | WorkloadSpec], *,
                 arrival_steps: Sequence[int] | None = None,
                 max_steps: int | None = None, progress_window: int | None = None,
                 state_repeats: int = 3,
                 scheduler_block_size: int | None = None, hash_block_size: int | None = None,
                 full_sequence_must_fit: bool = True, keep_trace: bool = True,
                 scheduler: SchedulerLike | None = None, connector: ConnectorScript | None = None,
                 on_step: Callable[[SchedulerLike, int], None] | None = None,
                 recorder: StepRecorder | None = None) -> WorkloadResult:
    """Run ``requests`` (arriving at ``arrival_steps``, default their own ``arrival_step``)
    until all finish or a stall is detected. Deterministic; never hangs (see the module
    docstring: a stall is a state that returns, not a step count). ``max_steps`` is an
    optional budget of the caller's (reported as ``max_steps``); ``progress_window`` is how
    many steps without an output token pass before states are fingerprinted;
    ``state_repeats`` how many sightings of one state make the ``no_progress`` verdict.

    ``connector`` (a :class:`~kvverify.reference.connector.ConnectorScript`) builds the
    scheduler with the scripted KV connector (``vllm_config.kv_connector`` must be on).
    ``on_step(scheduler, step)`` runs after every step (invariant checks); whatever it
    raises propagates to the caller. ``recorder`` (opt-in, :class:`kvverify.reference.steptrace.StepRecorder`)
    records each step for the timeline pictures; without one the loop does no extra work.
    """
    reqs = [r.to_request() if isinstance(r, WorkloadSpec) else r for r in requests]
    if arrival_steps is not None:
        if len(arrival_steps) != len(reqs):
            raise ConfigError("arrival_steps", list(arrival_steps),
                              f"must give one step per request ({len(reqs)})")
        arrivals = [require_int("arrival_steps[i]", a, minimum=0) for a in arrival_steps]
    else:
        arrivals = [r.arrival_step for r in reqs]
    sched: SchedulerLike = scheduler or Scheduler(vllm_config, kv_cache_config,
                                                  scheduler_block_size=scheduler_block_size,
                                                  hash_block_size=hash_block_size,
                                                  full_sequence_must_fit=full_sequence_must_fit,
                                                  connector=connector)
    max_model_len = sched.max_model_len
    if max_steps is not None:
        require_int("max_steps", max_steps, minimum=1)
    require_int("state_repeats", state_repeats, minimum=2)
    own_window = _default_progress_window(len(reqs), max_model_len, sched.max_num_scheduled_tokens)
    if progress_window is None:
        progress_window = own_window
    require_int("progress_window", progress_window, minimum=1)
    # the backstop counts the workload's own windows (a caller's small window only makes the
    # fingerprinting start sooner; it must not turn the backstop into a step budget)
    backstop = UNBOUNDED_WINDOWS * max(progress_window, own_window)

    pending = sorted(range(len(reqs)), key=lambda i: (arrivals[i], i))
    next_arrival = 0
    kvm = sched.kv_cache_manager
    trace: list[TraceRow] = []
    stall_reason: str | None = None
    stalled_ids: tuple[str, ...] = ()
    error: str | None = None
    num_outputs = 0
    last_progress_step = 0
    seen: dict[int, int] = {}  # fingerprint -> sightings since the last output token
    step = 0
    if recorder is not None:
        recorder.attach(sched)
    while True:
        # admit arrivals due by this step
        while next_arrival < len(pending) and arrivals[pending[next_arrival]] <= step:
            sched.add_request(reqs[pending[next_arrival]])
            next_arrival += 1
        more_arrivals = next_arrival < len(pending)
        if not sched.has_unfinished_requests() and not sched.has_pending_external_events():
            if not more_arrivals:
                break
            step = arrivals[pending[next_arrival]]  # idle: jump to the next arrival
            last_progress_step = step  # idle time is not a lack of progress
            seen.clear()
            continue
        if max_steps is not None and step >= max_steps:
            stall_reason, stalled_ids = "max_steps", _unfinished(sched)
            break
        try:
            out, finished = sched.step()
        except (PoolExhaustedError, WorkerError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            stalled_ids = _unfinished(sched)
            break
        step += 1
        if recorder is not None:
            recorder.record(sched, out, finished, step)
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
            seen.clear()
        if (scheduled_tokens == 0 and not out.preempted_reqs and not finished
                and sched.has_unfinished_requests() and not sched.has_pending_external_events()):
            if running == 0 and waiting >= 1:
                stall_reason = "head_of_line"
                stalled_ids = (_waiting(sched)[0].request_id,)
                break
            if not more_arrivals:
                stall_reason, stalled_ids = "no_tokens_scheduled", _unfinished(sched)
                break
        # an idle step (nothing scheduled, preempted or finished) is fingerprinted at once: a
        # live run that is merely slow schedules tokens every step and pays nothing, while a
        # stall behind a long window (a small budget, a long max_model_len) is seen in a few
        # steps instead of a window's worth
        idle = scheduled_tokens == 0 and not out.preempted_reqs and not finished
        if (idle or step - last_progress_step >= progress_window) and not more_arrivals:
            unfinished = sched.has_unfinished_requests()
            if unfinished or sched.has_pending_external_events():
                key = state_fingerprint(sched)
                seen[key] = seen.get(key, 0) + 1
                if seen[key] >= state_repeats:
                    stall_reason = "no_progress" if unfinished else "pending_transfer"
                    stalled_ids = _unfinished(sched)
                    break
                if step - last_progress_step >= backstop:
                    stall_reason, stalled_ids = "unbounded", _unfinished(sched)
                    break
    if recorder is not None:
        recorder.finish(sched, steps=step, stall_reason=stall_reason, stalled_request_ids=stalled_ids,
                        error=error)
    running, waiting = sched.get_request_counts()
    return WorkloadResult(
        finished=tuple(sched.finished), stalled=stall_reason is not None,
        stall_reason=stall_reason, stalled_request_ids=stalled_ids, steps=step,
        preemptions=sched.num_preemptions, num_output_tokens=num_outputs, running=running,
        waiting=waiting, free_blocks=kvm.get_num_free_blocks(), trace=tuple(trace),
        error=error)


def _waiting(sched: SchedulerLike) -> list[Any]:
    """The waiting requests in scan order: block holders first (upstream's two queues)."""
    return [*sched.kv_holding_waiting, *sched.waiting]


def _unfinished(sched: SchedulerLike) -> tuple[str, ...]:
    return tuple(r.request_id for r in sched.running) + tuple(r.request_id for r in _waiting(sched))
