"""Waiting queues under the two policies (upstream ``vllm/v1/core/sched/request_queue.py``).

Upstream keeps a ``FCFSRequestQueue`` (a deque) or a ``PriorityRequestQueue`` (a heap ordered
by ``(priority, arrival_time)``). The reference keeps a plain deque for both (tests and the
driver read it as one) and, under ``priority``, holds it sorted by the scheduler's key: the
head is what upstream's ``peek_request`` returns, and iterating gives upstream's order.

``prepend_request(s)``: FCFS puts requests at the front (``prepend_requests`` takes the
skipped requests of a step, collected with ``appendleft``, and restores their order with
``extendleft``, as upstream); a priority queue has no front and files them by key.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

Key = Callable[[Any], tuple[int, int, str]]


def add_request(queue: deque[Any], request: Any, key: Key | None) -> None:
    """``RequestQueue.add_request``: at the back (FCFS, ``key`` None) or by key (priority)."""
    if key is None:
        queue.append(request)
        return
    k = key(request)
    i = next((i for i, r in enumerate(queue) if k < key(r)), len(queue))
    queue.insert(i, request)


def prepend_request(queue: deque[Any], request: Any, key: Key | None) -> None:
    """``RequestQueue.prepend_request``: the front (FCFS) or by key (priority)."""
    if key is None:
        queue.appendleft(request)
    else:
        add_request(queue, request, key)


def prepend_requests(queue: deque[Any], requests: Iterable[Any], key: Key | None) -> None:
    """``RequestQueue.prepend_requests`` (FCFS: ``extendleft``, which reverses ``requests``)."""
    if key is None:
        queue.extendleft(requests)
    else:
        for request in requests:
            add_request(queue, request, key)


def remove_requests(queue: deque[Any], requests: Iterable[Any]) -> None:
    """``RequestQueue.remove_requests``: keep the others in order."""
    drop = {id(r) for r in requests}
    kept = [r for r in queue if id(r) not in drop]
    queue.clear()
    queue.extend(kept)


__all__ = ["add_request", "prepend_request", "prepend_requests", "remove_requests"]
