"""Exact examples of the per-type KV cache managers (docs/mutation.md, issue 15).

Each test is worked by hand from vLLM 0.33.0's
``vllm/v1/core/single_type_kv_cache_manager.py`` on tiny pools (block ids, free counts,
hit lengths), for the rules of ``kvverify/reference/managers/{base,full_attention,
sliding_window,chunked_local,cross_attention}.py``: ``find_longest_cache_hit`` per type,
``get_num_blocks_to_allocate`` (evictable hits counted, null blocks not),
``add_local_computed_blocks``, ``allocate_new_blocks``, ``cache_blocks``,
``remove_skipped_blocks`` and ``free``. The sliding-window / chunked-local hit rules and
sparse retention are in ``test_window_managers_units.py``, Mamba in
``test_mamba_manager_units.py``, the coordinator and the registry in
``test_coordinator_units.py``.

Pools are built with ``BlockPool(N, caching, hash_block_size)``: block 0 is the null block,
so the first ``get_new_blocks`` returns ids 1, 2, ... Hashes are short byte strings.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime_helpers import chunked, cross, full, swa  # noqa: E402

from kvverify import flaws  # noqa: E402
from kvverify.errors import KVVerifyError  # noqa: E402
from kvverify.reference.managers.base import SingleTypeKVCacheManager  # noqa: E402
from kvverify.reference.managers.chunked_local import ChunkedLocalAttentionManager  # noqa: E402
from kvverify.reference.managers.cross_attention import CrossAttentionManager  # noqa: E402
from kvverify.reference.managers.full_attention import FullAttentionManager  # noqa: E402
from kvverify.reference.managers.sliding_window import SlidingWindowManager  # noqa: E402
from kvverify.reference.specs import UniformTypeKVCacheSpecs  # noqa: E402

from manager_helpers import H  # noqa: E402
from manager_helpers import cached as _cached  # noqa: E402
from manager_helpers import ids as _ids  # noqa: E402
from manager_helpers import mgr as _mgr  # noqa: E402
from manager_helpers import pool as _pool  # noqa: E402
from manager_helpers import req as _req  # noqa: E402


# --- base: construction, views ----------------------------------------------------------


def test_manager_init_fields() -> None:
    """``SingleTypeKVCacheManager.__init__``: hit alignment starts at the scheduler block."""
    pool = _pool()
    m = _mgr(SlidingWindowManager, swa(8, 4), pool, gid=3, sbs=8, cap=5)
    assert m.kv_cache_spec == swa(8, 4) and m.spec == swa(8, 4)
    assert m.block_size == 4 and m.block_pool is pool and m.enable_caching is True
    assert m.kv_cache_group_id == 3 and m.scheduler_block_size == 8
    assert m.cache_hit_alignment_tokens == 8 and m.max_admission_blocks_per_request == 5
    assert m.req_to_blocks == {} and m.num_cached_block == {}
    assert m.sliding_window == 8 and m.extra_retained_tokens == 0
    m2 = _mgr(FullAttentionManager, full(4), pool, caching=False)
    assert m2.enable_caching is False and m2.max_admission_blocks_per_request is None
    assert m2.get_blocks("nobody") == [] and m2.num_held_blocks("nobody") == 0
    assert SingleTypeKVCacheManager.recycles_blocks is False
    assert SingleTypeKVCacheManager.supports_fine_grained_hash_lookup is False
    assert SlidingWindowManager.recycles_blocks and ChunkedLocalAttentionManager.recycles_blocks
    assert FullAttentionManager.supports_fine_grained_hash_lookup
    assert not SlidingWindowManager.supports_fine_grained_hash_lookup


def test_uniform_group_behaves_as_its_first_layer() -> None:
    """A uniform-type group's window and type come from its first layer spec."""
    uni = UniformTypeKVCacheSpecs(block_size=4, kv_cache_specs=(("a", swa(9, 4)), ("b", swa(9, 4))))
    m = _mgr(SlidingWindowManager, uni, _pool())
    assert m.spec == swa(9, 4) and m.sliding_window == 9 and m.kv_cache_spec is uni
    with pytest.raises(KVVerifyError, match=r"^SlidingWindowManager needs a SlidingWindowSpec, got FullAttentionSpec$"):
        _mgr(SlidingWindowManager, full(4), _pool())
    with pytest.raises(KVVerifyError, match=r"^ChunkedLocalAttentionManager needs a ChunkedLocalAttentionSpec, got FullAttentionSpec$"):
        _mgr(ChunkedLocalAttentionManager, full(4), _pool())


