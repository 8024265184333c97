"""Deferred block frees behind step fences (upstream ``Scheduler.deferred_frees`` and friends).

With more than one batch in flight (``max_concurrent_batches > 1``: pipeline parallelism or
async scheduling) and a consumer KV connector, a step still running may write the blocks of
a request the scheduler frees now, and a connector load into a reallocated block would not
be ordered against that write. Upstream (0.27 and later) then *defers* the free:

* ``sched_step_seq`` counts non-empty scheduled steps, ``processed_step_seq`` the non-empty
  steps whose output ``update_from_output`` processed (FIFO, so they stay in sync);
* a request remembers ``last_sched_seq``, the step that last scheduled it;
* ``_request_blocks_can_be_freed``: ``last_sched_seq <= processed_step_seq``; otherwise its
  blocks leave the request (``pop_blocks_for_free``) and wait in ``deferred_frees`` under the
  fence ``sched_step_seq``, returned to the pool (reversed) once that step is processed.

Preempting a victim whose free is fenced makes no capacity for the retry; 0.31 and later
stop the retry there (#49675, the zero-progress cascade of #49674).
"""

from __future__ import annotations

from collections import deque
from typing import Any


class BlockFreeFence:
    """``defer_block_free`` and its counters; frees requests' blocks now or behind a fence."""

    def __init__(self, defer_block_free: bool) -> None:
        self.defer_block_free = defer_block_free
        self.sched_step_seq = 0
        self.processed_step_seq = 0
        #: FIFO of ``(fence_seq, blocks)``: free once ``processed_step_seq >= fence_seq``
        self.deferred_frees: deque[tuple[int, list[Any]]] = deque()

    def request_blocks_can_be_freed(self, request: Any) -> bool:
        """Upstream ``_request_blocks_can_be_freed``."""
        return not self.defer_block_free or request.last_sched_seq <= self.processed_step_seq

    def free_request_blocks(self, kv_cache_manager: Any, request: Any) -> None:
        """Upstream ``_free_request_blocks``: free now, or park the blocks behind the fence."""
        if self.request_blocks_can_be_freed(request):
            kv_cache_manager.free(request)
            return
        blocks = kv_cache_manager.pop_blocks_for_free(request)
        if blocks:
            self.deferred_frees.append((self.sched_step_seq, blocks))

    def step_scheduled(self, total_num_scheduled_tokens: int) -> None:
        """End of ``schedule()``: a non-empty step advances ``sched_step_seq``."""
        if self.defer_block_free and total_num_scheduled_tokens > 0:
            self.sched_step_seq += 1

    def step_processed(self, total_num_scheduled_tokens: int, block_pool: Any) -> None:
        """Start of ``update_from_output``: a processed non-empty step advances
        ``processed_step_seq`` and drains the frees it fenced (``_drain_deferred_frees``)."""
        if not (self.defer_block_free and total_num_scheduled_tokens > 0):
            return
        self.processed_step_seq += 1
        while self.deferred_frees:
            fence, _ = self.deferred_frees[0]
            if fence > self.processed_step_seq:
                break
            _, blocks = self.deferred_frees.popleft()
            block_pool.free_blocks(reversed(blocks))  # tail blocks evicted first

    def num_deferred_blocks(self) -> int:
        return sum(sum(1 for b in blocks if not b.is_null) for _, blocks in self.deferred_frees)

    def ahead(self, seq: int) -> int:
        """How many unprocessed steps ``seq`` is ahead of ``processed_step_seq`` (0 if none):
        all a later decision reads of a fence or a request's ``last_sched_seq``."""
        return max(seq - self.processed_step_seq, 0)

    def state(self) -> tuple[object, ...]:
        """Hashable, counters taken relative to ``processed_step_seq`` (they only grow; the
        stall fingerprint must see a cycle): steps in flight, each fence and its block ids."""
        return (self.ahead(self.sched_step_seq),
                tuple((self.ahead(fence), tuple(b.block_id for b in blocks))
                      for fence, blocks in self.deferred_frees))


__all__ = ["BlockFreeFence"]
