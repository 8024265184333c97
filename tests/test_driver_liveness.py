"""Liveness by progress (issue 15): the driver's stall verdicts and the scheduling-policy knob.

A stall is a state that returns with no output token in between (or a fixed point), never
a step count: a slow but live run completes whatever ``progress_window`` is, and an
endless preempt/re-prefill cycle is still reported.
"""

from __future__ import annotations

import pytest
from runtime_helpers import chunked, full, kv_config

from kvverify.errors import ConfigError
from kvverify.reference import driver
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec, run_workload, state_fingerprint
from kvverify.reference.planner import plan_kv_cache
from kvverify.reference.request import Request
from kvverify.reference.scheduler import Scheduler, scheduling_policy_override


def config(**kw) -> VllmConfig:
    return VllmConfig(**{"block_size": 16, "max_model_len": 512, "max_num_batched_tokens": 512, **kw})


def spec(rid: str, prompt: int, max_tokens: int, arrival: int = 0, offset: int = 0, priority: int = 0):
    return WorkloadSpec(rid, tuple(range(offset, offset + prompt)), max_tokens, arrival, priority=priority)


def livelock_plan():
    """Finding F4's endless preempt/re-prefill loop (chunked-local cap ignores lookahead)."""
    vc = VllmConfig(block_size=32, max_model_len=512, max_num_batched_tokens=8, num_lookahead_tokens=1,
                    num_gpu_blocks_override=2, enable_prefix_caching=False)
    return plan_kv_cache(vc, [{"layer.0": chunked(16, 32)}])


@pytest.mark.parametrize("window", [1, 2, 5])
def test_slow_live_run_is_not_a_stall_whatever_the_window(window: int) -> None:
    """A long chunked prefill (8 tokens a step, no output for ~60 steps) and preemptions:
    with a window far below that, the old step-budget verdict said ``no_progress``."""
    work = [spec("a", 480, 20), spec("b", 300, 100, offset=1000)]
    result = run_workload(config(max_num_batched_tokens=8), kv_config(40, full(16)), work,
                          progress_window=window, full_sequence_must_fit=False)
    assert result.completed and set(result.finished) == {"a", "b"}
    assert result.preemptions > 0  # a tight pool: really a slow, preempting run


@pytest.mark.parametrize("window", [1, 50, None])
def test_endless_preempt_cycle_is_a_stall_whatever_the_window(window: int | None) -> None:
    plan = livelock_plan()
    result = run_workload(plan.vllm_config, plan.kv_cache_config, [spec("r", 100, 50)],
                          progress_window=window)
    assert result.stalled and result.stall_reason == "no_progress"
    assert result.finished == () and result.preemptions >= 2


def test_cycle_needs_state_repeats_sightings() -> None:
    """More sightings asked = more steps before the verdict; the verdict itself is the same."""
    plan = livelock_plan()
    few = run_workload(plan.vllm_config, plan.kv_cache_config, [spec("r", 100, 50)], progress_window=1,
                       state_repeats=2)
    more = run_workload(plan.vllm_config, plan.kv_cache_config, [spec("r", 100, 50)], progress_window=1,
                        state_repeats=4)
    assert few.stall_reason == more.stall_reason == "no_progress"
    assert few.steps < more.steps
    with pytest.raises(ConfigError, match="state_repeats"):
        run_workload(plan.vllm_config, plan.kv_cache_config, [spec("r", 100, 50)], state_repeats=1)


def test_no_step_budget_unless_asked() -> None:
    """No default ``max_steps``; a caller's budget is reported as such."""
    work = [spec("r", 100, 50)]
    assert run_workload(config(max_num_batched_tokens=1), kv_config(40, full(16)), work).completed
    capped = run_workload(config(), kv_config(40, full(16)), work, max_steps=10)
    assert capped.stalled and capped.stall_reason == "max_steps" and capped.steps == 10


