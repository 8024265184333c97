"""Block conservation across finish and abort: an ended request's blocks go back to the pool.

Guards against a free path that forgets a request while its blocks stay with it (the pool
shrinks by them for good): ``pop_blocks_for_free`` popping another request's table, a finish
or an abort that skips the free, a deferred free that is never drained. Read through the
surface both targets offer (upstream's names: ``requests``, the managers' ``req_to_blocks``,
the pool's free count):

* :func:`check_released`, after every step: no manager holds a block for a request the
  scheduler no longer knows (it was freed: nothing will ever free those blocks); without a KV
  connector (the only thing that may legitimately keep a finished request's blocks, until its
  send reports), a finished or aborted request is forgotten at once;
* :func:`check_pool_whole`, once the run is over (nothing unfinished, nothing in flight):
  the scheduler knows no request, no manager holds a block, and every block but the null block
  is free again (a deferred free behind a fence was drained).

:func:`kvverify.invariants.pool.check_pool` cannot see it: a forgotten request's blocks still
have a holder in ``req_to_blocks``, so their ref counts agree; the request-slot invariant
(:mod:`kvverify.invariants.slots`) counts requests, not the blocks they leave behind.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvverify.invariants.base import Violation


def held_blocks(kv_cache_manager: Any) -> dict[str, int]:
    """Real (non-null) blocks each request holds, over every group's manager."""
    held: dict[str, int] = {}
    for manager in kv_cache_manager.coordinator.single_type_managers:
        for rid, blocks in manager.req_to_blocks.items():
            n = sum(1 for b in blocks if not b.is_null)
            if n:
                held[str(rid)] = held.get(str(rid), 0) + n
    return held


def check_released(sched: Any, ended: Iterable[str], *, step: int, delayed_frees: bool) -> list[Violation]:
    """After a step (or an abort): blocks are held only by requests the scheduler knows, and,
    unless a connector may delay a free (``delayed_frees``), no ended request is still known."""
    known = sched.requests
    held = held_blocks(sched.kv_cache_manager)
    orphans = {rid: n for rid, n in sorted(held.items()) if rid not in known}
    if orphans:
        return [Violation("release.forgotten_holds_blocks",
                          "a request the scheduler freed still holds blocks: they never return to the pool",
                          {"step": step, "requests": orphans})]
    if not delayed_frees:
        kept = sorted(rid for rid in dict.fromkeys(ended) if rid in known)
        if kept:
            return [Violation("release.finished_kept",
                              "a finished or aborted request was not freed (no connector delays its free)",
                              {"step": step, "requests": kept, "holding": {r: held.get(r, 0) for r in kept}})]
    return []


def check_pool_whole(sched: Any) -> list[Violation]:
    """With every request ended and nothing in flight: no request known, none holding a block,
    every block but the null block free."""
    kvm = sched.kv_cache_manager
    usable = int(kvm.block_pool.num_gpu_blocks) - 1
    free = int(kvm.get_num_free_blocks())
    held = held_blocks(kvm)
    known = sorted(sched.requests)
    if free != usable or held or known:
        return [Violation("release.pool_not_whole",
                          "every request ended but not every block is back in the pool",
                          {"free": free, "usable": usable, "still_held": held, "still_known": known})]
    return []


__all__ = ["check_pool_whole", "check_released", "held_blocks"]
