"""A deterministic scheduler step (upstream ``vllm/v1/core/sched/scheduler.py``, 0.33.0).

``schedule()`` then ``update_from_output()`` (or :meth:`Scheduler.step`) is one engine step,
reduced to what decides capacity and progress:

* **running first**, in order: each gets ``min(remaining, token budget, L - computed - 1)``
  new tokens (chunked prefill; one token per decode step). When ``allocate_slots`` fails, the
  **last** running request is preempted (blocks freed, ``num_computed_tokens = 0``, to the
  **front** of the waiting queue) and allocation is retried; if the victim is the request
  itself, the running pass stops. A victim whose blocks cannot be freed now (a deferred free,
  :mod:`~kvverify.reference.sched.fences`) stops the retry instead (#49675);
* **waiting** only if nobody was preempted this step (:mod:`~kvverify.reference.sched.waiting`:
  ``kv_holding_waiting`` first, skipped requests, async KV loads, head-of-line ``break``; with
  ``enable_chunked_prefill`` off a head whose new tokens exceed the budget left also breaks);
* the fake worker samples one deterministic token for each request that computed all its
  tokens; a request finishes when ``num_tokens >= L`` or ``max_tokens`` outputs exist, and its
  blocks are freed at once, behind a fence, or when the connector's send reports.

A KV connector (:class:`~kvverify.reference.connector.ConnectorScript`) adds the transfer
paths of :mod:`~kvverify.reference.sched.kv_transfer`; ``max_concurrent_batches > 1`` steps
through a batch queue (:mod:`~kvverify.reference.sched.engine`).

``scheduling_policy="priority"`` (upstream ``SchedulerConfig.policy``): waiting queues ordered
by ``(priority, arrival, request_id)``, the victim is the running request with the largest
``(priority, arrival)``, and a request that preempted itself lets the requests after it try.
:data:`VARIANT_POLICIES` are legitimate non-upstream variants the suite must not call stalls.

Mamba ``align`` mode clips prefill chunks to block boundaries (``_mamba_block_aligned_split``);
when ``block_size > max_num_batched_tokens`` 0.33.0 lets the chunk advance sub-block (#34445).
No wall clock, no randomness: the same inputs give the same steps.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from kvverify import flaws
from kvverify.errors import ConfigError
from kvverify.reference.config import VllmConfig
from kvverify.reference.connector import ConnectorMeta, ConnectorScript, ScriptedConnectorState, TransferResults
from kvverify.reference.kv_cache_manager import KVCacheBlocks, KVCacheManager
from kvverify.reference.managers import behaviour_spec
from kvverify.reference import arith
from kvverify.reference.ops import cdiv
from kvverify.reference.request import (Request, RequestStatus, check_sampled_within_max_model_len,
                                        check_scheduled_token_counts, fake_output_token)
from kvverify.reference.sched import request_queue as rq
from kvverify.reference.sched.engine import BatchQueue, EngineStep, engine_step
from kvverify.reference.sched.fences import BlockFreeFence
from kvverify.reference.sched.kv_transfer import KVTransfer
from kvverify.reference.sched.output import ModelRunnerOutput, SchedulerOutput
from kvverify.reference.sched.waiting import WaitingPass
from kvverify.reference.specs import CrossAttentionSpec, MambaSpec

#: upstream ``SchedulingPolicy`` values (``SchedulerConfig.policy``)
SCHEDULING_POLICIES = ("fcfs", "priority")
#: legitimate non-upstream policies: FCFS queues, a different preemption victim
VARIANT_POLICIES = ("fcfs_fewest_computed_victim",)

_POLICY_OVERRIDE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "kvverify_scheduling_policy", default=None)


@contextlib.contextmanager
def scheduling_policy_override(policy: str | None) -> Iterator[None]:
    """Schedulers built in this extent use ``policy`` whatever their config says."""
    if policy is not None and policy not in SCHEDULING_POLICIES + VARIANT_POLICIES:
        raise ConfigError("scheduling_policy", policy,
                          f"must be one of {SCHEDULING_POLICIES + VARIANT_POLICIES}")
    token = _POLICY_OVERRIDE.set(policy)
    try:
        yield
    finally:
        _POLICY_OVERRIDE.reset(token)


def mamba_prefill_checkpoint_position(num_tokens: int, block_size: int) -> int:
    """Last block boundary strictly below ``num_tokens`` (``get_mamba_prefill_checkpoint_position``)."""
    return max((num_tokens - 1) // block_size * block_size, 0)


class Scheduler(WaitingPass, KVTransfer):
    """The scheduler over one :class:`KVCacheManager` (upstream ``Scheduler``)."""

    def __init__(self, vllm_config: VllmConfig, kv_cache_config: Any, *,
                 scheduler_block_size: int | None = None, hash_block_size: int | None = None,
                 full_sequence_must_fit: bool = True, connector: ConnectorScript | None = None) -> None:
        if (scheduler_block_size is None) != (hash_block_size is None):
            raise ConfigError("hash_block_size", hash_block_size,
                              "give both scheduler_block_size and hash_block_size, or neither")
        if scheduler_block_size is None:
            from kvverify.reference.block_sizes import resolve_kv_cache_block_sizes

            scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(
                kv_cache_config, vllm_config)
        assert hash_block_size is not None
        if vllm_config.auto_max_model_len:
            raise ConfigError("max_model_len", vllm_config.max_model_len,
                              "must be resolved (>= 1) before scheduling; plan the startup first")
        if connector is not None and not vllm_config.kv_connector:
            raise ConfigError("kv_connector", False,
                              "must be True when a connector script is given (it decides the hash block size)")
        self.vllm_config = vllm_config
        self.policy: str = _POLICY_OVERRIDE.get() or vllm_config.scheduling_policy
        self._num_arrived = 0
        self.max_model_len = vllm_config.max_model_len
        self.max_num_scheduled_tokens = vllm_config.max_num_batched_tokens
        # upstream's SchedulerConfig refuses max_num_seqs > max_num_batched_tokens; kvverify's flat
        # config does not, and every target clamps it as a user must (the vLLM adapter too:
        # kvverify/targets/vllm/config.py), so both run the same effective request cap
        self.max_num_running_reqs = min(vllm_config.max_num_seqs, vllm_config.max_num_batched_tokens)
        self.num_lookahead_tokens = vllm_config.num_lookahead_tokens
        self.num_spec_tokens = vllm_config.num_speculative_tokens
        self.enable_chunked_prefill = vllm_config.enable_chunked_prefill
        self.full_sequence_must_fit = full_sequence_must_fit
        self.block_size = scheduler_block_size
        self.hash_block_size = hash_block_size
        self.kv_cache_manager = KVCacheManager(
            kv_cache_config, vllm_config.max_model_len, scheduler_block_size, hash_block_size,
            max_in_flight_tokens=vllm_config.max_in_flight_tokens,
            enable_caching=vllm_config.enable_prefix_caching, watermark=vllm_config.watermark,
            prefix_cache_retention_interval=vllm_config.prefix_cache_retention_interval)
        specs = [behaviour_spec(g.kv_cache_spec) for g in kv_cache_config.kv_cache_groups]
        mamba = [g.kv_cache_spec for g, s in zip(kv_cache_config.kv_cache_groups, specs)
                 if isinstance(s, MambaSpec)]
        self.need_mamba_block_aligned_split = bool(mamba) and vllm_config.mamba_cache_mode == "align"
        #: Mamba align chunk granule: the Mamba group's block size (= attention block size)
        self.mamba_block_size = mamba[0].block_size if mamba else vllm_config.block_size
        self.is_encoder_decoder = any(isinstance(s, CrossAttentionSpec) for s in specs)
        if connector is not None and self.is_encoder_decoder:
            raise ConfigError("connector", "<ConnectorScript>",
                              "encoder-decoder models take no KV connector (upstream asserts it)")
        self.requests: dict[str, Request] = {}
        self._arrival: dict[str, int] = {}
        self.waiting: deque[Request] = deque()
        #: waiting requests holding KV blocks (landed or in-flight loads): drained first
        self.kv_holding_waiting: deque[Request] = deque()
        #: ids of waiting requests a scan skipped (or enqueued blocked); stats only upstream
        self.deferred_waiting: set[str] = set()
        self.running: list[Request] = []
        self.finished: list[str] = []
        #: requests finished since the last ``schedule()`` (upstream: sent to the workers with it)
        self.finished_req_ids: set[str] = set()
        self.current_step = 0
        self.num_preemptions = 0
        # -- KV connector --
        self.connector = ScriptedConnectorState(connector) if connector is not None else None
        self.recompute_kv_load_failures = (connector is not None
                                           and connector.kv_load_failure_policy == "recompute")
        self.requires_kv_delivery = connector is not None and connector.is_kv_producer
        self.finished_recving_kv_req_ids: set[str] = set()
        self.failed_recving_kv_req_ids: set[str] = set()
        #: ids of requests still prefilling (chunked prefills and async loads): their remaining
        #: blocks gate async loads
        self._inflight_prefills: set[str] = set()
        #: requests promoted from a full-hit load with 0 computed tokens (finding F12's fix only)
        self._landed_full_hits: set[str] = set()
        #: whether the last processed output carried a transfer report
        self._transfer_reported = False
        # -- batches in flight and deferred frees --
        self.max_concurrent_batches = vllm_config.max_concurrent_batches
        self.batch_queue = BatchQueue(self.max_concurrent_batches)
        self.fences = BlockFreeFence(connector is not None and self.max_concurrent_batches > 1
                                     and connector.is_kv_consumer)
        # blocks of one speculative step per group (Mamba managers count their own state)
        #: the slots of one speculative step: the sampled token, the drafts, the lookahead (0: no drafter)
        self.num_spec_step_tokens = int(arith.spec_step_tokens(self.num_spec_tokens, self.num_lookahead_tokens))
        num_spec_step_tokens = self.num_spec_step_tokens
        self._spec_decode_step_blocks = sum(
            cdiv(num_spec_step_tokens, m.block_size)
            for m in self.kv_cache_manager.coordinator.single_type_managers
            if not isinstance(m.kv_cache_spec, MambaSpec))

    # -- queue management --

    def add_request(self, request: Request) -> None:
        """Queue a new request; its prompt must leave room for one output token."""
        if request.request_id in self.requests or request.request_id in self._arrival:
            raise ConfigError("request_id", request.request_id, "must be unique")
        if request.num_prompt_tokens >= self.max_model_len:
            raise ConfigError("prompt_token_ids", f"<{request.num_prompt_tokens} tokens>",
                              f"prompt length must be in [1, {self.max_model_len - 1}] "
                              f"(max_model_len={self.max_model_len} minus one output token)")
        if request.status is not RequestStatus.WAITING or request.num_computed_tokens:
            raise ConfigError("request", request, "must be a fresh WAITING request")
        request.set_block_hasher(self.kv_cache_manager.request_block_hasher)
        self.requests[request.request_id] = request
        self._arrival[request.request_id] = self._num_arrived
        self._num_arrived += 1
        self._enqueue_waiting_request(request)

    def _priority_key(self, request: Request) -> tuple[int, int, str]:
        """``Request.__lt__``: priority, then arrival (add order), then request id."""
        return (request.priority, self._arrival[request.request_id], request.request_id)

    def _queue_key(self) -> Any:
        """The waiting queues' order: ``None`` (FCFS deque) or the priority key."""
        return self._priority_key if self.policy == "priority" else None

    def _select_victim(self) -> Request:
        """The running request to preempt: the last (FCFS), the largest
        ``(priority, arrival)`` (priority), or the fewest computed tokens, latest first."""
        if self.policy == "priority":
            return max(self.running, key=lambda r: (r.priority, self._arrival[r.request_id]))
        if self.policy == "fcfs_fewest_computed_victim":
            return min(reversed(self.running), key=lambda r: r.num_computed_tokens)
        return self.running[-1]

    def get_request_counts(self) -> tuple[int, int]:
        """``(running, waiting)``: waiting counts ``kv_holding_waiting`` too (upstream)."""
        return len(self.running), len(self.waiting) + len(self.kv_holding_waiting)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.kv_holding_waiting or self.running)

    def has_requests(self) -> bool:
        """Upstream ``has_requests``: unfinished requests, finished ones the next step still has to
        tell the workers about (``finished_req_ids``), or ones whose blocks the connector still
        holds (delayed frees)."""
        running, waiting = self.get_request_counts()
        # flaw delayed_free_idles_engine (<= 0.20.0, fixed by #43433): a finished request whose
        # blocks the connector still holds does not count, so the engine stops stepping and the
        # send's completion is never seen: the blocks stay held until another request arrives
        delayed = len(self.requests) > running + waiting and not flaws.is_on("delayed_free_idles_engine")
        return self.has_unfinished_requests() or bool(self.finished_req_ids) or delayed

    @property
    def connector_state(self) -> ScriptedConnectorState | None:
        """The scripted connector's state machine (its ``calls`` log), or ``None``."""
        return self.connector

    @property
    def defer_block_free(self) -> bool:
        """Upstream ``Scheduler.defer_block_free``: frees wait for the batches in flight."""
        return self.fences.defer_block_free

    def has_pending_external_events(self) -> bool:
        """Whether something outside the scheduling decision changed, or will still change, what
        the next scan sees: a batch in flight (its output, its fenced frees), a connector transfer
        in flight or about to start, or a load that landed after this step's scan (it is promoted
        by the next one), or a transfer report the last output carried (it may have freed blocks
        or ended requests after the scan). While it holds, a step that schedules nothing is not a
        fixed point."""
        return bool(len(self.batch_queue) or self.finished_recving_kv_req_ids or self._transfer_reported
                    or (self.connector is not None and self.connector.has_pending_work()))

    # -- the step --

    def _mamba_block_aligned_split(self, request: Request, num_new_tokens: int,
                                   num_new_local_computed_tokens: int = 0,
                                   num_external_computed_tokens: int = 0) -> int:
        """Clip a prefill chunk to end on a Mamba block boundary (upstream, same name)."""
        start = request.num_computed_tokens + num_new_local_computed_tokens + num_external_computed_tokens
        prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
        if start >= prefill_end:
            return num_new_tokens
        block_size = self.mamba_block_size
        last_cache_position = mamba_prefill_checkpoint_position(request.num_tokens, block_size)
        end = start + num_new_tokens
        if end < prefill_end:
            aligned_end = end // block_size * block_size
            if (aligned_end > start or block_size <= self.max_num_scheduled_tokens
                    or flaws.is_on("mamba_align_zero_chunk")):
                end = aligned_end
        next_block_boundary = (start // block_size + 1) * block_size
        # Marconi shared-prefix junction (``Request.shared_prefix_boundary``), block-floored
        # (``enable_mamba_shared_prefix_checkpoint`` is off by default): end the chunk there so
        # its state is cached for siblings sharing the prefix
        junction = request.shared_prefix_boundary
        junction_stop = start + (junction - start) // block_size * block_size
        stops = (next_block_boundary if start % block_size else 0, last_cache_position,
                 junction_stop if start < junction < end else 0)
        end = min((s for s in stops if start < s < end), default=end)
        return max(end - start, 0)

    def _preempt_request(self, request: Request) -> None:
        """Free the victim's blocks (now or behind a fence) and put it at the front of the
        waiting queue (priority: back to its place)."""
        self.fences.free_request_blocks(self.kv_cache_manager, request)
        self._inflight_prefills.discard(request.request_id)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        # output of batches still in flight is stale: delivered (or dropped) when it returns
        request.drop_stale_output = self.requires_kv_delivery or (
            request.drop_stale_output and request.num_stale_output_tokens > 0)
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_preemptions += 1
        self.num_preemptions += 1
        rq.prepend_request(self.waiting, request, self._queue_key())

    def schedule(self) -> SchedulerOutput:
        """Decide this step's tokens; advances ``num_computed_tokens`` of the scheduled."""
        self.current_step += 1
        out = SchedulerOutput(step=self.current_step)
        kvm = self.kv_cache_manager
        kvm.new_step_starts()
        token_budget = self.max_num_scheduled_tokens
        scheduled: dict[str, int] = out.num_scheduled_tokens
        prefill_scheduled = False

        # 1. running requests, in order
        req_index = 0
        while req_index < len(self.running) and token_budget > 0:
            request = self.running[req_index]
            num_new = request.num_tokens + len(request.spec_token_ids) - request.num_computed_tokens
            num_new = min(num_new, token_budget,
                          self.max_model_len - request.num_computed_tokens - 1)
            if self.need_mamba_block_aligned_split:
                num_new = self._mamba_block_aligned_split(request, num_new)
            # upstream skips a request with nothing to schedule; 0.25 - 0.27 skipped only
            # ``== 0``, so a padded new decode whose batch is still in flight (computed past its
            # tokens by the pad) went out with a negative count (flaw spec_pad_rescheduled_negative)
            if num_new == 0 or (num_new < 0 and not flaws.is_on("spec_pad_rescheduled_negative")):
                req_index += 1
                continue
            new_blocks: KVCacheBlocks | None = None
            while True:
                if num_new < 0:  # the flaw: upstream's allocate_slots allocates nothing for it
                    new_blocks = kvm.empty_kv_cache_blocks
                    break
                new_blocks = kvm.allocate_slots(request, num_new,
                                                num_lookahead_tokens=self.num_lookahead_tokens)
                if new_blocks is not None:
                    break
                if self.connector is not None and self.connector.has_pending_block_frees():
                    break
                victim = self._select_victim()
                if (not self.fences.request_blocks_can_be_freed(victim)
                        and not flaws.is_on("deferred_free_preemption_cascade")):
                    break  # a deferred free makes no room now (#49675)
                victim_index = self.running.index(victim)
                del self.running[victim_index]
                if victim_index < req_index:
                    req_index -= 1
                if victim.request_id in scheduled:  # already scheduled this step: give back
                    token_budget += scheduled.pop(victim.request_id)
                    out.scheduled_running_reqs.remove(victim.request_id)
                    out.scheduled_spec_decode_tokens.pop(victim.request_id, None)
                self._preempt_request(victim)
                out.preempted_reqs.append(victim.request_id)
                if victim is request:
                    break
            if new_blocks is None:
                if self.policy != "fcfs" and request.status is RequestStatus.PREEMPTED:
                    continue  # it preempted itself; the ones after it may still fit
                break
            out.scheduled_running_reqs.append(request.request_id)
            prefill_scheduled |= request.is_prefill_chunk
            scheduled[request.request_id] = num_new
            token_budget -= num_new
            req_index += 1
            request.spec_token_ids = []

        # 2. waiting requests, only if nobody was preempted
        if not out.preempted_reqs:
            token_budget = self._schedule_waiting(out, token_budget, prefill_scheduled)

        # 3. the connector's metadata, the fence, then advance computed tokens
        if self.connector is not None:
            out.kv_connector_metadata = self.connector.build_connector_meta()
        self.fences.step_scheduled(out.total_num_scheduled_tokens)
        self._update_after_schedule(out)
        return out

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        """Advance the scheduled requests' computed and in-flight tokens (upstream, same name)."""
        for rid, n in out.num_scheduled_tokens.items():
            request = self.requests[rid]
            self.requests[rid].num_computed_tokens += n
            request.num_in_flight_tokens += n
            if self.fences.defer_block_free:
                request.last_sched_seq = self.fences.sched_step_seq
            request.is_prefill_chunk = request.num_computed_tokens < request.num_tokens
            if not request.is_prefill_chunk:
                self._inflight_prefills.discard(rid)
        self.finished_req_ids = set()

    def execute_model(self, out: SchedulerOutput) -> ModelRunnerOutput:
        """The fake worker: a request that computed all its tokens samples one deterministic
        token (where the model runner would: within ``max_model_len``, else it raises,
        :func:`~kvverify.reference.request.check_sampled_within_max_model_len`); the
        connector's worker half starts and advances its transfers."""
        check_scheduled_token_counts(out.num_scheduled_tokens)
        sampled = {rid: [fake_output_token(rid, self.requests[rid].num_tokens)]
                   for rid in out.num_scheduled_tokens
                   if self.requests[rid].num_computed_tokens >= self.requests[rid].num_tokens}
        for rid in sampled:
            check_sampled_within_max_model_len(self.requests[rid].num_computed_tokens, self.max_model_len)
        results = None
        if self.connector is not None:
            results = self.connector.worker_step(out.kv_connector_metadata or ConnectorMeta())
        return ModelRunnerOutput(sampled, results)

    def update_from_output(self, output: SchedulerOutput,
                           model_runner_output: ModelRunnerOutput | None = None) -> list[str]:
        """Apply a step's output (run the fake worker now if none is given): sample, finish the
        requests that reached ``max_tokens`` or ``max_model_len``, take the connector's report.
        Returns the ids that finished."""
        mro = model_runner_output if model_runner_output is not None else self.execute_model(output)
        results = mro.kv_connector_output
        self._transfer_reported = results is not None and not results.empty
        self.fences.step_processed(output.total_num_scheduled_tokens, self.kv_cache_manager.block_pool)
        failed_loads = self._handle_failed_recving(results.failed_recving) if results else set()
        finished: list[str] = []
        stopped_running: set[str] = set()
        stopped_preempted: set[str] = set()
        for rid, n in output.num_scheduled_tokens.items():
            request = self.requests.get(rid)
            stale = False
            if request is not None:
                request.num_in_flight_tokens -= n
                if request.num_stale_output_tokens > 0:
                    stale = True
                    request.num_stale_output_tokens -= n
            if rid in failed_loads or request is None or request.is_finished():
                continue
            if stale and request.drop_stale_output:
                continue
            generated = mro.sampled_token_ids.get(rid, [])
            drafts = output.scheduled_spec_decode_tokens.get(rid)
            if drafts and generated and not stale and request.num_computed_tokens > 0:
                # the fake model runner accepts no draft: the rejected slots roll back
                request.num_computed_tokens -= len(drafts) - max(len(generated) - 1, 0)
            status_before = request.status
            stopped = False
            for token in generated:
                request.append_output_token_ids(token)
                if (request.num_tokens >= self.max_model_len
                        or request.num_output_tokens >= request.max_tokens):
                    request.status = RequestStatus.FINISHED_LENGTH_CAPPED
                    stopped = True
                    break
            if generated:
                output.sampled_reqs.append(rid)
            if stopped:
                finished.append(rid)
                self._free_request(request)
                (stopped_running if status_before is RequestStatus.RUNNING else stopped_preempted).add(rid)
        if stopped_running:
            self.running = [r for r in self.running if r.request_id not in stopped_running]
        if stopped_preempted:
            drop = [r for r in (*self.waiting, *self.kv_holding_waiting) if r.request_id in stopped_preempted]
            rq.remove_requests(self.waiting, drop)
            rq.remove_requests(self.kv_holding_waiting, drop)
            self.deferred_waiting.difference_update(stopped_preempted)
        if failed_loads:  # kv_load_failure_policy "fail": the request ends with an error
            finished.extend(self.finish_requests(sorted(failed_loads), RequestStatus.FINISHED_ERROR))
        if results is not None:
            self._update_from_kv_xfer_finished(results)
        self.finished.extend(finished)
        output.finished_reqs.extend(finished)
        return finished

    def finish_requests(self, request_ids: list[str], finished_status: RequestStatus) -> list[str]:
        """Finish requests from outside the step (upstream ``finish_requests``; here: loads that
        failed under the ``fail`` policy). A parked load whose landing was not reported keeps
        its blocks until ``finished_recving`` says so."""
        valid = [self.requests[rid] for rid in request_ids
                 if rid in self.requests and not self.requests[rid].is_finished()]
        running = {r.request_id for r in valid if r.status is RequestStatus.RUNNING}
        self.running = [r for r in self.running if r.request_id not in running]
        others = [r for r in valid if r.request_id not in running]
        rq.remove_requests(self.waiting, others)
        rq.remove_requests(self.kv_holding_waiting, others)
        self.deferred_waiting.difference_update(r.request_id for r in others)
        for request in valid:
            delay = False
            if request.status is RequestStatus.WAITING_FOR_REMOTE_KVS:
                delay = request.request_id not in self.finished_recving_kv_req_ids
                self.finished_recving_kv_req_ids.discard(request.request_id)
                self.failed_recving_kv_req_ids.discard(request.request_id)
            request.status = finished_status
            self._free_request(request, delay_free_blocks=delay)
        return [r.request_id for r in valid]

    def abort_requests(self, request_ids: Sequence[str]) -> list[str]:
        """Upstream ``EngineCore.abort_requests``: ``finish_requests(ids, FINISHED_ABORTED)``
        (a client that disconnects, at any point of a request's life). Unknown and finished ids
        are skipped; the aborted ids join :attr:`finished` and are returned."""
        aborted = self.finish_requests(list(dict.fromkeys(request_ids)), RequestStatus.FINISHED_ABORTED)
        self.finished.extend(aborted)
        return aborted

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> None:
        """A finished request leaves the in-flight set; its blocks are freed unless the
        connector (``request_finished``) or an unreported load keeps them."""
        assert request.is_finished()  # upstream asserts it too
        self._inflight_prefills.discard(request.request_id)
        delay_free_blocks |= self._connector_finished(request)
        self.finished_req_ids.add(request.request_id)
        if not delay_free_blocks:
            self._free_blocks(request)

    def _free_blocks(self, request: Request) -> None:
        """Free (now or behind the fence) and forget the request (upstream ``_free_blocks``)."""
        assert request.is_finished()
        self.fences.free_request_blocks(self.kv_cache_manager, request)
        del self.requests[request.request_id]

    def step(self) -> tuple[SchedulerOutput | EngineStep, list[str]]:
        """One engine step: ``schedule()`` then ``update_from_output()``; with
        ``max_concurrent_batches > 1``, one ``step_with_batch_queue``."""
        if self.max_concurrent_batches == 1:
            out = self.schedule()
            return out, self.update_from_output(out)
        scheduled, processed, finished = self.batch_queue.step(
            self.has_requests, self.schedule, self.execute_model, self.update_from_output)
        if scheduled is None and processed is None:
            self._transfer_reported = False  # nothing ran: the last output's report was consumed
        return engine_step(self.current_step, scheduled, processed, finished), finished

    # -- views --

    def inflight_prefill_ids(self) -> tuple[str, ...] | None:
        """The requests the async-load gate reserves blocks for (upstream ``_inflight_prefills``:
        chunked prefills still prefilling after their chunk, async loads in flight)."""
        return tuple(sorted(self._inflight_prefills))

    def num_blocks_to_hold(self, request_id: str, num_tokens: int) -> int:
        """The blocks request ``request_id`` must still get to hold ``num_tokens`` tokens, nothing
        new computed, the admission cap applied: the coordinator's ``get_num_blocks_to_allocate``
        (the primitive upstream's ``_request_remaining_blocks`` asks)."""
        request = self.requests[request_id]
        kvm = self.kv_cache_manager
        n: int = kvm.coordinator.get_num_blocks_to_allocate(
            request_id, num_tokens, kvm.empty_kv_cache_blocks.blocks, 0, request.num_computed_tokens,
            min(request.num_tokens, self.max_model_len), apply_admission_cap=True)
        return n

    def kv_transfer_state(self) -> tuple[object, ...]:
        """What the stall fingerprint must add to the queues and the pool: the connector, the
        parked and deferred requests, the fences, the batches in flight."""
        fences = self.fences

        def req(r: Request) -> tuple[object, ...]:
            return (r.request_id, r.status.name, r.num_tokens, r.num_computed_tokens, r.num_in_flight_tokens,
                    r.num_stale_output_tokens, r.drop_stale_output, fences.ahead(r.last_sched_seq))

        return (tuple(req(r) for r in self.kv_holding_waiting), tuple(sorted(self.deferred_waiting)),
                tuple(sorted(self.finished_recving_kv_req_ids)), tuple(sorted(self.failed_recving_kv_req_ids)),
                tuple(sorted(self._inflight_prefills)), tuple(sorted(self._landed_full_hits)),
                tuple(sorted(self.requests)), fences.state(),
                self.connector.state() if self.connector is not None else (),
                self.batch_queue.state(lambda out, mro: (
                    tuple(sorted(out.num_scheduled_tokens.items())), tuple(sorted(mro.sampled_token_ids)),
                    mro.kv_connector_output)))


__all__ = [
    "Request",
    "RequestStatus",
    "SCHEDULING_POLICIES",
    "Scheduler",
    "SchedulerOutput",
    "TransferResults",
    "VARIANT_POLICIES",
    "mamba_prefill_checkpoint_position",
    "scheduling_policy_override",
]
