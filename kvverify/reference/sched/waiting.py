"""The waiting pass of ``schedule()`` (upstream 0.33.0 ``Scheduler.schedule``, second half).

Runs only if nobody was preempted this step. Each round peeks the head of
``kv_holding_waiting`` (requests holding KV blocks: landed or in-flight loads, always drained
first, whatever the policy: :meth:`WaitingPass._queue_to_scan`) or, once that is empty, of
``waiting``; stops at ``max_num_seqs`` running or an empty token budget. A request the scan
cannot schedule *now* is **skipped**: popped into the step's skip list (``deferred_waiting``
remembers it), the scan goes on behind it, and the skipped requests return to the front of
their queue at the end of the pass (``skip_request``):

* a parked load that has not landed, or one that lands and is promoted (then it is scheduled
  in the same round, 0 external tokens);
* stale output of a preempted request still in flight (two batches in flight);
* the connector answering ``None`` ("ask again later");
* an async load admitted this round (it holds its blocks, status ``WAITING_FOR_REMOTE_KVS``).

A request that fails ``allocate_slots`` **breaks** the scan (head-of-line blocking): nothing
behind it is tried this step. Speculative decoding pads a new one-token decode to
``1 + num_speculative_tokens`` slots when it fits (``pad_spec_decode``); an async load
allocates no lookahead slots (they come after the load, #57104) and passes
``reserved_blocks`` (:meth:`~kvverify.reference.sched.kv_transfer.KVTransfer._async_load_reserved_blocks`).

Not modelled: LoRA and encoder budgets of multimodal inputs, structured-output grammars and
streaming sessions (other blocked statuses), DP prefill throttling, SWA bounded replay, the
connector's sub-block local-hit reconciliation (local hits land on scheduler-block boundaries
here, so the block-aligned local hit the connector is shown is the local hit).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from kvverify import behaviours, fixes, flaws
from kvverify.reference.request import Request, RequestStatus
from kvverify.reference.sched import request_queue as rq

if TYPE_CHECKING:
    from kvverify.reference.sched.output import SchedulerOutput


class WaitingPass:
    """Mixed into :class:`~kvverify.reference.sched.scheduler.Scheduler`."""

    def _queue_to_scan(self: Any) -> deque[Request]:
        """The queue whose head the scan tries next: ``kv_holding_waiting`` while it holds a
        request, whatever the policy (0.31 and later: block holders are always drained first).

        Flaw ``priority_strands_parked_loads`` (<= 0.29 ``_select_waiting_queue_for_scheduling``,
        #45406, #57841's "FCFS only"): under ``priority`` the head of ``waiting`` goes first when
        it orders before the head of the skipped queue, so a block-less request of higher
        priority whose allocation fails stops the scan ahead of the parked loads, every step."""
        held, fresh = self.kv_holding_waiting, self.waiting
        if held and fresh and self.policy == "priority" and flaws.is_on("priority_strands_parked_loads"):
            key = self._queue_key()
            return fresh if key(fresh[0]) < key(held[0]) else held
        return held or fresh

    def _schedule_waiting(self: Any, out: SchedulerOutput, token_budget: int,
                          prefill_scheduled: bool) -> int:
        """Admit waiting requests into ``running`` (or as async loads); returns the budget left."""
        kvm = self.kv_cache_manager
        scheduled = out.num_scheduled_tokens
        key = self._queue_key()
        step_skipped_waiting: deque[Request] = deque()
        step_skipped_kv_holding: deque[Request] = deque()

        def skip_request(queue: deque[Request]) -> None:
            request = queue.popleft()
            self.deferred_waiting.add(request.request_id)
            if self._holds_kv_blocks(request) or flaws.is_on("skipped_queue_not_split_by_blocks"):
                # (the flaw: 0.27 - 0.29 kept one skipped queue, drained first, for block holders
                # and requests holding nothing alike, #45406 / #57841)
                step_skipped_kv_holding.appendleft(request)
            else:
                step_skipped_waiting.appendleft(request)

        while token_budget > 0:
            queue = self._queue_to_scan()
            if not queue:
                break
            num_running = len(self.running)
            if flaws.is_on("deferred_requests_hold_slots"):
                # #53130 / #42568's accounting: parked and skipped requests hold request slots,
                # and the cap is checked before any of them can be promoted
                num_running += len(self.deferred_waiting)
            if num_running >= self.max_num_running_reqs:
                break
            request = queue[0]
            if not self._handle_blocked_waiting_request(request):
                skip_request(queue)
                continue
            if request.num_stale_output_tokens and not request.drop_stale_output:
                skip_request(queue)  # deliverable stale output still in flight
                continue

            num_external = 0
            load_kv_async = False
            if request.num_computed_tokens == 0 and request.request_id not in self._landed_full_hits:
                computed_blocks, num_local, request.shared_prefix_boundary = kvm.get_computed_blocks(request)
                if self.connector is not None:
                    ext, load_kv_async = self.connector.get_num_new_matched_tokens(
                        request.request_id, request.num_tokens, num_local)
                    if ext is None:
                        skip_request(queue)  # the connector cannot tell yet: ask again later
                        continue
                    num_external = ext
                num_computed = num_local + num_external
            else:  # a landed load (or a resumed session): computed tokens already counted
                computed_blocks, num_local = kvm.empty_kv_cache_blocks, 0
                num_computed = request.num_computed_tokens

            pad_spec_decode = False
            if load_kv_async:
                num_new = 0  # loading remote KV: no new work this step
            else:
                num_new = request.num_tokens - num_computed
                spec = self.num_spec_tokens
                if (spec > 0 and num_new == 1 and not prefill_scheduled
                        and not behaviours.is_on("no_spec_decode_padding")  # <= 0.22 (attribution only)
                        and (out.scheduled_running_reqs
                             or (num_computed > 0 and not behaviours.is_on("spec_pad_behind_running_only")))):
                    padded = 1 + spec
                    fits = padded <= self.max_num_scheduled_tokens or not fixes.is_on(
                        "spec_decode_padding_fits_budget")  # finding F10: a pad no step can hold
                    if flaws.is_on("spec_pad_leaves_no_sampled_slot"):
                        # #53812 (<= 0.28): pad whenever the placeholders fit max_model_len, no
                        # room kept for the sampled token (the model runner's RuntimeError), and
                        # a pad past max_model_len stops the scan instead of going un-padded
                        if padded > token_budget or num_computed + padded > self.max_model_len:
                            break
                        num_new, pad_spec_decode = padded, True
                    elif num_computed + padded + 1 <= self.max_model_len and fits:
                        if padded > token_budget:
                            break  # rather not schedule than schedule un-padded
                        num_new, pad_spec_decode = padded, True
                if not self.enable_chunked_prefill and num_new > token_budget:
                    break  # chunked prefill off: the prompt is scheduled whole or not at all (F14)
                num_new = min(num_new, token_budget)
                if self.need_mamba_block_aligned_split:
                    num_new = self._mamba_block_aligned_split(request, num_new, num_local, num_external)
                    if num_new == 0:
                        break
                    if pad_spec_decode and num_new != 1 + self.num_spec_tokens:
                        num_new, pad_spec_decode = 1, False

            if (num_external and self.need_mamba_block_aligned_split
                    and flaws.is_on("mamba_align_connector_asserts")):
                # <= 0.22.0 ran _mamba_block_aligned_split for every new request, async loads
                # included, and it asserted that no connector tokens came with it
                raise AssertionError("External KV connector is not verified yet")
            lookahead = 0 if load_kv_async and self.num_lookahead_tokens > 0 else self.num_lookahead_tokens
            num_encoder = request.num_encoder_tokens if self.is_encoder_decoder else 0
            reserved = (self._async_load_reserved_blocks(request, computed_blocks, num_computed)
                        if load_kv_async else 0)
            new_blocks = kvm.allocate_slots(
                request, num_new, num_new_computed_tokens=num_local, new_computed_blocks=computed_blocks,
                num_lookahead_tokens=lookahead, num_external_computed_tokens=num_external,
                delay_cache_blocks=load_kv_async, num_encoder_tokens=num_encoder,
                full_sequence_must_fit=self.full_sequence_must_fit and not behaviours.is_on("no_full_sequence_gate"),
                reserved_blocks=reserved,
                has_scheduled_reqs=bool(self.running))
            if new_blocks is None:
                break  # head-of-line blocking: nothing behind it is tried
            if self.connector is not None:
                self.connector.update_state_after_alloc(request.request_id, num_external)
            if load_kv_async:
                request.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                request.num_computed_tokens = num_computed
                self._inflight_prefills.add(request.request_id)
                out.async_load_reqs.append(request.request_id)
                skip_request(queue)
                continue

            queue.popleft()
            self.deferred_waiting.discard(request.request_id)
            self._landed_full_hits.discard(request.request_id)
            self.running.append(request)
            if request.status is RequestStatus.PREEMPTED:
                out.scheduled_resumed_reqs.append(request.request_id)
            else:
                out.scheduled_new_reqs.append(request.request_id)
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_computed
            scheduled[request.request_id] = num_new
            token_budget -= num_new
            if pad_spec_decode:
                out.scheduled_spec_decode_tokens[request.request_id] = [-1] * self.num_spec_tokens
            if num_computed + num_new < request.num_tokens:
                self._inflight_prefills.add(request.request_id)

        # re-queue this pass's skipped requests ahead of the rest, in their order
        if step_skipped_kv_holding:
            rq.prepend_requests(self.kv_holding_waiting, step_skipped_kv_holding, key)
        if step_skipped_waiting:
            rq.prepend_requests(self.waiting, step_skipped_waiting, key)
        return token_budget


__all__ = ["WaitingPass"]
