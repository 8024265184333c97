"""BlockPool / FreeKVCacheBlockQueue / hashes: unit tests and a model-based state machine.

The state machine keeps a plain-Python model of the free queue order (0.33.0 rules:
unhashed frees go to the head, hashed frees to the tail, ``touch`` removes, allocation
pops the head) and of who holds which block, and checks after every operation:
null ⊎ free ⊎ held = all ids, ref counts = holders, hash map consistency, lazy
eviction, and the exact LRU order.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from kvverify.errors import KVVerifyError, PoolExhaustedError
from kvverify.reference.pool import (
    NONE_HASH,
    BlockHashListWithBlockSize,
    BlockPool,
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    get_request_block_hasher,
    hash_block_tokens,
)


class FakeRequest:
    """Minimal hashable request: ids and tokens, hashes kept up to date."""

    def __init__(self, request_id: str, tokens: list[int], hash_block_size: int) -> None:
        self.request_id = request_id
        self._tokens = list(tokens)
        self.block_hashes: list[bytes] = []
        self._hasher = get_request_block_hasher(hash_block_size)
        self.block_hashes.extend(self._hasher(self))

    @property
    def all_token_ids(self) -> list[int]:
        return self._tokens

    @property
    def num_tokens(self) -> int:
        return len(self._tokens)


def check_pool(pool: BlockPool, holders: dict[int, list[KVCacheBlock]]) -> None:
    """The structural invariants a checker can verify from the read-only views."""
    all_ids = set(range(pool.num_gpu_blocks))
    free_ids = pool.free_block_ids()
    assert len(free_ids) == len(set(free_ids)) == pool.get_num_free_blocks()
    held_ids = set(pool.held_block_ids())
    null_id = pool.null_block.block_id
    assert null_id == 0 and pool.null_block.is_null
    assert null_id not in free_ids and null_id not in held_ids
    assert set(free_ids).isdisjoint(held_ids)
    assert {null_id} | set(free_ids) | held_ids == all_ids
    # ref counts equal holders
    expected: dict[int, int] = {}
    for blocks in holders.values():
        for b in blocks:
            expected[b.block_id] = expected.get(b.block_id, 0) + 1
    for bid, cnt in pool.ref_counts().items():
        assert cnt == expected.get(bid, 0), (bid, cnt, expected.get(bid, 0))
    # hash map consistency: every entry's block carries that key, and vice versa
    entries = list(pool.cached_entries())
    for key, block in entries:
        assert block.block_hash == key and not block.is_null
    hashed = {b.block_id for b in pool.blocks if b.block_hash is not None}
    assert hashed == {b.block_id for _, b in entries}
    assert pool.null_block.block_hash is None
    # linked-list integrity
    q = pool.free_block_queue
    prev = q.fake_free_list_head
    for b in q:
        assert b.prev_free_block is prev
        prev = b
    assert q.fake_free_list_tail.prev_free_block is prev
    for b in pool.blocks:
        if b.block_id not in free_ids:
            assert b.prev_free_block is None and b.next_free_block is None
    usable = pool.num_gpu_blocks - 1
    expected_usage = 0.0 if usable == 0 else 1 - pool.get_num_free_blocks() / usable
    assert pool.get_usage() == pytest.approx(expected_usage)


# --- unit tests -----------------------------------------------------------------------


def test_null_block_is_popped_at_construction() -> None:
    pool = BlockPool(5, enable_caching=True, hash_block_size=4)
    assert pool.null_block.block_id == 0 and pool.null_block.is_null
    assert pool.get_num_free_blocks() == 4
    assert pool.free_block_ids() == [1, 2, 3, 4]
    assert pool.get_usage() == 0.0
    check_pool(pool, {})


def test_single_block_pool_has_no_usable_block() -> None:
    pool = BlockPool(1, enable_caching=False, hash_block_size=16)
    assert pool.get_num_free_blocks() == 0
    assert pool.get_usage() == 0.0
    assert pool.get_new_blocks(0) == []
    with pytest.raises(PoolExhaustedError, match="Cannot get 1 free blocks from the pool"):
        pool.get_new_blocks(1)


def test_get_new_blocks_shortage_message_and_type() -> None:
    pool = BlockPool(4, enable_caching=False, hash_block_size=16)
    pool.get_new_blocks(2)
    with pytest.raises(PoolExhaustedError, match=r"^Cannot get 2 free blocks from the pool$") as e:
        pool.get_new_blocks(2)
    assert isinstance(e.value, ValueError) and isinstance(e.value, KVVerifyError)
    assert pool.get_num_free_blocks() == 1  # nothing was taken by the failed call


@pytest.mark.parametrize("kwargs, field", [
    ({"num_gpu_blocks": 0, "enable_caching": True, "hash_block_size": 16}, "num_gpu_blocks"),
    ({"num_gpu_blocks": -3, "enable_caching": True, "hash_block_size": 16}, "num_gpu_blocks"),
    ({"num_gpu_blocks": 2.5, "enable_caching": True, "hash_block_size": 16}, "num_gpu_blocks"),
    ({"num_gpu_blocks": True, "enable_caching": True, "hash_block_size": 16}, "num_gpu_blocks"),
    ({"num_gpu_blocks": 8, "enable_caching": True, "hash_block_size": 0}, "hash_block_size"),
    ({"num_gpu_blocks": 8, "enable_caching": 1, "hash_block_size": 16}, "enable_caching"),
])
def test_bad_pool_arguments_raise_project_value_error(kwargs: dict, field: str) -> None:
    with pytest.raises(KVVerifyError, match=field) as e:
        BlockPool(**kwargs)
    assert isinstance(e.value, ValueError)


def test_negative_block_count_is_a_clear_error() -> None:
    pool = BlockPool(4, enable_caching=False, hash_block_size=16)
    with pytest.raises(KVVerifyError, match=r"num_blocks=-1 .*>= 0"):
        pool.get_new_blocks(-1)


def test_double_free_is_a_clear_error() -> None:
    pool = BlockPool(4, enable_caching=False, hash_block_size=16)
    blocks = pool.get_new_blocks(1)
    pool.free_blocks(blocks)
    with pytest.raises(KVVerifyError, match="double free"):
        pool.free_blocks(blocks)


def test_null_block_is_never_freed_or_touched() -> None:
    pool = BlockPool(3, enable_caching=True, hash_block_size=2)
    pool.touch([pool.null_block])
    pool.free_blocks([pool.null_block])
    assert pool.null_block.ref_cnt == 0
    assert pool.free_block_ids() == [1, 2]


def test_request_freed_tail_first_is_evicted_tail_first() -> None:
    """Hashed blocks of a request go to the tail in tail-first order (LRU)."""
    pool = BlockPool(8, enable_caching=True, hash_block_size=2)
    req = FakeRequest("a", [1, 2, 3, 4, 5, 6], 2)
    blocks = pool.get_new_blocks(3)  # ids 1, 2, 3
    pool.cache_full_blocks(req, blocks, 0, 3, 2, 0)
    pool.free_blocks(reversed(blocks))
    assert pool.free_block_ids() == [4, 5, 6, 7, 3, 2, 1]
    # the untouched blocks go first, then the chain's tail before its prefix
    assert [b.block_id for b in pool.get_new_blocks(5)] == [4, 5, 6, 7, 3]
    assert blocks[2].block_hash is None  # lazily evicted on reuse
    assert blocks[0].block_hash is not None and blocks[1].block_hash is not None
    assert pool.get_cached_block(req.block_hashes[0], [0]) == [blocks[0]]
    assert pool.get_cached_block(req.block_hashes[2], [0]) is None


def test_unhashed_blocks_are_reused_first() -> None:
    """0.33.0: never-hashed blocks are prepended (LIFO reuse), hashed ones appended."""
    pool = BlockPool(6, enable_caching=True, hash_block_size=2)
    req = FakeRequest("a", [7, 7], 2)
    hashed = pool.get_new_blocks(1)  # id 1
    pool.cache_full_blocks(req, hashed, 0, 1, 2, 0)
    plain = pool.get_new_blocks(2)  # ids 2, 3
    pool.free_blocks(hashed)
    pool.free_blocks(reversed(plain))
    assert pool.free_block_ids() == [3, 2, 4, 5, 1]


def test_caching_off_frees_everything_to_the_head() -> None:
    pool = BlockPool(5, enable_caching=False, hash_block_size=2)
    blocks = pool.get_new_blocks(3)
    pool.free_blocks(reversed(blocks))
    assert pool.free_block_ids() == [3, 2, 1, 4]


def test_touch_takes_a_cached_free_block_back() -> None:
    pool = BlockPool(4, enable_caching=True, hash_block_size=2)
    req = FakeRequest("a", [1, 2], 2)
    (blk,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(req, [blk], 0, 1, 2, 0)
    pool.free_blocks([blk])
    assert pool.get_num_free_blocks() == 3
    hit = pool.get_cached_block(req.block_hashes[0], [0])
    assert hit == [blk]
    pool.touch(hit)
    assert blk.ref_cnt == 1 and pool.get_num_free_blocks() == 2
    assert blk.block_id not in pool.free_block_ids()
    pool.touch(hit)  # a second holder: no queue change
    assert blk.ref_cnt == 2 and pool.get_num_free_blocks() == 2
    check_pool(pool, {0: [blk], 1: [blk]})


def test_reset_prefix_cache_only_when_everything_is_free() -> None:
    pool = BlockPool(4, enable_caching=True, hash_block_size=2)
    req = FakeRequest("a", [1, 2, 3, 4], 2)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(req, blocks, 0, 2, 2, 0)
    assert pool.reset_prefix_cache() is False
    assert pool.num_cached_blocks == 2
    pool.free_blocks(reversed(blocks))
    assert pool.reset_prefix_cache() is True
    assert pool.num_cached_blocks == 0 and all(b.block_hash is None for b in pool.blocks)


def test_free_queue_operations_are_o1_linked_list() -> None:
    blocks = [KVCacheBlock(i) for i in range(6)]
    q = FreeKVCacheBlockQueue(blocks)
    assert [b.block_id for b in q.get_all_free_blocks()] == [0, 1, 2, 3, 4, 5]
    assert q.popleft().block_id == 0
    q.remove(blocks[3])
    assert [b.block_id for b in q.popleft_n(2)] == [1, 2]
    q.append(blocks[0])
    q.append_n([blocks[1], blocks[2]])
    q.prepend_n([blocks[3]])
    assert [b.block_id for b in q.get_all_free_blocks()] == [3, 4, 5, 0, 1, 2]
    assert len(q) == 6
    with pytest.raises(KVVerifyError, match="not in the free queue"):
        q.remove(KVCacheBlock(99))
    with pytest.raises(KVVerifyError, match="already in the free queue"):
        q.append(blocks[4])
    with pytest.raises(PoolExhaustedError):
        q.popleft_n(7)


def test_hashes_chain_and_are_deterministic() -> None:
    h1 = hash_block_tokens(None, [1, 2, 3])
    assert h1 == hash_block_tokens(NONE_HASH, (1, 2, 3))
    assert h1 != hash_block_tokens(None, [1, 2, 4])
    h2 = hash_block_tokens(h1, [4, 5, 6])
    assert h2 != hash_block_tokens(None, [4, 5, 6])  # the parent is part of the hash
    assert hash_block_tokens(None, [1, 2, 3], ("salt",)) != h1
    # fixed value: stable across processes and runs (sha256, not Python's hash)
    assert h1.hex() == hash_block_tokens(None, [1, 2, 3]).hex() and len(h1) == 32


def test_request_hasher_and_coarse_view() -> None:
    req = FakeRequest("r", list(range(10)), 2)
    assert len(req.block_hashes) == 5  # 10 tokens / 2; partial blocks are not hashed
    assert req.block_hashes[1] == hash_block_tokens(req.block_hashes[0], [2, 3])
    view = BlockHashListWithBlockSize(req.block_hashes, 2, 4)
    assert len(view) == 2
    # a coarse block is the run of k fine hashes; its hash is the run's last (chained)
    assert list(view) == [req.block_hashes[1], req.block_hashes[3]]
    assert view[-1] == req.block_hashes[3] and view[0:2] == list(view)
    with pytest.raises(KVVerifyError, match="multiple"):
        BlockHashListWithBlockSize(req.block_hashes, 2, 3)


def test_cache_full_blocks_skips_null_and_masked_blocks() -> None:
    pool = BlockPool(6, enable_caching=True, hash_block_size=2)
    req = FakeRequest("a", list(range(8)), 2)
    blocks = pool.get_new_blocks(3)
    table = [pool.null_block] + blocks
    pool.cache_full_blocks(req, table, 0, 4, 2, 0, block_mask=[True, True, False, True])
    assert pool.null_block.block_hash is None
    assert table[1].block_hash == (req.block_hashes[1], 0)
    assert table[2].block_hash is None
    assert table[3].block_hash == (req.block_hashes[3], 0)


# --- model-based state machine ----------------------------------------------------------


class PoolMachine(RuleBasedStateMachine):
    """Random allocate / cache / hit / free sequences against a reference model."""

    holders = Bundle("holders")

    def __init__(self) -> None:
        super().__init__()
        self.pool: BlockPool | None = None
        self.held: dict[int, list[KVCacheBlock]] = {}
        self.model_free: list[int] = []
        self.next_holder = 0
        self.next_token = 0

    @rule(num_blocks=st.integers(1, 12), caching=st.booleans())
    def init_pool(self, num_blocks: int, caching: bool) -> None:
        if self.pool is not None:
            return
        self.pool = BlockPool(num_blocks, enable_caching=caching, hash_block_size=2)
        self.model_free = list(range(1, num_blocks))

    def _new_holder(self, blocks: list[KVCacheBlock]) -> int:
        hid = self.next_holder
        self.next_holder += 1
        self.held[hid] = blocks
        return hid

    @rule(target=holders, n=st.integers(0, 6))
    def allocate(self, n: int):
        if self.pool is None:
            return -1
        free_before = self.pool.get_num_free_blocks()
        if n > free_before:
            with pytest.raises(PoolExhaustedError, match=f"Cannot get {n} free blocks"):
                self.pool.get_new_blocks(n)
            assert self.pool.get_num_free_blocks() == free_before
            return -1
        blocks = self.pool.get_new_blocks(n)
        assert [b.block_id for b in blocks] == self.model_free[:n]
        del self.model_free[:n]
        for b in blocks:
            assert b.ref_cnt == 1 and b.block_hash is None  # evicted blocks lose hashes
            assert all(blk is not b for _, blk in self.pool.cached_entries())
        return self._new_holder(blocks)

    @rule(hid=holders, distinct=st.booleans())
    def cache(self, hid: int, distinct: bool) -> None:
        if self.pool is None or hid not in self.held or not self.pool.enable_caching:
            return
        blocks = self.held[hid]
        if any(b.block_hash is not None for b in blocks):
            return  # already cached (e.g. a hit holder)
        base = self.next_token if distinct else 0
        self.next_token += 2 * len(blocks)
        req = FakeRequest(f"h{hid}", list(range(base, base + 2 * len(blocks))), 2)
        self.pool.cache_full_blocks(req, blocks, 0, len(blocks), 2, 0)
        assert all(b.block_hash is not None for b in blocks)

    @rule(target=holders, src=holders)
    def hit(self, src: int):
        """Look a cached block up by its hash and touch it, as a prefix hit would."""
        if self.pool is None or src not in self.held:
            return -1
        hashed = [b for b in self.held[src] if b.block_hash is not None]
        if not hashed:
            return -1
        block_hash, group = hashed[0].block_hash
        found = self.pool.get_cached_block(block_hash, [group])
        assert found is not None
        was_free = found[0].ref_cnt == 0
        self.pool.touch(found)
        if was_free:
            self.model_free.remove(found[0].block_id)
        return self._new_holder(found)

    @rule(target=holders, src=holders)
    def hit_after_free(self, src: int):
        """Free a holder, then hit one of its (still cached) blocks from the free queue."""
        if self.pool is None or src not in self.held:
            return -1
        blocks = self.held[src]
        hashed = [b.block_hash for b in blocks if b.block_hash is not None]
        self._free(src)
        if not hashed:
            return -1
        found = self.pool.get_cached_block(hashed[0][0], [hashed[0][1]])
        if found is None:
            return -1
        was_free = found[0].ref_cnt == 0
        self.pool.touch(found)
        if was_free:
            self.model_free.remove(found[0].block_id)
        return self._new_holder(found)

    def _free(self, hid: int) -> None:
        assert self.pool is not None
        blocks = self.held.pop(hid)
        ordered = list(reversed(blocks))  # a request frees tail-first
        self.pool.free_blocks(ordered)
        first, last = [], []
        for b in ordered:
            if b.ref_cnt == 0:
                (first if b.block_hash is None or not self.pool.enable_caching else last).append(
                    b.block_id)
        self.model_free = first + self.model_free + last

    @rule(hid=consumes(holders))
    def free(self, hid: int) -> None:
        if self.pool is None or hid not in self.held:
            return
        self._free(hid)

    @invariant()
    def pool_is_consistent(self) -> None:
        if self.pool is None:
            return
        check_pool(self.pool, self.held)
        assert self.pool.free_block_ids() == self.model_free  # exact LRU order


TestPoolMachine = PoolMachine.TestCase  # examples and steps come from the active profile


@given(st.integers(1, 40), st.lists(st.integers(0, 5), max_size=20))
def test_alloc_free_roundtrip_returns_every_block(num_blocks: int, sizes: list[int]) -> None:
    pool = BlockPool(num_blocks, enable_caching=False, hash_block_size=4)
    held = []
    for n in sizes:
        if n <= pool.get_num_free_blocks():
            held.append(pool.get_new_blocks(n))
    for blocks in held:
        pool.free_blocks(reversed(blocks))
    assert pool.get_num_free_blocks() == num_blocks - 1
    assert sorted(pool.free_block_ids()) == list(range(1, num_blocks))
    check_pool(pool, {})
