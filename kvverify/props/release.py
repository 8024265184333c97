"""Block conservation across finish and abort, on the target's own scheduler.

A workload runs as usual and, at drawn steps, some requests are aborted the way the engine
core aborts them (``EngineCore.abort_requests`` -> ``Scheduler.finish_requests(ids,
FINISHED_ABORTED)``: a client that disconnects, whatever the request is doing — waiting,
mid-prefill, decoding, parked on a KV load, in a batch still in flight). After every step and
every abort no request the scheduler forgot holds a block, and without a connector an ended
request is forgotten at once; when the run is over every usable block is free again
(:mod:`kvverify.invariants.release`). An abort that raises is a violation too: a request can
always be aborted.

Three generators: the plain scheduler over every startup layout (:func:`startup_cases`), the
KV-transfer paths (:func:`connector_cases`: async loads, delayed frees, one or two batches in
flight), and two batches in flight with a connector on, where a consumer's frees of requests in
a running batch are fenced through ``pop_blocks_for_free`` (the path of upstream's surviving
``pop_blocks_for_free(None)`` mutant, ``docs/mutation.md``). Planted mutations:
``tests/test_release_mutations.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import assume, event, note
from hypothesis import strategies as st

from kvverify.connector_strategies import connector_cases, connector_workloads
from kvverify.hypothesis_hooks import given
from kvverify.invariants.base import Violation, assert_no_violations
from kvverify.invariants.release import check_pool_whole, check_released
from kvverify.props.connector import chunked_local_misaligned, pool_tokens
from kvverify.props.known import check_or_known
from kvverify.props.recorder import recorded
from kvverify.reference.connector import ConnectorScript
from kvverify.reference.driver import SchedulerLike, WorkloadResult, WorkloadSpec
from kvverify.reference.planner import StartupPlan
from kvverify.strategies import StartupCase, fine_hash_cases, startup_cases, workloads
from kvverify.targets.base import Capability, Target, require_capability


@dataclass(frozen=True)
class AbortPlan:
    """When clients disconnect: ``at_step`` (``{step: ids}``, after that engine step; an id may
    not have arrived or may have ended: the abort skips it) and ``after_running``
    (``{id: k}``, after the k-th step that leaves the request running: mid-prefill or decoding,
    whatever the global step)."""

    at_step: dict[int, list[str]]
    after_running: dict[str, int]

    def due(self, step: int, running: Sequence[str], seen: dict[str, int]) -> list[str]:
        """The ids to abort after ``step`` (``seen`` counts each request's running steps)."""
        due = list(self.at_step.get(step, ()))
        for rid in running:
            seen[rid] = seen.get(rid, 0) + 1
            if self.after_running.get(rid) == seen[rid]:
                due.append(rid)
        return list(dict.fromkeys(due))


@st.composite
def abort_schedules(draw: Any, request_ids: Sequence[str], *, max_step: int = 40) -> AbortPlan:
    """An :class:`AbortPlan` with at least one abort; global steps early ones first (most runs are
    short). Knob: ``max_step``."""
    ids = st.sampled_from(list(request_ids))
    steps = st.one_of(st.integers(1, 3), st.integers(1, max_step))
    at_step = draw(st.dictionaries(steps, st.lists(ids, min_size=1, max_size=3), max_size=3))
    after_running = draw(st.dictionaries(ids, st.integers(1, 4), min_size=0 if at_step else 1, max_size=2))
    return AbortPlan(at_step, after_running)


class _Stop(Exception):
    """Raised from ``on_step`` to end a run at its first violation."""


def release_violations(sched: SchedulerLike, aborts: AbortPlan, *, delayed_frees: bool,
                       run: Callable[[Callable[[SchedulerLike, int], None]], WorkloadResult]) -> list[Violation]:
    """Run (``run(on_step)``) aborting what ``aborts`` says after each step, checking
    :func:`check_released` after every step and abort, :func:`check_pool_whole` at the end."""
    found: list[Violation] = []
    seen: dict[str, int] = {}

    def on_step(s: SchedulerLike, step: int) -> None:
        found.extend(check_released(s, s.finished, step=step, delayed_frees=delayed_frees))
        due = aborts.due(step, [r.request_id for r in s.running], seen)
        if not found and due:
            live = s.requests
            for rid in sorted(set(due) & set(live)):  # what the abort hits (coverage)
                status = live[rid].status
                event(f"abort hits {str(getattr(status, 'name', status)).split('.')[-1]}")
            try:
                s.abort_requests(due)
            except Exception as exc:  # noqa: BLE001 - an abort must not fail: the property's verdict
                found.append(Violation("release.abort_raised", "aborting a request raised",
                                       {"step": step, "requests": due,
                                        "error": f"{type(exc).__name__}: {exc}"}))
            else:
                found.extend(check_released(s, s.finished, step=step, delayed_frees=delayed_frees))
        if found:
            raise _Stop

    try:
        result = run(on_step)
    except _Stop:
        return found
    note(f"steps={result.steps} finished={list(result.finished)} stall={result.stall_reason}")
    if result.completed and not sched.has_unfinished_requests() and not sched.has_pending_external_events():
        found.extend(check_pool_whole(sched))
    return found


@given(case=startup_cases(allow_auto=False, max_len=256), data=st.data())
@recorded
def test_finished_requests_return_their_blocks(target: Target, case: StartupCase, data: Any) -> None:
    """Every finished or aborted request's blocks return to the pool at once; a drained pool is
    whole (no KV connector: nothing may delay a free)."""
    _plain_release(target, case, data)


@given(case=fine_hash_cases(), data=st.data())
@recorded
def test_fine_grained_prefix_hits_return_their_blocks(target: Target, case: StartupCase, data: Any) -> None:
    """The same with hashes finer than the block and prompts that continue earlier ones: a hit on
    a cached partial tail block is copied on write, both copy endpoints are retained until the
    copy has run (``take_kv_cache_block_copies``) and must then come back; a drained pool is whole."""
    _plain_release(target, case, data, turns=True)


def _plain_release(target: Target, case: StartupCase, data: Any, *, turns: bool = False) -> None:
    require_capability(target, Capability.SCHEDULER)
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.starts and plan.vllm_config.max_model_len >= 2)
    # finding F7's deployments (a prefix-cached chunked-local group whose block size differs from
    # the cache-hit alignment) assert on the first lookup: left to F7's own strict known failure,
    # as the connector properties leave them
    assume(not chunked_local_misaligned(plan))
    workload = data.draw(workloads(plan.vllm_config.max_model_len, turns=turns), label="workload")
    aborts = data.draw(abort_schedules([w.request_id for w in workload]), label="aborts")
    sched = target.scheduler(plan)
    assert_no_violations(release_violations(
        sched, aborts, delayed_frees=False,
        run=lambda on_step: target.run_workload(plan, workload, scheduler=sched, on_step=on_step)))


