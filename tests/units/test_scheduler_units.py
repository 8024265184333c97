"""Exact examples of the scheduler's queue policies (docs/mutation.md).

Upstream ``priority`` (``SchedulerConfig.policy``, ``PriorityRequestQueue``, the victim in
``Scheduler.schedule``) and the legitimate variant ``fcfs_fewest_computed_victim`` of
``tests/test_alternative_policies.py``: the properties run under these policies there, but
that file is left out of the mutation selection (it doubles what a survivor costs), so the
policies' rules are pinned here, worked by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime_helpers import full, kv_config  # noqa: E402

from kvverify.errors import ConfigError  # noqa: E402
from kvverify.reference.config import VllmConfig  # noqa: E402
from kvverify.reference.request import Request, RequestStatus  # noqa: E402
from kvverify.reference.scheduler import (  # noqa: E402
    Scheduler,
    mamba_prefill_checkpoint_position,
    scheduling_policy_override,
)


def make(policy: str, num_blocks: int = 40, **kw) -> Scheduler:
    base = dict(block_size=4, max_model_len=64, max_num_batched_tokens=64, scheduling_policy="fcfs")
    base.update(kw)
    with scheduling_policy_override(policy):
        return Scheduler(VllmConfig(**base), kv_config(num_blocks, full(4)))


def add(sched: Scheduler, rid: str, prompt: int, priority: int = 0, offset: int = 0) -> Request:
    r = Request(rid, list(range(offset, offset + prompt)), 20, priority=priority)
    sched.add_request(r)
    return r


def test_priority_waiting_queue_order() -> None:
    """``Request.__lt__``: (priority, arrival, request_id); lower priority value first."""
    sched = make("priority")
    for rid, prio in (("a", 2), ("b", 0), ("c", 1), ("d", 0), ("e", 2)):
        add(sched, rid, 3, prio, offset=100 * ord(rid))
    assert [r.request_id for r in sched.waiting] == ["b", "d", "c", "a", "e"]
    assert sched.policy == "priority"


def test_fcfs_and_variant_keep_arrival_order() -> None:
    for policy in ("fcfs", "fcfs_fewest_computed_victim"):
        sched = make(policy)
        for rid, prio in (("a", 2), ("b", 0), ("c", 1)):
            add(sched, rid, 3, prio, offset=100 * ord(rid))
        assert [r.request_id for r in sched.waiting] == ["a", "b", "c"], policy


def _running(sched: Scheduler, computed: dict[str, int]) -> None:
    sched.running = [sched.waiting.popleft() for _ in range(len(sched.waiting))]
    for r in sched.running:
        r.status = RequestStatus.RUNNING
        r.num_computed_tokens = computed[r.request_id]


def test_victim_per_policy() -> None:
    """fcfs: the last running; priority: the largest (priority, arrival); the variant: the
    fewest computed tokens, the latest of equals."""
    computed = {"a": 5, "b": 1, "c": 9, "d": 1}
    prios = {"a": 1, "b": 0, "c": 1, "d": 0}
    expect = {"fcfs": "d", "priority": "c", "fcfs_fewest_computed_victim": "d"}
    for policy, victim in expect.items():
        sched = make(policy)
        for rid in ("a", "b", "c", "d"):
            add(sched, rid, 3, prios[rid], offset=100 * ord(rid))
        _running(sched, computed)
        if policy == "priority":  # the queue sorted them: running order b, d, a, c
            assert [r.request_id for r in sched.running] == ["b", "d", "a", "c"]
        assert sched._select_victim().request_id == victim, policy
    sched = make("fcfs_fewest_computed_victim")
    for rid in ("a", "b", "c"):
        add(sched, rid, 3, offset=100 * ord(rid))
    _running(sched, {"a": 2, "b": 7, "c": 3})
    assert sched._select_victim().request_id == "a"


def test_preempted_request_returns_to_its_place_under_priority() -> None:
    """``PriorityRequestQueue.prepend_request`` re-inserts by key; FCFS puts it at the front."""
    for policy, order in (("priority", ["x", "v", "y"]), ("fcfs", ["v", "x", "y"])):
        sched = make(policy)
        v = add(sched, "v", 3, priority=1, offset=0)
        sched.waiting.popleft()
        sched.running.append(v)
        v.status = RequestStatus.RUNNING
        add(sched, "x", 3, priority=0, offset=100)
        add(sched, "y", 3, priority=2, offset=200)
        sched._preempt_request(v)
        assert [r.request_id for r in sched.waiting] == order, policy
        assert v.status is RequestStatus.PREEMPTED and v.num_computed_tokens == 0
        assert v.num_preemptions == 1 and sched.num_preemptions == 1
        sched.waiting.remove(v)
        sched.running.append(v)
        v.status = RequestStatus.RUNNING
        sched._preempt_request(v)  # the counts add up
        assert v.num_preemptions == 2 and sched.num_preemptions == 2


def test_self_preemption_lets_later_requests_run_under_non_fcfs_policies() -> None:
    """A request whose allocation fails and that is its own victim ends the running pass
    under FCFS (``break``; there it is always the last one) but not under the other policies
    (``continue``): the request after it is still scheduled."""
    scheduled = {}
    for policy in ("fcfs", "priority", "fcfs_fewest_computed_victim"):
        # 4 blocks of 4 tokens, 3 usable (the null block). x: 4 prompt tokens + 1 output,
        # holds 1 block, its 6th token needs a 2nd; y: 7 + 1, holds 2, needs none. No block free.
        sched = make(policy, num_blocks=4, max_model_len=32)
        x = add(sched, "x", 4, priority=2)
        y = add(sched, "y", 7, priority=0, offset=500)
        for r in (x, y):
            sched.waiting.remove(r)
            sched.running.append(r)
            r.status = RequestStatus.RUNNING
            assert sched.kv_cache_manager.allocate_slots(r, r.num_tokens) is not None
            r.num_computed_tokens = r.num_tokens
            r.append_output_token_ids(1)
        assert sched.kv_cache_manager.get_num_free_blocks() == 0
        out = sched.schedule()
        scheduled[policy] = (dict(out.num_scheduled_tokens), list(out.preempted_reqs))
    assert scheduled["fcfs"] == ({"x": 1}, ["y"])  # the last one goes, x gets its block
    assert scheduled["priority"] == ({"y": 1}, ["x"])  # x: largest priority value = victim
    assert scheduled["fcfs_fewest_computed_victim"] == ({"y": 1}, ["x"])  # 4 < 7 computed


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ConfigError, match="scheduling_policy"):
        with scheduling_policy_override("lifo"):
            pass


@pytest.mark.parametrize(("num_tokens", "block_size", "expected"),
                         [(1, 4, 0), (4, 4, 0), (5, 4, 4), (8, 4, 4), (9, 4, 8), (17, 16, 16), (16, 16, 0)])
def test_mamba_prefill_checkpoint_position(num_tokens: int, block_size: int, expected: int) -> None:
    """``get_mamba_prefill_checkpoint_position`` without EAGLE: the last block boundary
    strictly below ``num_tokens`` (the last token is recomputed for its logits)."""
    assert mamba_prefill_checkpoint_position(num_tokens, block_size) == expected
