"""A per-step trace of a workload run, for the timeline pictures (opt-in, bounded).

:func:`kvverify.reference.driver.run_workload` takes ``recorder=StepRecorder()``; after
every scheduler step it calls :meth:`StepRecorder.record`, and :meth:`StepRecorder.finish`
when the run ends (completed, stalled, or the pool raised). Without a recorder the driver
does none of this work, so fuzzing pays nothing; reports re-run the failing workload with a
recorder (:mod:`kvverify.reports.timeline`), and ``kvverify check --plot`` runs with one.

A row holds ``running`` (in the step: the requests that finished in it included),
``waiting`` after the step, the tokens scheduled, the distinct
real blocks **held per KV cache group during the step** (after scheduling: a request that
finishes in the step still holds its blocks — the peak a pool must serve), ``free_blocks``
at the same moment (the free queue, evictable cached blocks included), and how many
requests were **preempted**, **admitted** (new or resumed) and **refused** in the step. *Refused* is read off the step's outcome, the way
the FCFS waiting pass ends: nobody was preempted (so the waiting pass ran), requests still
wait, token budget and ``max_num_seqs`` were left — so the head of the queue was refused
by ``allocate_slots`` (head-of-line blocking). ``sum(held) + free_blocks + 1 == N`` (block
0 is the null block) on every row.

Bounded: once ``max_rows`` rows are kept, every other row is dropped and the sampling
stride doubles; the event counts of a dropped row move to the next kept row, and the
last step is always kept. A run of a million decode steps costs ``max_rows`` snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Sequence

from kvverify.reference import arith

COLUMNS = ("step", "running", "waiting", "free_blocks", "scheduled_tokens", "held",
           "preempted", "admitted", "refused")


class TraceStep(NamedTuple):
    """One row: the state after ``step`` and the events of the step (or of its bucket)."""

    step: int
    running: int
    waiting: int
    free_blocks: int
    scheduled_tokens: int
    held: tuple[int, ...]
    preempted: int
    admitted: int
    refused: int


@dataclass(frozen=True)
class StepTrace:
    """A finished trace: groups, pool size, rows, and how the run ended."""

    groups: tuple[str, ...]
    num_blocks: int
    rows: tuple[TraceStep, ...]
    stride: int
    steps: int
    stall_reason: str | None
    stalled_request_ids: tuple[str, ...]
    error: str | None
    preemptions: int
    refusals: int
    completed: bool
    max_num_seqs: int | None = None

    @property
    def usable_blocks(self) -> int:
        """``N - 1`` (:func:`kvverify.reference.arith.usable_blocks`): block 0 is the null block;
        0 for an empty pool."""
        return max(arith.usable_blocks(self.num_blocks), 0)

    def to_json(self) -> dict[str, Any]:
        return {"groups": list(self.groups), "num_blocks": self.num_blocks,
                "usable_blocks": self.usable_blocks, "stride": self.stride, "steps": self.steps,
                "stall_reason": self.stall_reason, "stalled_request_ids": list(self.stalled_request_ids),
                "error": self.error, "preemptions": self.preemptions, "refusals": self.refusals,
                "completed": self.completed, "max_num_seqs": self.max_num_seqs,
                "columns": list(COLUMNS),
                "rows": [[r.step, r.running, r.waiting, r.free_blocks, r.scheduled_tokens, list(r.held),
                          r.preempted, r.admitted, r.refused] for r in self.rows]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepTrace:
        rows = tuple(TraceStep(int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]),
                               tuple(int(h) for h in r[5]), int(r[6]), int(r[7]), int(r[8]))
                     for r in data.get("rows") or ())
        return cls(groups=tuple(str(g) for g in data.get("groups") or ()),
                   num_blocks=int(data["num_blocks"]), rows=rows, stride=int(data.get("stride", 1)),
                   steps=int(data.get("steps", rows[-1].step if rows else 0)),
                   stall_reason=data.get("stall_reason"),
                   stalled_request_ids=tuple(data.get("stalled_request_ids") or ()),
                   error=data.get("error"), preemptions=int(data.get("preemptions", 0)),
                   refusals=int(data.get("refusals", 0)), completed=bool(data.get("completed")),
                   max_num_seqs=data.get("max_num_seqs"))


def group_labels(kv_cache_manager: Any) -> tuple[str, ...]:
    """``"full_attention B=16"`` per KV cache group (kind and block size)."""
    out = []
    for m in kv_cache_manager.coordinator.single_type_managers:
        spec = m.kv_cache_spec
        kind = getattr(spec, "kind", None) or type(spec).__name__
        out.append(f"{kind} B={spec.block_size}")
    return tuple(out)


def held_per_group(kv_cache_manager: Any) -> tuple[int, ...]:
    """Distinct real (non-null) blocks the requests hold, per KV cache group."""
    out = []
    for m in kv_cache_manager.coordinator.single_type_managers:
        ids = {b.block_id for blocks in m.req_to_blocks.values() for b in blocks if not b.is_null}
        out.append(len(ids))
    return tuple(out)


@dataclass
class StepRecorder:
    """Collects :class:`TraceStep` rows while the driver runs (mutable, one run)."""

    max_rows: int = 1024
    rows: list[TraceStep] = field(default_factory=list)
    stride: int = 1
    groups: tuple[str, ...] = ()
    num_blocks: int = 0
    max_num_seqs: int | None = None
    preemptions: int = 0
    refusals: int = 0
    _pending: list[int] = field(default_factory=lambda: [0, 0, 0])  # events since the last kept row
    _freed: list[int] = field(default_factory=list)  # per group: blocks finishing requests released
    _last: TraceStep | None = None
    result: StepTrace | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_rows, int) or self.max_rows < 4:
            raise ValueError(f"max_rows must be an int >= 4, got {self.max_rows!r}")

    def attach(self, sched: Any) -> None:
        """Called by the driver before the first step.

        Blocks a request held during its last step are released by ``update_from_output``
        before the driver sees the step; to draw them, ``kv_cache_manager.free`` is wrapped
        (on this scheduler's manager only) to count, per group, the blocks a *finishing*
        request releases. A preempted request's blocks were released before the step ran
        and are not counted. (An adapter whose scheduler frees through another object is
        drawn after the release.)
        """
        self._start(sched)
        kvm = sched.kv_cache_manager
        original = getattr(kvm, "free", None)
        if original is None:
            return
        managers = kvm.coordinator.single_type_managers
        freed = self._freed

        def free(request: Any) -> None:
            done = getattr(request, "is_finished", None)
            if callable(done) and done():
                for g, m in enumerate(managers):
                    freed[g] += sum(1 for b in m.req_to_blocks.get(request.request_id, ())
                                    if not b.is_null and b.ref_cnt == 1)
            original(request)

        kvm.free = free

    def _start(self, sched: Any) -> None:
        kvm = sched.kv_cache_manager
        self.groups = group_labels(kvm)
        self._freed[:] = [0] * len(self.groups)
        pool = getattr(kvm, "block_pool", None)
        self.num_blocks = int(getattr(pool, "num_gpu_blocks", 0) or 0) or (
            kvm.get_num_free_blocks() + sum(held_per_group(kvm)) + 1)
        self.max_num_seqs = getattr(sched, "max_num_running_reqs", None)

    def record(self, sched: Any, out: Any, finished: Sequence[str], step: int) -> None:
        """The state after ``step`` (``out``: its ``SchedulerOutput``; ``finished``: ids)."""
        if not self.groups:
            self._start(sched)
        running, waiting = sched.get_request_counts()
        running += len(finished)  # in the step: a request that finished in it ran in it
        scheduled = out.total_num_scheduled_tokens
        preempted = len(out.preempted_reqs)
        admitted = len(getattr(out, "scheduled_new_reqs", ()) or ()) + \
            len(getattr(out, "scheduled_resumed_reqs", ()) or ())
        budget = getattr(sched, "max_num_scheduled_tokens", None)
        seqs_left = self.max_num_seqs is None or running < self.max_num_seqs
        refused = int(not preempted and waiting > 0 and seqs_left
                      and (budget is None or scheduled < budget))
        self.preemptions += preempted
        self.refusals += refused
        pend = self._pending
        pend[0] += preempted
        pend[1] += admitted
        pend[2] += refused
        released = tuple(self._freed)
        self._freed[:] = [0] * len(self._freed)
        keep = (step - 1) % self.stride == 0
        if not keep:
            self._last = TraceStep(step, running, waiting, -1, scheduled, released, 0, 0, 0)
            return
        self._append(self._snapshot(sched, TraceStep(step, running, waiting, -1, scheduled, released, *pend)))
        self._last = None

    @staticmethod
    def _snapshot(sched: Any, row: TraceStep) -> TraceStep:
        """Fill ``free_blocks`` and ``held`` (``row.held`` holds what finishing requests released)."""
        kvm = sched.kv_cache_manager
        held = held_per_group(kvm)
        released = row.held or (0,) * len(held)
        return row._replace(free_blocks=kvm.get_num_free_blocks() - sum(released),
                            held=tuple(h + r for h, r in zip(held, released)))

    def _append(self, row: TraceStep) -> None:
        self.rows.append(row)
        self._pending = [0, 0, 0]
        if len(self.rows) >= self.max_rows:
            self._decimate()

    def _decimate(self) -> None:
        """Keep every other row (the first always); events of dropped rows move forward."""
        kept: list[TraceStep] = []
        carry = [0, 0, 0]
        for i, r in enumerate(self.rows):
            if i % 2 == 1:
                carry = [carry[0] + r.preempted, carry[1] + r.admitted, carry[2] + r.refused]
                continue
            r = r._replace(preempted=r.preempted + carry[0], admitted=r.admitted + carry[1],
                           refused=r.refused + carry[2])
            carry = [0, 0, 0]
            kept.append(r)
        self._pending = [self._pending[j] + carry[j] for j in range(3)]
        self.rows = kept
        self.stride *= 2

    def finish(self, sched: Any, *, steps: int, stall_reason: str | None,
               stalled_request_ids: Sequence[str] = (), error: str | None = None) -> StepTrace:
        """Close the trace (the last step is always a row) and return it."""
        if not self.groups:
            self._start(sched)
        if self._last is not None:  # the last step fell between samples: snapshot it now
            last = self._last._replace(preempted=self._pending[0], admitted=self._pending[1],
                                       refused=self._pending[2])
            self.rows.append(self._snapshot(sched, last))
            self._pending = [0, 0, 0]
            self._last = None
        self.result = StepTrace(
            groups=self.groups, num_blocks=self.num_blocks, rows=tuple(self.rows), stride=self.stride,
            steps=steps, stall_reason=stall_reason, stalled_request_ids=tuple(stalled_request_ids),
            error=error, preemptions=self.preemptions, refusals=self.refusals,
            completed=stall_reason is None and error is None, max_num_seqs=self.max_num_seqs)
        return self.result


# --- state machines: one row per rule step ----------------------------------------------

RULE_COLUMNS = ("step", "rule", "live", "free_blocks", "held", "allocated", "freed", "hits", "evicted")


class RuleStep(NamedTuple):
    """The pool after one rule of a state machine's program, and what the rule did to it.

    ``step`` 0 is the ``@initialize`` rule; ``live``: requests admitted and not freed;
    ``held``: distinct real blocks held per KV cache group; ``free_blocks``: the free queue
    (evictable cached blocks included); ``allocated``: blocks ``get_new_blocks`` handed out;
    ``freed``: blocks whose reference count reached 0 (back in the free queue); ``hits``:
    prefix-cache hit blocks ``touch``-ed; ``evicted``: prefix-cache entries dropped (a
    cached free block handed out again, or ``reset_prefix_cache``).
    """

    step: int
    rule: str
    live: int
    free_blocks: int
    held: tuple[int, ...]
    allocated: int
    freed: int
    hits: int
    evicted: int


@dataclass(frozen=True)
class RuleTrace:
    """A state machine's run, rule by rule; ``failed_step``: the step the run failed in."""

    groups: tuple[str, ...]
    num_blocks: int
    rows: tuple[RuleStep, ...]
    failed_step: int | None = None
    failure: str | None = None

    @property
    def usable_blocks(self) -> int:
        """``N - 1`` (:func:`kvverify.reference.arith.usable_blocks`); 0 for an empty pool."""
        return max(arith.usable_blocks(self.num_blocks), 0)

    def to_json(self) -> dict[str, Any]:
        return {"groups": list(self.groups), "num_blocks": self.num_blocks, "usable_blocks": self.usable_blocks,
                "failed_step": self.failed_step, "failure": self.failure, "columns": list(RULE_COLUMNS),
                "rows": [[r.step, r.rule, r.live, r.free_blocks, list(r.held), r.allocated, r.freed, r.hits,
                          r.evicted] for r in self.rows]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RuleTrace:
        rows = tuple(RuleStep(int(r[0]), str(r[1]), int(r[2]), int(r[3]), tuple(int(h) for h in r[4]),
                              int(r[5]), int(r[6]), int(r[7]), int(r[8])) for r in data.get("rows") or ())
        failed = data.get("failed_step")
        return cls(groups=tuple(str(g) for g in data.get("groups") or ()), num_blocks=int(data["num_blocks"]),
                   rows=rows, failed_step=None if failed is None else int(failed), failure=data.get("failure"))


class RuleRecorder:
    """Records a :class:`RuleTrace` while a state machine runs over a ``KVCacheManager``.

    Counts the pool's events by wrapping this pool instance's ``get_new_blocks``, ``touch``,
    ``free_blocks`` and ``reset_prefix_cache``; the machine calls :meth:`step` at the start
    of every rule (closing the previous row: the state after that rule and the invariants
    run after it) and :meth:`close` in ``teardown``. Only a report's replay records.
    """

    def __init__(self, kv_cache_manager: Any, live: Any) -> None:
        self.kvm = kv_cache_manager
        self.live = live  # () -> number of live requests
        self.groups = group_labels(kv_cache_manager)
        pool = kv_cache_manager.block_pool
        self.num_blocks = int(pool.num_gpu_blocks)
        self.rows: list[RuleStep] = []
        self._open: tuple[int, str] | None = None
        self._events = [0, 0, 0, 0]  # allocated, freed, hits, evicted
        ev = self._events
        get_new, touch, free_blocks, reset = pool.get_new_blocks, pool.touch, pool.free_blocks, \
            pool.reset_prefix_cache

        def cached() -> int:
            return sum(1 for _ in pool.cached_entries())

        def get_new_blocks(num_blocks: int) -> Any:
            before = cached()
            got = get_new(num_blocks)
            ev[0] += len(got)
            ev[3] += before - cached()
            return got

        def touch_(blocks: Any) -> None:
            blocks = list(blocks)
            touch(blocks)
            ev[2] += sum(1 for b in blocks if not b.is_null)

        def free_blocks_(ordered: Any) -> None:
            ordered = list(ordered)
            free_blocks(ordered)
            ev[1] += len({b.block_id for b in ordered if not b.is_null and b.ref_cnt == 0})

        def reset_prefix_cache() -> bool:
            before = cached()
            done = reset()
            ev[3] += before - cached()
            return bool(done)

        pool.get_new_blocks, pool.touch, pool.free_blocks = get_new_blocks, touch_, free_blocks_
        pool.reset_prefix_cache = reset_prefix_cache

    def step(self, rule: str) -> None:
        """A rule starts: close the previous row, open one for ``rule``."""
        self._close_row()
        self._open = (len(self.rows), rule)

    def close(self) -> None:
        """The run ended (``teardown``): close the open row."""
        self._close_row()

    def _close_row(self) -> None:
        if self._open is None:
            return
        step, rule = self._open
        self.rows.append(RuleStep(step, rule, int(self.live()), self.kvm.get_num_free_blocks(),
                                  held_per_group(self.kvm), *self._events))
        self._events[:] = [0, 0, 0, 0]
        self._open = None

    def result(self, failed: bool, failure: str | None = None) -> RuleTrace:
        """The trace; when ``failed``, the last row is the step the run failed in."""
        self._close_row()
        at = self.rows[-1].step if failed and self.rows else None
        return RuleTrace(self.groups, self.num_blocks, tuple(self.rows), at, failure if failed else None)
