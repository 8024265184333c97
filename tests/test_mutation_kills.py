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
    import kvverify.invariants.block_sizes as inv
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


def test_a_misspelled_switch_is_an_error_not_silently_off() -> None:
    """Kills the mutants that garble a flaw / fix name at its use (`is_on("XXname")`)."""
    from kvverify import fixes, flaws
    from kvverify.errors import ConfigError

    assert flaws.is_on("null_block_not_reserved") is False
    for switches in (flaws, fixes):
        with pytest.raises(ConfigError):
            switches.is_on("XXnull_block_not_reservedXX")
