"""Predictor == allocator: ``get_num_blocks_to_allocate`` predicts exactly what allocation pulls.

A step ``allocate_slots`` admitted must never raise from the pool (PR #40027's
``Cannot get 1 free blocks``); the admission cap belongs to the full-sequence gate only.
Guards ``swa_cap_on_allocation`` and ``evictable_hits_not_counted``.
"""

from __future__ import annotations

from kvverify.invariants.base import Violation


def check_allocations(records: list[tuple[int, int]]) -> list[Violation]:
    for i, (predicted, pulled) in enumerate(records):
        if predicted != pulled:
            return [Violation("allocation.predictor_vs_allocator",
                              "allocate_slots pulled a different number of blocks than it predicted",
                              {"allocation": i, "predicted": predicted, "pulled": pulled})]
    return []


class AllocationRecorder:
    """Wraps a ``KVCacheManager.allocate_slots`` to collect ``(predicted, pulled)`` pairs."""

    def __init__(self, kv_cache_manager) -> None:
        self.records: list[tuple[int, int]] = []
        #: ``(reserved_blocks, free blocks before, pulled)`` of each successful call
        self.reservations: list[tuple[int, int, int]] = []
        self._kvm = kv_cache_manager
        original = kv_cache_manager.allocate_slots

        def allocate_slots(*args, **kwargs):
            kv_cache_manager.last_allocation = None
            kv_cache_manager.last_reservation = None
            got = original(*args, **kwargs)
            if got is not None and kv_cache_manager.last_allocation is not None:
                self.records.append(kv_cache_manager.last_allocation)
                if kv_cache_manager.last_reservation is not None:
                    reserved, free_before = kv_cache_manager.last_reservation
                    self.reservations.append((reserved, free_before, kv_cache_manager.last_allocation[1]))
            return got

        kv_cache_manager.allocate_slots = allocate_slots
