"""A deterministic FCFS scheduler step (upstream ``vllm/v1/core/sched/scheduler.py``).

``schedule()`` then ``update_from_output()`` (or :meth:`Scheduler.step`) is one engine
step of 0.33.0's synchronous FCFS policy, reduced to what decides capacity:

* **running first**, in order: each gets ``min(remaining, token budget,
  L - computed - 1)`` new tokens (chunked prefill; one token per decode step). When
  ``allocate_slots`` fails, the **last** running request is preempted (blocks freed,
  ``num_computed_tokens = 0``, to the **front** of the waiting queue) and allocation is
  retried; if the victim is the request itself, the running pass stops;
* **waiting** only if nobody was preempted this step: peek the head, look up the
  prefix cache, ``allocate_slots(full_sequence_must_fit=True)``; on ``None`` →
  **break** (head-of-line blocking); stop at ``max_num_seqs`` running or no budget;
  with ``enable_chunked_prefill`` off, a head whose remaining tokens exceed the budget left
  also **breaks** (upstream: "If chunked_prefill is disabled, we can stop the scheduling here");
* a request that has computed all its tokens samples one (a deterministic fake id);
  it finishes when ``num_tokens >= L`` or ``max_tokens`` outputs exist.

``scheduling_policy="priority"`` (upstream ``SchedulerConfig.policy``): the waiting queue
is ordered by ``(priority, arrival, request_id)`` (``PriorityRequestQueue``; a preempted
request goes back to its place, not the front), the victim is the running request with
the largest ``(priority, arrival)``, and a request that preempted itself lets the
requests after it try (``continue``). :data:`VARIANT_POLICIES` are legitimate
non-upstream variants (e.g. preempt the request with the fewest computed tokens) that
the suite must not call stalls (``tests/test_alternative_policies.py``); switch one on with
:func:`scheduling_policy_override`.

Mamba ``align`` mode clips prefill chunks to block boundaries
(``_mamba_block_aligned_split``); when ``block_size > max_num_batched_tokens`` 0.33.0
lets the chunk advance sub-block instead of rounding it to 0 (#34445).

No wall clock, no randomness: the same inputs give the same steps.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kvverify import flaws
from kvverify.reference.config import VllmConfig
from kvverify.errors import ConfigError
from kvverify.reference.kv_cache_manager import KVCacheManager
from kvverify.reference.managers import behaviour_spec
from kvverify.reference.request import Request, RequestStatus, fake_output_token
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


@dataclass
class SchedulerOutput:
    """What one ``schedule()`` call decided (upstream ``SchedulerOutput``, reduced)."""

    step: int
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    scheduled_new_reqs: list[str] = field(default_factory=list)
    scheduled_resumed_reqs: list[str] = field(default_factory=list)
    scheduled_running_reqs: list[str] = field(default_factory=list)
    preempted_reqs: list[str] = field(default_factory=list)
    #: filled by ``update_from_output``: requests that sampled a token / finished
    sampled_reqs: list[str] = field(default_factory=list)
    finished_reqs: list[str] = field(default_factory=list)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


def mamba_prefill_checkpoint_position(num_tokens: int, block_size: int) -> int:
    """Last block boundary strictly below ``num_tokens`` (``get_mamba_prefill_checkpoint_position``)."""
    return max((num_tokens - 1) // block_size * block_size, 0)


class Scheduler:
    """FCFS scheduler over one :class:`KVCacheManager` (upstream ``Scheduler``)."""

    def __init__(self, vllm_config: VllmConfig, kv_cache_config: Any, *,
                 scheduler_block_size: int | None = None, hash_block_size: int | None = None,
                 full_sequence_must_fit: bool = True) -> None:
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
        self.vllm_config = vllm_config
        self.policy: str = _POLICY_OVERRIDE.get() or vllm_config.scheduling_policy
        self._num_arrived = 0
        self.max_model_len = vllm_config.max_model_len
        self.max_num_scheduled_tokens = vllm_config.max_num_batched_tokens
        self.max_num_running_reqs = vllm_config.max_num_seqs
        self.num_lookahead_tokens = vllm_config.num_lookahead_tokens
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
        self.requests: dict[str, Request] = {}
        self._arrival: dict[str, int] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.finished: list[str] = []
        self.current_step = 0
        self.num_preemptions = 0

    # -- queue management --

    def add_request(self, request: Request) -> None:
        """Queue a new request; its prompt must leave room for one output token."""
        if request.request_id in self.requests:
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
        if self.policy == "priority":
            self._insert_by_priority(request)
        else:
            self.waiting.append(request)

    def _priority_key(self, request: Request) -> tuple[int, int, str]:
        """``Request.__lt__``: priority, then arrival (add order), then request id."""
        return (request.priority, self._arrival[request.request_id], request.request_id)

    def _insert_by_priority(self, request: Request) -> None:
        """``PriorityRequestQueue.add_request``: keep ``waiting`` sorted by the key."""
        key = self._priority_key(request)
        i = next((i for i, r in enumerate(self.waiting) if key < self._priority_key(r)),
                 len(self.waiting))
        self.waiting.insert(i, request)

    def _select_victim(self) -> Request:
        """The running request to preempt: the last (FCFS), the largest
        ``(priority, arrival)`` (priority), or the fewest computed tokens, latest first."""
        if self.policy == "priority":
            return max(self.running, key=lambda r: (r.priority, self._arrival[r.request_id]))
        if self.policy == "fcfs_fewest_computed_victim":
            return min(reversed(self.running), key=lambda r: r.num_computed_tokens)
        return self.running[-1]

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    # -- the step --

    def _mamba_block_aligned_split(self, request: Request, num_new_tokens: int,
                                   num_new_local_computed_tokens: int = 0) -> int:
        """Clip a prefill chunk to end on a Mamba block boundary (upstream, same name)."""
        start = request.num_computed_tokens + num_new_local_computed_tokens
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
        """Free the victim's blocks and put it at the front of the waiting queue
        (priority: back to its place, ``PriorityRequestQueue.prepend_request``)."""
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        if self.policy == "priority":
            self._insert_by_priority(request)
        else:
            self.waiting.appendleft(request)

    def schedule(self) -> SchedulerOutput:
        """Decide this step's tokens; advances ``num_computed_tokens`` of the scheduled."""
        self.current_step += 1
        out = SchedulerOutput(step=self.current_step)
        kvm = self.kv_cache_manager
        kvm.new_step_starts()
        token_budget = self.max_num_scheduled_tokens
        scheduled: dict[str, int] = out.num_scheduled_tokens

        # 1. running requests, in order
        req_index = 0
        while req_index < len(self.running) and token_budget > 0:
            request = self.running[req_index]
            num_new = request.num_tokens - request.num_computed_tokens
            num_new = min(num_new, token_budget,
                          self.max_model_len - request.num_computed_tokens - 1)
            if self.need_mamba_block_aligned_split:
                num_new = self._mamba_block_aligned_split(request, num_new)
            if num_new <= 0:
                req_index += 1
                continue
            while True:
                new_blocks = kvm.allocate_slots(request, num_new,
                                                num_lookahead_tokens=self.num_lookahead_tokens)
                if new_blocks is not None:
                    break
                victim = self._select_victim()
                victim_index = self.running.index(victim)
                del self.running[victim_index]
                if victim_index < req_index:
                    req_index -= 1
                if victim.request_id in scheduled:  # already scheduled this step: give back
                    token_budget += scheduled.pop(victim.request_id)
                    out.scheduled_running_reqs.remove(victim.request_id)
                self._preempt_request(victim)
                out.preempted_reqs.append(victim.request_id)
                if victim is request:
                    break
            if new_blocks is None:
                if self.policy != "fcfs" and request.status is RequestStatus.PREEMPTED:
                    continue  # it preempted itself; the ones after it may still fit
                break
            out.scheduled_running_reqs.append(request.request_id)
            scheduled[request.request_id] = num_new
            token_budget -= num_new
            req_index += 1

        # 2. waiting requests, only if nobody was preempted
        if not out.preempted_reqs:
            while token_budget > 0 and self.waiting:
                if len(self.running) >= self.max_num_running_reqs:
                    break
                request = self.waiting[0]
                if request.num_computed_tokens == 0:
                    computed_blocks, num_local, request.shared_prefix_boundary = \
                        kvm.get_computed_blocks(request)
                else:
                    computed_blocks, num_local = kvm.empty_kv_cache_blocks, 0
                num_computed = request.num_computed_tokens + num_local
                if not self.enable_chunked_prefill and request.num_tokens - num_computed > token_budget:
                    break  # chunked prefill off: the prompt is scheduled whole or not at all
                num_new = min(request.num_tokens - num_computed, token_budget)
                if self.need_mamba_block_aligned_split:
                    num_new = self._mamba_block_aligned_split(request, num_new, num_local)
                    if num_new == 0:
                        break
                num_encoder = request.num_encoder_tokens if self.is_encoder_decoder else 0
                new_blocks = kvm.allocate_slots(
                    request, num_new, num_new_computed_tokens=num_local,
                    new_computed_blocks=computed_blocks,
                    num_lookahead_tokens=self.num_lookahead_tokens,
                    num_encoder_tokens=num_encoder,
                    full_sequence_must_fit=self.full_sequence_must_fit,
                    has_scheduled_reqs=bool(self.running))
                if new_blocks is None:
                    break  # head-of-line blocking: nothing behind it is tried
                self.waiting.popleft()
                self.running.append(request)
                if request.status is RequestStatus.PREEMPTED:
                    out.scheduled_resumed_reqs.append(request.request_id)
                else:
                    out.scheduled_new_reqs.append(request.request_id)
                request.status = RequestStatus.RUNNING
                request.num_computed_tokens = num_computed
                scheduled[request.request_id] = num_new
                token_budget -= num_new

        # 3. advance computed tokens of everything scheduled (_update_after_schedule)
        for rid, n in scheduled.items():
            self.requests[rid].num_computed_tokens += n
        return out

    def update_from_output(self, output: SchedulerOutput) -> list[str]:
        """Sample one token for each request that computed all its tokens; finish the
        ones that reached ``max_tokens`` or ``max_model_len``. Returns finished ids."""
        finished: list[str] = []
        for rid in output.num_scheduled_tokens:
            request = self.requests[rid]
            if request.status is not RequestStatus.RUNNING:
                continue
            if request.num_computed_tokens < request.num_tokens:
                continue  # partial prefill: nothing sampled
            request.append_output_token_ids(fake_output_token(rid, request.num_tokens))
            output.sampled_reqs.append(rid)
            if (request.num_tokens >= self.max_model_len
                    or request.num_output_tokens >= request.max_tokens):
                request.status = RequestStatus.FINISHED_LENGTH_CAPPED
                finished.append(rid)
        if finished:
            done = set(finished)
            self.running = [r for r in self.running if r.request_id not in done]
            for rid in finished:
                self.kv_cache_manager.free(self.requests[rid])
            self.finished.extend(finished)
        output.finished_reqs.extend(finished)
        return finished

    def step(self) -> tuple[SchedulerOutput, list[str]]:
        """``schedule()`` then ``update_from_output()``."""
        out = self.schedule()
        return out, self.update_from_output(out)

    # -- views --

    def get_request_counts(self) -> tuple[int, int]:
        """``(running, waiting)``."""
        return len(self.running), len(self.waiting)


__all__ = [
    "Request",
    "RequestStatus",
    "Scheduler",
    "SchedulerOutput",
    "mamba_prefill_checkpoint_position",
]
