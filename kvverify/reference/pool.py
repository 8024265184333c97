"""The block pool: null block, LRU free queue, prefix-cache hashes, ref counts.

Mirrors upstream vLLM 0.33.0 ``vllm/v1/core/block_pool.py`` (``BlockPool``) and the
pieces of ``vllm/v1/core/kv_cache_utils.py`` it stands on (``KVCacheBlock``,
``FreeKVCacheBlockQueue``, ``hash_block_tokens``, ``get_request_block_hasher``,
``BlockHashListWithBlockSize``). Written from the upstream behaviour, not copied.

Every pool operation is O(1) per block: the free queue is an intrusive doubly linked
list threaded through the blocks themselves, with two sentinels so no branch is
needed at either end.

Behaviour worth knowing (0.33.0):

* block 0 is popped at construction and is the **null block** forever: never handed
  out, never hashed, never freed, its ``ref_cnt`` not maintained;
* ``free_blocks`` takes blocks in eviction order (first = evicted first). Blocks that
  reach ``ref_cnt == 0`` *without* a hash (or with caching off) are **prepended** to
  the head of the free queue (LIFO reuse); hashed blocks are **appended** to the tail
  (LRU). A request's blocks are freed tail-first so a chain's last block is evicted
  before its prefix;
* hashes are evicted lazily: a free block keeps its hash (it can still be hit and
  ``touch``-ed back) until ``get_new_blocks`` hands it out again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from kvverify.errors import KVVerifyError, PoolExhaustedError
from kvverify.reference.validation import require_int

BlockHash = bytes
"""A chained block hash (sha256 digest): deterministic across processes."""

BlockHashWithGroupId = tuple[bytes, int]
"""Prefix-cache key: ``(block_hash, kv_cache_group_id)`` (upstream packs the bytes)."""

NONE_HASH: BlockHash = hashlib.sha256(b"kvverify-none-hash").digest()
"""Parent hash of a request's first block (upstream ``NONE_HASH``, fixed seed)."""


def require_count(field: str, value: object, minimum: int = 0) -> int:
    """Hot-path ``require_int(field, value, minimum=minimum)``: one type check when valid."""
    if type(value) is int and value >= minimum:
        return value
    return require_int(field, value, minimum=minimum)


# --- hashes --------------------------------------------------------------------------


def hash_block_tokens(parent_block_hash: BlockHash | None,
                      curr_block_token_ids: Sequence[int],
                      extra_keys: tuple[Any, ...] | None = None) -> BlockHash:
    """Chained hash of one full block (upstream ``kv_cache_utils.hash_block_tokens``).

    ``sha256(repr((parent, tokens, extra_keys)))``: deterministic for ints, tuples and
    strings (unlike Python's salted ``hash``), so reports replay across processes.
    """
    parent = parent_block_hash if parent_block_hash else NONE_HASH
    payload = repr((parent, tuple(curr_block_token_ids), extra_keys)).encode()
    return hashlib.sha256(payload).digest()


class HashableRequest(Protocol):
    """What the block hasher reads from a request (upstream ``Request``)."""

    block_hashes: list[BlockHash]

    @property
    def all_token_ids(self) -> Sequence[int]: ...

    @property
    def num_tokens(self) -> int: ...


def get_request_block_hasher(
        hash_block_size: int,
        extra_keys_fn: Callable[[Any, int, int], tuple[Any, ...] | None] | None = None,
) -> Callable[[HashableRequest], list[BlockHash]]:
    """Hasher of a request's not-yet-hashed full blocks (upstream ``get_request_block_hasher``).

    Hashes are computed at ``hash_block_size`` granularity and chained over the whole
    prefix. ``extra_keys_fn(request, start, end)`` stands in for upstream's
    multimodal/LoRA/salt extra keys (``None`` by default).
    """
    require_int("hash_block_size", hash_block_size, minimum=1)

    def request_block_hasher(request: HashableRequest) -> list[BlockHash]:
        start = len(request.block_hashes) * hash_block_size
        num_tokens = request.num_tokens
        if start + hash_block_size > num_tokens:
            return []
        tokens = request.all_token_ids
        parent = request.block_hashes[-1] if request.block_hashes else None
        new_hashes: list[BlockHash] = []
        while start + hash_block_size <= num_tokens:
            end = start + hash_block_size
            extra = extra_keys_fn(request, start, end) if extra_keys_fn else None
            parent = hash_block_tokens(parent, tokens[start:end], extra)
            new_hashes.append(parent)
            start = end
        return new_hashes

    return request_block_hasher


