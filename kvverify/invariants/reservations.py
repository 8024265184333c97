"""Reservations hold: an allocation never eats into the blocks it was told to leave free.

``allocate_slots(reserved_blocks=R)`` (the async-load gate of #44560, with #57104's
speculative step) admits only if the step's blocks fit in ``free - R``; with predictor ==
allocator that means the call leaves at least ``R`` blocks free, so the in-flight prefills and
parked loads the reservation stands for can still finish. A call that pulls more than its
prediction, or whose per-step check forgets ``R``, lets a load take the blocks another
request needs: the deadlock of #45387 / #45388 (nothing running, every parked request
waiting for a block the others hold).

That the reservation is *enough* is the second check (:func:`check_reservation_covers_inflight`):
``R`` must cover what the other in-flight prefills still need to hold their whole sequence and,
with speculative decoding, their first speculative step, computed here from the coordinator's
prediction, not read off the gate's own arithmetic, so a gate that under-counts is seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kvverify.invariants.base import Violation
from kvverify.reference import arith


def check_reservations(records: list[tuple[int, int, int]]) -> list[Violation]:
    """``records``: ``(reserved_blocks, free blocks before, pulled)`` per successful allocation."""
    for i, (reserved, free_before, pulled) in enumerate(records):
        if reserved and free_before - pulled < reserved:
            return [Violation("reservation.eaten", "an allocation left fewer free blocks than it had to reserve",
                              {"allocation": i, "reserved_blocks": reserved, "free_before": free_before,
                               "pulled": pulled, "free_after": free_before - pulled})]
    return []


class ReservingScheduler(Protocol):
    """What :class:`InflightNeedRecorder` reads off a connector scheduler (both targets)."""

    @property
    def kv_cache_manager(self) -> Any: ...

    @property
    def requests(self) -> Any: ...

    def inflight_prefill_ids(self) -> tuple[str, ...] | None:
        """Upstream ``_inflight_prefills``; ``None`` on a release before #44560."""
        ...

    def num_blocks_to_hold(self, request_id: str, num_tokens: int) -> int:
        """The coordinator's prediction for ``request_id`` to hold ``num_tokens`` (admission cap on)."""
        ...


@dataclass(frozen=True)
class LoadAdmission:
    """One async load's ``allocate_slots`` call: what it was told to reserve, and what the
    in-flight prefills it stood behind still needed at that moment."""

    request_id: str
    reserved_blocks: int
    #: ``(request id, blocks it still needs)`` for each in-flight prefill with a need
    needs: tuple[tuple[str, int], ...]

    @property
    def need(self) -> int:
        return sum(n for _, n in self.needs)


def _status(request: Any) -> str:
    return str(getattr(request.status, "name", request.status)).upper()


class InflightNeedRecorder:
    """Wraps a connector scheduler's ``kv_cache_manager.allocate_slots``: at every async load's
    call (``delay_cache_blocks=True``), before it runs, what each in-flight prefill still needs to
    hold its whole sequence (``min(num_tokens, max_model_len)``) and, with speculative decoding,
    the slots of its first speculative step (``1 + num_speculative_tokens + num_lookahead_tokens``).

    The in-flight prefills are upstream's ``_inflight_prefills`` (chunked prefills that will still
    be prefilling after their chunk, loads in flight); on a release without that set (before
    #44560) the parked loads (``WAITING_FOR_REMOTE_KVS``), the requests a load can strand."""

    def __init__(self, scheduler: ReservingScheduler, *, max_model_len: int, num_speculative_tokens: int,
                 num_lookahead_tokens: int) -> None:
        self.admissions: list[LoadAdmission] = []
        step = int(arith.spec_step_tokens(num_speculative_tokens, num_lookahead_tokens))
        kvm = scheduler.kv_cache_manager
        original = kvm.allocate_slots

        def allocate_slots(request: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("delay_cache_blocks"):
                ids = scheduler.inflight_prefill_ids()
                requests = scheduler.requests
                if ids is None:
                    ids = tuple(sorted(rid for rid, r in requests.items()
                                       if _status(r) == "WAITING_FOR_REMOTE_KVS"))
                needs = []
                for rid in ids:
                    if rid == request.request_id or rid not in requests:
                        continue
                    full = min(requests[rid].num_tokens, max_model_len)
                    n = scheduler.num_blocks_to_hold(rid, full + step)
                    if n:
                        needs.append((rid, n))
                self.admissions.append(LoadAdmission(request.request_id,
                                                     int(kwargs.get("reserved_blocks", 0) or 0), tuple(needs)))
            return original(request, *args, **kwargs)

        kvm.allocate_slots = allocate_slots


def check_reservation_covers_inflight(admissions: list[LoadAdmission]) -> list[Violation]:
    """The async-load gate (#44560, with #57104's speculative step) must reserve at least what the
    other in-flight prefills still need: a load admitted into those blocks holds them for its whole
    transfer, unpreemptible, while a prefill behind it waits for them — the deadlock of #45387 /
    #45388, or a predictable preemption. Guards ``async_load_unreserved``,
    ``spec_blocks_unreserved_after_load``, and a reservation that under-counts a prefill's
    speculative step (the engine mutant ``_request_remaining_blocks``: ``1 - num_spec_tokens``)."""
    for i, a in enumerate(admissions):
        if a.reserved_blocks < a.need:
            return [Violation("reservation.short_of_inflight_need",
                              "an async load was admitted with a reservation smaller than what the "
                              "in-flight prefills still need",
                              {"admission": i, "request": a.request_id, "reserved_blocks": a.reserved_blocks,
                               "inflight_need": a.need, "needs": dict(a.needs)})]
    return []


__all__ = ["InflightNeedRecorder", "LoadAdmission", "ReservingScheduler", "check_reservation_covers_inflight",
           "check_reservations"]
