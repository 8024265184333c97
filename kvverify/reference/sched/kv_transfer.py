"""The scheduler's side of KV transfer (upstream ``Scheduler`` methods, same names).

A request whose connector answered ``(n, load_kv_async=True)`` is allocated blocks for the
``n`` external tokens, told to the connector (``update_state_after_alloc``), set to
``WAITING_FOR_REMOTE_KVS`` with ``num_computed_tokens`` already counting the load, and parked
in ``kv_holding_waiting`` (0.31 and later drain it before ``waiting``: a block holder must never
sit behind a request whose failed allocation stops the scan). The worker reports the load in
``finished_recving``; the next scan promotes the request (``_update_waiting_for_remote_kv``:
cache the loaded blocks, a full hit recomputes its last token) and schedules the rest of its
prompt in the same step. A load that failed (``failed_recving``) finishes the request with an
error (policy ``fail``, upstream's default) or recomputes it (``recompute``).

Async loads hold blocks with no forward progress and cannot be preempted, so one is admitted
only if it fits in the free blocks minus what the other in-flight prefills still need
(``_inflight_prefill_reserved_blocks``, #44560) minus the blocks of its own speculative step
(``_spec_decode_step_blocks``, #57104). ``request_finished`` may keep a finished request's
blocks until the connector's send reports ``finished_sending`` (a delayed free).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from kvverify import fixes, flaws
from kvverify.reference.ops import cdiv
from kvverify.reference.connector import ScriptedConnectorState, TransferResults
from kvverify.reference.request import Request, RequestStatus
from kvverify.reference.sched import request_queue as rq

if TYPE_CHECKING:
    from kvverify.reference.kv_cache_manager import KVCacheManager
    from kvverify.reference.sched.fences import BlockFreeFence

#: statuses that park a request until something outside the scheduler happens
BLOCKED_WAITING_STATUSES = (RequestStatus.WAITING_FOR_REMOTE_KVS,)


class KVTransfer:
    """Mixed into :class:`~kvverify.reference.sched.scheduler.Scheduler` (the attributes below)."""

    connector: ScriptedConnectorState | None
    kv_cache_manager: KVCacheManager
    fences: BlockFreeFence
    requests: dict[str, Request]
    waiting: deque[Request]
    kv_holding_waiting: deque[Request]
    deferred_waiting: set[str]
    finished_recving_kv_req_ids: set[str]
    failed_recving_kv_req_ids: set[str]
    _inflight_prefills: set[str]
    _landed_full_hits: set[str]
    recompute_kv_load_failures: bool
    max_model_len: int
    num_spec_tokens: int
    num_lookahead_tokens: int
    num_spec_step_tokens: int
    _spec_decode_step_blocks: int
    block_size: int

    if TYPE_CHECKING:  # provided by the scheduler
        def _queue_key(self) -> Any: ...

        def _free_blocks(self, request: Request) -> None: ...

        def num_blocks_to_hold(self, request_id: str, num_tokens: int) -> int: ...

    # -- queues --

    @staticmethod
    def _holds_kv_blocks(request: Request) -> bool:
        """Upstream ``_holds_kv_blocks``: computed tokens, or a load in flight."""
        return request.num_computed_tokens > 0 or request.status is RequestStatus.WAITING_FOR_REMOTE_KVS

    def _enqueue_waiting_request(self, request: Request) -> None:
        """Upstream ``_enqueue_waiting_request``: block holders to ``kv_holding_waiting``."""
        if request.status in BLOCKED_WAITING_STATUSES:
            self.deferred_waiting.add(request.request_id)
        queue = self.kv_holding_waiting if self._holds_kv_blocks(request) else self.waiting
        rq.add_request(queue, request, self._queue_key())

    # -- promotion --

    def _handle_blocked_waiting_request(self, request: Request) -> bool:
        """Whether the scan may schedule ``request`` now; promotes a landed load to
        ``WAITING`` (``PREEMPTED`` if it was ever preempted)."""
        if request.status is RequestStatus.WAITING_FOR_REMOTE_KVS:
            if request.request_id not in self.finished_recving_kv_req_ids:
                return False
            self._update_waiting_for_remote_kv(request)
            request.status = RequestStatus.PREEMPTED if request.num_preemptions else RequestStatus.WAITING
        return True

    def _update_waiting_for_remote_kv(self, request: Request) -> None:
        """A load landed: cache its blocks (a failed one: free them, recompute from 0); a full
        hit recomputes its last token so the next one can be sampled."""
        rid = request.request_id
        if rid in self.failed_recving_kv_req_ids:
            if request.num_computed_tokens:
                self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
            else:
                self.kv_cache_manager.free(request)  # no valid tokens: release (a retry may hit locally)
            self.failed_recving_kv_req_ids.remove(rid)
        else:
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
        if request.num_computed_tokens == request.num_tokens:
            request.num_computed_tokens = request.num_tokens - 1
            if fixes.is_on("landed_load_not_reloaded"):
                self._landed_full_hits.add(rid)  # finding F12: 0 computed tokens, but loaded
        self.finished_recving_kv_req_ids.remove(rid)

    # -- the worker's report --

    def _handle_failed_recving(self, failed_req_ids: frozenset[str]) -> set[str]:
        """Loads that failed: under ``recompute`` their tokens are recomputed (none skipped);
        under ``fail`` the returned requests finish with an error."""
        affected: set[str] = set()
        for rid in failed_req_ids:
            request = self.requests.get(rid)
            if request is not None and request.status is RequestStatus.WAITING_FOR_REMOTE_KVS:
                affected.add(rid)
                if self.recompute_kv_load_failures:
                    request.num_computed_tokens = 0
                    self.failed_recving_kv_req_ids.add(rid)
        return set() if self.recompute_kv_load_failures else affected

    def _update_from_kv_xfer_finished(self, results: TransferResults) -> None:
        """``finished_recving``: mark a parked load landed (a finished request: free its blocks
        now); ``finished_sending``: a delayed free completes."""
        for rid in sorted(results.finished_recving):
            request = self.requests[rid]
            if request.status is RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.finished_recving_kv_req_ids.add(rid)
            else:
                assert request.is_finished(), f"{rid} reported a landed load while {request.status}"
                self._free_blocks(request)
        for rid in sorted(results.finished_sending):
            self._free_blocks(self.requests[rid])

    def _connector_finished(self, request: Request) -> bool:
        """Upstream ``_connector_finished``: drop out-of-window blocks on the processed-token
        basis, then ask the connector whether it keeps the blocks (``delay_free_blocks``)."""
        if self.connector is None:
            return False
        self.kv_cache_manager.remove_skipped_blocks(
            request.request_id, max(0, request.num_computed_tokens - request.num_in_flight_tokens))
        return self.connector.request_finished(request.request_id,
                                               request.status is RequestStatus.FINISHED_LENGTH_CAPPED)

    # -- the async-load gate (#44560, #57104) --

    @staticmethod
    def _spec_unreserved() -> bool:
        """Flaw ``spec_blocks_unreserved_after_load`` (#57104): the gate reserves no speculative
        slots, neither the admitted load's own step nor the other parked loads'."""
        return flaws.is_on("spec_blocks_unreserved_after_load")

    @staticmethod
    def _spec_not_per_group() -> bool:
        """Flaw ``spec_step_blocks_not_per_group``: 0.31.0's flat speculative-step reservation."""
        return flaws.is_on("spec_step_blocks_not_per_group")

    def _spec_step_blocks(self) -> int:
        """The blocks of one speculative step the gate reserves (0.32 and later:
        ``_spec_decode_step_blocks``, per group at its block size, Mamba groups excluded since
        their managers allocate their own speculative state blocks).

        Flaw ``spec_step_blocks_not_per_group`` (#57104 as shipped in 0.31.0): one
        ``cdiv(1 + num_spec_tokens + num_lookahead_tokens, block_size)`` at the scheduler's
        block size, whatever the groups: a Mamba group is charged for slots it never allocates
        (on a pool that exactly holds a load, the load is never admitted) and a second attention
        group is not charged for the slots it does allocate."""
        if self._spec_unreserved():
            return 0
        if self._spec_not_per_group():
            return cdiv(self.num_spec_step_tokens, self.block_size)
        return self._spec_decode_step_blocks

    def _request_remaining_blocks(self, request: Request) -> int:
        """Blocks ``request`` still needs to hold its full sequence and be promoted (with a
        speculative config: the slots of its first speculative step too; under flaw
        ``spec_step_blocks_not_per_group`` 0.31.0's flat :meth:`_spec_step_blocks` on top)."""
        full = min(request.num_tokens, self.max_model_len)
        num_tokens = full
        flat = self._spec_not_per_group()
        if not self._spec_unreserved() and not flat:
            num_tokens += self.num_spec_step_tokens
        blocks = self.num_blocks_to_hold(request.request_id, num_tokens)
        return blocks + self._spec_step_blocks() if flat else blocks

    def _inflight_prefill_reserved_blocks(self) -> int:
        """What in-flight prefills (chunked prefills, async loads) still need to finish."""
        return sum(self._request_remaining_blocks(self.requests[rid]) for rid in sorted(self._inflight_prefills))

    def _async_load_reserved_blocks(self, request: Request, computed_blocks: Any, num_computed: int) -> int:
        """``reserved_blocks`` an async load's ``allocate_slots`` must leave free: the other
        in-flight prefills' remaining blocks and the blocks of its own first speculative step."""
        if flaws.is_on("async_load_unreserved"):
            return 0  # #45388: before #44560 the load could take blocks other prefills need
        spec = self._spec_step_blocks()
        if spec and fixes.is_on("async_load_reserves_own_need"):
            # finding F11: only what the request still needs after the load, speculative slots
            # included (never past max_model_len: allocate_slots caps its slots there)
            coordinator = self.kv_cache_manager.coordinator
            full = min(request.num_tokens, self.max_model_len)
            slots = min(full + self.num_spec_step_tokens, self.max_model_len)
            need_all = coordinator.get_num_blocks_to_allocate(
                request.request_id, slots, computed_blocks.blocks, 0, num_computed, full,
                apply_admission_cap=True)
            need_load = coordinator.get_num_blocks_to_allocate(
                request.request_id, num_computed, computed_blocks.blocks, 0, num_computed, num_computed)
            spec = min(spec, max(0, need_all - need_load))
        return self._inflight_prefill_reserved_blocks() + spec


__all__ = ["BLOCKED_WAITING_STATUSES", "KVTransfer"]