def test_num_held_blocks_skips_null_slots() -> None:
    pool = _pool()
    m = _mgr(SlidingWindowManager, swa(5, 4), pool)
    m.allocate_new_blocks("r", 16)
    assert m.num_held_blocks("r") == 4 and _ids(m.get_blocks("r")) == [1, 2, 3, 4]
    m.remove_skipped_blocks("r", 13)  # skipped 9 -> 2 blocks
    assert m.num_held_blocks("r") == 2 and _ids(m.get_blocks("r")) == [0, 0, 3, 4]


# --- base: allocation ----------------------------------------------------------------


def test_allocate_new_blocks_grows_to_cdiv() -> None:
    """Upstream ``allocate_new_blocks``: ``cdiv(num_tokens, B) - len(table)`` from the head."""
    pool = _pool(10)
    m = _mgr(FullAttentionManager, full(4), pool)
    assert _ids(m.allocate_new_blocks("r", 9)) == [1, 2, 3]
    assert m.allocate_new_blocks("r", 12) == [] and m.allocate_new_blocks("r", 1) == []
    assert _ids(m.allocate_new_blocks("r", 13)) == [4]
    assert _ids(m.get_blocks("r")) == [1, 2, 3, 4] and pool.get_num_free_blocks() == 5
    assert _ids(m.allocate_new_blocks("s", 4)) == [5]
    assert [b.ref_cnt for b in m.get_blocks("r")] == [1, 1, 1, 1]


def test_get_num_blocks_to_allocate_new_request_counts_evictable_hits() -> None:
    """Upstream ``get_num_blocks_to_allocate`` for a new request on SWA (W=5, B=4).

    ``total_computed_tokens=12``: skipped ``12 - 4 = 8`` tokens = 2 blocks. Hits
    ``[e1, e2, e3, busy, null]`` (e = cached, ref 0): ``R = cdiv(28, 4) = 7``,
    ``new = 7 - max(2, 5) = 2``; evictable among ``hits[2:]``: e3 only (busy has a
    holder, null is never counted) -> 3.
    """
    pool = _pool(12)
    m = _mgr(SlidingWindowManager, swa(5, 4), pool)
    e1, e2, e3 = _cached(pool, H[:3], 4)
    busy = pool.get_new_blocks(1)[0]
    hits = [e1, e2, e3, busy, pool.null_block]
    assert m.get_num_blocks_to_allocate("r", 28, hits, 12) == 3
    # nothing skipped (4 computed tokens): every evictable hit counts, R - 5 = 2
    assert m.get_num_blocks_to_allocate("r", 28, hits, 4) == 2 + 3
    # all hits skipped: 20 computed -> 16 skipped = 4 blocks; new = 7 - max(4, 5) = 2; null: 0
    assert m.get_num_blocks_to_allocate("r", 28, hits, 20) == 2
    # more skipped blocks than hits: 28 computed -> 24 skipped = 6 blocks, R = 9 -> 3 new
    assert m.get_num_blocks_to_allocate("r", 36, hits, 28) == 3
    # required below the hits: new blocks 0, evictable still counted
    assert m.get_num_blocks_to_allocate("r", 4, hits, 0) == 3
    with flaws.enabled("evictable_hits_not_counted"):
        assert m.get_num_blocks_to_allocate("r", 28, hits, 4) == 2


