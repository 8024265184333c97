"""Exact examples of the sliding-window and chunked-local managers' hit rules and sparse
retention (docs/mutation.md, issue 15).

Worked by hand from vLLM 0.33.0's ``SlidingWindowManager`` and
``ChunkedLocalAttentionManager`` (``single_type_kv_cache_manager.py``, no EAGLE):
``find_longest_cache_hit`` (right-to-left contiguous window, alignment of a run's right
edge, the leading run without a full window, chunked local's null earlier chunks),
``reachable_block_mask`` and ``cache_blocks`` under retention intervals. The base rules are
in ``test_managers_units.py``.

Pools are built with ``BlockPool(N, caching, hash_block_size)``: block 0 is the null block,
so the first ``get_new_blocks`` returns ids 1, 2, ... Hashes are short byte strings.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime_helpers import chunked, swa  # noqa: E402

from kvverify.errors import KVVerifyError  # noqa: E402
from kvverify.reference.managers.chunked_local import ChunkedLocalAttentionManager  # noqa: E402
from kvverify.reference.managers.sliding_window import (  # noqa: E402
    SlidingWindowManager,
    contiguous_blocks_for_hit,
)

from manager_helpers import H  # noqa: E402
from manager_helpers import cached as _cached  # noqa: E402
from manager_helpers import mgr as _mgr  # noqa: E402
from manager_helpers import pool as _pool  # noqa: E402
from manager_helpers import req as _req  # noqa: E402


# --- find_longest_cache_hit: sliding window ------------------------------------------------


def test_contiguous_blocks_for_hit() -> None:
    """Upstream ``_contiguous_blocks_for_hit`` (no EAGLE): ``cdiv(W - 1, B)``."""
    assert [contiguous_blocks_for_hit(w, 4) for w in (1, 2, 5, 6, 9, 10)] == [0, 1, 1, 2, 2, 3]


def test_swa_hit_right_to_left_contiguous_window() -> None:
    """Upstream ``SlidingWindowManager.find_longest_cache_hit`` (W=9, B=4: 2 blocks in a
    row). Cached: B, C, E of A..F. From the right: F miss, E hit (1), D miss (reset),
    C hit (1), B hit (2): match; ``[null, B, C]``, hit 12."""
    pool = _pool(12)
    b, c, e = _cached(pool, [H[1], H[2], H[4]], 4)
    find = SlidingWindowManager.find_longest_cache_hit
    blocks, hit = find(H[:6], 24, [0], pool, swa(9, 4), 4)
    assert blocks == ([pool.null_block, b, c],) and hit == 12
    # max_length 11: only A, B scanned; B alone (1 < 2) at the right, A missing: no hit
    blocks, hit = find(H[:6], 11, [0], pool, swa(9, 4), 4)
    assert blocks == ([],) and hit == 0
    # W=5 needs 1 block: the rightmost cached block within max_length
    blocks, hit = find(H[:6], 24, [0], pool, swa(5, 4), 4)
    assert blocks == ([pool.null_block] * 4 + [e],) and hit == 20
    blocks, hit = find(H[:6], 16, [0], pool, swa(5, 4), 4)
    assert blocks == ([pool.null_block, pool.null_block, c],) and hit == 12


def test_swa_hit_without_full_window_takes_leading_run() -> None:
    """No run of 3 blocks (W=13): the run reaching block 0 is still a hit."""
    pool = _pool(12)
    a, b, d = _cached(pool, [H[0], H[1], H[3]], 4)
    find = SlidingWindowManager.find_longest_cache_hit
    blocks, hit = find(H[:5], 20, [0], pool, swa(13, 4), 4)
    assert blocks == ([a, b],) and hit == 8
    # two groups: the hit must be common to both
    a1 = _cached(pool, [H[0]], 4, gid=1)[0]
    blocks, hit = find(H[:5], 20, [0, 1], pool, swa(13, 4), 4)
    assert blocks == ([a], [a1]) and hit == 4
    del d


def test_swa_hit_alignment_skips_unaligned_right_edges() -> None:
    """Alignment 8 with B=4: a run may only end on a block whose end is a multiple of 8
    (``((i + 1) * B) % 8 == 0``). Cached A, B, C (W=9, need 2): C ends at 12, skipped;
    B (8) and A: ``[A, B]``, hit 8. Without the skip the run would be ``[null, B, C]``."""
    pool = _pool(12)
    a, b, c = _cached(pool, H[:3], 4)
    find = SlidingWindowManager.find_longest_cache_hit
    blocks, hit = find(H[:4], 16, [0], pool, swa(9, 4), 8)
    assert blocks == ([a, b],) and hit == 8
    # once a run started, unaligned blocks extend it: W=13 (need 3), cached A..D, align 8
    d = _cached(pool, [H[3]], 4)[0]
    blocks, hit = find(H[:5], 20, [0], pool, swa(13, 4), 8)
    assert blocks == ([pool.null_block, b, c, d],) and hit == 16
    # alignment equal to the block size: no skip
    blocks, hit = find(H[:4], 12, [0], pool, swa(9, 4), 4)
    assert blocks == ([pool.null_block, b, c],) and hit == 12


# --- find_longest_cache_hit: chunked local -------------------------------------------------


def test_chunked_local_hit_counts_earlier_chunks_as_null() -> None:
    """Upstream ``ChunkedLocalAttentionManager.find_longest_cache_hit`` docstring examples
    (C=8, B=4): max 15 -> blocks 0, 1 null, block 2 looked up; max 16 -> 4 nulls."""
    pool = _pool(12)
    blk = _cached(pool, [H[2]], 4)[0]
    find = ChunkedLocalAttentionManager.find_longest_cache_hit
    null = pool.null_block
    assert find(H[:4], 15, [0], pool, chunked(8, 4), 4) == (([null, null, blk],), 12)
    assert find(H[:4], 16, [0], pool, chunked(8, 4), 4) == (([null] * 4,), 16)
    assert find(H[:4], 7, [0], pool, chunked(8, 4), 4) == (([],), 0)
    assert find(H[:4], 0, [0], pool, chunked(8, 4), 4) == (([],), 0)
    assert find(H[:6], 23, [0], pool, chunked(8, 4), 4) == (([null] * 4,), 16)
    # the scan stops at the first miss
    c2 = _cached(pool, [H[4]], 4)[0]
    assert find(H[:6], 23, [0], pool, chunked(8, 4), 4) == (([null] * 4 + [c2],), 20)
    assert find(H[:8], 31, [0], pool, chunked(16, 4), 4) == (([null] * 4 + [c2],), 20)
    # two groups
    g1 = _cached(pool, [H[2]], 4, gid=1)[0]
    assert find(H[:4], 15, [0, 1], pool, chunked(8, 4), 4) == (([null, null, blk], [null, null, g1]), 12)


def test_chunked_local_hit_refuses_coarser_alignment() -> None:
    """Upstream asserts ``block_size == alignment_tokens`` (finding F7)."""
    pool = _pool(12)
    with pytest.raises(KVVerifyError, match=r"^KV cache groups with different block sizes are not compatible with chunked "
                       r"local attention \(block_size=4, alignment=8\)$"):
        ChunkedLocalAttentionManager.find_longest_cache_hit(H[:4], 15, [0], pool, chunked(8, 4), 8)


def test_chunked_local_hit_block_size_one() -> None:
    """B=1 (C=1): ``start_idx = max_length // C * C`` only when ``max_length > 0``."""
    pool = _pool(12, hbs=1)
    find = ChunkedLocalAttentionManager.find_longest_cache_hit
    null = pool.null_block
    assert find(H[:4], 0, [0], pool, chunked(1, 1), 1) == (([],), 0)
    assert find(H[:4], 1, [0], pool, chunked(1, 1), 1) == (([null],), 1)
    assert find(H[:4], 3, [0], pool, chunked(2, 1), 1) == (([null, null],), 2)