def connector_release_violations(target: Target, plan: StartupPlan, workload: Sequence[WorkloadSpec],
                                 script: ConnectorScript | None, aborts: AbortPlan) -> list[Violation]:
    """:func:`release_violations` through the connector scheduler (delayed frees allowed while
    a connector is on)."""
    sched = target.connector_scheduler(plan, script)
    return release_violations(sched, aborts, delayed_frees=script is not None, run=lambda on_step: (
        target.run_connector_workload(plan, workload, script, scheduler=sched, on_step=on_step)))


@given(case=connector_cases(), data=st.data())
@recorded
def test_connector_finished_requests_return_their_blocks(target: Target, case: StartupCase, data: Any) -> None:
    """The same through the KV-transfer paths: aborts of loading, parked and in-flight requests,
    delayed frees that end with the send, fenced frees behind a batch in flight."""
    _connector_release(target, case, data)


def _connector_release(target: Target, case: StartupCase, data: Any) -> None:
    require_capability(target, Capability.KV_CONNECTOR)
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.starts and plan.groups and plan.vllm_config.max_model_len >= 2)
    cfg = plan.vllm_config
    workload, script = data.draw(connector_workloads(cfg.max_model_len, cfg.block_size, pool_tokens=pool_tokens(plan)),
                                 label="connector_workload")
    aborts = data.draw(abort_schedules([w.request_id for w in workload]), label="aborts")
    note(f"connector={cfg.kv_connector} batches={cfg.max_concurrent_batches} script={script}")
    on = script if cfg.kv_connector else None
    check_or_known(target, lambda t: connector_release_violations(
        t, t.plan(case.vllm_config, case.kv_cache_specs, case.available_memory), workload, on, aborts))


@given(case=connector_cases(batches=(2,), connector_off=False), data=st.data())
@recorded
def test_aborts_behind_batches_in_flight_return_their_blocks(target: Target, case: StartupCase, data: Any) -> None:
    """Two batches in flight with a connector on (pipeline parallelism, async scheduling): a
    consumer's frees of requests in a batch still running are fenced (``pop_blocks_for_free``,
    ``deferred_frees``); they must still come back, to the block, once the batch is processed."""
    _connector_release(target, case, data)


__all__ = ["AbortPlan", "abort_schedules", "connector_release_violations", "release_violations",
           "test_aborts_behind_batches_in_flight_return_their_blocks",
           "test_connector_finished_requests_return_their_blocks", "test_finished_requests_return_their_blocks",
           "test_fine_grained_prefix_hits_return_their_blocks"]
