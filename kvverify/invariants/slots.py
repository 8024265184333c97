"""Request-slot conservation: every request is in exactly one place, every step.

After each step, every request the workload added and the scheduler still knows is counted
in **exactly one** of: ``running``; ``waiting`` (holding no KV blocks); ``kv_holding_waiting``
(skipped or parked requests holding blocks, loads in flight); or *finished but not yet freed*
(its blocks kept by the connector's delayed free or an unreported load, in no queue). Also:

* a request in ``running`` is ``RUNNING``; one loading (``WAITING_FOR_REMOTE_KVS``) is parked
  in ``kv_holding_waiting``; one in ``waiting`` has computed nothing and loads nothing;
* a request the scheduler forgot (freed) is in no queue, and a finished one in no queue;
* nobody is lost: added = finished (and freed) + the ones counted above.

A request in two queues would be scheduled twice; a request in none is stranded forever
(``Running: 0, Waiting: N`` while it waits nowhere) — the accounting class of #53130 / #42568,
where requests parked outside ``running`` must still be promoted. Read through the surface
both targets offer (upstream's names: ``running``, ``waiting``, ``kv_holding_waiting``,
``requests``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from kvverify.invariants.base import Violation


def _status(request: Any) -> str:
    return str(getattr(request.status, "name", request.status)).upper()


def check_request_slots(sched: Any, added: Iterable[str], finished: Iterable[str], step: int) -> list[Violation]:
    """``added``: every request id the driver added so far; ``finished``: ids that finished."""
    running = [r.request_id for r in sched.running]
    waiting = [r.request_id for r in sched.waiting]
    holding = [r.request_id for r in sched.kv_holding_waiting]
    where = Counter(running + waiting + holding)
    known = dict(sched.requests)
    added, finished = set(added), set(finished)
    evidence: dict[str, Any] = {"step": step, "running": running, "waiting": waiting,
                                "kv_holding_waiting": holding}
    twice = sorted(rid for rid, n in where.items() if n > 1)
    if twice:
        return [Violation("slots.counted_twice", "a request sits in two queues (or twice in one)",
                          {**evidence, "requests": twice})]
    for rid, request in sorted(known.items()):
        done = request.is_finished()
        if rid not in where and not done:
            return [Violation("slots.stranded", "an unfinished request is in no queue: nothing will schedule it",
                              {**evidence, "request": rid, "status": _status(request)})]
        if rid in where and done:
            return [Violation("slots.finished_queued", "a finished request is still queued",
                              {**evidence, "request": rid, "status": _status(request)})]
    for queue, ids in (("running", running), ("waiting", waiting), ("kv_holding_waiting", holding)):
        for rid in ids:
            request = known.get(rid)
            if request is None:
                return [Violation("slots.forgotten_queued", "a queued request the scheduler no longer knows",
                                  {**evidence, "request": rid, "queue": queue})]
            status = _status(request)
            if queue == "running" and status != "RUNNING":
                return [Violation("slots.running_status", "a request in running is not RUNNING",
                                  {**evidence, "request": rid, "status": status})]
            if queue != "running" and status == "RUNNING":
                return [Violation("slots.running_outside", "a RUNNING request waits outside running",
                                  {**evidence, "request": rid, "queue": queue})]
            if status == "WAITING_FOR_REMOTE_KVS" and queue != "kv_holding_waiting":
                return [Violation("slots.loading_misplaced", "a loading request is not parked with the block holders",
                                  {**evidence, "request": rid, "queue": queue})]
            if queue == "waiting" and request.num_computed_tokens:
                return [Violation("slots.waiting_holds_blocks",
                                  "a request in waiting holds computed KV (block holders are drained first)",
                                  {**evidence, "request": rid, "num_computed_tokens": request.num_computed_tokens})]
    lost = sorted(added - finished - set(known))
    if lost:
        return [Violation("slots.lost", "a request vanished: neither finished nor known to the scheduler",
                          {**evidence, "requests": lost})]
    return []


__all__ = ["check_request_slots"]