def test_get_num_blocks_to_allocate_held_blocks_and_running_fast_path() -> None:
    """A request with a table: held slots count as computed; once ``num_cached_block``
    knows it (running), ``max(R - len(table), 0)``, null slots included."""
    pool = _pool(12)
    m = _mgr(SlidingWindowManager, swa(5, 4), pool)
    e1 = _cached(pool, H[:1], 4)[0]
    # not running yet but holding 2 blocks: skipped 2 blocks (12 computed), held 2 -> skip 0 hits
    m.req_to_blocks["r"] = pool.get_new_blocks(2)
    assert m.get_num_blocks_to_allocate("r", 20, [e1], 12) == 5 - 3 + 1
    # held 1, skipped 2: the first hit is skipped, not counted
    m.req_to_blocks["q"] = pool.get_new_blocks(1)
    assert m.get_num_blocks_to_allocate("q", 20, [e1], 12) == 5 - 2 + 0
    m.add_local_computed_blocks("n", [], 0)
    m.allocate_new_blocks("n", 8)
    m.remove_skipped_blocks("n", 8)  # skipped 4 -> slot 0 nulled, table [null, b]
    assert m.num_cached_block["n"] == 0 and len(m.get_blocks("n")) == 2
    assert m.get_num_blocks_to_allocate("n", 13, [], 8) == 4 - 2
    assert m.get_num_blocks_to_allocate("n", 4, [], 8) == 0


def test_admission_cap_only_on_the_gate() -> None:
    """``max_admission_blocks_per_request`` clamps ``R`` only with ``apply_admission_cap``."""
    pool = _pool(12)
    m = _mgr(SlidingWindowManager, swa(5, 4), pool, cap=3)
    assert m.get_num_blocks_to_allocate("r", 40, [], 0) == 10
    assert m.get_num_blocks_to_allocate("r", 40, [], 0, None, True) == 3
    assert m.get_num_blocks_to_allocate("r", 40, [], 0, apply_admission_cap=True) == 3
    f = _mgr(FullAttentionManager, full(4), pool)
    assert f.get_num_blocks_to_allocate("r", 40, [], 0, apply_admission_cap=True) == 10
    assert m._required_blocks(9, False) == 3 and m._required_blocks(40, True) == 3


def test_add_local_computed_blocks_touches_unskipped_hits() -> None:
    """Upstream ``add_local_computed_blocks``: skipped head -> null slots; the rest touched
    (out of the free queue, ref 1); ``num_cached_block`` = table length."""
    pool = _pool(12)
    m = _mgr(SlidingWindowManager, swa(5, 4), pool)
    e1, e2, e3 = _cached(pool, H[:3], 4)
    free_before = pool.get_num_free_blocks()
    m.add_local_computed_blocks("r", [e1, e2, e3], 12)  # skipped 8 tokens = 2 blocks
    assert _ids(m.get_blocks("r")) == [0, 0, 3] and m.num_cached_block["r"] == 3
    assert (e1.ref_cnt, e2.ref_cnt, e3.ref_cnt) == (0, 0, 1)
    assert pool.get_num_free_blocks() == free_before - 1
    assert e3.block_id not in pool.free_block_ids() and e1.block_id in pool.free_block_ids()
    # nothing skipped: all touched
    m.add_local_computed_blocks("s", [e1, e2], 4)
    assert _ids(m.get_blocks("s")) == [1, 2] and m.num_cached_block["s"] == 2
    assert (e1.ref_cnt, e2.ref_cnt) == (1, 1)
    with pytest.raises(AssertionError, match=r"^request s already holds blocks$"):
        m.add_local_computed_blocks("s", [], 0)
    # an empty adoption still registers the request (running from now on)
    m.add_local_computed_blocks("t", [], 0)
    assert m.get_blocks("t") == [] and m.num_cached_block["t"] == 0


def test_add_local_computed_blocks_without_caching() -> None:
    pool = _pool(12, caching=False)
    m = _mgr(FullAttentionManager, full(4), pool, caching=False)
    m.add_local_computed_blocks("r", [pool.null_block], 0)
    assert _ids(m.get_blocks("r")) == [0] and pool.null_block.ref_cnt == 0
    blk = pool.get_new_blocks(1)[0]
    with pytest.raises(AssertionError, match=r"^computed blocks must be empty when prefix caching is off$"):
        m.add_local_computed_blocks("s", [blk], 4)
    assert blk.ref_cnt == 1


# --- base: freeing and recycling -------------------------------------------------------


