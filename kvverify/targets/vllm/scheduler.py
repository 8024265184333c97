"""The upstream ``Scheduler`` behind the interface :func:`kvverify.reference.driver.run_workload` steps."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvverify.errors import ConfigError
from kvverify.reference.planner import StartupPlan
from kvverify.reference.request import (Request, check_sampled_within_max_model_len, check_scheduled_token_counts,
                                        fake_output_token)
from kvverify.targets.vllm import compat
from kvverify.targets.vllm.env import LOCK, preserved_environ
from kvverify.targets.vllm.refusals import unsupported
from kvverify.targets.vllm.runtime import UpstreamKVCacheManager, block_hasher, build, request

if TYPE_CHECKING:
    from kvverify.targets.vllm.target import VllmTarget


@dataclass
class StepOutput:
    """What the driver reads from one step (kvverify's ``SchedulerOutput`` surface)."""

    step: int
    num_scheduled_tokens: dict[str, int]
    preempted_reqs: list[str]
    sampled_reqs: list[str] = field(default_factory=list)
    finished_reqs: list[str] = field(default_factory=list)
    upstream: Any = None

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


#: Scheduler keywords a release may lack (< 0.20: no separate hash block size)
SCHEDULER_NEUTRAL = {"hash_block_size": None}


def give_speculative_tokens(caps: Any, scheduler: Any, num_speculative_tokens: int) -> None:
    """Give a release's ``Scheduler`` the config's draft tokens where nothing else does.

    From 0.28 (``Compat.lookahead_property``) the config subclass of
    :func:`kvverify.targets.vllm.config.upstream_config` answers ``num_speculative_tokens``.
    Releases before it that have the property (0.25, 0.27) read it off the speculative config
    in ``Scheduler.__init__`` only, and no drafter is built (it is ``None``: 0), so it is set
    on the scheduler as the lookahead is; without this their waiting scan never padded and a
    drafter's example silently ran without one. Releases without the property refuse such a
    config before a scheduler is built."""
    if not caps.lookahead_property and caps.speculative_tokens_property:
        scheduler.num_spec_tokens = num_speculative_tokens


class UpstreamScheduler:
    """Upstream ``Scheduler`` stepped with fake model-runner outputs.

    Same surface as :class:`kvverify.reference.scheduler.Scheduler` for
    :func:`kvverify.reference.driver.run_workload`: ``add_request``, ``step()``,
    ``has_unfinished_requests()``, ``get_request_counts()``, ``kv_cache_manager``,
    ``waiting``, ``running``, ``finished``, ``num_preemptions``, ``max_model_len``,
    ``max_num_scheduled_tokens``. A request that computed all its tokens in a step
    samples one (kvverify's deterministic ``fake_output_token``); a mid-prefill chunk
    samples nothing. ``num_lookahead_tokens`` (speculative decoding's extra slots) is
    set on the scheduler as upstream's ``vllm_config.num_lookahead_tokens`` would.
    """

    def __init__(self, target: VllmTarget, plan: StartupPlan, configure: Callable[[Any], None] | None = None) -> None:
        up = target.up
        caps = self.caps = up.compat
        self.target = target
        u = build(target, plan)
        if configure is not None:  # e.g. the KV transfer config (kvverify.targets.vllm.connector)
            configure(u.vc)
        self.plan = plan
        kw: dict[str, Any] = dict(vllm_config=u.vc, kv_cache_config=u.scheduler_config,
                  structured_output_manager=up.StructuredOutputManager(u.vc),
                  block_size=u.scheduler_block_size, hash_block_size=u.hash_block_size, log_stats=False)
        if not caps.block_size_resolution:
            kw["hash_block_size"] = None
        try:
            kw = compat.fit_kwargs(caps, "Scheduler", kw, SCHEDULER_NEUTRAL)
        except compat.KnobMissing as e:
            unsupported(f"vLLM {caps.version}: {e}")
        with LOCK, preserved_environ():
            self.upstream = up.Scheduler(**kw)
        self.upstream.num_lookahead_tokens = plan.vllm_config.num_lookahead_tokens
        give_speculative_tokens(caps, self.upstream, plan.vllm_config.num_speculative_tokens)
        self.scheduler_block_size = u.scheduler_block_size
        self.hash_block_size = u.hash_block_size
        self.kv_cache_manager = UpstreamKVCacheManager(
            self.upstream.kv_cache_manager, u.translator, block_hasher(target, u.vc, u.hash_block_size), caps)
        self.max_model_len = int(self.upstream.max_model_len)
        self.max_num_scheduled_tokens = int(self.upstream.max_num_scheduled_tokens)
        self.finished: list[str] = []
        self.num_preemptions = 0
        self.current_step = 0
        self._num_added = 0
        #: scheduled steps of requests carrying a Marconi shared-prefix junction
        #: (``Request.shared_prefix_boundary > 0``): a Mamba-align prefill chunk stops there
        self.junction_stops = 0

    def add_request(self, req: Request) -> None:
        """Queue a kvverify ``Request`` (as the engine's input processor would)."""
        if req.num_prompt_tokens >= self.max_model_len:
            raise ConfigError("prompt_token_ids", f"<{req.num_prompt_tokens} tokens>",
                              f"prompt length must be in [1, {self.max_model_len - 1}] "
                              f"(max_model_len={self.max_model_len} minus one output token)")
        # arrival_time = add order (the reference's priority tie-break), not the wall clock
        self.upstream.add_request(request(self.target, self.kv_cache_manager, req.request_id,
                                          req.prompt_token_ids, req.max_tokens,
                                          priority=req.priority,
                                          arrival_time=float(self.current_arrival())))

    def current_arrival(self) -> int:
        """The next add-order index (upstream ``Request.arrival_time`` stand-in)."""
        self._num_added += 1
        return self._num_added

    def has_unfinished_requests(self) -> bool:
        return bool(self.upstream.has_unfinished_requests())

    def get_request_counts(self) -> tuple[int, int]:
        running, waiting = self.upstream.get_request_counts()
        return int(running), int(waiting)

    @property
    def running(self) -> list[Any]:
        return list(self.upstream.running)

    @property
    def waiting(self) -> list[Any]:
        """Waiting requests holding no KV blocks (those holding blocks: :attr:`kv_holding_waiting`)."""
        return list(self.upstream.waiting)

    @property
    def kv_holding_waiting(self) -> list[Any]:
        """Waiting requests holding KV blocks (only a KV connector's loads put them there), in the
        queue the release drains first (``Compat.waiting_queues``: 0.31 and later
        ``kv_holding_waiting``, 0.18 - 0.29 ``skipped_waiting``)."""
        first = self.caps.waiting_queues()[0]
        return list(getattr(self.upstream, first)) if first else []

    @property
    def requests(self) -> dict[str, Any]:
        """Upstream ``Scheduler.requests``: the requests it still knows (a freed one is forgotten)."""
        return dict(self.upstream.requests)

    def abort_requests(self, request_ids: Sequence[str]) -> list[str]:
        """Abort as the engine core does (``EngineCore.abort_requests``:
        ``Scheduler.finish_requests(ids, RequestStatus.FINISHED_ABORTED)``, a client that
        disconnects); the aborted ids (unknown and finished ones skipped: read before the call,
        releases before 0.33 return nothing) join :attr:`finished`."""
        status = importlib.import_module(self.target.up.Request.__module__).RequestStatus
        known = self.upstream.requests
        ids = list(dict.fromkeys(request_ids))
        aborted = [rid for rid in ids if rid in known and not known[rid].is_finished()]
        self.upstream.finish_requests(ids, status.FINISHED_ABORTED)
        self.finished.extend(aborted)
        return aborted

    def has_pending_external_events(self) -> bool:
        """Nothing outside the step changes this scheduler (no connector, one batch in flight)."""
        return False

    def kv_transfer_state(self) -> tuple[object, ...]:
        return ()

    def step(self) -> tuple[StepOutput, list[str]]:
        up = self.target.up
        sched = self.upstream
        self.current_step += 1
        out = sched.schedule()
        rids = list(out.num_scheduled_tokens)
        check_scheduled_token_counts(dict(out.num_scheduled_tokens))
        if self.caps.shared_prefix_boundary:
            self.junction_stops += sum(1 for rid in rids if sched.requests[rid].shared_prefix_boundary)
        sampled: list[list[int]] = []
        sampled_ids: list[str] = []
        for rid in rids:
            r = sched.requests[rid]
            if r.num_computed_tokens >= r.num_tokens:
                check_sampled_within_max_model_len(r.num_computed_tokens, self.max_model_len)
                sampled.append([fake_output_token(rid, r.num_tokens)])
                sampled_ids.append(rid)
            else:
                sampled.append([])
        mro = up.ModelRunnerOutput(req_ids=rids, req_id_to_index={r: i for i, r in enumerate(rids)},
                                   sampled_token_ids=sampled)
        engine_outputs = sched.update_from_output(out, mro)
        finished = [o.request_id for eco in engine_outputs.values() for o in eco.outputs
                    if o.finish_reason is not None]
        preempted = sorted((out.preempted_req_ids if self.caps.preempted_req_ids else None) or ())
        self.num_preemptions += len(preempted)
        self.finished.extend(finished)
        step_out = StepOutput(step=self.current_step, num_scheduled_tokens=dict(out.num_scheduled_tokens),
                              preempted_reqs=preempted, sampled_reqs=sampled_ids, finished_reqs=finished,
                              upstream=out)
        return step_out, finished


__all__ = ["give_speculative_tokens", "StepOutput", "UpstreamScheduler"]
