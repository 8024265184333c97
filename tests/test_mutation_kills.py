"""The invariants added for mutation survivors (issue 15), each seen to fail on a planted mutation.

Every check here closes a blind-spot class of ``docs/mutation.md``: an exact value where
upstream is exact, or the other direction of a guarantee. The faithful reference passes
the same properties (``pytest properties/``).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings

from kvverify.hypothesis_hooks import rebuild
from kvverify.targets import get_target

QUICK = settings(max_examples=150, derandomize=True, database=None, deadline=None,
                 suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                 phases=[Phase.explicit, Phase.generate])


def fails(prop, **kw) -> str:
    with pytest.raises(AssertionError) as info:
        rebuild(prop, settings=QUICK)(target=get_target("reference"), **kw)
    return str(info.value)


@pytest.mark.parametrize("wrong, violation", [
    (lambda s, h: (2 * s, h), "block_sizes.scheduler_least"),  # a common multiple, not the least
    (lambda s, h: (s, 1), "block_sizes.hash_exact"),           # divides everything, needlessly fine
])
def test_block_sizes_exact_in_both_directions(monkeypatch, wrong, violation) -> None:
    import kvverify.targets.reference as inv  # the resolver the reference target answers G3 with
    from kvverify.props.block_sizes import test_resolved_block_sizes_accepted_by_coordinator as prop

    original = inv.resolve_kv_cache_block_sizes
    monkeypatch.setattr(inv, "resolve_kv_cache_block_sizes",
                        lambda kv, vc: wrong(*original(kv, vc)) if len(kv.kv_cache_groups) > 1 else original(kv, vc))
    assert violation in fails(prop)


def _coordinator_property():
    from importlib import import_module

    return import_module("properties.test_coordinator_rejects").test_coordinator_rejects_exactly_the_unservable_sizes


def test_coordinator_rejection_property_catches_a_lax_coordinator(monkeypatch) -> None:
    import kvverify.targets.reference as ref

    prop = _coordinator_property()
    monkeypatch.setattr(ref, "validate_coordinator_block_sizes", lambda *args: None)
    assert "accepted unservable sizes" in fails(prop)


def test_coordinator_rejection_property_catches_a_nameless_refusal(monkeypatch) -> None:
    import kvverify.reference.block_sizes as bs

    prop = _coordinator_property()
    original = bs.validate_coordinator_block_sizes

    def nameless(*args):
        try:
            original(*args)
        except bs.BlockSizeError:
            raise bs.BlockSizeError("invalid") from None

    import kvverify.targets.reference as ref

    monkeypatch.setattr(ref, "validate_coordinator_block_sizes", nameless)
    assert "does not name the sizes" in fails(prop)


def _run_pool_machine() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    from kvverify.props.pool_machine import PoolMachine

    run_state_machine_as_test(PoolMachine, settings=settings(QUICK, max_examples=200, stateful_step_count=20))


def test_pool_usage_is_exact_at_every_step(monkeypatch) -> None:
    """Usage in range but wrong (the null block counted as usable): pool.usage_exact."""
    from kvverify.reference.pool import BlockPool

    monkeypatch.setattr(BlockPool, "get_usage", lambda self: 1.0 - self.get_num_free_blocks() / self.num_gpu_blocks)
    with pytest.raises(AssertionError, match="pool.usage_exact"):
        _run_pool_machine()


def test_block_hashes_are_recomputed_along_the_chain(monkeypatch) -> None:
    """A hasher that forgets the parent hash: every block still hashes, the chain is wrong."""
    import kvverify.reference.pool as pool

    original = pool.hash_block_tokens
    monkeypatch.setattr(pool, "hash_block_tokens", lambda parent, tokens, extra=None: original(None, tokens, extra))
    with pytest.raises(AssertionError, match="recomputed from"):
        _run_pool_machine()


def test_free_queue_order_is_exact(monkeypatch) -> None:
    """Cached blocks returned to the head instead of the tail (MRU evicted first): every
    block is still free exactly once, only the eviction order is wrong."""
    from kvverify.reference.pool import FreeKVCacheBlockQueue

    monkeypatch.setattr(FreeKVCacheBlockQueue, "append_n", FreeKVCacheBlockQueue.prepend_n)
    with pytest.raises(AssertionError, match="pool.free_queue_order"):
        _run_pool_machine()


def _free_in_forward_order(monkeypatch) -> None:
    """A request's blocks freed head-first (upstream frees them reversed,
    ``SingleTypeKVCacheManager.free``), so a cached chain's prefix is evicted before its tail.
    Every block is still freed exactly once."""
    from kvverify.reference.managers.base import SingleTypeKVCacheManager

    def free(self, request_id: str) -> None:
        blocks = self.req_to_blocks.pop(request_id, [])
        self.num_cached_block.pop(request_id, None)
        self.block_pool.free_blocks(list(blocks))

    monkeypatch.setattr(SingleTypeKVCacheManager, "free", free)


def _window_left_to_right(monkeypatch) -> None:
    """Blocks that leave the attention window freed left to right (upstream
    ``_remove_blocks_in_range`` frees right to left); the same blocks, in another order."""
    from kvverify.reference.managers.base import SingleTypeKVCacheManager

    original = SingleTypeKVCacheManager._remove_blocks_in_range

    def remove(self, request_id: str, first_block: int, last_block: int) -> None:
        pool = self.block_pool
        calls: list[list] = []
        real_free = pool.free_blocks
        pool.free_blocks = lambda blocks: calls.append(list(blocks))
        try:
            original(self, request_id, first_block, last_block)
        finally:
            pool.free_blocks = real_free
        for blocks in calls:
            real_free(blocks[::-1])

    monkeypatch.setattr(SingleTypeKVCacheManager, "_remove_blocks_in_range", remove)


class _NoModel:
    """The machine without the free-queue model (what every other check sees)."""

    violations: list = []

    def __init__(self, kv_cache_manager, pool=None) -> None:
        pass


def _without_the_model(monkeypatch) -> None:
    import kvverify.props.pool_machine as pm

    monkeypatch.setattr(pm, "FreeQueueModel", _NoModel)
    monkeypatch.setattr(pm, "check_free_queue", lambda *a, **k: [])


def test_free_order_is_checked_against_an_independent_model(monkeypatch) -> None:
    """Forward-order request frees: the free-queue model (``FreeQueueModel``: upstream's
    order kept from the calls, a request's blocks reversed group by group) catches it."""
    _free_in_forward_order(monkeypatch)
    with pytest.raises(AssertionError, match="pool.free_queue_order"):
        _run_pool_machine()


def test_forward_order_frees_survive_the_checks_without_the_model(monkeypatch) -> None:
    """The same mutation passes every other check of the machine (partition, ref counts, hash
    map, usage, predictor == allocator, the hash chain): only the model sees the order. (The
    relative per-call check it replaced took the order from the manager's own call and let it
    through too: 1,000 derandomized examples, 0 failures.)"""
    _free_in_forward_order(monkeypatch)
    _without_the_model(monkeypatch)
    _run_pool_machine()  # survives


def _swa_decode_run(monkeypatch) -> None:
    """``PoolMachine`` driven by hand: one sliding-window group (B=2, window 4), a 6-token
    request, 16 tokens at once, then one more, so ``allocate_slots`` frees 8 blocks that left
    the window in one call; every check of the machine after every rule. Deterministic, unlike the search
    (whether it reaches a multi-block window eviction within its budget depends on the
    generators)."""
    import kvverify.props.pool_machine as pm
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import KVCacheSpec, SlidingWindowSpec
    from kvverify.strategies import StartupCase

    monkeypatch.setattr(pm, "note", lambda *a: None)  # Hypothesis's note/target need a test context
    monkeypatch.setattr(pm, "hyp_target", lambda *a, **k: None)
    specs: dict[str, KVCacheSpec] = {"l0": SlidingWindowSpec(block_size=2, num_kv_heads=1, head_size=8,
                                                              sliding_window=4)}
    case = StartupCase(VllmConfig(block_size=2, max_model_len=64, num_gpu_blocks_override=16), (specs,),
                       "override", None, 16, 16)
    m = pm.PoolMachine()
    m.setup(case=case)
    req = m.add_request(prompt_len=6, shared=6)
    m.pool_invariants()
    for n in (16, 1):  # the window moves with the computed tokens: 8 blocks leave it at once
        m.append_tokens(req=req, n=n)
        m.pool_invariants()
    m.free(req=req)
    m.pool_invariants()


def test_window_evictions_are_freed_right_to_left(monkeypatch) -> None:
    """Blocks leaving the window freed left to right: caught by the model, and only by it."""
    _swa_decode_run(monkeypatch)  # the faithful reference passes
    _window_left_to_right(monkeypatch)
    with pytest.raises(AssertionError, match="pool.free_queue_order"):
        _swa_decode_run(monkeypatch)
    _without_the_model(monkeypatch)
    _swa_decode_run(monkeypatch)  # survives every other check


def test_eviction_takes_the_front_of_the_free_queue(monkeypatch) -> None:
    """``popleft_n`` taking the tail (MRU first): the blocks handed out are not the model's front."""
    from kvverify.reference.pool import FreeKVCacheBlockQueue

    def pop_tail(self, n: int):
        blocks = list(self)[len(self) - n:] if n else []
        for b in blocks:
            self._unlink(b)
        return blocks

    monkeypatch.setattr(FreeKVCacheBlockQueue, "popleft_n", pop_tail)
    with pytest.raises(AssertionError, match="pool.eviction_order"):
        _run_pool_machine()


def test_a_misspelled_switch_is_an_error_not_silently_off() -> None:
    """Kills the mutants that garble a flaw / fix name at its use (`is_on("XXname")`)."""
    from kvverify import fixes, flaws
    from kvverify.errors import ConfigError

    assert flaws.is_on("null_block_not_reserved") is False
    for switches in (flaws, fixes):
        with pytest.raises(ConfigError):
            switches.is_on("XXnull_block_not_reservedXX")



def _planted_scheduler_method(name: str, old: str, new: str, nth: int = 0):
    """``Scheduler.<name>`` with the ``nth`` occurrence of ``old`` in its source replaced."""
    import inspect
    import textwrap

    import kvverify.reference.scheduler as sm

    method = getattr(sm.Scheduler, name)
    sm = inspect.getmodule(method)  # the module defining it (kvverify.reference.sched.*)
    src = textwrap.dedent(inspect.getsource(method))
    parts = src.split(old)
    assert len(parts) > nth + 1, f"{old!r} occurs fewer than {nth + 1} times"
    src = old.join(parts[:nth + 1]) + new + old.join(parts[nth + 1:])
    namespace: dict = {}
    exec(compile(src, f"<planted {name}>", "exec"), vars(sm), namespace)
    return namespace[name]


@pytest.mark.parametrize("name, old, new, nth, violation", [
    # mutation survivors schedule 77 / 76: the running pass's budget grows / is reset
    ("schedule", "token_budget -= num_new", "token_budget += num_new", 0, "scheduling.token_budget"),
    ("schedule", "token_budget -= num_new", "token_budget = num_new", 0, "scheduling.token_budget"),
    # the same in the waiting pass (several admissions in one step)
    ("_schedule_waiting", "token_budget -= num_new", "token_budget += num_new", 0, "scheduling.token_budget"),
    ("_schedule_waiting", "token_budget -= num_new", "token_budget = num_new", 0, "scheduling.token_budget"),
    ("_schedule_waiting", "if num_running >= self.max_num_running_reqs:",
     "if num_running > self.max_num_running_reqs:", 0, "scheduling.max_num_seqs"),
    # computed tokens run past the request's tokens / a preempted request keeps one
    ("_update_after_schedule", "self.requests[rid].num_computed_tokens += n",
     "self.requests[rid].num_computed_tokens += n + 2 * (n > 1)", 0, "scheduling.token_counts"),
    ("_preempt_request", "request.num_computed_tokens = 0", "request.num_computed_tokens = 1", 0,
     "scheduling.token_counts"),
])
def test_scheduler_step_bounds_are_checked(monkeypatch, name, old, new, nth, violation) -> None:
    """``kvverify.invariants.scheduling`` (run by the predictor == allocator property after every
    step): a step over ``max_num_batched_tokens``, more than ``max_num_seqs`` running requests,
    or computed-token counts past the request's tokens fail it; before it, these planted
    miscounts finished every workload and passed the property."""
    from kvverify.props.runtime import test_predictor_equals_allocator as prop
    from kvverify.reference.scheduler import Scheduler

    monkeypatch.setattr(Scheduler, name, _planted_scheduler_method(name, old, new, nth))
    assert violation in fails(prop)