def test_free_releases_tail_first() -> None:
    """Upstream ``free``: ``free_blocks(reversed(table))``; uncached blocks go to the head
    in that order, cached ones to the tail; null slots are skipped."""
    pool = _pool(8)
    m = _mgr(FullAttentionManager, full(4), pool)
    m.allocate_new_blocks("r", 12)  # 1, 2, 3
    m.num_cached_block["r"] = 0
    m.free("r")
    assert pool.free_block_ids() == [3, 2, 1, 4, 5, 6, 7]
    assert "r" not in m.req_to_blocks and "r" not in m.num_cached_block
    m.free("r")  # unknown: no-op
    # cached blocks go to the tail, tail block first
    c = _mgr(FullAttentionManager, full(4), pool)
    c.add_local_computed_blocks("q", [], 0)
    c.allocate_new_blocks("q", 12)  # 3, 2, 1
    c.cache_blocks(_req("q", H[:3]), 12)
    c.free("q")
    assert pool.free_block_ids() == [4, 5, 6, 7, 1, 2, 3]


def test_remove_skipped_blocks_swa() -> None:
    """Upstream ``remove_skipped_blocks`` / ``_remove_blocks_in_range`` (W=5, B=4):
    ``floor(skipped / B)`` slots (capped at the table) nulled right to left, stopping at
    the first null slot; freed blocks return to the free queue in that order."""
    pool = _pool(8)
    m = _mgr(SlidingWindowManager, swa(5, 4), pool)
    m.allocate_new_blocks("r", 16)  # 1..4
    m.remove_skipped_blocks("r", 8)  # skipped 4 -> 1 block
    assert _ids(m.get_blocks("r")) == [0, 2, 3, 4] and pool.free_block_ids() == [1, 5, 6, 7]
    m.remove_skipped_blocks("r", 16)  # skipped 12 -> 3 blocks: 3 and 2 freed, stop at null
    assert _ids(m.get_blocks("r")) == [0, 0, 0, 4]
    assert pool.free_block_ids() == [3, 2, 1, 5, 6, 7]
    m.remove_skipped_blocks("r", 100)  # capped at the 4 slots
    assert _ids(m.get_blocks("r")) == [0, 0, 0, 0] and pool.free_block_ids()[0] == 4
    m.remove_skipped_blocks("nobody", 100)  # unknown: no-op
    m.remove_skipped_blocks("r", 4)  # nothing skipped
    # stop at an interior null: [b, null, b] range(0, 3) frees only the last
    m.req_to_blocks["s"] = [pool.get_new_blocks(1)[0], pool.null_block, pool.get_new_blocks(1)[0]]
    first, _, last = m.req_to_blocks["s"]
    m._remove_blocks_in_range("s", 0, 3)
    assert m.req_to_blocks["s"] == [first, pool.null_block, pool.null_block]
    assert first.ref_cnt == 1 and last.ref_cnt == 0
    m._remove_blocks_in_range("s", 1, 1)
    m._remove_blocks_in_range("s", 1, 0)
    assert first.ref_cnt == 1
    m._remove_blocks_in_range("s", 0, 1)
    assert first.ref_cnt == 0 and m.req_to_blocks["s"] == [pool.null_block] * 3


def test_full_attention_never_skips() -> None:
    pool = _pool(8)
    m = _mgr(FullAttentionManager, full(4), pool)
    m.allocate_new_blocks("r", 16)
    m.remove_skipped_blocks("r", 1000)
    assert _ids(m.get_blocks("r")) == [1, 2, 3, 4] and m.get_num_skipped_tokens(1000) == 0


def test_skipped_tokens_per_type() -> None:
    pool = _pool(8)
    s = _mgr(SlidingWindowManager, swa(5, 4), pool)
    assert [s.get_num_skipped_tokens(n) for n in (0, 4, 5, 12)] == [0, 0, 1, 8]
    e = _mgr(SlidingWindowManager, swa(5, 4).__class__(block_size=4, num_kv_heads=1, head_size=64,
                                                       sliding_window=5, extra_retained_tokens=2),
             pool)
    assert e.extra_retained_tokens == 2 and e.get_num_skipped_tokens(12) == 6
    c = _mgr(ChunkedLocalAttentionManager, chunked(8, 4), pool)
    assert c.attention_chunk_size == 8
    assert [c.get_num_skipped_tokens(n) for n in (7, 8, 13, 16)] == [0, 8, 8, 16]


# --- base: cache_blocks ----------------------------------------------------------------