class BlockHashListWithBlockSize(Sequence[BlockHash]):
    """View of fine hashes at a coarser group block size (upstream, same name).

    A group block of ``k = target_block_size / hash_block_size`` fine blocks is the
    run of ``k`` fine hashes; since every fine hash already chains over its whole
    prefix, 0.33.0 uses the **last** fine hash of the run as the coarse hash.
    """

    __slots__ = ("block_hashes", "scale_factor")

    def __init__(self, block_hashes: Sequence[BlockHash], hash_block_size: int,
                 target_block_size: int) -> None:
        require_int("hash_block_size", hash_block_size, minimum=1)
        require_int("target_block_size", target_block_size, minimum=1)
        if target_block_size % hash_block_size != 0:
            raise KVVerifyError(
                f"target_block_size={target_block_size} must be a multiple of "
                f"hash_block_size={hash_block_size}")
        self.block_hashes = block_hashes
        self.scale_factor = target_block_size // hash_block_size

    def __len__(self) -> int:
        return len(self.block_hashes) // self.scale_factor

    def __getitem__(self, idx):  # int or slice, like a list
        if isinstance(idx, slice):
            return [self._at(i) for i in range(*idx.indices(len(self)))]
        if idx < 0:
            idx += len(self)
        if not 0 <= idx < len(self):
            raise IndexError(idx)
        return self._at(idx)

    def __iter__(self) -> Iterator[BlockHash]:
        for i in range(len(self)):
            yield self._at(i)

    def _at(self, idx: int) -> BlockHash:
        return self.block_hashes[(idx + 1) * self.scale_factor - 1]


BlockHashList = Sequence[BlockHash] | BlockHashListWithBlockSize


def resolve_block_hashes(block_hashes: BlockHashList, hash_block_size: int,
                         block_size: int) -> BlockHashList:
    """The hash view at ``block_size`` (upstream ``resolve_block_hashes``, coarse only)."""
    if block_size == hash_block_size:
        return block_hashes
    if isinstance(block_hashes, BlockHashListWithBlockSize):
        return block_hashes
    return BlockHashListWithBlockSize(block_hashes, hash_block_size, block_size)


# --- blocks and the free queue -------------------------------------------------------


class KVCacheBlock:
    """Metadata of one KV cache block (upstream ``kv_cache_utils.KVCacheBlock``)."""

    __slots__ = (
        "block_hash",
        "block_id",
        "is_null",
        "next_free_block",
        "prev_free_block",
        "ref_cnt",
    )

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        #: prefix-cache key, set only while the block is full and cached
        self.block_hash: BlockHashWithGroupId | None = None
        #: free-queue links; only ``FreeKVCacheBlockQueue`` touches them
        self.prev_free_block: KVCacheBlock | None = None
        self.next_free_block: KVCacheBlock | None = None
        self.is_null = False

    def reset_hash(self) -> None:
        """Forget the hash (upstream ``KVCacheBlock.reset_hash``)."""
        self.block_hash = None

    def __repr__(self) -> str:
        prev_id = self.prev_free_block.block_id if self.prev_free_block else None
        next_id = self.next_free_block.block_id if self.next_free_block else None
        return (f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, "
                f"block_hash={self.block_hash!r}, prev={prev_id}, next={next_id})")


