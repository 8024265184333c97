"""A deterministic, scripted KV connector: both halves, as a pure state machine (no vLLM import).

Upstream's KV connector (``KVConnectorBase_V1``, ``vllm/distributed/kv_transfer/kv_connector/v1/
base.py``) has a scheduler half — ``get_num_new_matched_tokens``, ``update_state_after_alloc``,
``build_connector_meta``, ``request_finished`` — and a worker half that moves the KV and reports
``finished_recving`` / ``finished_sending`` / ``failed_recving`` in the model runner's
``KVConnectorOutput``. Real connectors answer from a cache whose contents and timing depend on
the world; this one answers from a :class:`ConnectorScript`, per request:

* ``hit_tokens``: the prompt prefix the external cache holds (absolute, from token 0); the
  connector offers ``min(hit_tokens, num_tokens) - num_computed_tokens`` new tokens (never
  negative; a synchronous load leaves the last token to compute, as upstream connectors do);
* ``load_steps``: ``0`` loads synchronously inside the scheduled step; ``k >= 1`` loads
  asynchronously and reports ``finished_recving`` in the output of the ``k``-th worker step
  counted from the step that carried the load (1: the same step);
* ``deferrals``: the first ``deferrals`` queries answer ``None`` ("ask again later");
* ``fail_load``: the async load fails (``failed_recving`` with ``finished_recving``) and the
  external copy is lost (later queries offer nothing);
* ``free_delay_steps``: ``request_finished`` of a request that finished normally asks the
  scheduler to delay the free (``delay_free_blocks``) and the send reports ``finished_sending``
  ``k`` worker steps after the step that carried it (0: blocks are freed at once).

The same :class:`ScriptedConnectorState` drives the reference scheduler
(:mod:`kvverify.reference.sched`) and, wrapped as a ``KVConnectorBase_V1`` subclass, the real
vLLM Scheduler (:mod:`kvverify.targets.vllm.connector`), so both see identical answers and timing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvverify.errors import MAX_TOKENS, ConfigError, require_int

#: the most worker steps a scripted transfer may take (keeps the state space small)
MAX_TRANSFER_STEPS = 64
#: the most ``None`` answers a scripted request may give
MAX_DEFERRALS = 64


@dataclass(frozen=True)
class RequestScript:
    """How the external cache behaves for one request (see the module docstring)."""

    hit_tokens: int = 0
    load_steps: int = 1
    deferrals: int = 0
    fail_load: bool = False
    free_delay_steps: int = 0

    def __post_init__(self) -> None:
        require_int("hit_tokens", self.hit_tokens, minimum=0, maximum=MAX_TOKENS)
        require_int("load_steps", self.load_steps, minimum=0, maximum=MAX_TRANSFER_STEPS)
        require_int("deferrals", self.deferrals, minimum=0, maximum=MAX_DEFERRALS)
        require_int("free_delay_steps", self.free_delay_steps, minimum=0, maximum=MAX_TRANSFER_STEPS)
        if not isinstance(self.fail_load, bool):
            raise ConfigError("fail_load", self.fail_load, "must be a bool")
        if self.fail_load and self.load_steps == 0:
            raise ConfigError("fail_load", True, "only an asynchronous load (load_steps >= 1) can fail")


NO_SCRIPT = RequestScript(hit_tokens=0, load_steps=1)


@dataclass(frozen=True)
class ConnectorScript:
    """Per-request scripts, by request id; a request without one gets no external hit.

    ``kv_role`` is upstream's ``KVTransferConfig.kv_role``: ``kv_both`` (the default) and
    ``kv_consumer`` make the connector a consumer (with two batches in flight, upstream then
    defers block frees behind a fence); ``kv_producer`` only saves.
    """

    requests: tuple[tuple[str, RequestScript], ...] = ()
    kv_role: str = "kv_both"
    #: upstream ``KVTransferConfig.kv_load_failure_policy``: ``"fail"`` (its default) finishes a
    #: request whose load failed with an error; ``"recompute"`` recomputes its tokens
    kv_load_failure_policy: str = "fail"

    def __post_init__(self) -> None:
        for pair in self.requests:
            if (not isinstance(pair, tuple) or len(pair) != 2 or not isinstance(pair[0], str) or not pair[0]
                    or not isinstance(pair[1], RequestScript)):
                raise ConfigError("requests", pair, "must be (request id, RequestScript) pairs")
        ids = [rid for rid, _ in self.requests]
        if len(set(ids)) != len(ids):
            raise ConfigError("requests", ids, "must name each request once")
        if self.kv_role not in KV_ROLES:
            raise ConfigError("kv_role", self.kv_role, f"must be one of {KV_ROLES}")
        if self.kv_load_failure_policy not in KV_LOAD_FAILURE_POLICIES:
            raise ConfigError("kv_load_failure_policy", self.kv_load_failure_policy,
                              f"must be one of {KV_LOAD_FAILURE_POLICIES}")

    @classmethod
    def of(cls, scripts: Mapping[str, RequestScript], kv_role: str = "kv_both",
           kv_load_failure_policy: str = "fail") -> ConnectorScript:
        return cls(tuple(sorted(scripts.items())), kv_role, kv_load_failure_policy)

    def for_request(self, request_id: str) -> RequestScript:
        return dict(self.requests).get(request_id, NO_SCRIPT)

    @property
    def is_kv_consumer(self) -> bool:
        """Upstream ``KVTransferConfig.is_kv_consumer``."""
        return self.kv_role in ("kv_consumer", "kv_both")

    @property
    def is_kv_producer(self) -> bool:
        """Upstream ``KVTransferConfig.is_kv_producer`` (also the connector's default
        ``requires_kv_delivery``: a preempted request's in-flight output is dropped)."""
        return self.kv_role in ("kv_producer", "kv_both")


KV_ROLES = ("kv_both", "kv_consumer", "kv_producer")
KV_LOAD_FAILURE_POLICIES = ("fail", "recompute")


@dataclass(frozen=True)
class ConnectorMeta:
    """What ``build_connector_meta`` hands the worker for one step: loads and sends to start."""

    loads: tuple[str, ...] = ()
    sends: tuple[str, ...] = ()


@dataclass(frozen=True)
class TransferResults:
    """The worker's report for one step (upstream ``KVConnectorOutput``'s request-id fields)."""

    finished_recving: frozenset[str] = frozenset()
    finished_sending: frozenset[str] = frozenset()
    failed_recving: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.finished_recving or self.finished_sending or self.failed_recving)


