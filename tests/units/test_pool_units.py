"""Exact examples of the block pool (docs/mutation.md), worked from vLLM 0.33.0's source.

``vllm/v1/core/block_pool.py`` (``BlockPool``) and ``vllm/v1/core/kv_cache_utils.py``
(``KVCacheBlock``, ``FreeKVCacheBlockQueue``, ``hash_block_tokens``,
``get_request_block_hasher``, ``BlockHashListWithBlockSize``): every expected value
below is restated by hand from those functions, not read back from the reference.
Plain pytest, no Hypothesis: each test runs in milliseconds, so mutmut runs them first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pytest

from kvverify.errors import ConfigError, KVVerifyError, PoolExhaustedError
from kvverify.reference.pool import (
    NONE_HASH,
    BlockHashListWithBlockSize,
    BlockPool,
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    get_request_block_hasher,
    hash_block_tokens,
    require_count,
    resolve_block_hashes,
)


class Req:
    """The three things the block hasher and ``cache_full_blocks`` read from a request."""

    def __init__(self, tokens: Sequence[int], block_hashes: list[bytes] | None = None) -> None:
        self.tokens = list(tokens)
        self.block_hashes: list[bytes] = list(block_hashes or [])

    @property
    def all_token_ids(self) -> list[int]:
        return self.tokens

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


def sha(parent: bytes, tokens: Sequence[int], extra: object = None) -> bytes:
    """The hash restated: ``sha256(repr((parent, tuple(tokens), extra_keys)))``."""
    return hashlib.sha256(repr((parent, tuple(tokens), extra)).encode()).digest()


def chain(tokens: Sequence[int], size: int, extra=None) -> list[bytes]:
    """Upstream ``hash_request_tokens``: full blocks only, each chained on the previous."""
    out: list[bytes] = []
    parent = NONE_HASH
    for start in range(0, len(tokens) - size + 1, size):
        e = extra(start, start + size) if extra else None
        parent = sha(parent, tokens[start:start + size], e)
        out.append(parent)
    return out


def ids(blocks: Sequence[KVCacheBlock]) -> list[int]:
    return [b.block_id for b in blocks]


# --- require_count -------------------------------------------------------------------


def test_require_count_accepts_counts_and_refuses_the_rest() -> None:
    """The hot-path validator: 0 is a count, the minimum is inclusive, floats, bools and
    negatives are refused with a ConfigError naming the field and value."""
    assert require_count("n", 0) == 0
    assert require_count("n", 7) == 7
    assert require_count("n", 3, minimum=3) == 3
    for bad in (-1, 2.0, True, "3", None):
        with pytest.raises(ConfigError) as err:
            require_count("num_blocks", bad)
        assert err.value.field == "num_blocks" and err.value.value == bad
    with pytest.raises(ConfigError) as err:
        require_count("n", 2, minimum=3)
    assert err.value.field == "n" and err.value.value == 2 and "3" in err.value.allowed


# --- hashes --------------------------------------------------------------------------


def test_hash_block_tokens_exact_value() -> None:
    """``hash_block_tokens``: a falsy parent means ``NONE_HASH``; the tuple
    ``(parent, tuple(tokens), extra_keys)`` is what is hashed."""
    assert hash_block_tokens(None, [1, 2]) == sha(NONE_HASH, (1, 2))
    assert hash_block_tokens(b"", [1, 2]) == sha(NONE_HASH, (1, 2))
    parent = sha(NONE_HASH, (9,))
    assert hash_block_tokens(parent, [1, 2]) == sha(parent, (1, 2))
    assert hash_block_tokens(parent, [1, 2], ("lora", 3)) == sha(parent, (1, 2), ("lora", 3))


def test_request_block_hasher_full_blocks_only() -> None:
    """``get_request_block_hasher``: hashes every full block not hashed yet; an exact
    multiple of the block size hashes its last block too; a partial block never."""
    hasher = get_request_block_hasher(4)
    toks = list(range(100, 112))
    assert hasher(Req(toks[:3])) == []
    assert hasher(Req(toks[:4])) == chain(toks[:4], 4)
    assert hasher(Req(toks[:11])) == chain(toks[:8], 4)
    assert hasher(Req(toks)) == chain(toks, 4)
    assert len(chain(toks, 4)) == 3
    assert get_request_block_hasher(1)(Req([5, 6])) == chain([5, 6], 1)  # one-token blocks
    with pytest.raises(ConfigError) as err:
        get_request_block_hasher(0)
    assert err.value.field == "hash_block_size"


def test_request_block_hasher_is_incremental() -> None:
    """Only the blocks after ``len(request.block_hashes)`` are hashed, chained on the
    last one already there (``request.block_hashes[-1]``)."""
    toks = list(range(50, 66))
    full = chain(toks, 4)
    hasher = get_request_block_hasher(4)
    for have in range(0, 4):
        req = Req(toks, full[:have])
        assert hasher(req) == full[have:], have
    # a stale chain is extended from its own last hash, not recomputed
    fake = [b"a" * 32, b"b" * 32]
    new = hasher(Req(toks[:12], fake))
    assert new == [sha(b"b" * 32, toks[8:12])]


def test_request_block_hasher_folds_extra_keys() -> None:
    """Extra keys (upstream's multimodal / LoRA / cache-salt keys) are asked for each
    block with its absolute token range ``(start, end)`` and folded into its hash."""
    calls: list[tuple[int, int]] = []

    def extra(req: Req, start: int, end: int) -> tuple:
        calls.append((start, end))
        return ("salt", req.tokens[0], start, end)  # read from the request, like a cache salt

    toks = list(range(10))
    hasher = get_request_block_hasher(3, extra)
    expected = chain(toks, 3, lambda s, e: ("salt", 0, s, e))
    assert hasher(Req(toks)) == expected
    assert calls == [(0, 3), (3, 6), (6, 9)]
    # incremental: the offsets are absolute, not relative to the new part
    calls.clear()
    assert hasher(Req(toks, expected[:2])) == expected[2:]
    assert calls == [(6, 9)]
    assert expected != chain(toks, 3)


# --- the coarse hash view ------------------------------------------------------------


def test_block_hash_list_with_block_size_exact() -> None:
    """``BlockHashListWithBlockSize``: length ``len // k``, item ``i`` is fine hash
    ``(i + 1) * k - 1``; negative indices and slices act like a list's."""
    fine = [bytes([i]) * 4 for i in range(7)]
    view = BlockHashListWithBlockSize(fine, 2, 6)  # k = 3, a partial coarse block at the end
    assert view.scale_factor == 3 and len(view) == 2
    assert view[0] == fine[2] and view[1] == fine[5]
    assert view[0:2] == [fine[2], fine[5]] and view[1:] == [fine[5]] and view[:0] == []
    assert list(view) == [fine[2], fine[5]]
    with pytest.raises(IndexError):
        view[2]
    assert len(BlockHashListWithBlockSize(fine, 4, 4)) == 7
    assert list(BlockHashListWithBlockSize(fine[:2], 1, 1)) == fine[:2]  # size-1 blocks
    assert list(BlockHashListWithBlockSize(fine, 1, 4)) == [fine[3]]
    # negative indices only where upstream's arithmetic (no range check) agrees: a
    # whole number of coarse blocks
    whole = BlockHashListWithBlockSize(fine[:6], 2, 6)
    assert whole[-1] == fine[5] and whole[-2] == fine[2] and whole[-2:] == [fine[2], fine[5]]
    for bad in (2, -3):
        with pytest.raises(IndexError):
            whole[bad]


@pytest.mark.parametrize("hash_bs,target", [(4, 5), (4, 6), (4, 2), (3, 4)])
def test_block_hash_list_refuses_a_non_multiple(hash_bs: int, target: int) -> None:
    with pytest.raises(KVVerifyError) as err:
        BlockHashListWithBlockSize([], hash_bs, target)
    assert f"target_block_size={target}" in str(err.value)
    assert f"hash_block_size={hash_bs}" in str(err.value)


@pytest.mark.parametrize("field,args", [("hash_block_size", (0, 4)),
                                        ("target_block_size", (4, 0))])
def test_block_hash_list_refuses_a_bad_size(field: str, args: tuple[int, int]) -> None:
    with pytest.raises(ConfigError) as err:
        BlockHashListWithBlockSize([], *args)
    assert err.value.field == field and err.value.value == 0


def test_resolve_block_hashes() -> None:
    """``resolve_block_hashes``: same size -> the list itself; coarser -> a view;
    a view is passed through."""
    fine = [bytes([i]) for i in range(8)]
    assert resolve_block_hashes(fine, 2, 2) is fine
    view = resolve_block_hashes(fine, 2, 8)
    assert isinstance(view, BlockHashListWithBlockSize) and list(view) == [fine[3], fine[7]]
    assert resolve_block_hashes(view, 2, 4) is view


# --- blocks and the free queue -------------------------------------------------------


def test_fresh_block_and_sentinels() -> None:
    """``KVCacheBlock(id)``: ref_cnt 0, no hash, no links, not null. The free queue's two
    sentinels are ``KVCacheBlock(block_id=-1)`` (upstream ``fake_free_list_head/tail``)."""
    b = KVCacheBlock(5)
    assert (b.block_id, b.ref_cnt, b.block_hash, b.is_null) == (5, 0, None, False)
    assert b.prev_free_block is None and b.next_free_block is None
    q = FreeKVCacheBlockQueue([])
    assert q.fake_free_list_head.block_id == -1 and q.fake_free_list_tail.block_id == -1
    assert q.fake_free_list_head.next_free_block is q.fake_free_list_tail
    assert q.fake_free_list_tail.prev_free_block is q.fake_free_list_head
    assert repr(KVCacheBlock(3)) == ("KVCacheBlock(block_id=3, ref_cnt=0, block_hash=None, "
                                     "prev=None, next=None)")
    q.append(b)  # a fresh block is detached: it may join a queue
    assert ids(q.get_all_free_blocks()) == [5] and len(q) == 1
    assert "prev=-1" in repr(b) and "next=-1" in repr(b) and "block_id=5" in repr(b)
    b.block_hash = (b"h", 0)
    b.reset_hash()
    assert b.block_hash is None


def test_free_queue_construction_links_every_block() -> None:
    blocks = [KVCacheBlock(i) for i in range(4)]
    q = FreeKVCacheBlockQueue(blocks)
    assert len(q) == q.num_free_blocks == 4
    assert ids(q.get_all_free_blocks()) == [0, 1, 2, 3]
    assert blocks[0].prev_free_block is q.fake_free_list_head
    assert blocks[3].next_free_block is q.fake_free_list_tail
    assert q.fake_free_list_tail.prev_free_block is blocks[3]
    assert q.fake_free_list_head.next_free_block is blocks[0]
    for a, b in zip(blocks, blocks[1:]):
        assert a.next_free_block is b and b.prev_free_block is a


def _links_ok(q: FreeKVCacheBlockQueue) -> list[int]:
    """Walk both directions; return the ids head to tail."""
    fwd = []
    cur = q.fake_free_list_head.next_free_block
    prev = q.fake_free_list_head
    while cur is not q.fake_free_list_tail:
        assert cur is not None and cur.prev_free_block is prev
        fwd.append(cur.block_id)
        prev, cur = cur, cur.next_free_block
    assert q.fake_free_list_tail.prev_free_block is prev
    assert len(fwd) == q.num_free_blocks
    return fwd


def test_free_queue_popleft_remove_and_relink() -> None:
    """``popleft``/``popleft_n``/``remove``/``append_n``/``prepend_n`` keep both links
    and the count exact; a popped or removed block is fully detached."""
    blocks = [KVCacheBlock(i) for i in range(6)]
    q = FreeKVCacheBlockQueue(blocks)
    first = q.popleft()
    assert first is blocks[0] and first.prev_free_block is None and first.next_free_block is None
    assert _links_ok(q) == [1, 2, 3, 4, 5]
    assert q.popleft_n(0) == [] and _links_ok(q) == [1, 2, 3, 4, 5]
    two = q.popleft_n(2)
    assert ids(two) == [1, 2] and all(b.prev_free_block is None and b.next_free_block is None
                                     for b in two)
    assert _links_ok(q) == [3, 4, 5]
    q.remove(blocks[4])
    assert blocks[4].prev_free_block is None and blocks[4].next_free_block is None
    assert _links_ok(q) == [3, 5]
    q.append_n([blocks[1], blocks[4]])
    assert _links_ok(q) == [3, 5, 1, 4]
    q.prepend_n([blocks[2], blocks[0]])
    assert _links_ok(q) == [2, 0, 3, 5, 1, 4]
    q.append_n([])
    q.prepend_n([])
    assert _links_ok(q) == [2, 0, 3, 5, 1, 4]
    assert ids(q.popleft_n(6)) == [2, 0, 3, 5, 1, 4]
    assert _links_ok(q) == [] and len(q) == 0
    with pytest.raises(PoolExhaustedError) as err:
        q.popleft()
    assert str(err.value) == "Cannot get 1 free blocks from the pool"
    # into an empty queue from either end
    q.prepend_n([blocks[3]])
    assert _links_ok(q) == [3]
    q.append_n([blocks[2]])
    q.prepend_n([blocks[1]])
    assert _links_ok(q) == [1, 3, 2]
    assert q.popleft() is blocks[1] and _links_ok(q) == [3, 2]


def test_free_queue_popleft_n_all_and_too_many() -> None:
    blocks = [KVCacheBlock(i) for i in range(3)]
    q = FreeKVCacheBlockQueue(blocks)
    with pytest.raises(PoolExhaustedError, match="Cannot get 4 free blocks from the pool"):
        q.popleft_n(4)
    assert _links_ok(q) == [0, 1, 2]
    assert ids(q.popleft_n(3)) == [0, 1, 2] and _links_ok(q) == []


def test_free_queue_refuses_misuse() -> None:
    blocks = [KVCacheBlock(i) for i in range(3)]
    q = FreeKVCacheBlockQueue(blocks)
    out = q.popleft()
    with pytest.raises(KVVerifyError, match="block 0, which is not in the free queue"):
        q.remove(out)
    half = KVCacheBlock(7)
    half.prev_free_block = blocks[1]  # one link only: still not in the queue
    with pytest.raises(KVVerifyError, match="not in the free queue"):
        q.remove(half)
    half2 = KVCacheBlock(8)
    half2.next_free_block = blocks[1]
    with pytest.raises(KVVerifyError, match="not in the free queue"):
        q.remove(half2)
    for linked in (blocks[1], half, half2):
        with pytest.raises(KVVerifyError, match=f"block {linked.block_id} is already in the free queue"):
            q.append(linked)
        with pytest.raises(KVVerifyError, match="already in the free queue"):
            q.prepend_n([linked])
    assert _links_ok(q) == [1, 2]


# --- the pool ------------------------------------------------------------------------


def test_pool_construction() -> None:
    """``BlockPool.__init__``: ``num_gpu_blocks`` blocks, block 0 popped as the null block."""
    pool = BlockPool(5, enable_caching=True, hash_block_size=4)
    assert (pool.num_gpu_blocks, pool.enable_caching, pool.hash_block_size) == (5, True, 4)
    assert ids(pool.blocks) == [0, 1, 2, 3, 4]
    assert pool.null_block is pool.blocks[0] and pool.null_block.is_null
    assert not any(b.is_null for b in pool.blocks[1:])
    assert pool.free_block_ids() == [1, 2, 3, 4] and pool.get_num_free_blocks() == 4
    assert pool.cached_block_hash_to_block == {} and pool.num_cached_blocks == 0
    assert pool.held_block_ids() == [] and pool.ref_counts() == {1: 0, 2: 0, 3: 0, 4: 0}
    one = BlockPool(1, enable_caching=False, hash_block_size=1)
    assert one.free_block_ids() == [] and one.get_usage() == 0.0


@pytest.mark.parametrize("kwargs,field", [
    (dict(num_gpu_blocks=0, enable_caching=True, hash_block_size=4), "num_gpu_blocks"),
    (dict(num_gpu_blocks=4, enable_caching=True, hash_block_size=0), "hash_block_size"),
])
def test_pool_refuses_bad_sizes(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        BlockPool(**kwargs)
    assert err.value.field == field and err.value.value == 0


def test_pool_refuses_a_non_bool_caching_flag() -> None:
    with pytest.raises(KVVerifyError, match="enable_caching=1 is invalid: must be a bool"):
        BlockPool(4, enable_caching=1, hash_block_size=4)  # type: ignore[arg-type]


def test_get_new_blocks_pops_the_head_with_ref_cnt_one() -> None:
    """``get_new_blocks``: ``popleft_n`` from the head, each block's ref_cnt 0 -> 1; all
    the free blocks may be taken; one more is ``Cannot get N free blocks``."""
    pool = BlockPool(4, enable_caching=True, hash_block_size=2)
    assert pool.get_new_blocks(0) == []
    got = pool.get_new_blocks(3)
    assert ids(got) == [1, 2, 3] and [b.ref_cnt for b in got] == [1, 1, 1]
    assert pool.get_num_free_blocks() == 0 and pool.held_block_ids() == [1, 2, 3]
    with pytest.raises(PoolExhaustedError, match="Cannot get 1 free blocks from the pool"):
        pool.get_new_blocks(1)
    with pytest.raises(ConfigError) as err:
        pool.get_new_blocks(-1)
    assert err.value.field == "num_blocks"


def test_get_new_blocks_refuses_a_free_block_with_references() -> None:
    """Upstream asserts ``block.ref_cnt == 0`` for every block it hands out."""
    pool = BlockPool(3, enable_caching=True, hash_block_size=2)
    pool.blocks[1].ref_cnt = 2  # corrupted: in the free queue yet referenced
    with pytest.raises(KVVerifyError, match="free block 1 has ref_cnt=2, expected 0"):
        pool.get_new_blocks(1)


def _cache(pool: BlockPool, tokens: Sequence[int], n: int, group: int = 0):
    req = Req(tokens)
    req.block_hashes = get_request_block_hasher(pool.hash_block_size)(req)
    blocks = pool.get_new_blocks(n)
    pool.cache_full_blocks(req, blocks, 0, n, pool.hash_block_size, group)
    return req, blocks


def test_cache_full_blocks_and_get_cached_block() -> None:
    """``cache_full_blocks`` keys block ``i`` by ``(hash i, group)``; ``get_cached_block``
    wants a hit in every group asked, else None; the first block cached under a key wins."""
    pool = BlockPool(8, enable_caching=True, hash_block_size=2)
    toks = [1, 2, 3, 4, 5]
    req, blocks = _cache(pool, toks, 2)
    h = chain(toks, 2)
    assert [b.block_hash for b in blocks] == [(h[0], 0), (h[1], 0)]
    assert pool.get_cached_block(h[0], [0]) == [blocks[0]]
    assert pool.get_cached_block(h[1], [0]) == [blocks[1]]
    assert pool.get_cached_block(h[0], [1]) is None
    assert pool.get_cached_block(h[0], [0, 1]) is None
    assert pool.get_cached_block(h[0], []) == []
    # the same prefix cached again under group 1, and a duplicate in group 0
    _, g1 = _cache(pool, toks, 1, group=1)
    assert pool.get_cached_block(h[0], [0, 1]) == [blocks[0], g1[0]]
    assert pool.get_cached_block(h[0], [1, 0]) == [g1[0], blocks[0]]
    _, dup = _cache(pool, toks, 1, group=0)
    assert pool.get_cached_block(h[0], [0]) == [blocks[0]]  # no dedup: the first stays
    assert pool.cached_block_hash_to_block[(h[0], 0)] == {blocks[0].block_id: blocks[0],
                                                          dup[0].block_id: dup[0]}
    assert pool.num_cached_blocks == 4
    assert sorted((k, b.block_id) for k, b in pool.cached_entries()) == sorted(
        [((h[0], 0), blocks[0].block_id), ((h[1], 0), blocks[1].block_id),
         ((h[0], 1), g1[0].block_id), ((h[0], 0), dup[0].block_id)])


def test_cache_full_blocks_range_coarse_size_null_and_mask() -> None:
    """Only ``blocks[num_cached:num_full]`` is hashed; a group block size ``k`` times the
    hash size takes every ``k``-th fine hash; null and masked-out blocks are skipped; an
    empty range is a no-op even with no hashes; too few hashes is an error."""
    pool = BlockPool(10, enable_caching=True, hash_block_size=2)
    toks = list(range(12))
    req = Req(toks)
    req.block_hashes = get_request_block_hasher(2)(req)
    fine = chain(toks, 2)
    assert req.block_hashes == fine
    blocks = pool.get_new_blocks(3)
    # block size 4: coarse hashes are fine[1], fine[3], fine[5]; cache positions 1..2 only
    pool.cache_full_blocks(req, blocks, 1, 3, 4, 2)
    assert blocks[0].block_hash is None
    assert blocks[1].block_hash == (fine[3], 2) and blocks[2].block_hash == (fine[5], 2)
    # nothing to do: num_cached >= num_full, even if the request has no hashes at all
    pool.cache_full_blocks(Req([]), blocks, 3, 3, 4, 2)
    pool.cache_full_blocks(Req([]), blocks, 3, 1, 4, 2)
    # null block and mask: the mask is aligned with the new range, not with the table
    more = pool.get_new_blocks(4)
    table = [pool.null_block, *more]
    pool.cache_full_blocks(req, table, 1, 5, 2, 0, block_mask=[False, True, True, False])
    assert pool.null_block.block_hash is None
    assert [b.block_hash for b in more] == [None, (fine[2], 0), (fine[3], 0), None]
    pool.cache_full_blocks(req, table, 0, 2, 2, 0, block_mask=[True, True])
    assert more[0].block_hash == (fine[1], 0)
    with pytest.raises(KVVerifyError, match="request has 6 block hashes at block_size=2, "
                                            "fewer than num_full_blocks=7"):
        pool.cache_full_blocks(req, [*table, *more], 6, 7, 2, 0)


def test_lazy_eviction_on_reuse() -> None:
    """A freed hashed block keeps its hash (still hittable) until ``get_new_blocks``
    hands it out again; then its entry leaves the map, the others stay."""
    pool = BlockPool(4, enable_caching=True, hash_block_size=2)
    req, blocks = _cache(pool, [1, 2, 3, 4, 5, 6], 3)
    h = chain([1, 2, 3, 4, 5, 6], 2)
    assert ids(blocks) == [1, 2, 3]
    pool.free_blocks(reversed(blocks))  # tail first: 3, 2, 1 appended in that order
    assert pool.free_block_ids() == [3, 2, 1]
    assert pool.get_cached_block(h[2], [0]) == [blocks[2]]
    got = pool.get_new_blocks(1)
    assert got == [blocks[2]] and blocks[2].block_hash is None
    assert pool.get_cached_block(h[2], [0]) is None
    assert pool.get_cached_block(h[1], [0]) == [blocks[1]]
    assert pool.get_cached_block(h[0], [0]) == [blocks[0]]
    assert pool.cached_block_hash_to_block == {(h[0], 0): {1: blocks[0]}, (h[1], 0): {2: blocks[1]}}
    assert ids(pool.get_new_blocks(2)) == [2, 1]
    assert pool.cached_block_hash_to_block == {} and pool.num_cached_blocks == 0


def test_eviction_of_one_of_two_blocks_under_a_key() -> None:
    """Two blocks cached under one key: reusing one keeps the other's entry."""
    pool = BlockPool(3, enable_caching=True, hash_block_size=2)
    _, a = _cache(pool, [1, 2], 1)
    _, b = _cache(pool, [1, 2], 1)
    key = a[0].block_hash
    assert key == b[0].block_hash and pool.num_cached_blocks == 2
    pool.free_blocks(a)
    assert pool.get_new_blocks(1) == a and a[0].block_hash is None
    assert pool.cached_block_hash_to_block == {key: {b[0].block_id: b[0]}}
    assert pool.get_cached_block(key[0], [0]) == b


def test_touch_takes_hits_back_and_counts_references() -> None:
    """``touch``: skip the null block (its ref_cnt is not maintained), take a block with
    ref_cnt 0 out of the free queue, and add one reference to each."""
    pool = BlockPool(6, enable_caching=True, hash_block_size=2)
    _, blocks = _cache(pool, [1, 2, 3, 4], 2)
    pool.free_blocks(reversed(blocks))
    assert pool.free_block_ids() == [3, 4, 5, 2, 1]
    pool.touch([pool.null_block, blocks[0], blocks[1]])
    assert pool.null_block.ref_cnt == 0
    assert [b.ref_cnt for b in blocks] == [1, 1] and pool.free_block_ids() == [3, 4, 5]
    pool.touch([blocks[0]])
    assert blocks[0].ref_cnt == 2 and pool.free_block_ids() == [3, 4, 5]
    assert pool.get_num_free_blocks() == 3 and pool.get_usage() == pytest.approx(0.4)


def test_free_blocks_order_and_reference_counts() -> None:
    """``free_blocks(ordered)``: one reference off each; at 0 an unhashed block is
    prepended (LIFO), a hashed one appended (LRU), each group in the given order; the
    null block is skipped; a block at 0 is a double free."""
    pool = BlockPool(8, enable_caching=True, hash_block_size=2)
    _, hashed = _cache(pool, [1, 2, 3, 4], 2)            # blocks 1, 2
    plain = pool.get_new_blocks(3)                       # blocks 3, 4, 5
    pool.touch([plain[1]])                               # block 4: ref_cnt 2
    assert pool.free_block_ids() == [6, 7]
    pool.free_blocks([plain[0], hashed[1], pool.null_block, plain[1], hashed[0], plain[2]])
    # 3 and 5 reach 0 unhashed -> head, in the given order; 2 then 1 hashed -> tail
    assert pool.free_block_ids() == [3, 5, 6, 7, 2, 1]
    assert plain[1].ref_cnt == 1 and pool.held_block_ids() == [4]
    assert pool.ref_counts() == {1: 0, 2: 0, 3: 0, 4: 1, 5: 0, 6: 0, 7: 0}
    pool.free_blocks([plain[1]])
    assert pool.free_block_ids() == [4, 3, 5, 6, 7, 2, 1]
    with pytest.raises(KVVerifyError, match=r"double free of block 4 \(ref_cnt=0\)"):
        pool.free_blocks([plain[1]])
    assert plain[1].ref_cnt == 0


def test_free_blocks_with_caching_off_all_go_to_the_head() -> None:
    pool = BlockPool(5, enable_caching=False, hash_block_size=2)
    got = pool.get_new_blocks(3)
    got[0].block_hash = (b"x", 0)  # a hash is ignored when caching is off
    pool.free_blocks(got)
    assert pool.free_block_ids() == [1, 2, 3, 4]


def test_reset_prefix_cache_only_with_every_block_free() -> None:
    """``reset_prefix_cache``: refused (False, nothing forgotten) while any usable block
    is held; otherwise every hash and the map are cleared."""
    pool = BlockPool(4, enable_caching=True, hash_block_size=2)
    _, blocks = _cache(pool, [1, 2, 3, 4], 2)
    assert pool.reset_prefix_cache() is False
    pool.free_blocks(blocks[1:])
    assert pool.reset_prefix_cache() is False and blocks[1].block_hash is not None
    pool.free_blocks(blocks[:1])
    assert pool.reset_prefix_cache() is True
    assert pool.cached_block_hash_to_block == {} and all(b.block_hash is None for b in pool.blocks)
    assert pool.get_cached_block(chain([1, 2], 2)[0], [0]) is None
    assert pool.reset_prefix_cache() is True
    # caching still works after a reset (the map is a dict again)
    _cache(pool, [5, 6], 1)
    assert pool.num_cached_blocks == 1


def test_usage_exact() -> None:
    """``get_usage`` = ``1 - free / (N - 1)``: 0 empty, 1 full, 0 with no usable block."""
    pool = BlockPool(5, enable_caching=False, hash_block_size=1)
    assert pool.get_usage() == 0.0
    got = pool.get_new_blocks(1)
    assert pool.get_usage() == pytest.approx(0.25)
    got += pool.get_new_blocks(3)
    assert pool.get_usage() == 1.0
    pool.free_blocks(got)
    assert pool.get_usage() == 0.0
    two = BlockPool(2, enable_caching=False, hash_block_size=1)
    assert two.get_usage() == 0.0
    two.get_new_blocks(1)
    assert two.get_usage() == 1.0