def test_cache_blocks_full_attention_fine_hashes() -> None:
    """Upstream ``cache_blocks``: ``num_full = min(num_tokens, len(hashes) * hbs) // B``;
    block ``i`` gets the hash of its last fine block; ``num_cached_block`` advances."""
    pool = _pool(8, hbs=2)
    m = _mgr(FullAttentionManager, full(4), pool, gid=1)
    m.add_local_computed_blocks("r", [], 0)
    m.allocate_new_blocks("r", 16)  # 1..4
    r = _req("r", H[:5])  # 10 hashed tokens
    m.cache_blocks(r, 16)
    b = m.get_blocks("r")
    assert m.num_cached_block["r"] == 2
    assert (b[0].block_hash, b[1].block_hash, b[2].block_hash) == ((H[1], 1), (H[3], 1), None)
    m.cache_blocks(r, 16)  # nothing new
    assert m.num_cached_block["r"] == 2
    r.block_hashes = list(H[:8])
    m.cache_blocks(r, 14)  # min(14, 16) // 4 = 3
    assert m.num_cached_block["r"] == 3 and b[2].block_hash == (H[5], 1) and b[3].block_hash is None
    assert pool.get_cached_block(H[5], [1]) == [b[2]]


def test_cache_blocks_skips_non_cacheable_and_starts_at_zero() -> None:
    """A request unknown to ``num_cached_block`` caches from block 0."""
    pool = _pool(8)
    m = _mgr(FullAttentionManager, full(4), pool)
    m.allocate_new_blocks("r", 8)
    m.cache_blocks(_req("r", H[:2]), 8)
    assert m.num_cached_block["r"] == 2 and pool.get_cached_block(H[0], [0]) == [m.get_blocks("r")[0]]


def test_cross_attention_manager_refuses_prefix_caching() -> None:
    """Upstream ``CrossAttentionManager`` (finding F8): lookups raise, caching raises."""
    pool = _pool(8)
    m = _mgr(CrossAttentionManager, cross(4), pool)
    m.add_local_computed_blocks("r", [pool.null_block], 0)
    assert m.get_blocks("r") == [] and "r" not in m.num_cached_block
    with pytest.raises(AssertionError, match=r"^cross-attention groups never have prefix-cache hits$"):
        m.add_local_computed_blocks("r", [pool.get_new_blocks(1)[0]], 0)
    with pytest.raises(ValueError, match=r"^Should not be called as prefix caching is disabled\.$"):
        m.cache_blocks(_req("r", H[:2]), 8)
    with pytest.raises(NotImplementedError, match=r"^CrossAttentionManager does not support caching$"):
        CrossAttentionManager.find_longest_cache_hit(H[:2], 8, [0], pool, cross(4), 4)
    assert _ids(m.allocate_new_blocks("r", 9)) == [2, 3, 4]


# --- find_longest_cache_hit: full attention ------------------------------------------------


def test_full_attention_hit_is_leading_run_aligned_down() -> None:
    """Upstream ``FullAttentionManager.find_longest_cache_hit`` (coarse): scan left to right
    up to ``max_length // B`` blocks, stop at the first miss, align down."""
    pool = _pool(12)
    c = _cached(pool, H[:3], 4)  # blocks 1, 2, 3 under A, B, C
    find = FullAttentionManager.find_longest_cache_hit
    blocks, hit = find(H[:5], 20, [0], pool, full(4), 4)
    assert (_ids(blocks[0]), hit) == ([1, 2, 3], 12)
    blocks, hit = find(H[:5], 11, [0], pool, full(4), 4)
    assert (_ids(blocks[0]), hit) == ([1, 2], 8)
    blocks, hit = find(H[:5], 20, [0], pool, full(4), 8)  # 12 aligned down to 8
    assert (_ids(blocks[0]), hit) == ([1, 2], 8)
    blocks, hit = find(H[:5], 20, [0], pool, full(4), 12)
    assert (_ids(blocks[0]), hit) == ([1, 2, 3], 12)
    blocks, hit = find(H[:2], 100, [0], pool, full(4), 4)  # bounded by the hashes too
    assert (_ids(blocks[0]), hit) == ([1, 2], 8)
    blocks, hit = find(H[:5], 3, [0], pool, full(4), 4)
    assert (blocks, hit) == (([],), 0)
    # a miss ends the hit even when later blocks are cached (hashes chain)
    pool2 = _pool(12)
    a = _cached(pool2, [H[0]], 4)[0]
    _cached(pool2, [H[2]], 4)
    blocks, hit = find(H[:4], 16, [0], pool2, full(4), 4)
    assert (blocks, hit) == (([a],), 4)
    del c