@dataclass
class ScriptedConnectorState:
    """Both halves of the scripted connector; every method is deterministic and pure Python."""

    script: ConnectorScript
    #: queries answered so far, per request (the first ``deferrals`` answer ``None``)
    queries: dict[str, int] = field(default_factory=dict)
    #: the last answer's ``load_kv_async`` per request (what ``update_state_after_alloc`` acts on)
    last_async: dict[str, bool] = field(default_factory=dict)
    #: requests whose load failed: their external copy is gone
    lost: set[str] = field(default_factory=set)
    #: loads / sends to start with the next step's metadata
    new_loads: list[str] = field(default_factory=list)
    new_sends: list[str] = field(default_factory=list)
    #: in-flight transfers: request id -> worker steps left
    loading: dict[str, int] = field(default_factory=dict)
    sending: dict[str, int] = field(default_factory=dict)
    #: every call, for tests and reports: (method, request id, answer)
    calls: list[tuple[str, str, object]] = field(default_factory=list)

    # -- scheduler side (upstream KVConnectorBase_V1 names) --

    def get_num_new_matched_tokens(self, request_id: str, num_tokens: int,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        """``(new external tokens or None, load_kv_async)`` for a waiting request."""
        script = self.script.for_request(request_id)
        asked = self.queries.get(request_id, 0)
        self.queries[request_id] = asked + 1
        if asked < script.deferrals:
            self.calls.append(("get_num_new_matched_tokens", request_id, None))
            return None, False
        cached = 0 if request_id in self.lost else min(script.hit_tokens, num_tokens)
        if script.load_steps == 0:
            cached = min(cached, num_tokens - 1)  # a synchronous load leaves the last token to compute
        ext = max(0, cached - num_computed_tokens)
        load_async = ext > 0 and script.load_steps > 0
        self.last_async[request_id] = load_async
        self.calls.append(("get_num_new_matched_tokens", request_id, (ext, load_async)))
        return ext, load_async

    def update_state_after_alloc(self, request_id: str, num_external_tokens: int) -> None:
        """Blocks were allocated: an async load of ``num_external_tokens > 0`` starts next step."""
        self.calls.append(("update_state_after_alloc", request_id, num_external_tokens))
        if num_external_tokens > 0 and self.last_async.get(request_id, False):
            self.new_loads.append(request_id)
            self.last_async[request_id] = False

    def build_connector_meta(self) -> ConnectorMeta:
        """The loads and sends the worker starts with this step (clears them)."""
        meta = ConnectorMeta(tuple(self.new_loads), tuple(self.new_sends))
        self.new_loads.clear()
        self.new_sends.clear()
        return meta

    def request_finished(self, request_id: str, length_capped: bool = True) -> bool:
        """``delay_free_blocks``: whether the connector keeps the blocks until its send reports.
        Only a request that finished normally (``FINISHED_LENGTH_CAPPED``) is sent, as upstream's
        producers do: an aborted or failed one has nothing to hand off."""
        delay = length_capped and self.script.for_request(request_id).free_delay_steps > 0
        self.calls.append(("request_finished", request_id, delay))
        # an ended request is never asked again: a deferral it still owed is no pending work
        # (an abort of a request whose answer was ``None``; else the run would wait for it forever)
        if request_id in self.queries:
            self.queries[request_id] = max(self.queries[request_id], self.script.for_request(request_id).deferrals + 1)
        if delay:
            self.new_sends.append(request_id)
        return delay

    def has_pending_block_frees(self) -> bool:
        """Upstream's hook ("pending transfers can release blocks instead of preemption"): False,
        as for every connector that does not override it."""
        return False

    # -- worker side --

    def worker_step(self, meta: ConnectorMeta) -> TransferResults:
        """Execute one step: start ``meta``'s transfers, advance all, report the finished ones."""
        for rid in meta.loads:
            self.loading[rid] = self.script.for_request(rid).load_steps
        for rid in meta.sends:
            self.sending[rid] = self.script.for_request(rid).free_delay_steps
        recv, sent, failed = _advance(self.loading), _advance(self.sending), set()
        for rid in recv:
            if self.script.for_request(rid).fail_load:
                failed.add(rid)
                self.lost.add(rid)
        return TransferResults(frozenset(recv), frozenset(sent), frozenset(failed))

    # -- views --

    def has_pending_work(self) -> bool:
        """A transfer in flight or about to start, or a request that answered ``None`` and will
        answer otherwise when asked again: the next steps can see something new."""
        return bool(self.loading or self.sending or self.new_loads or self.new_sends or any(
            0 < n <= self.script.for_request(rid).deferrals for rid, n in self.queries.items()))

    def state(self) -> tuple[object, ...]:
        """Everything later answers depend on, hashable (the driver's stall fingerprint)."""
        # a query count past the deferrals no longer changes any answer: clamp it, so a request
        # re-asked every step is not a new state each time
        queries = tuple(sorted((rid, min(n, self.script.for_request(rid).deferrals + 1))
                               for rid, n in self.queries.items()))
        return (queries, tuple(sorted(self.last_async.items())),
                tuple(sorted(self.lost)), tuple(self.new_loads), tuple(self.new_sends),
                tuple(sorted(self.loading.items())), tuple(sorted(self.sending.items())))


def _advance(transfers: dict[str, int]) -> set[str]:
    """One worker step for every in-flight transfer; returns (and drops) those that finished."""
    done = set()
    for rid in list(transfers):
        transfers[rid] -= 1
        if transfers[rid] <= 0:
            done.add(rid)
            del transfers[rid]
    return done


__all__ = ["ConnectorMeta", "ConnectorScript", "KV_LOAD_FAILURE_POLICIES", "KV_ROLES", "NO_SCRIPT", "RequestScript",
           "ScriptedConnectorState", "TransferResults"]