class FreeKVCacheBlockQueue:
    """Doubly linked free list, head = eviction end (upstream ``FreeKVCacheBlockQueue``).

    All operations but ``get_all_free_blocks`` are O(1) per block and allocate no
    Python objects: the links live in the blocks; two sentinels (id -1) bound the list.
    """

    __slots__ = ("fake_free_list_head", "fake_free_list_tail", "num_free_blocks")

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self.fake_free_list_head = KVCacheBlock(-1)
        self.fake_free_list_tail = KVCacheBlock(-1)
        prev = self.fake_free_list_head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = prev

    def __len__(self) -> int:
        return self.num_free_blocks

    def popleft(self) -> KVCacheBlock:
        """Pop the head (the next block to evict)."""
        first = self.fake_free_list_head.next_free_block
        if first is None or first is self.fake_free_list_tail:
            raise PoolExhaustedError("Cannot get 1 free blocks from the pool")
        self._unlink(first)
        return first

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Pop the first ``n`` blocks, in queue order."""
        if n > self.num_free_blocks:
            raise PoolExhaustedError(f"Cannot get {n} free blocks from the pool")
        ret: list[KVCacheBlock] = []
        if n <= 0:
            return ret
        head = self.fake_free_list_head
        curr = head.next_free_block
        for _ in range(n):
            assert curr is not None
            ret.append(curr)
            nxt = curr.next_free_block
            curr.prev_free_block = curr.next_free_block = None
            curr = nxt
        assert curr is not None
        head.next_free_block = curr
        curr.prev_free_block = head
        self.num_free_blocks -= n
        return ret

    def remove(self, block: KVCacheBlock) -> None:
        """Take ``block`` out of the middle of the queue."""
        if block.prev_free_block is None or block.next_free_block is None:
            raise KVVerifyError(f"remove() called on block {block.block_id}, "
                                "which is not in the free queue")
        self._unlink(block)

    def _unlink(self, block: KVCacheBlock) -> None:
        prev, nxt = block.prev_free_block, block.next_free_block
        assert prev is not None and nxt is not None
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Put ``block`` at the tail (evicted last)."""
        self.append_n([block])

    def append_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Put ``blocks`` at the tail, in order."""
        if not blocks:
            return
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        assert last is not None
        for block in blocks:
            self._check_detached(block)
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Put ``blocks`` at the head, in order (``blocks[0]`` is evicted first)."""
        if not blocks:
            return
        head = self.fake_free_list_head
        first = head.next_free_block
        assert first is not None
        prev = head
        for block in blocks:
            self._check_detached(block)
            block.prev_free_block = prev
            prev.next_free_block = block
            prev = block
        prev.next_free_block = first
        first.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    @staticmethod
    def _check_detached(block: KVCacheBlock) -> None:
        if block.prev_free_block is not None or block.next_free_block is not None:
            raise KVVerifyError(f"block {block.block_id} is already in the free queue")

    def __iter__(self) -> Iterator[KVCacheBlock]:
        curr = self.fake_free_list_head.next_free_block
        tail = self.fake_free_list_tail
        while curr is not None and curr is not tail:
            yield curr
            curr = curr.next_free_block

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """All free blocks, head (evicted first) to tail. O(free); for checkers/tests."""
        return list(self)


# --- the pool ------------------------------------------------------------------------


