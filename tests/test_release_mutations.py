"""Block conservation across finish and abort (``properties/test_release.py``), each check seen
to fail on a planted mutation of the reference's free paths (issue 27, item 4), and the
reference's abort itself (``Scheduler.abort_requests``)."""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings

from kvverify.hypothesis_hooks import rebuild
from kvverify.reference.driver import WorkloadSpec, run_workload
from kvverify.reference.managers import coordinator as coordinator_module
from kvverify.reference.request import RequestStatus
from kvverify.reference.sched import fences as fences_module
from kvverify.reference.scheduler import Scheduler
from kvverify.reference.workloads import full_length_request
from kvverify.targets import get_target
from kvverify.targets.conformance import probe_config, probe_specs

QUICK = settings(max_examples=200, derandomize=True, database=None, deadline=None,
                 suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                 phases=[Phase.explicit, Phase.generate])  # detection only: no shrinking


def _planted(owner: type, name: str, old: str, new: str) -> Any:
    """``owner.name`` with ``old`` replaced by ``new`` once, compiled in its own module."""
    method = getattr(owner, name)
    module = inspect.getmodule(method)
    src = textwrap.dedent(inspect.getsource(method))
    assert src.count(old) == 1, f"{old!r} not once in {owner.__name__}.{name}"
    namespace: dict[str, Any] = {}
    exec(compile(src.replace(old, new), f"<planted {name}>", "exec"), vars(module), namespace)
    return namespace[name]


def _fails(prop: Any) -> str:
    with pytest.raises(AssertionError) as info:
        rebuild(prop, settings=QUICK)(target=get_target("reference"))
    return str(info.value)


def _plain() -> Any:
    from kvverify.props.release import test_finished_requests_return_their_blocks
    return test_finished_requests_return_their_blocks


def _connector() -> Any:
    from kvverify.props.release import test_connector_finished_requests_return_their_blocks
    return test_connector_finished_requests_return_their_blocks


def _fine() -> Any:
    from kvverify.props.release import test_fine_grained_prefix_hits_return_their_blocks
    return test_fine_grained_prefix_hits_return_their_blocks


@pytest.mark.parametrize("prop", [_plain, _fine], ids=["plain", "fine_grained_hashes"])
def test_free_that_forgets_the_request_but_not_its_blocks(monkeypatch: pytest.MonkeyPatch, prop: Any) -> None:
    """``_free_blocks`` drops the request without freeing: its blocks are held by nobody known
    (also on the hybrid layouts hashed finer than the block: the check is live there too; the
    copy-on-write leak itself is upstream's path only, killed as an engine mutant,
    ``docs/mutation.md``)."""
    monkeypatch.setattr(Scheduler, "_free_blocks", _planted(
        Scheduler, "_free_blocks", "self.fences.free_request_blocks(self.kv_cache_manager, request)\n", "\n"))
    assert "release.forgotten_holds_blocks" in _fails(prop())


def test_abort_that_never_frees(monkeypatch: pytest.MonkeyPatch) -> None:
    """``finish_requests`` treats every abort as a delayed free (no connector will ever free it)."""
    monkeypatch.setattr(Scheduler, "finish_requests", _planted(
        Scheduler, "finish_requests", "delay_free_blocks=delay)", "delay_free_blocks=True)"))
    assert "release.finished_kept" in _fails(_plain())


def test_abort_that_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's ``request.status = None`` survivor planted in the reference: the status is lost and
    ``_free_request``'s ``assert request.is_finished()`` (upstream's too) raises from the abort."""
    monkeypatch.setattr(Scheduler, "finish_requests", _planted(
        Scheduler, "finish_requests", "request.status = finished_status", "request.status = None"))
    assert "release.abort_raised" in _fails(_plain())


def test_fenced_free_of_the_wrong_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's surviving ``pop_blocks_for_free(None)`` planted in the reference's coordinator: a
    free fenced behind a batch in flight pops nothing, the request is forgotten with its blocks.
    Only the connector generator reaches it (two batches in flight, a consumer connector)."""
    Coordinator = coordinator_module.KVCacheCoordinator
    monkeypatch.setattr(Coordinator, "pop_blocks_for_free", _planted(
        Coordinator, "pop_blocks_for_free", "pop_blocks_for_free(request_id)", "pop_blocks_for_free(None)"))
    assert "release.forgotten_holds_blocks" in _fails(_connector())
    rebuild(_plain(), settings=QUICK)(target=get_target("reference"))  # no fence without a connector


def test_fence_never_drained(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fenced free that is never returned to the pool: the drained pool is not whole."""
    Fence = fences_module.BlockFreeFence
    monkeypatch.setattr(Fence, "step_processed", _planted(
        Fence, "step_processed", "block_pool.free_blocks(reversed(blocks))", "pass"))
    assert "release.pool_not_whole" in _fails(_connector())


def test_reference_abort_frees_at_once_and_skips_unknown_ids() -> None:
    """``abort_requests`` mirrors ``EngineCore.abort_requests``: the aborted ids (not the unknown,
    not the already finished), each ``FINISHED_ABORTED``, freed and forgotten at once."""
    plan = get_target("reference").plan(probe_config(), [probe_specs()])
    sched = Scheduler(plan.vllm_config, plan.kv_cache_config)
    a, b = full_length_request(64, 2).to_request(), WorkloadSpec("b", tuple(range(100, 140)), 8).to_request()
    sched.add_request(a)
    sched.add_request(b)
    sched.step()
    assert sched.kv_cache_manager.num_held_blocks("b") > 0
    assert sched.abort_requests(["b", "nobody", "b"]) == ["b"]
    assert b.status is RequestStatus.FINISHED_ABORTED and b.is_finished()
    assert "b" not in sched.requests and "b" in sched.finished and sched.kv_cache_manager.num_held_blocks("b") == 0
    assert sched.abort_requests(["b"]) == []
    result = run_workload(plan.vllm_config, plan.kv_cache_config, [], scheduler=sched)
    assert result.completed and result.free_blocks == plan.num_blocks - 1


def test_aborting_every_request_leaves_nothing_to_run() -> None:
    plan = get_target("reference").plan(probe_config(), [probe_specs()])
    sched = Scheduler(plan.vllm_config, plan.kv_cache_config)
    work = [WorkloadSpec(f"r{i}", tuple(range(10 * i, 10 * i + 20)), 30) for i in range(3)]

    def abort_all(s: Any, step: int) -> None:
        if step == 2:
            s.abort_requests([w.request_id for w in work])

    result = run_workload(plan.vllm_config, plan.kv_cache_config, work, scheduler=sched, on_step=abort_all)
    assert result.completed and result.steps == 2 and set(result.finished) == {"r0", "r1", "r2"}
    assert result.free_blocks == plan.num_blocks - 1 and not sched.requests
