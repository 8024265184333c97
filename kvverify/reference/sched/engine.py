"""Batches in flight: upstream ``EngineCore.step_with_batch_queue``, over any scheduler.

With ``max_concurrent_batches = 1`` a step is ``schedule()``, execute, ``update_from_output()``.
With more (pipeline parallelism: the plain ``Scheduler`` behind a batch queue of that depth),
each engine step schedules a batch and hands it to the worker; only when the queue is full
(or nothing more can be scheduled) does it block on the **oldest** batch and process its
output. So a step's output is processed one engine step later, a request whose prefill ended
in a batch still in flight is not scheduled again until its token arrives, and a request
preempted while its batch is in flight gets that batch's (stale) output afterwards.

The fake worker executes a batch when it is scheduled (the sampled tokens and the connector's
transfer report are fixed then), as the real worker does. Both targets step through
:class:`BatchQueue`, so the reference and the vLLM adapter see the same pipeline.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineStep:
    """One engine step with a batch queue: what it scheduled and what it processed."""

    step: int
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    preempted_reqs: list[str] = field(default_factory=list)
    sampled_reqs: list[str] = field(default_factory=list)
    finished_reqs: list[str] = field(default_factory=list)
    scheduled: Any = None
    processed: Any = None

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


class BatchQueue:
    """``EngineCore.batch_queue`` of ``size`` batches: ``(scheduler output, model output)``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.queue: deque[tuple[Any, Any]] = deque()
        #: ``num_scheduled_tokens`` of the batches in flight when the last step scheduled, and
        #: what it scheduled (``None``: nothing)
        self.last_in_flight: list[dict[str, int]] = []
        self.last_scheduled: Any = None

    def step(self, has_requests: Callable[[], bool], schedule: Callable[[], Any],
             execute: Callable[[Any], Any],
             update: Callable[[Any, Any], list[str]]) -> tuple[Any, Any, list[str]]:
        """One ``step_with_batch_queue``: ``(scheduled output or None, processed output or
        None, finished request ids)``."""
        scheduled = None
        self.last_in_flight = [dict(out.num_scheduled_tokens) for out, _ in self.queue]
        self.last_scheduled = None
        if has_requests():
            scheduled = self.last_scheduled = schedule()
            self.queue.appendleft((scheduled, execute(scheduled)))
            executed = scheduled.total_num_scheduled_tokens > 0
            if len(self.queue) < self.size and (executed or has_requests()):
                return scheduled, None, []
        elif not self.queue:
            return None, None, []
        processed, model_output = self.queue.pop()
        return scheduled, processed, update(processed, model_output)

    def __len__(self) -> int:
        return len(self.queue)

    def state(self, describe: Callable[[Any, Any], object]) -> tuple[object, ...]:
        """Hashable: each batch in flight, oldest last, as ``describe(output, model_output)``."""
        return tuple(describe(out, mro) for out, mro in self.queue)


def engine_step(step: int, scheduled: Any, processed: Any, finished: list[str]) -> EngineStep:
    """The driver's view of one batch-queue step."""
    return EngineStep(
        step=step,
        num_scheduled_tokens=dict(scheduled.num_scheduled_tokens) if scheduled is not None else {},
        preempted_reqs=list(scheduled.preempted_reqs) if scheduled is not None else [],
        sampled_reqs=list(processed.sampled_reqs) if processed is not None else [],
        finished_reqs=list(finished), scheduled=scheduled, processed=processed)


__all__ = ["BatchQueue", "EngineStep", "engine_step"]
