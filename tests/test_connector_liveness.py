"""The KV-transfer paths: the scripted connector, the driver's view of pending transfers, and the
new invariants each seen to fail on a planted mutation (issue 29).

* the connector state machine answers and times transfers as documented;
* a load slower than the progress window is no stall; a landed load never promoted is one;
* request-slot conservation catches a scan that loses or duplicates a request;
* the reservation check catches an ``allocate_slots`` that ignores ``reserved_blocks``.
"""

from __future__ import annotations

import inspect
import textwrap

import pytest
from hypothesis import HealthCheck, Phase, settings

from kvverify import flaws
from kvverify.hypothesis_hooks import rebuild
from kvverify.reference.config import VllmConfig
from kvverify.reference.connector import ConnectorMeta, ConnectorScript, RequestScript, ScriptedConnectorState
from kvverify.reference.driver import WorkloadSpec, run_workload, state_fingerprint
from kvverify.reference.planner import plan_kv_cache
from kvverify.reference.scheduler import Scheduler
from kvverify.reference.specs import FullAttentionSpec
from kvverify.targets import get_target

QUICK = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                 suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                 phases=[Phase.explicit, Phase.generate])


def _plan(num_blocks: int, max_model_len: int = 256, **kw):
    cfg = VllmConfig(block_size=16, max_model_len=max_model_len, max_num_batched_tokens=2048,
                     num_gpu_blocks_override=num_blocks, kv_connector=True, **kw)
    return plan_kv_cache(cfg, [{"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)}])


# ------------------------------------------------------------------ the connector

def test_scripted_connector_answers_and_times_transfers() -> None:
    state = ScriptedConnectorState(ConnectorScript.of({
        "a": RequestScript(hit_tokens=32, load_steps=2, deferrals=1, free_delay_steps=1),
        "s": RequestScript(hit_tokens=40, load_steps=0)}))
    assert state.get_num_new_matched_tokens("a", 48, 0) == (None, False)  # one deferral
    assert state.has_pending_work()  # it will answer otherwise next time
    assert state.get_num_new_matched_tokens("a", 48, 16) == (16, True)  # beyond the local hit
    assert state.get_num_new_matched_tokens("s", 40, 0) == (39, False)  # sync: leave the last token
    assert state.get_num_new_matched_tokens("x", 40, 0) == (0, False)  # no script, no hit
    state.update_state_after_alloc("a", 16)
    meta = state.build_connector_meta()
    assert meta == ConnectorMeta(loads=("a",)) and state.build_connector_meta() == ConnectorMeta()
    assert state.worker_step(meta).empty  # 2 steps: not after the first
    assert state.worker_step(ConnectorMeta()).finished_recving == {"a"}
    assert not state.has_pending_work()
    assert state.request_finished("a") is True and not state.request_finished("a", length_capped=False)
    sent = state.worker_step(state.build_connector_meta())
    assert sent.finished_sending == {"a"}


def test_failed_load_loses_the_external_copy() -> None:
    state = ScriptedConnectorState(ConnectorScript.of({"a": RequestScript(hit_tokens=32, fail_load=True)}))
    assert state.get_num_new_matched_tokens("a", 48, 0) == (32, True)
    state.update_state_after_alloc("a", 32)
    got = state.worker_step(state.build_connector_meta())
    assert got.finished_recving == got.failed_recving == {"a"}
    assert state.get_num_new_matched_tokens("a", 48, 0) == (0, False)


def test_connector_state_clamps_the_query_count() -> None:
    """Asked again and again past its deferrals, a request is not a new state each time."""
    state = ScriptedConnectorState(ConnectorScript.of({"a": RequestScript(deferrals=1)}))
    seen = set()
    for _ in range(5):
        state.get_num_new_matched_tokens("a", 8, 0)
        seen.add(state.state())
    assert len(seen) == 2


# ------------------------------------------------------------------ the driver

def test_a_load_slower_than_the_progress_window_is_not_a_stall() -> None:
    plan = _plan(17)
    work = [WorkloadSpec("a", tuple(range(100)), 2)]
    script = ConnectorScript.of({"a": RequestScript(hit_tokens=64, load_steps=60)})
    result = run_workload(plan.vllm_config, plan.kv_cache_config, work, connector=script, progress_window=4)
    assert result.completed and result.steps > 60, result


def test_the_load_countdown_is_part_of_the_fingerprint() -> None:
    plan = _plan(17)
    sched = Scheduler(plan.vllm_config, plan.kv_cache_config,
                      connector=ConnectorScript.of({"a": RequestScript(hit_tokens=64, load_steps=5)}))
    sched.add_request(WorkloadSpec("a", tuple(range(100)), 2).to_request())
    prints = []
    for _ in range(4):
        sched.step()
        prints.append(state_fingerprint(sched))
        assert sched.has_pending_external_events()
    assert len(set(prints)) == 4  # the request waits, but the countdown moves


def test_a_landed_load_never_promoted_is_a_stall() -> None:
    """#45388's shape under its flaw: both loads land, the head cannot fit its prefill, the
    other is never tried: no verdict while the loads are in flight, ``no_progress`` after."""
    plan = _plan(21)
    work = [WorkloadSpec("a", tuple(range(239)), 1), WorkloadSpec("b", tuple(range(1000, 1159)), 1)]
    script = ConnectorScript.of({"a": RequestScript(hit_tokens=128, load_steps=2),
                                 "b": RequestScript(hit_tokens=128, load_steps=2)})
    assert run_workload(plan.vllm_config, plan.kv_cache_config, work, connector=script).completed
    with flaws.enabled("async_load_unreserved"):
        stalled = run_workload(plan.vllm_config, plan.kv_cache_config, work, connector=script)
    assert stalled.stall_reason == "no_progress" and stalled.running == 0 and stalled.waiting == 2


# ------------------------------------------------------------------ planted mutations

def _planted(name: str, old: str, new: str):
    method = getattr(Scheduler, name)
    module = inspect.getmodule(method)
    src = textwrap.dedent(inspect.getsource(method))
    assert src.count(old) == 1, f"{old!r} not once in {name}"
    namespace: dict = {}
    exec(compile(src.replace(old, new), f"<planted {name}>", "exec"), vars(module), namespace)
    return namespace[name]


def _fails(prop) -> str:
    with pytest.raises(AssertionError) as info:
        rebuild(prop, settings=QUICK)(target=get_target("reference"))
    return str(info.value)


@pytest.mark.parametrize("old, new, violation", [
    # a skipped request is dropped instead of re-queued: it waits nowhere
    ("    if step_skipped_waiting:\n        rq.prepend_requests(self.waiting, step_skipped_waiting, key)",
     "    pass", "slots."),
    # an admitted request joins running but stays queued (it finishes and is freed while queued)
    ("        queue.popleft()\n        self.deferred_waiting.discard",
     "        self.deferred_waiting.discard", "slots."),
])
def test_request_slots_catch_a_lost_or_duplicated_request(monkeypatch, old, new, violation) -> None:
    from kvverify.props.connector import test_request_slots_conserved as prop

    monkeypatch.setattr(Scheduler, "_schedule_waiting", _planted("_schedule_waiting", old, new))
    assert violation in _fails(prop)


def test_reservation_check_catches_an_allocator_ignoring_reserved_blocks(monkeypatch) -> None:
    """``allocate_slots``'s per-step check with ``reserved_blocks`` dropped admits a load into
    the blocks it must leave to other in-flight prefills."""
    from kvverify.props.connector import test_connector_predictor_equals_allocator as prop
    from kvverify.reference import kv_cache_manager as kvm_module

    src = textwrap.dedent(inspect.getsource(kvm_module.KVCacheManager.allocate_slots))
    old = "pool.get_num_free_blocks() - reserved_blocks"
    assert src.count(old) == 1
    namespace: dict = {}
    exec(compile(src.replace(old, "pool.get_num_free_blocks()"), "<planted allocate_slots>", "exec"),
         vars(kvm_module), namespace)
    monkeypatch.setattr(kvm_module.KVCacheManager, "allocate_slots", namespace["allocate_slots"])
    assert "reservation.eaten" in _fails(prop)


def test_reservation_need_catches_a_gate_that_undercounts_the_speculative_step(monkeypatch) -> None:
    """The async-load gate's reservation must cover what the other in-flight prefills still need,
    their first speculative step included: the engine mutant that survived the other connector
    properties (``_request_remaining_blocks``: ``1 + num_spec_tokens`` -> ``1 - num_spec_tokens``),
    planted in the reference, is seen by ``reservation.short_of_inflight_need``."""
    from kvverify.props.connector import test_connector_predictor_equals_allocator as prop
    from kvverify.reference.sched.kv_transfer import KVTransfer

    method = KVTransfer._request_remaining_blocks
    src = textwrap.dedent(inspect.getsource(method))
    old = "num_tokens += self.num_spec_step_tokens"
    assert src.count(old) == 1
    namespace: dict = {}
    exec(compile(src.replace(old, "num_tokens += 1 - self.num_spec_tokens + self.num_lookahead_tokens"),
                 "<planted _request_remaining_blocks>", "exec"), vars(inspect.getmodule(method)), namespace)
    monkeypatch.setattr(KVTransfer, "_request_remaining_blocks", namespace["_request_remaining_blocks"])
    assert "reservation.short_of_inflight_need" in _fails(prop)


@pytest.mark.parametrize("flaw", ["async_load_unreserved", "spec_blocks_unreserved_after_load"])
def test_reservation_need_catches_the_unreserved_gates(flaw) -> None:
    """#45388's gate missing and #57104's speculative step left out of the other loads' need."""
    from kvverify.props.connector import test_connector_predictor_equals_allocator as prop

    with flaws.enabled(flaw):
        assert "reservation.short_of_inflight_need" in _fails(prop)


def test_reservation_need_falls_back_to_the_parked_loads_before_the_gate() -> None:
    """A release without ``_inflight_prefills`` (before #44560: 0.18, 0.19) is judged on its parked
    loads; the request being admitted is never its own need, and the speculative step is counted."""
    from types import SimpleNamespace

    from kvverify.invariants.reservations import InflightNeedRecorder, check_reservation_covers_inflight

    asked: list[tuple[str, int]] = []

    class Release:  # no in-flight set; r0 parked (a load in flight), r1 running, r2 being admitted
        requests = {"r0": SimpleNamespace(status="WAITING_FOR_REMOTE_KVS", num_tokens=40),
                    "r1": SimpleNamespace(status="RUNNING", num_tokens=40),
                    "r2": SimpleNamespace(status="WAITING_FOR_REMOTE_KVS", num_tokens=40)}
        kv_cache_manager = SimpleNamespace(allocate_slots=lambda request, *a, **k: "blocks")

        def inflight_prefill_ids(self):
            return None

        def num_blocks_to_hold(self, request_id, num_tokens):
            asked.append((request_id, num_tokens))
            return 1

    release = Release()
    rec = InflightNeedRecorder(release, max_model_len=32, num_speculative_tokens=1, num_lookahead_tokens=1)
    admit = release.kv_cache_manager.allocate_slots
    assert admit(SimpleNamespace(request_id="r2"), 16, delay_cache_blocks=True, reserved_blocks=0) == "blocks"
    assert admit(SimpleNamespace(request_id="r1"), 16) == "blocks"  # not a load: not judged
    assert asked == [("r0", 32 + 3)]  # min(40, L) + 1 + 1 draft + 1 lookahead
    (v,) = check_reservation_covers_inflight(rec.admissions)
    assert v.name == "reservation.short_of_inflight_need" and v.evidence["needs"] == {"r0": 1}
    rec.admissions[:] = [type(rec.admissions[0])("r2", 1, (("r0", 1),))]
    assert check_reservation_covers_inflight(rec.admissions) == []  # enough: a lower bound, not a formula
