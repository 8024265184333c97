"""No zero-progress preemption: a victim whose blocks cannot be freed now is never preempted.

With batches in flight and a consumer KV connector, upstream defers freeing a request's
blocks until the last batch that scheduled it has been processed (``defer_block_free``).
Preempting such a victim to make room frees nothing for the failing allocation: the retry
sees the same free count, and one failure cascades through the running queue (#49674) —
work thrown away, requests re-prefilled, 0 tok/s under pressure. The contract #49675
restored: a victim known in advance to be unreclaimable stops the retry instead.

Checked from the outside on every engine step: when the deferral is on, no request preempted
by the step's schedule may appear in a batch still in flight (its last scheduling not yet
processed). Each target exposes its batch queue's scheduled outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kvverify.invariants.base import Violation


def check_no_zero_progress_preemption(preempted: Iterable[str], in_flight: Iterable[Mapping[str, int]],
                                      defer_block_free: bool, step: int) -> list[Violation]:
    """``preempted``: the step's victims; ``in_flight``: the ``num_scheduled_tokens`` of every
    batch that was in flight when the step scheduled (its output not yet processed)."""
    if not defer_block_free:
        return []
    flying: set[str] = set()
    for batch in in_flight:
        flying.update(batch)
    fenced = sorted(set(preempted) & flying)
    if fenced:
        return [Violation("preemption.zero_progress",
                          "a victim was preempted while a batch that scheduled it is still in flight: its "
                          "block free is deferred, so the preemption makes no room for the retry",
                          {"step": step, "victims": fenced, "preempted": list(preempted)})]
    return []


def in_flight_at_last_schedule(sched: Any) -> list[dict[str, int]]:
    """The batches in flight when ``sched``'s last step scheduled (its
    :class:`~kvverify.reference.sched.engine.BatchQueue` records them)."""
    return list(sched.batch_queue.last_in_flight)


__all__ = ["check_no_zero_progress_preemption", "in_flight_at_last_schedule"]