def test_a_blind_fingerprint_would_cry_wolf(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted mutation: a fingerprint that ignores the requests' progress sees a
    'repeated state' in a live run (the guard against a too-coarse fingerprint)."""
    work = [spec("a", 480, 20)]
    kw = dict(progress_window=1)
    assert run_workload(config(max_num_batched_tokens=8), kv_config(40, full(16)), work, **kw).completed
    monkeypatch.setattr(driver, "state_fingerprint", lambda sched: len(sched.running))
    blind = run_workload(config(max_num_batched_tokens=8), kv_config(40, full(16)), work, **kw)
    assert blind.stalled and blind.stall_reason == "no_progress"


def test_a_transfer_never_reported_ends_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request finished, but an external event stays pending forever (on vLLM 0.19.1 a
    finished request's delayed free whose send was never reported): the state returns, so the
    run ends as ``pending_transfer`` instead of looping until memory runs out (it did: 18 million
    steps, 22 GB). ``max_steps`` is only this test's safety net against that old loop."""
    monkeypatch.setattr(Scheduler, "has_pending_external_events", lambda self: True)
    result = run_workload(config(), kv_config(8, full(16)), [spec("a", 20, 2)], max_steps=100_000)
    assert result.finished == ("a",) and result.stalled and result.stall_reason == "pending_transfer"
    assert result.steps < 1_000


def test_an_idle_stall_is_seen_without_waiting_out_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token budget of 1 and a long ``max_model_len`` make the progress window long (a live
    prefill may go that many steps without a token). A run that sits idle (nothing scheduled,
    preempted or finished) while an event stays pending is fingerprinted at once, so its
    verdict comes after ``state_repeats`` idle steps, not after the window: the connector
    properties' stalls used to spend 1,155 steps each here (84% of one property's steps)."""
    monkeypatch.setattr(Scheduler, "has_pending_external_events", lambda self: True)
    cfg = config(max_model_len=4096, max_num_batched_tokens=1)
    window = driver._default_progress_window(1, cfg.max_model_len, cfg.max_num_batched_tokens)
    result = run_workload(cfg, kv_config(300, full(16)), [spec("a", 3, 1)])
    assert result.finished == ("a",) and result.stall_reason == "pending_transfer"
    assert result.steps <= 3 + 3, (result.steps, window)  # 3 prefill steps, then 3 idle sightings
    assert window > 10 * result.steps


@pytest.mark.parametrize("window", [1, 2])
def test_the_backstop_is_no_step_budget_for_a_slow_live_run(window: int) -> None:
    """A prefill of 480 tokens at 2 a step: 240 steps without an output token, far more than
    ``UNBOUNDED_WINDOWS`` of a caller's tiny window. The backstop scales with the workload's own
    window (what a live policy needs per token), never with the caller's: the run completes."""
    work = [spec("a", 480, 3)]
    result = run_workload(config(max_num_batched_tokens=2), kv_config(40, full(16)), work, progress_window=window)
    assert result.completed and result.finished == ("a",), result.stall_reason


def test_a_state_that_never_returns_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backstop: a target leaking state into what the fingerprint reads never repeats a
    state; after ``UNBOUNDED_WINDOWS`` progress windows without an output token the run ends as
    ``unbounded`` (F4's endless preempt cycle, its fingerprint made unique per step)."""
    counter = iter(range(10**9))
    monkeypatch.setattr(driver, "state_fingerprint", lambda sched: next(counter))
    plan = livelock_plan()
    own = driver._default_progress_window(1, plan.vllm_config.max_model_len,
                                          plan.vllm_config.max_num_batched_tokens)
    result = run_workload(plan.vllm_config, plan.kv_cache_config, [spec("r", 100, 50)], progress_window=3,
                          max_steps=100_000)
    assert result.stalled and result.stall_reason == "unbounded"
    assert result.steps == driver.UNBOUNDED_WINDOWS * max(3, own)


def test_fingerprint_reads_pool_order_and_progress() -> None:
    s = Scheduler(config(), kv_config(8, full(16)))
    s.add_request(Request("a", list(range(40)), 4))
    before = state_fingerprint(s)
    s.step()
    after = state_fingerprint(s)
    assert before != after
    t = Scheduler(config(), kv_config(8, full(16)))
    t.add_request(Request("a", list(range(40)), 4))
    assert state_fingerprint(t) == before  # deterministic: the same state, the same value
    pool = t.kv_cache_manager.block_pool
    blocks = pool.get_new_blocks(2)
    pool.free_blocks(reversed(blocks))  # same blocks free, another free-queue order
    assert state_fingerprint(t) != before


# --- the scheduling-policy knob (upstream SchedulerConfig.policy) ----------------------------


def tight(policy: str) -> Scheduler:
    s = Scheduler(config(scheduling_policy=policy), kv_config(5, full(16)), full_sequence_must_fit=False)
    s.add_request(Request("a", list(range(16)), 40, priority=1))
    s.add_request(Request("b", list(range(100, 116)), 40, priority=0))
    return s


def first_preemption(s: Scheduler) -> tuple[list[str], list[str]]:
    for _ in range(64):
        out, _ = s.step()
        if out.preempted_reqs:
            return out.preempted_reqs, [r.request_id for r in s.running]
    raise AssertionError("no preemption")


def test_priority_orders_waiting_and_picks_victim() -> None:
    fcfs, prio = tight("fcfs"), tight("priority")
    assert [r.request_id for r in fcfs.waiting] == ["a", "b"]
    assert [r.request_id for r in prio.waiting] == ["b", "a"]  # lower priority value first
    assert first_preemption(fcfs) == (["b"], ["a"])  # FCFS: the last running
    assert first_preemption(prio) == (["a"], ["b"])  # priority: the largest (priority, arrival)
    assert [r.request_id for r in prio.waiting] == ["a"]


def test_fewest_computed_victim_and_override() -> None:
    with scheduling_policy_override("fcfs_fewest_computed_victim"):
        s = tight("fcfs")
    assert s.policy == "fcfs_fewest_computed_victim"
    victims, running = first_preemption(s)
    assert len(victims) == 1 and running and victims[0] not in running
    with pytest.raises(ConfigError, match="scheduling_policy"):
        with scheduling_policy_override("lifo"):
            pass
    with pytest.raises(ConfigError, match="scheduling_policy"):
        config(scheduling_policy="lifo")


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_policies_finish_the_same_requests(policy: str) -> None:
    work = [spec(f"r{i}", 60 + 7 * i, 30, arrival=i, offset=1000 * i, priority=(i * 2) % 3) for i in range(5)]
    result = run_workload(config(scheduling_policy=policy, max_num_batched_tokens=32), kv_config(14, full(16)),
                          work)
    assert result.completed and sorted(result.finished) == [f"r{i}" for i in range(5)]