def test_full_attention_hit_common_to_several_groups() -> None:
    pool = _pool(12)
    g0 = _cached(pool, H[:3], 4, gid=0)
    g1 = _cached(pool, H[:2], 4, gid=1)
    blocks, hit = FullAttentionManager.find_longest_cache_hit(H[:4], 16, [0, 1], pool, full(4), 4)
    assert blocks == (g0[:2], g1) and hit == 8


def test_full_attention_hit_on_fine_hashes() -> None:
    """Hash block 2, group block 4: the group block's hash is its last fine hash."""
    pool = _pool(12, hbs=2)
    m = _mgr(FullAttentionManager, full(4), pool)
    m.add_local_computed_blocks("w", [], 0)
    m.allocate_new_blocks("w", 12)
    m.cache_blocks(_req("w", H[:6]), 12)
    blocks, hit = FullAttentionManager.find_longest_cache_hit(H[:7], 14, [0], pool, full(4), 4)
    assert (_ids(blocks[0]), hit) == ([1, 2, 3], 12)
    blocks, hit = FullAttentionManager.find_longest_cache_hit(H[:7], 11, [0], pool, full(4), 4)
    assert (_ids(blocks[0]), hit) == ([1, 2], 8)


def test_recycling_with_block_size_one() -> None:
    """B=1, W=2: 2 computed tokens skip 1 token = 1 block (freed); adopting hits with
    8 computed tokens (W=5, B=4) skips exactly one block."""
    pool = _pool(12, hbs=1)
    m = _mgr(SlidingWindowManager, swa(2, 1), pool, sbs=1)
    m.allocate_new_blocks("r", 3)
    m.remove_skipped_blocks("r", 2)
    assert _ids(m.get_blocks("r")) == [0, 2, 3]
    pool4 = _pool(12)
    s = _mgr(SlidingWindowManager, swa(5, 4), pool4)
    e1, e2 = _cached(pool4, H[:2], 4)
    s.add_local_computed_blocks("r", [e1, e2], 8)
    assert s.get_blocks("r") == [pool4.null_block, e2] and (e1.ref_cnt, e2.ref_cnt) == (0, 1)


def test_remove_blocks_in_range_unknown_request() -> None:
    """Upstream ``_remove_blocks_in_range`` returns for a request without a table."""
    m = _mgr(SlidingWindowManager, swa(5, 4), _pool())
    m._remove_blocks_in_range("nobody", 0, 2)
    assert m.req_to_blocks == {}


def test_encoder_decoder_prefix_caching_refused_only_under_the_fix() -> None:
    """Finding F8's fix option: with caching on and a cross-attention group, startup refuses
    ``enable_prefix_caching`` (field, value True, reason); upstream (fix off) accepts."""
    from kvverify import fixes
    from kvverify.errors import ConfigError
    from kvverify.reference.managers.cross_attention import refuse_encoder_decoder_prefix_caching
    from runtime_helpers import kv_config

    with_cross = kv_config(8, full(4), cross(4))
    without = kv_config(8, full(4), swa(5, 4))
    refuse_encoder_decoder_prefix_caching(with_cross, True)  # upstream: accepted
    with fixes.enabled("encoder_decoder_prefix_caching_refused"):
        refuse_encoder_decoder_prefix_caching(with_cross, False)
        refuse_encoder_decoder_prefix_caching(without, True)
        with pytest.raises(ConfigError) as info:
            refuse_encoder_decoder_prefix_caching(with_cross, True)
    err = info.value
    assert err.field == "enable_prefix_caching" and err.value is True
    assert str(err) == ("enable_prefix_caching=True is invalid: must be False for encoder-decoder "
                        "models (cross-attention layers): their KV cache cannot be prefix-cached "
                        "(finding F8)")
    uni = UniformTypeKVCacheSpecs(block_size=4, kv_cache_specs=(("a", cross(4)), ("b", cross(4))))
    with fixes.enabled("encoder_decoder_prefix_caching_refused"), pytest.raises(ConfigError):
        refuse_encoder_decoder_prefix_caching(kv_config(8, full(4), uni), True)
