"""The timeline trace of an event-based run: :class:`~kvverify.reference.steptrace.StepRecorder`'s own
sampling, fed with counts instead of a scheduler.

The recorder keeps one row per ``stride`` steps and doubles the stride when it is full; a row
it does not keep costs it nothing but the run's last step. So an event-based run hands it only
the steps it would keep (and the last one), each as the counts the scheduler would have shown
after that step: the picture is the same as the step-by-step driver's, row for row
(``properties/test_eventrun.py``), whatever the number of steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvverify.reference.steptrace import StepRecorder, TraceStep


@dataclass
class _Scheduler:
    """What :class:`StepRecorder` reads from a scheduler, as plain counts (after the step)."""

    max_num_running_reqs: int
    max_num_scheduled_tokens: int
    counts: tuple[int, int] = (0, 0)
    held_now: tuple[int, ...] = ()
    free_now: int = 0

    def get_request_counts(self) -> tuple[int, int]:
        return self.counts


@dataclass(frozen=True)
class _Output:
    """What :class:`StepRecorder` reads from one step's ``SchedulerOutput``."""

    total_num_scheduled_tokens: int
    preempted_reqs: tuple[str, ...] = ()
    scheduled_new_reqs: tuple[str, ...] = ()
    scheduled_resumed_reqs: tuple[str, ...] = ()


@dataclass
class CountRecorder(StepRecorder):
    """A :class:`StepRecorder` whose rows come from counts (``groups`` and ``num_blocks`` given)."""

    group_labels: tuple[str, ...] = ()
    pool_blocks: int = 0
    seqs: int | None = None
    _sched: _Scheduler | None = field(default=None, repr=False)

    def _start(self, sched: Any) -> None:
        self.groups = self.group_labels
        self._freed[:] = [0] * len(self.groups)
        self.num_blocks = self.pool_blocks
        self.max_num_seqs = self.seqs

    @staticmethod
    def _snapshot(sched: Any, row: TraceStep) -> TraceStep:
        held = sched.held_now
        released = row.held or (0,) * len(held)
        return row._replace(free_blocks=sched.free_now - sum(released),
                            held=tuple(h + r for h, r in zip(held, released)))

    def step(self, sched: _Scheduler, step: int, *, scheduled: int, running: int, waiting: int,
             held_now: tuple[int, ...], free_now: int, finished: bool = False,
             released: tuple[int, ...] = (), admitted: int = 0) -> None:
        """Record one step: the request counts, held blocks and free blocks *after* it."""
        sched.counts = (running, waiting)
        sched.held_now = held_now
        sched.free_now = free_now
        if not self.groups:
            self._start(sched)
        if released:
            self._freed[:] = list(released)
        out = _Output(scheduled, scheduled_new_reqs=("r",) * admitted)
        self.record(sched, out, ("r",) if finished else (), step)

    def stretch(self, sched: _Scheduler, first: int, count: int, row_at: Callable[[int], dict[str, Any]],
                *, last_of_run: bool) -> None:
        """Steps ``first .. first + count - 1`` that differ only in what ``row_at(step)`` gives
        (no events): record the ones the sampling keeps, and the last one if the run ends there."""
        end = first + count - 1
        s = first
        recorded_end = False
        while s <= end:
            offset = (s - 1) % self.stride
            nxt = s if offset == 0 else s + self.stride - offset
            if nxt > end:
                break
            self.step(sched, nxt, **row_at(nxt))
            recorded_end = nxt == end
            s = nxt + 1
        if last_of_run and not recorded_end:
            self.step(sched, end, **row_at(end))


def new_recorder(groups: Sequence[str], num_blocks: int, max_num_seqs: int, budget: int) -> tuple[CountRecorder, _Scheduler]:
    """A recorder and the count-carrying scheduler stand-in it reads."""
    rec = CountRecorder(group_labels=tuple(groups), pool_blocks=num_blocks, seqs=max_num_seqs)
    return rec, _Scheduler(max_num_running_reqs=max_num_seqs, max_num_scheduled_tokens=budget)