def test_swa_hit_alignment_not_a_power_of_two() -> None:
    """Alignment 12 (B=4, W=5: 1 block): from the right, D ends at 16 (skipped), C at 12."""
    pool = _pool(12)
    a, b, c, d = _cached(pool, H[:4], 4)
    find = SlidingWindowManager.find_longest_cache_hit
    null = pool.null_block
    assert find(H[:4], 16, [0], pool, swa(5, 4), 12) == (([null, null, c],), 12)
    del a, b, d


def test_swa_hit_not_found_under_alignment() -> None:
    """No full window and alignment 8: the leading run [A, B] (8 tokens) stays; no cached
    block at all gives ``([], 0)``; A alone (4 tokens, unaligned) is not a hit."""
    pool = _pool(12)
    a, b = _cached(pool, H[:2], 4)
    find = SlidingWindowManager.find_longest_cache_hit
    assert find(H[:5], 20, [0], pool, swa(13, 4), 8) == (([a, b],), 8)
    assert find(H[2:6], 16, [0], pool, swa(13, 4), 8) == (([],), 0)
    assert find([H[0], H[5], H[6]], 12, [0], pool, swa(13, 4), 8) == (([],), 0)


# --- sliding window: sparse retention (reachable_block_mask, cache_blocks) -----------------


