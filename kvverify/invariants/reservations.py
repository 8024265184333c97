"""Reservations hold: an allocation never eats into the blocks it was told to leave free.

``allocate_slots(reserved_blocks=R)`` (the async-load gate of #44560, with #57104's
speculative step) admits only if the step's blocks fit in ``free - R``; with predictor ==
allocator that means the call leaves at least ``R`` blocks free, so the in-flight prefills and
parked loads the reservation stands for can still finish. A call that pulls more than its
prediction, or whose per-step check forgets ``R``, lets a load take the blocks another
request needs: the deadlock of #45387 / #45388 (nothing running, every parked request
waiting for a block the others hold).
"""

from __future__ import annotations

from kvverify.invariants.base import Violation


def check_reservations(records: list[tuple[int, int, int]]) -> list[Violation]:
    """``records``: ``(reserved_blocks, free blocks before, pulled)`` per successful allocation."""
    for i, (reserved, free_before, pulled) in enumerate(records):
        if reserved and free_before - pulled < reserved:
            return [Violation("reservation.eaten", "an allocation left fewer free blocks than it had to reserve",
                              {"allocation": i, "reserved_blocks": reserved, "free_before": free_before,
                               "pulled": pulled, "free_after": free_before - pulled})]
    return []


__all__ = ["check_reservations"]