class BlockPool:
    """Allocate, free and cache KV cache blocks (upstream ``block_pool.BlockPool``).

    ``num_gpu_blocks`` counts the null block: ``N - 1`` blocks are usable.
    """

    def __init__(self, num_gpu_blocks: int, enable_caching: bool,
                 hash_block_size: int) -> None:
        require_int("num_gpu_blocks", num_gpu_blocks, minimum=1)
        require_int("hash_block_size", hash_block_size, minimum=1)
        if not isinstance(enable_caching, bool):
            raise KVVerifyError(f"enable_caching={enable_caching!r} is invalid: "
                                "must be a bool")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.hash_block_size = hash_block_size
        self.blocks: tuple[KVCacheBlock, ...] = tuple(
            KVCacheBlock(i) for i in range(num_gpu_blocks))
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        # key -> {block_id: block}; several blocks may share a key (no dedup upstream)
        self.cached_block_hash_to_block: dict[BlockHashWithGroupId,
                                              dict[int, KVCacheBlock]] = {}
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True

    # -- prefix cache --

    def get_cached_block(self, block_hash: BlockHash,
                         kv_cache_group_ids: Sequence[int]) -> list[KVCacheBlock] | None:
        """One cached block per group for ``block_hash``, or None on any miss."""
        cached: list[KVCacheBlock] = []
        for group_id in kv_cache_group_ids:
            blocks = self.cached_block_hash_to_block.get((block_hash, group_id))
            if not blocks:
                return None
            cached.append(next(iter(blocks.values())))
        return cached

    def cache_full_blocks(self, request: HashableRequest, blocks: Sequence[KVCacheBlock],
                          num_cached_blocks: int, num_full_blocks: int, block_size: int,
                          kv_cache_group_id: int,
                          block_mask: Sequence[bool] | None = None) -> None:
        """Hash ``blocks[num_cached_blocks:num_full_blocks]`` into the prefix cache.

        Upstream ``BlockPool.cache_full_blocks``. Null blocks and blocks masked out by
        ``block_mask`` (aligned with the new range) are skipped.
        """
        if num_cached_blocks >= num_full_blocks:
            return
        hashes = resolve_block_hashes(request.block_hashes, self.hash_block_size,
                                      block_size)
        if len(hashes) < num_full_blocks:
            raise KVVerifyError(
                f"cache_full_blocks: request has {len(hashes)} block hashes at "
                f"block_size={block_size}, fewer than num_full_blocks={num_full_blocks}")
        for i in range(num_cached_blocks, num_full_blocks):
            blk = blocks[i]
            if blk.is_null or (block_mask is not None
                               and not block_mask[i - num_cached_blocks]):
                continue
            key = (hashes[i], kv_cache_group_id)
            if blk.block_hash == key:
                continue
            if blk.block_hash is not None:
                self._remove_cached_block_hash(blk)
            blk.block_hash = key
            self.cached_block_hash_to_block.setdefault(key, {})[blk.block_id] = blk

    def _remove_cached_block_hash(self, block: KVCacheBlock) -> bool:
        key = block.block_hash
        if key is None:
            return False
        entry = self.cached_block_hash_to_block.get(key)
        if entry is not None:
            entry.pop(block.block_id, None)
            if not entry:
                del self.cached_block_hash_to_block[key]
        block.reset_hash()
        return True

    # -- allocation --

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop ``num_blocks`` from the head, evicting their hashes (lazy eviction).

        Raises :class:`PoolExhaustedError` "Cannot get N free blocks from the pool"
        when ``num_blocks`` exceeds the free count, as upstream does.
        """
        require_count("num_blocks", num_blocks)
        if num_blocks > self.free_block_queue.num_free_blocks:
            raise PoolExhaustedError(f"Cannot get {num_blocks} free blocks from the pool")
        ret = self.free_block_queue.popleft_n(num_blocks)
        for block in ret:
            if block.block_hash is not None:
                self._remove_cached_block_hash(block)
            if block.ref_cnt != 0:
                raise KVVerifyError(f"free block {block.block_id} has "
                                    f"ref_cnt={block.ref_cnt}, expected 0")
            block.ref_cnt = 1
        return ret

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take prefix-cache hits: out of the free queue if ``ref_cnt == 0``, then ``+1``."""
        queue = self.free_block_queue
        for block in blocks:
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference per block; blocks reaching 0 return to the free queue.

        ``ordered_blocks`` is in eviction order (first = evicted first). Unhashed
        blocks (or all, with caching off) go to the head, hashed ones to the tail.
        """
        evict_first: list[KVCacheBlock] = []
        evict_last: list[KVCacheBlock] = []
        caching = self.enable_caching
        for block in ordered_blocks:
            if block.is_null:
                continue
            if block.ref_cnt <= 0:
                raise KVVerifyError(f"double free of block {block.block_id} "
                                    f"(ref_cnt={block.ref_cnt})")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is None or not caching:
                    evict_first.append(block)
                else:
                    evict_last.append(block)
        self.free_block_queue.prepend_n(evict_first)
        self.free_block_queue.append_n(evict_last)

    def reset_prefix_cache(self) -> bool:
        """Forget every hash; refused (False) unless every usable block is free."""
        if self.num_gpu_blocks - self.get_num_free_blocks() != 1:
            return False
        self.cached_block_hash_to_block = {}
        for block in self.blocks:
            block.reset_hash()
        return True

    # -- accounting --

    def get_num_free_blocks(self) -> int:
        """Blocks in the free queue (cached-but-free blocks included)."""
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """``1 - free / (N - 1)``; 0 when the pool has no usable block."""
        usable = self.num_gpu_blocks - 1
        if usable == 0:
            return 0.0
        return 1.0 - self.get_num_free_blocks() / usable

    # -- read-only views for invariant checkers --

    def free_block_ids(self) -> list[int]:
        """Free block ids in eviction order (head first). O(free)."""
        return [b.block_id for b in self.free_block_queue]

    def held_block_ids(self) -> list[int]:
        """Ids of non-null blocks with ``ref_cnt > 0``. O(N)."""
        return [b.block_id for b in self.blocks if b.ref_cnt > 0 and not b.is_null]

    def ref_counts(self) -> dict[int, int]:
        """``block_id -> ref_cnt`` of every non-null block. O(N)."""
        return {b.block_id: b.ref_cnt for b in self.blocks if not b.is_null}

    def cached_entries(self) -> Iterator[tuple[BlockHashWithGroupId, KVCacheBlock]]:
        """Every ``(key, block)`` pair of the prefix-cache map."""
        for key, blocks in self.cached_block_hash_to_block.items():
            for block in blocks.values():
                yield key, block

    @property
    def num_cached_blocks(self) -> int:
        """Number of (key, block) entries in the prefix-cache map."""
        return sum(len(v) for v in self.cached_block_hash_to_block.values())