def test_swa_reachable_block_mask() -> None:
    """Upstream ``SlidingWindowManager.reachable_block_mask`` (no EAGLE, shift 0):
    W=9, B=4 (need 2), alignment 16 (4 blocks a segment)."""
    m = _mgr(SlidingWindowManager, swa(9, 4), _pool(), sbs=16)
    T, F = True, False
    # dense: a 2-block tail in every 16-token segment
    assert m.reachable_block_mask(0, 8) == [F, F, T, T, F, F, T, T]
    assert m.reachable_block_mask(1, 8) == [F, T, T, F, F, T, T]
    assert m.reachable_block_mask(5, 7) == [F, T]
    # retention 0: only the tails ending on the reachable boundaries (aligned down to 16)
    assert m.reachable_block_mask(0, 8, 0, [27]) == [F, F, T, T, F, F, F, F]
    assert m.reachable_block_mask(3, 8, 0, [27, 40]) == [T, F, F, T, T]
    assert m.reachable_block_mask(0, 8, 0, []) == [F] * 8
    assert m.reachable_block_mask(0, 3, 0, [27]) == [F, F, T]
    # retention 32: a tail per 8-block segment (6, 7, 14, 15) plus the boundaries
    assert m.reachable_block_mask(0, 16, 32, [27]) == [F, F, T, T, F, F, T, T] + [F] * 6 + [T, T]
    assert m.reachable_block_mask(2, 16, 32, [27]) == [T, T, F, F, T, T] + [F] * 6 + [T, T]
    # the tail covers a whole segment: dense (None)
    assert m.reachable_block_mask(0, 8, 8, [27]) is None
    assert _mgr(SlidingWindowManager, swa(9, 4), _pool(), sbs=8).reachable_block_mask(0, 8) is None
    # need 1 of 2 blocks a segment: only the last block of each segment
    m5 = _mgr(SlidingWindowManager, swa(5, 4), _pool(), sbs=8)
    assert m5.reachable_block_mask(0, 4) == [F, T, F, T]
    assert m5.reachable_block_mask(0, 4, 0, [9]) == [F, T, F, F]


def test_swa_cache_blocks_keeps_only_reachable_tails() -> None:
    """``cache_blocks`` under retention 0: only the replay boundary's tail and the
    shared-prefix junction's tail are hashed (W=9, B=4, alignment 16)."""
    pool = _pool(14)
    m = _mgr(SlidingWindowManager, swa(9, 4), pool, sbs=16)
    m.add_local_computed_blocks("r", [], 0)
    m.allocate_new_blocks("r", 32)  # ids 1..8
    r = _req("r", H[:8], num_prompt=28, junction=32)
    m.cache_blocks(r, 32, 0, replay_boundaries=(27,))
    hashed = [b.block_id for b in m.get_blocks("r") if b.block_hash is not None]
    assert hashed == [3, 4, 7, 8] and m.num_cached_block["r"] == 8
    assert pool.get_cached_block(H[7], [0]) == [m.get_blocks("r")[7]]
    # dense (retention None): a tail per alignment segment, boundaries ignored
    m2 = _mgr(SlidingWindowManager, swa(9, 4), pool, sbs=16)
    m2.allocate_new_blocks("q", 16)
    m2.cache_blocks(_req("q", H[8:12]), 16, None, replay_boundaries=(3,))
    assert [b.block_hash is not None for b in m2.get_blocks("q")] == [False, False, True, True]


def test_swa_cache_blocks_new_range_only() -> None:
    """The mask covers only the new blocks ``[num_cached, num_full)``: a junction that
    appears later does not re-hash older blocks (alignment 8, W=9, B=4)."""
    pool = _pool(12)
    m = _mgr(SlidingWindowManager, swa(9, 4), pool, sbs=8)
    m.add_local_computed_blocks("r", [], 0)
    m.allocate_new_blocks("r", 32)
    r = _req("r", H[:8], num_prompt=28)
    m.cache_blocks(r, 16, 0, replay_boundaries=(27,))  # tail of 24 is blocks 4, 5: not full yet
    assert all(b.block_hash is None for b in m.get_blocks("r")) and m.num_cached_block["r"] == 4
    r.shared_prefix_boundary = 8  # tail blocks 0, 1: already past
    m.cache_blocks(r, 32, 0, replay_boundaries=(27,))
    assert [b.block_id for b in m.get_blocks("r") if b.block_hash is not None] == [5, 6]


def test_swa_cache_blocks_request_without_junction_attribute() -> None:
    """A ``HashableRequest`` without ``shared_prefix_boundary`` has no junction (B=1,
    W=2: a junction at 1 would keep block 0)."""
    pool = _pool(12, hbs=1)
    m = _mgr(SlidingWindowManager, swa(2, 1), pool, sbs=1)
    m.allocate_new_blocks("r", 4)
    r = SimpleNamespace(request_id="r", block_hashes=list(H[:4]))
    m.cache_blocks(r, 4, 0, replay_boundaries=(3,))
    assert [b.block_hash is not None for b in m.get_blocks("r")] == [False, False, True, False]
