"""The scripted KV connector inside upstream's Scheduler (``Capability.KV_CONNECTOR``).

Upstream builds its connector from ``VllmConfig.kv_transfer_config``
(``KVConnectorFactory``: ``kv_connector_module_path`` + the class name). This module is that
path: :data:`CONNECTOR_NAME` resolves, lazily (importing kvverify never imports vLLM), to a
``KVConnectorBase_V1`` subclass (and ``SupportsHMA`` where the release has it, so hybrid
layouts keep the hybrid KV cache manager) whose scheduler-role methods delegate to a
:class:`~kvverify.reference.connector.ScriptedConnectorState` — the same state machine the
reference scheduler uses. ``kv_connector_extra_config["kvverify_script"]`` names the state.

:class:`ConnectorScheduler` is the adapter's scheduler with the connector on: the fake worker
runs the connector's worker half on each step's ``kv_connector_metadata`` and reports the
transfers in ``ModelRunnerOutput(kv_connector_output=KVConnectorOutput(...))`` as a worker
would; ``max_concurrent_batches = 2`` runs upstream's Scheduler behind the batch queue
(pipeline parallelism's engine loop, :mod:`kvverify.reference.sched.engine`).
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

from kvverify.errors import PoolExhaustedError
from kvverify.reference.connector import ConnectorMeta, ConnectorScript, ScriptedConnectorState
from kvverify.reference.planner import StartupPlan
from kvverify.reference.request import check_sampled_within_max_model_len, check_scheduled_token_counts, fake_output_token
from kvverify.reference.sched.engine import BatchQueue, engine_step
from kvverify.targets.vllm.env import upstream
from kvverify.targets.vllm.transfer import CONNECTOR_NAME, MODULE_PATH, SCRIPT_KEY, transfer_config
from kvverify.targets.vllm.refusals import unsupported
from kvverify.targets.vllm.scheduler import StepOutput, UpstreamScheduler

if MODULE_PATH != __name__:  # upstream's factory imports MODULE_PATH to find the class
    raise ImportError(f"kvverify.targets.vllm.transfer.MODULE_PATH is {MODULE_PATH!r}, the connector is {__name__}")

_STATES: weakref.WeakValueDictionary[str, ScriptedConnectorState] = weakref.WeakValueDictionary()
_IDS = itertools.count()
_CLASS: type | None = None


def register(state: ScriptedConnectorState) -> str:
    """File ``state`` for the connector upstream will build; returns its id."""
    sid = f"s{next(_IDS)}"
    _STATES[sid] = state
    return sid


def connector_class() -> type:
    """The ``KVConnectorBase_V1`` subclass over the installed release (built once)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    up = upstream()
    bases: tuple[type, ...] = (up.KVConnectorBase_V1,) + ((up.SupportsHMA,) if up.SupportsHMA is not None else ())

    class ScriptedMeta(up.KVConnectorMetadata):  # type: ignore[misc,name-defined]
        def __init__(self, meta: ConnectorMeta) -> None:
            self.meta = meta

    def __init__(self: Any, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        up.KVConnectorBase_V1.__init__(self, vllm_config, role, kv_cache_config)
        sid = vllm_config.kv_transfer_config.kv_connector_extra_config.get(SCRIPT_KEY)
        state = _STATES.get(sid) if sid else None
        self.kvverify_state = state if state is not None else ScriptedConnectorState(ConnectorScript())

    def get_num_new_matched_tokens(self: Any, request: Any, num_computed_tokens: int,
                                   *args: Any, **kwargs: Any) -> tuple[int | None, bool]:
        state: ScriptedConnectorState = self.kvverify_state
        return state.get_num_new_matched_tokens(request.request_id, request.num_tokens, num_computed_tokens)

    def update_state_after_alloc(self: Any, request: Any, blocks: Any, num_external_tokens: int) -> None:
        self.kvverify_state.update_state_after_alloc(request.request_id, num_external_tokens)

    def build_connector_meta(self: Any, scheduler_output: Any) -> Any:
        return ScriptedMeta(self.kvverify_state.build_connector_meta())

    def request_finished(self: Any, request: Any, block_ids: Any) -> tuple[bool, None]:
        capped = str(getattr(request.status, "name", request.status)) == "FINISHED_LENGTH_CAPPED"
        return self.kvverify_state.request_finished(request.request_id, capped), None

    def worker_side(self: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the scripted connector has a scheduler side only: kvverify's fake "
                                  "worker runs its worker half")

    namespace: dict[str, Any] = {
        "__module__": MODULE_PATH, "__init__": __init__,
        "get_num_new_matched_tokens": get_num_new_matched_tokens,
        "update_state_after_alloc": update_state_after_alloc, "build_connector_meta": build_connector_meta,
        "request_finished": request_finished, "request_finished_all_groups": request_finished,
        "start_load_kv": worker_side, "wait_for_layer_load": worker_side, "save_kv_layer": worker_side,
        "wait_for_save": worker_side,
    }
    # any other abstract method of this release's base (scheduler-side ones are the above)
    for name in getattr(up.KVConnectorBase_V1, "__abstractmethods__", ()):
        namespace.setdefault(name, worker_side)
    _CLASS = type(CONNECTOR_NAME, bases, namespace)
    return _CLASS


def __getattr__(name: str) -> Any:  # PEP 562: upstream's factory reads the class by name
    if name == CONNECTOR_NAME:
        return connector_class()
    raise AttributeError(name)


class ConnectorScheduler(UpstreamScheduler):
    """Upstream's Scheduler with the scripted connector (``script``; ``None``: no connector)
    and, for ``max_concurrent_batches = 2``, the batch queue."""

    def __init__(self, target: Any, plan: StartupPlan, script: ConnectorScript | None) -> None:
        caps = target.up.compat
        cfg = plan.vllm_config
        if script is not None and not cfg.kv_connector:
            unsupported("a connector script with kv_connector=False")
        if script is not None and not caps.kv_failed_recving and any(s.fail_load for _, s in script.requests):
            unsupported(f"vLLM {caps.version} has no KVConnectorOutput.failed_recving: a request-level load "
                        "failure cannot be reported")
        self.script = script
        self.state = ScriptedConnectorState(script) if script is not None else None
        self._sid = register(self.state) if self.state is not None else None
        self.batch_queue = BatchQueue(cfg.max_concurrent_batches)
        super().__init__(target, plan, configure=self._configure)
        self.connector = self.upstream.get_kv_connector() if script is not None else None
        self._transfer_reported = False

    def _configure(self, vc: Any) -> None:
        if self.script is not None:
            vc.kv_transfer_config = transfer_config(self.script, self._sid)
        else:
            vc.kv_transfer_config = None

    # -- what the driver and the invariants read (upstream's names) --

    def _state(self, name: str, absent: Any) -> Any:
        """Upstream Scheduler attribute ``name`` of :data:`~.compat.TRANSFER_STATE_ATTRS`, or
        ``absent`` where the release lacks it (``Compat.transfer_state``: probed at detection, an
        absence the history does not explain is a ``DriftError`` there, never a default here)."""
        return getattr(self.upstream, name) if name in self.caps.transfer_state else absent

    @property
    def waiting(self) -> list[Any]:
        return list(getattr(self.upstream, self.caps.waiting_queues()[1]))

    @property
    def kv_holding_waiting(self) -> list[Any]:
        """Block holders drained first (``kv_holding_waiting``; before 0.31, ``skipped_waiting``)."""
        first = self.caps.waiting_queues()[0]
        return list(getattr(self.upstream, first)) if first else []

    @property
    def requests(self) -> dict[str, Any]:
        return dict(self.upstream.requests)

    @property
    def connector_state(self) -> ScriptedConnectorState | None:
        """The scripted connector's state machine (its ``calls`` log), or ``None``."""
        return self.state

    @property
    def defer_block_free(self) -> bool:
        return bool(self._state("defer_block_free", False))

    def has_requests(self) -> bool:
        return bool(self.upstream.has_requests())

    def has_pending_external_events(self) -> bool:
        """A batch in flight, a transfer in flight or about to start, a landed load not yet promoted,
        or a transfer report the last output carried (see the reference scheduler's)."""
        return bool(len(self.batch_queue) or self._transfer_reported
                    or self._state("finished_recving_kv_req_ids", ())
                    or (self.state is not None and self.state.has_pending_work()))

    def inflight_prefill_ids(self) -> tuple[str, ...] | None:
        """Upstream ``_inflight_prefills`` (#44560), ``None`` on a release without it."""
        inflight = self._state("_inflight_prefills", None)
        return None if inflight is None else tuple(sorted(r.request_id for r in inflight))

    def num_blocks_to_hold(self, request_id: str, num_tokens: int) -> int:
        """The coordinator's ``get_num_blocks_to_allocate`` for ``request_id`` to hold ``num_tokens``,
        nothing new computed, the admission cap applied (the keywords the release has)."""
        from kvverify.targets.vllm.runtime import gate_kwargs

        sched = self.upstream
        r = sched.requests[request_id]
        kvm = sched.kv_cache_manager
        full = min(r.num_tokens, int(sched.max_model_len))
        kw: dict[str, Any] = dict(request_id=request_id, num_tokens=num_tokens,
                                  new_computed_blocks=kvm.empty_kv_cache_blocks.blocks, num_encoder_tokens=0,
                                  total_computed_tokens=r.num_computed_tokens,
                                  num_local_computed_tokens=r.num_computed_tokens, num_tokens_main_model=full,
                                  apply_admission_cap=True, prefill_end=max(r.num_prompt_tokens, r.num_tokens - 1))
        return int(kvm.coordinator.get_num_blocks_to_allocate(**gate_kwargs(self.caps, kw)))

    def kv_transfer_state(self) -> tuple[object, ...]:
        sched = self.upstream
        state = self._state
        processed = int(state("processed_step_seq", 0))

        def ahead(seq: int) -> int:
            return max(int(seq) - processed, 0)

        def req(r: Any) -> tuple[object, ...]:
            return (r.request_id, str(r.status), r.num_tokens, r.num_computed_tokens,
                    getattr(r, "num_in_flight_tokens", 0), getattr(r, "num_stale_output_tokens", 0),
                    getattr(r, "drop_stale_output", False), ahead(getattr(r, "last_sched_seq", 0)))

        fences = (ahead(state("sched_step_seq", 0)),
                  tuple((ahead(fence), tuple(b.block_id for b in blocks))
                        for fence, blocks in state("deferred_frees", ())))
        return (tuple(req(r) for r in self.kv_holding_waiting),
                tuple(sorted(r.request_id for r in state("deferred_waiting", ()))),
                tuple(sorted(state("finished_recving_kv_req_ids", ()))),
                tuple(sorted(state("failed_recving_kv_req_ids", ()))),
                tuple(sorted(r.request_id for r in state("_inflight_prefills", ()))),
                tuple(sorted(sched.requests)), fences,
                self.state.state() if self.state is not None else (),
                self.batch_queue.state(lambda out, mro: (
                    tuple(sorted(out.num_scheduled_tokens.items())), tuple(sorted(mro[1])), mro[2])))

    # -- the step --

    def _schedule(self) -> StepOutput:
        self.current_step += 1
        out = self.upstream.schedule()
        return StepOutput(step=self.current_step, num_scheduled_tokens=dict(out.num_scheduled_tokens),
                          preempted_reqs=sorted(getattr(out, "preempted_req_ids", None) or ()), upstream=out)

    def _execute(self, out: StepOutput) -> tuple[Any, dict[str, list[int]], Any]:
        """The fake worker: sample for requests that computed all their tokens, run the
        connector's worker half on the step's metadata."""
        up = self.target.up
        sched = self.upstream
        rids = list(out.num_scheduled_tokens)
        check_scheduled_token_counts(out.num_scheduled_tokens)  # the model runner's (np.repeat) and update's
        sampled = {rid: [fake_output_token(rid, sched.requests[rid].num_tokens)] for rid in rids
                   if sched.requests[rid].num_computed_tokens >= sched.requests[rid].num_tokens}
        for rid in sampled:  # the model runner's own check (an engine-killing RuntimeError upstream)
            check_sampled_within_max_model_len(sched.requests[rid].num_computed_tokens, self.max_model_len)
        results = None
        kv_output = None
        if self.state is not None:
            meta = getattr(out.upstream, "kv_connector_metadata", None)
            results = self.state.worker_step(meta.meta if meta is not None else ConnectorMeta())
            kw: dict[str, Any] = dict(finished_recving=set(results.finished_recving) or None,
                                      finished_sending=set(results.finished_sending) or None)
            if results.failed_recving:
                kw["failed_recving"] = set(results.failed_recving)
            kv_output = up.KVConnectorOutput(**kw)
        mro = up.ModelRunnerOutput(req_ids=rids, req_id_to_index={r: i for i, r in enumerate(rids)},
                                   sampled_token_ids=[sampled.get(r, []) for r in rids],
                                   kv_connector_output=kv_output)
        return mro, sampled, results

    def _update(self, out: StepOutput, executed: tuple[Any, dict[str, list[int]], Any]) -> list[str]:
        mro, sampled, results = executed
        self._transfer_reported = results is not None and not results.empty
        requests = self.upstream.requests
        before = {rid: requests[rid].num_tokens for rid in sampled if rid in requests}
        engine_outputs = self.upstream.update_from_output(out.upstream, mro)
        finished = [o.request_id for eco in engine_outputs.values() for o in eco.outputs
                    if o.finish_reason is not None]
        # a token counts once it is appended (a preempted request's stale output may be dropped)
        out.sampled_reqs.extend(rid for rid in out.num_scheduled_tokens if rid in before and (
            rid in finished or (rid in requests and requests[rid].num_tokens > before[rid])))
        out.finished_reqs.extend(finished)
        self.num_preemptions += len(out.preempted_reqs)
        self.finished.extend(finished)
        return finished

    def step(self) -> tuple[Any, list[str]]:
        try:
            if self.batch_queue.size == 1:
                out = self._schedule()
                return out, self._update(out, self._execute(out))
            scheduled, processed, finished = self.batch_queue.step(
                self.has_requests, self._schedule, self._execute, self._update)
            if scheduled is None and processed is None:
                # nothing ran: the last output's transfer report was consumed (else an engine with
                # no requests left would count as pending forever: vLLM 0.19.1 looped so)
                self._transfer_reported = False
        except ValueError as e:
            if str(e).startswith("Cannot get"):  # BlockPool.get_new_blocks: the pool ran out mid-step
                raise PoolExhaustedError(str(e)) from e
            raise
        return engine_step(self.current_step, scheduled, processed, finished), finished


__all__ = ["CONNECTOR_NAME", "ConnectorScheduler", "connector_class", "register", "transfer_config"]
