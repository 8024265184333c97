"""Guarantee 3, the other direction: the coordinator *rejects* block sizes it cannot serve.

``test_block_sizes.py`` checks that what ``resolve_kv_cache_block_sizes`` returns is
accepted. Here arbitrary (scheduler, hash) pairs around the resolved ones meet upstream's
``KVCacheCoordinator.__init__`` assertions, restated: accepted exactly when both are >= 1,
the scheduler size is a multiple of the hash size and of every group's size, and (prefix
caching on) one group's size equals the hash size or every prefix-cacheable group's size
is divisible by it. The reference's rejection is a ``BlockSizeError`` naming the sizes.
"""

from __future__ import annotations

from hypothesis import assume, event
from hypothesis import strategies as st

from kvverify.hypothesis_hooks import given
from kvverify.reference.block_sizes import BlockSizeError
from kvverify.strategies import BlockSizeCase, StartupCase, block_size_cases, startup_cases
from kvverify.targets.base import Feature, Target, has, require


def _near(value: int, low: int) -> st.SearchStrategy[int]:
    """Around the resolved size; from ``low`` (0 and -1 only where sizes < 1 are in the domain)."""
    return st.one_of(st.sampled_from(tuple(v for v in (value, low, value + 1, max(1, value - 1), 2 * value, 1)
                                           if v >= low)),
                     st.integers(low, 2 * value + 2))


def _accepts(case: BlockSizeCase, scheduler: int, hash_size: int) -> bool:
    groups = case.kv_cache_config.kv_cache_groups
    sizes = [g.kv_cache_spec.block_size for g in groups]
    if scheduler < 1 or hash_size < 1 or scheduler % hash_size or any(scheduler % b for b in sizes):
        return False
    if not case.vllm_config.enable_prefix_caching:
        return True
    if len(groups) == 1:
        return hash_size == sizes[0]
    return not any(g.kv_cache_spec.block_size % hash_size for g in groups if g.kv_cache_spec.prefix_cacheable)


def _check(target: Target, case: BlockSizeCase, data) -> None:
    require(target, Feature.COORDINATOR_BLOCK_SIZES)  # vLLM 0.19 - 0.22: skipped with the reason
    try:
        scheduler, hash_size = target.resolve_block_sizes(case.kv_cache_config, case.vllm_config)
    except BlockSizeError:
        return  # an invalid prefix_match_unit: test_block_sizes.py judges the refusal
    # sizes < 1 never reach upstream's coordinator (it asserts nothing about them); the
    # reference refuses them with a clear error (bad input), so they are drawn for it only
    low = -1 if has(target, Feature.NONPOSITIVE_BLOCK_SIZES) else 1
    divisors = [d for d in range(1, min(scheduler, 4096) + 1) if scheduler % d == 0]
    scheduler_drawn = data.draw(st.one_of(st.just(scheduler), _near(scheduler, low)), label="scheduler_block_size")
    hash_size = data.draw(st.one_of(st.sampled_from(divisors), _near(hash_size, low)), label="hash_block_size")
    scheduler = scheduler_drawn
    expected = _accepts(case, scheduler, hash_size)
    event(f"groups={min(len(case.kv_cache_config.kv_cache_groups), 2)} expected {'accept' if expected else 'reject'}")
    refusal = target.coordinator_accepts(case.kv_cache_config, case.vllm_config, scheduler, hash_size)
    if refusal is None:
        assert expected, f"accepted unservable sizes scheduler={scheduler} hash={hash_size}"
        return
    assert not expected, f"rejected servable sizes scheduler={scheduler} hash={hash_size}: {refusal}"
    if has(target, Feature.NAMED_REFUSALS):  # upstream's bare asserts carry no message; ours must be clear
        assert any(str(v) in refusal for v in (scheduler, hash_size)), (
            f"the refusal does not name the sizes: {refusal!r}")


@given(case=block_size_cases(), data=st.data())
def test_coordinator_rejects_exactly_the_unservable_sizes(target: Target, case: BlockSizeCase, data) -> None:
    """Group block-size lists as upstream produces them (several groups, Mamba, units)."""
    _check(target, case, data)


@given(case=startup_cases(allow_auto=False, max_len=256, workers=False), data=st.data())
def test_coordinator_rejects_exactly_the_unservable_planned_sizes(target: Target, case: StartupCase,
                                                                  data) -> None:
    """The same on planned models (mostly one group: the unitary coordinator's assertion)."""
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.groups)
    _check(target, BlockSizeCase(plan.kv_cache_config, plan.vllm_config), data)
