"""Exact examples of the coordinator and the manager registry (docs/mutation.md, issue 15).

Worked from vLLM 0.33.0's ``vllm/v1/core/kv_cache_coordinator.py`` (no EAGLE, no partial
hash hits: the alignment is the scheduler block size) and ``KVCacheSpecRegistry``'s
manager lookup: ``find_longest_cache_hit`` of the three coordinator kinds (the hybrid
fixed point, its full-attention-first order, same-spec groups looked up together),
per-group sums, cross attention's encoder tokens, cacheable tokens and replay boundaries,
and ``_validate_prefix_cache_retention_interval``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime_helpers import chunked, cross, full, kv_config, mamba, swa  # noqa: E402

from kvverify import fixes  # noqa: E402
from kvverify.errors import ConfigError, KVVerifyError  # noqa: E402
from kvverify.reference.block_sizes import BlockSizeError  # noqa: E402
from kvverify.reference.managers.chunked_local import ChunkedLocalAttentionManager  # noqa: E402
from kvverify.reference.managers.coordinator import KVCacheCoordinator, replay_boundaries  # noqa: E402
from kvverify.reference.managers.cross_attention import CrossAttentionManager  # noqa: E402
from kvverify.reference.managers.full_attention import FullAttentionManager  # noqa: E402
from kvverify.reference.managers.mamba import MambaManager  # noqa: E402
from kvverify.reference.managers.registry import (  # noqa: E402
    get_manager_class,
    get_manager_for_kv_cache_spec,
)
from kvverify.reference.managers.sliding_window import SlidingWindowManager  # noqa: E402
from kvverify.reference.pool import BlockPool  # noqa: E402
from kvverify.reference.specs import (  # noqa: E402
    EncoderOnlyAttentionSpec,
    KVCacheSpec,
    MLAAttentionSpec,
    UniformTypeKVCacheSpecs,
)

from manager_helpers import H  # noqa: E402
from manager_helpers import ids as _ids  # noqa: E402
from manager_helpers import req as _req  # noqa: E402


def _coord(*specs, n: int = 24, caching: bool = True, sbs: int = 4, hbs: int = 4,
           retention: int | None = 0, max_model_len: int = 64, max_in_flight: int = 8):
    return KVCacheCoordinator(kv_config(n, *specs), max_model_len, max_in_flight, caching, sbs, hbs,
                              retention)


def _cache(c: KVCacheCoordinator, gid: int, idxs, block_size: int = 4):
    """Cache one block per index ``i`` under hash ``H[i]`` in group ``gid`` (then free it)."""
    pool = c.block_pool
    out = []
    for i in idxs:
        blk = pool.get_new_blocks(1)[0]
        pool.cache_full_blocks(_req("w", [H[i]]), [blk], 0, 1, block_size, gid)
        out.append(blk)
    pool.free_blocks(out)
    return out


# --- construction -------------------------------------------------------------------------


def test_coordinator_init_groups_and_caps() -> None:
    """Hybrid: one manager per group (id, type, admission cap ``cdiv(min(W - 1 + F, L), B)
    + 1`` for SWA); lookup groups = equal spec and manager type, full attention first."""
    s9, s13 = swa(9, 4), swa(13, 4)
    c = _coord(s9, full(4), s9, s13, n=20, max_model_len=64, max_in_flight=8)
    assert c.kind == "hybrid" and c.retention_interval == 0 and c.enable_caching is True
    assert c.scheduler_block_size == 4 and c.hash_block_size == 4
    assert c.kv_cache_config.num_blocks == 20
    pool = c.block_pool
    assert pool.num_gpu_blocks == 20 and pool.enable_caching is True and pool.hash_block_size == 4
    ms = c.single_type_managers
    assert [type(m) for m in ms] == [SlidingWindowManager, FullAttentionManager,
                                     SlidingWindowManager, SlidingWindowManager]
    assert [m.kv_cache_group_id for m in ms] == [0, 1, 2, 3]
    assert all(m.block_pool is pool and m.enable_caching and m.scheduler_block_size == 4 for m in ms)
    assert [m.max_admission_blocks_per_request for m in ms] == [5, None, 5, 6]
    assert c.attention_groups == [(full(4), [1], FullAttentionManager),
                                  (s9, [0, 2], SlidingWindowManager),
                                  (s13, [3], SlidingWindowManager)]
    assert _coord(full(4)).kind == "unitary"
    off = _coord(full(4), s9, caching=False)
    assert off.kind == "no_prefix_cache" and off.block_pool.enable_caching is False
    assert not any(m.enable_caching for m in off.single_type_managers)
    c1 = _coord(s9, max_model_len=1, max_in_flight=1)
    assert c1.single_type_managers[0].max_admission_blocks_per_request == 2  # cdiv(1, 4) + 1
    assert _coord(s9, max_model_len=64, max_in_flight=30).single_type_managers[0] \
        .max_admission_blocks_per_request == 11  # cdiv(38, 4) + 1


def test_coordinator_refuses_bad_sizes() -> None:
    with pytest.raises(ConfigError) as info:
        _coord(full(4), max_model_len=0)
    assert info.value.field == "max_model_len" and info.value.value == 0
    with pytest.raises(ConfigError) as info:
        _coord(full(4), max_in_flight=0)
    assert info.value.field == "max_in_flight_tokens" and info.value.value == 0
    with pytest.raises(BlockSizeError):  # unitary with caching: hash block = block size
        _coord(full(8), sbs=8, hbs=4)
    _coord(full(8), sbs=8, hbs=4, caching=False)
    with pytest.raises(BlockSizeError):
        _coord(full(4), sbs=4, hbs=8)
    with fixes.enabled("encoder_decoder_prefix_caching_refused"), pytest.raises(ConfigError):
        _coord(full(4), cross(4))


def test_retention_interval_validation() -> None:
    """Upstream ``_validate_prefix_cache_retention_interval``: None and 0 always pass; a
    positive interval needs an SWA or Mamba group (the group spec's own type) and a
    multiple of the scheduler block size; negative values are refused."""
    _coord(full(4), retention=None)
    _coord(full(4), retention=0)
    with pytest.raises(ConfigError) as info:
        _coord(full(4), retention=4)
    assert info.value.field == "prefix_cache_retention_interval" and info.value.value == 4
    assert str(info.value) == ("prefix_cache_retention_interval=4 is invalid: must be 0 or None: this "
                               "model has no sliding-window or Mamba KV cache group, so retention has "
                               "no effect")
    _coord(full(4), swa(9, 4), retention=8)
    _coord(full(4), mamba(4, "align"), retention=8)
    _coord(full(4), swa(9, 4), retention=None)
    _coord(full(4), swa(9, 4), retention=0)
    for bad in (-4, 6, 2):
        with pytest.raises(ConfigError) as info:
            _coord(full(4), swa(9, 4), retention=bad)
        assert info.value.field == "prefix_cache_retention_interval" and info.value.value == bad
        assert str(info.value) == (f"prefix_cache_retention_interval={bad} is invalid: must be "
                                   "non-negative and a multiple of scheduler_block_size (4)")
    uni = UniformTypeKVCacheSpecs(block_size=4, kv_cache_specs=(("a", swa(9, 4)), ("b", swa(9, 4))))
    with pytest.raises(ConfigError):
        _coord(full(4), uni, retention=8)


# --- counting and allocating ----------------------------------------------------------------


def test_sum_over_groups_cross_attention_counts_encoder_tokens() -> None:
    """``get_num_blocks_to_allocate`` sums the groups; cross attention is asked for the
    encoder tokens (no hits); ``allocate_new_blocks`` likewise."""
    c = _coord(full(4), cross(4), caching=False)
    assert c.get_num_blocks_to_allocate("r", 10, ([], []), 7, 0, 10) == 3 + 2
    assert _ids(c.allocate_new_blocks("r", 10, 10, 7)[0]) == [1, 2, 3]
    assert _ids(c.get_blocks("r")[1]) == [4, 5]
    assert c.get_num_blocks_to_allocate("r", 14, ([], []), 7, 10, 14) == 1
    assert c.allocate_new_blocks("r", 10, 10) == ([], [])
    c.free("r")
    assert c.get_blocks("r") == ([], []) and c.block_pool.get_num_free_blocks() == 23


def test_admission_cap_and_main_model_tokens_reach_the_managers() -> None:
    c = _coord(full(4), swa(9, 4), caching=False)
    assert c.get_num_blocks_to_allocate("r", 40, ([], []), 0, 0, 40) == 10 + 10
    assert c.get_num_blocks_to_allocate("r", 40, ([], []), 0, 0, 40, True) == 10 + 5
    assert c.get_num_blocks_to_allocate("r", 40, ([], []), 0, 0, 40, apply_admission_cap=True) == 15
    m = _coord(full(4), mamba(4, "align", 2))
    e1, e2 = _cache(m, 1, [0, 1])
    # mamba: R = cdiv(4, 4) + 2 = 3 - 2 hits = 1, + 2 evictable; full: cdiv(20, 4) = 5
    assert m.get_num_blocks_to_allocate("r", 20, ([], [e1, e2]), 0, 8, 4) == 5 + 3


def test_adopting_hits_only_for_a_new_request() -> None:
    c = _coord(full(4), swa(5, 4))
    f = _cache(c, 0, [0, 1, 2])
    s = _cache(c, 1, [0, 1, 2])
    c.allocate_new_computed_blocks("r", (f, s), 12)
    assert c.get_blocks("r") == (f, [c.block_pool.null_block, c.block_pool.null_block, s[2]])
    c.allocate_new_computed_blocks("r", (f[:1], s[:1]), 4)  # running now: no-op
    assert c.get_blocks("r")[0] == f and [b.ref_cnt for b in f] == [1, 1, 1]
    c.remove_skipped_blocks("r", 13)  # SWA: skipped 8 -> 2 slots (already null) + none more
    assert c.get_blocks("r")[1][2] is s[2]
    c.remove_skipped_blocks("r", 16)  # skipped 12 -> 3 slots
    assert c.get_blocks("r")[1][2] is c.block_pool.null_block and s[2].ref_cnt == 0


def test_cacheable_tokens_and_replay_boundaries() -> None:
    """Hybrid hits land on scheduler blocks: cache ``floor(n / sbs) * sbs`` tokens; a replay of
    the prompt resumes at ``num_prompt_tokens - 1`` (upstream ``replay_boundaries``, no EAGLE)."""
    assert replay_boundaries(25) == (24,) and replay_boundaries(1) == (0,)
    h = _coord(full(4), swa(9, 4), sbs=8)
    assert [h.get_num_cacheable_tokens(n) for n in (7, 8, 13, 16)] == [0, 8, 8, 16]
    u = _coord(full(4))
    assert u.get_num_cacheable_tokens(13) == 13


def test_hybrid_cache_blocks_full_dense_swa_replay_tail() -> None:
    """Prompt 25 (boundary 24, aligned to 8: blocks 4 and 5 of the SWA group), 30 computed
    tokens -> 24 cacheable: full attention hashes its 6 blocks, SWA only blocks 4, 5."""
    c = _coord(full(4), swa(9, 4), sbs=8)
    c.allocate_new_computed_blocks("r", ([], []), 0)
    c.allocate_new_blocks("r", 32, 32)
    c.cache_blocks(_req("r", H[:8], num_prompt=25), 30)
    fb, sb = c.get_blocks("r")
    assert [b.block_hash is not None for b in fb] == [True] * 6 + [False] * 2
    assert [b.block_hash is not None for b in sb] == [False] * 4 + [True, True, False, False]
    assert c.single_type_managers[0].num_cached_block["r"] == 6
    off = _coord(full(4), swa(9, 4), sbs=8, caching=False)
    off.allocate_new_blocks("r", 32, 32)
    off.cache_blocks(_req("r", H[:8], num_prompt=25), 30)
    assert all(b.block_hash is None for g in off.get_blocks("r") for b in g)


def test_new_step_and_reset_reach_every_group() -> None:
    c = _coord(full(4), mamba(4, "align"), retention=None)
    c.allocate_new_computed_blocks("r", ([], []), 0)
    c.allocate_new_blocks("r", 8, 8)
    c.cache_blocks(_req("r", H[:2], num_prompt=100), 8)
    assert c.single_type_managers[1].cached_blocks_this_step
    c.new_step_starts()
    assert not c.single_type_managers[1].cached_blocks_this_step
    assert c.reset_prefix_cache() is False
    c.free("r")
    assert c.reset_prefix_cache() is True and c.block_pool.num_cached_blocks == 0


# --- prefix-cache lookups --------------------------------------------------------------------


def test_lookup_without_prefix_caching_finds_nothing() -> None:
    """``KVCacheCoordinatorNoPrefixCache``: one empty list per group, 0, 0, whatever the pool."""
    c = _coord(full(4), swa(5, 4), caching=False)
    pool = c.block_pool
    blocks = pool.get_new_blocks(4)
    pool.cache_full_blocks(_req("w", H[:2]), blocks[:2], 0, 2, 4, 0)
    pool.cache_full_blocks(_req("w", H[:2]), blocks[2:], 0, 2, 4, 1)
    assert pool.get_cached_block(H[1], [0, 1]) == [blocks[1], blocks[3]]
    assert c.find_longest_cache_hit(H[:4], 12) == (([], []), 0, 0)


def test_unitary_lookup_aligns_to_the_block_size() -> None:
    c = _coord(swa(9, 8), sbs=8, hbs=8)
    pool = c.block_pool
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(_req("w", H[:2]), blocks, 0, 2, 8, 0)
    pool.free_blocks(blocks)
    assert c.find_longest_cache_hit(H[:3], 20) == (([pool.null_block, blocks[1]],), 16, 0)
    assert c.find_longest_cache_hit(H[:3], 15) == (([blocks[0]],), 8, 0)
    assert c.find_longest_cache_hit(H[:3], 7) == (([],), 0, 0)
    # upstream UnitaryKVCacheCoordinator aligns to the group block size, not the scheduler's
    u = _coord(full(4), sbs=8, hbs=4)
    f = _cache(u, 0, [0, 1, 2])
    assert u.find_longest_cache_hit(H[:4], 16) == ((f,), 12, 0)


def test_simple_hybrid_one_round() -> None:
    """Full + SWA (W=9: 2 blocks): full finds 20 tokens, SWA within 20 finds its run B, C
    (12); full is cut to 3 blocks; the uncached common prefix is 20 - 12 = 8."""
    c = _coord(full(4), swa(9, 4))
    f = _cache(c, 0, [0, 1, 2, 3, 4])
    s = _cache(c, 1, [1, 2])
    null = c.block_pool.null_block
    assert c.find_longest_cache_hit(H[:6], 24) == ((f[:3], [null, s[0], s[1]]), 12, 8)
    assert c.find_longest_cache_hit(H[:6], 7) == (([], []), 0, 4)
    assert c.find_longest_cache_hit(H[:6], 0) == (([], []), 0, 0)


def test_hybrid_fixed_point_over_three_types() -> None:
    """Full + SWA (W=5: 1 block) + Mamba: each type lowers the candidate until all agree.

    Full: A..E (20). SWA: blocks 0, 1, 3. Mamba: blocks 0, 2. Round 1: 20 -> SWA 16 ->
    Mamba 12. Round 2: SWA 8 -> Mamba 4. Round 3: SWA 4, Mamba 4: stable at 4."""
    c = _coord(full(4), swa(5, 4), mamba(4, "align"))
    f = _cache(c, 0, [0, 1, 2, 3, 4])
    s = _cache(c, 1, [0, 1, 3])
    m = _cache(c, 2, [0, 2])
    assert c.find_longest_cache_hit(H[:6], 24) == (([f[0]], [s[0]], [m[0]]), 4, 16)
    assert c.attention_groups[0][1] == [0]


def test_hybrid_same_spec_groups_share_one_lookup() -> None:
    """Two full-attention groups with one spec: one lookup, the hit common to both."""
    c = _coord(full(4), full(4), swa(5, 4))
    g0 = _cache(c, 0, [0, 1, 2])
    g1 = _cache(c, 1, [0, 1])
    s = _cache(c, 2, [0, 1, 2])
    null = c.block_pool.null_block
    assert c.find_longest_cache_hit(H[:4], 16) == ((g0[:2], g1, [null, s[1]]), 8, 0)
    assert c.attention_groups[0] == (full(4), [0, 1], FullAttentionManager)


def test_hybrid_without_full_attention_iterates_to_agreement() -> None:
    """SWA + Mamba (no full group, so not the one-round case). Round 1: SWA (W=5) finds
    block 3 (16), Mamba within 16 finds block 1 (8). Round 2: SWA within 8 finds block 1
    (8), Mamba 8 again: stable at 8; the longest single-type hit was 16."""
    c = _coord(swa(5, 4), mamba(4, "align"))
    s = _cache(c, 0, [1, 3])
    m = _cache(c, 1, [1])
    null = c.block_pool.null_block
    assert c.find_longest_cache_hit(H[:6], 24) == (([null, s[0]], [null, m[0]]), 8, 8)


# --- registry --------------------------------------------------------------------------------


def test_manager_class_per_spec_type() -> None:
    """``get_manager_class``: the nearest registered class in the spec's MRO decides."""
    mla = MLAAttentionSpec(block_size=4, num_kv_heads=1, head_size=64)
    assert get_manager_class(full(4)) is FullAttentionManager
    assert get_manager_class(mla) is FullAttentionManager
    assert get_manager_class(swa(5, 4)) is SlidingWindowManager
    assert get_manager_class(chunked(8, 4)) is ChunkedLocalAttentionManager
    assert get_manager_class(cross(4)) is CrossAttentionManager
    assert get_manager_class(mamba(4)) is MambaManager
    uni = UniformTypeKVCacheSpecs(block_size=4, kv_cache_specs=(("a", swa(5, 4)), ("b", swa(5, 4))))
    assert get_manager_class(uni) is SlidingWindowManager
    enc = EncoderOnlyAttentionSpec(block_size=4, num_kv_heads=1, head_size=64)
    with pytest.raises(KVVerifyError, match=r"^no KV cache manager for spec type "
                                            r"EncoderOnlyAttentionSpec \(encoder-only layers"):
        get_manager_class(enc)

    class Stray(KVCacheSpec):  # a spec class nobody registered
        pass
    with pytest.raises(KVVerifyError, match=r"^no KV cache manager for spec type Stray "
                                            r"\(not a registered spec kind\)$"):
        get_manager_class(Stray.__new__(Stray))


def test_manager_for_spec_gets_its_admission_cap() -> None:
    """``get_manager_for_kv_cache_spec``: recycling managers get the startup formula's cap
    (SWA ``cdiv(min(W - 1 + F, L), B) + 1``, chunked ``cdiv(min(C + F, L), B)``), others none."""
    pool = BlockPool(8, True, 4)

    def build(spec, f: int = 8, length: int = 64, **kw):
        return get_manager_for_kv_cache_spec(spec, pool, max_in_flight_tokens=f, max_model_len=length,
                                             enable_caching=kw.get("caching", True),
                                             kv_cache_group_id=kw.get("gid", 2),
                                             scheduler_block_size=kw.get("sbs", 8))
    s = build(swa(9, 4))
    assert type(s) is SlidingWindowManager and s.max_admission_blocks_per_request == 5
    assert s.kv_cache_group_id == 2 and s.scheduler_block_size == 8 and s.enable_caching
    assert s.block_pool is pool
    assert build(swa(9, 4), f=8, length=10).max_admission_blocks_per_request == 4
    ch = build(chunked(8, 4), f=8, length=64, caching=False, gid=0)
    assert ch.max_admission_blocks_per_request == 4 and not ch.enable_caching and ch.kv_cache_group_id == 0
    assert build(chunked(8, 4), f=8, length=6).max_admission_blocks_per_request == 2
    assert build(full(4)).max_admission_blocks_per_request is None
    uni = UniformTypeKVCacheSpecs(block_size=4, kv_cache_specs=(("a", swa(9, 4)), ("b", swa(9, 4))))
    u = build(uni)
    assert type(u) is SlidingWindowManager and u.max_admission_blocks_per_request == 5


def test_coordinator_defaults() -> None:
    """Default ``retention_interval`` 0 (accepted without an SWA/Mamba group); default
    ``num_encoder_tokens`` 0 (a cross group takes nothing); a request without
    ``num_prompt_tokens`` has no replay boundary to keep."""
    c = KVCacheCoordinator(kv_config(24, full(4), cross(4)), 64, 8, False, 4, 4)
    assert c.retention_interval == 0
    assert _ids(c.allocate_new_blocks("r", 10, 10)[0]) == [1, 2, 3] and c.get_blocks("r")[1] == []
    h = _coord(full(4), swa(9, 4), sbs=8)
    h.allocate_new_computed_blocks("r", ([], []), 0)
    h.allocate_new_blocks("r", 32, 32)
    h.cache_blocks(SimpleNamespace(request_id="r", block_hashes=list(H[:8])), 32)
    fb, sb = h.get_blocks("r")
    assert all(b.block_hash is not None for b in fb) and all(b.block_hash is None for b in sb)


def test_allocation_passes_main_model_tokens() -> None:
    """Mamba (align) sizes its table by the main model's tokens: ``cdiv(4, 4) + 0``."""
    c = _coord(full(4), mamba(4, "align"))
    new = c.allocate_new_blocks("r", 20, 4)
    assert [len(g) for g in new] == [5, 1] and len(c.get_blocks("r")[1]) == 1
