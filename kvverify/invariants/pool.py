"""Pool invariants: partition, ref counts, null block, hash map, usage, free-queue order.

null ⊎ free ⊎ held = all ids; every block's ref count equals its holders; the null
block is never free, held or hashed; every hash-map entry points at a block carrying
that hash and vice versa; usage is exactly ``1 - free / (N - 1)``; the free queue equals
an independent model of upstream's (:class:`FreeQueueModel`) exactly.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kvverify.invariants.base import Violation


def check_pool(kv_cache_manager) -> list[Violation]:
    pool = kv_cache_manager.block_pool
    out: list[Violation] = []
    n = pool.num_gpu_blocks
    free = pool.free_block_ids()
    held = pool.held_block_ids()
    null_id = pool.null_block.block_id
    if null_id != 0:
        out.append(Violation("pool.null_block_id", "the null block is not block 0", {"null": null_id}))
    if null_id in free or null_id in held:
        out.append(Violation("pool.null_block_handed_out", "the null block is free or held",
                             {"in_free": null_id in free, "in_held": null_id in held}))
    if len(set(free)) != len(free):
        dup = [b for b, c in Counter(free).items() if c > 1]
        out.append(Violation("pool.free_duplicates", "a block appears twice in the free queue", {"blocks": dup}))
    overlap = set(free) & set(held)
    if overlap:
        out.append(Violation("pool.free_and_held", "a block is both free and held", {"blocks": sorted(overlap)}))
    covered = {null_id} | set(free) | set(held)
    if covered != set(range(n)):
        out.append(Violation("pool.partition", "null + free + held does not cover every block id",
                             {"missing": sorted(set(range(n)) - covered)[:10], "num_blocks": n}))
    if pool.get_num_free_blocks() != len(free):
        out.append(Violation("pool.free_count", "free count disagrees with the free queue",
                             {"count": pool.get_num_free_blocks(), "queue": len(free)}))
    holders: Counter[int] = Counter()
    for manager in kv_cache_manager.coordinator.single_type_managers:
        for blocks in manager.req_to_blocks.values():
            for b in blocks:
                if not b.is_null:
                    holders[b.block_id] += 1
    for bid, rc in pool.ref_counts().items():
        if rc != holders.get(bid, 0):
            out.append(Violation("pool.ref_count", "ref count differs from the number of holders",
                                 {"block": bid, "ref_cnt": rc, "holders": holders.get(bid, 0)}))
            break
    for key, block in pool.cached_entries():
        if block.block_hash != key or block.is_null:
            out.append(Violation("pool.hash_map", "hash map entry does not match its block",
                                 {"block": block.block_id, "key": repr(key)[:40]}))
            break
    mapped = {b.block_id for _, b in pool.cached_entries()}
    for b in pool.blocks:
        if b.block_hash is not None and b.block_id not in mapped:
            out.append(Violation("pool.stale_hash", "a block keeps a hash the map forgot", {"block": b.block_id}))
            break
    usage = pool.get_usage()
    if not 0.0 <= usage <= 1.0:
        out.append(Violation("pool.usage_range", "usage outside [0, 1]", {"usage": usage}))
    # exact, not only in range: the fraction of the N - 1 usable blocks that are not free
    # (0.0 on an empty pool, 1.0 on a full one; upstream BlockPool.get_usage)
    exact = 1.0 - len(free) / (n - 1) if n > 1 else 0.0
    if abs(usage - exact) > 1e-9:
        out.append(Violation("pool.usage_exact", "usage is not 1 - free / (N - 1)",
                             {"usage": usage, "expected": exact, "free": len(free), "num_blocks": n}))
    return out


class FreeQueueModel:
    """An independent model of upstream 0.33.0's free block queue, checked exactly.

    Kept from the calls alone (never read back from the pool's queue), after upstream
    ``FreeKVCacheBlockQueue`` and ``BlockPool`` (``vllm/v1/core/kv_cache_utils.py``,
    ``block_pool.py``) and the managers' free order:

    * at construction the queue is ``[1, ..., N - 1]``: block 0 is popped as the null
      block and is never in it;
    * ``get_new_blocks(n)`` hands out the first ``n`` (``popleft_n``: LRU eviction order);
    * ``touch`` takes a hit block whose reference count is 0 out of the queue;
    * ``free_blocks(ordered)``: a block whose count drops to 0 goes to the **head** when it
      has no hash (or caching is off; ``prepend_n``, LIFO reuse) and to the **tail** when
      hashed (``append_n``, LRU), both in the given order;
    * a request's free (``KVCacheManager.free`` -> ``KVCacheCoordinator.free``) is applied in
      upstream's order, not the order the reference passes: group by group, each group's
      block table **reversed** (``SingleTypeKVCacheManager.free``: tail blocks evicted first),
      one ``free_blocks`` call per group;
    * blocks that leave the attention window during ``allocate_slots``
      (``remove_skipped_blocks`` -> ``_remove_blocks_in_range``) are freed right to left: each
      such call must pass them in strictly decreasing block-table position; they are then
      applied in that order.

    The model keeps its own reference counts. It wraps the pool's ``get_new_blocks``,
    ``touch`` and ``free_blocks`` and the manager's ``free`` and ``allocate_slots`` on these
    instances. :func:`check_free_queue` compares after every step; mismatches seen
    inside a call collect in ``violations``. ``pool``: the object the managers call, when
    ``kv_cache_manager.block_pool`` is a view over it (the vLLM adapter's).
    """

    def __init__(self, kv_cache_manager: Any, pool: Any = None) -> None:
        self.pool = kv_cache_manager.block_pool  # read: free_block_ids(), num_gpu_blocks, enable_caching
        pool = self.pool if pool is None else pool
        self.queue: list[int] = list(range(1, self.pool.num_gpu_blocks))
        self.ref: dict[int, int] = {}
        self.violations: list[Violation] = []
        self._in_request_free = False
        self._passed: list[int] = []
        self._where: dict[int, int] | None = None  # block id -> table position, inside allocate_slots
        get_new, touch, free_blocks = pool.get_new_blocks, pool.touch, pool.free_blocks
        managers = kv_cache_manager.coordinator.single_type_managers
        request_free = kv_cache_manager.free
        allocate_slots = kv_cache_manager.allocate_slots

        def get_new_blocks(num_blocks: int) -> Any:
            expected = self.queue[:num_blocks] if num_blocks <= len(self.queue) else None
            got = get_new(num_blocks)  # raises when the pool has fewer: the model is unchanged
            ids = [b.block_id for b in got]
            if ids != expected:
                self._add(Violation("pool.eviction_order", "get_new_blocks did not hand out the front of "
                                    "upstream's free queue", {"num_blocks": num_blocks, "got": ids[:12],
                                                              "expected": (expected or [])[:12],
                                                              "model_free": len(self.queue)}))
            if ids == expected:
                del self.queue[:num_blocks]
            else:
                taken = set(ids)
                self.queue = [i for i in self.queue if i not in taken]
            for bid in ids:
                self.ref[bid] = 1
            self._compare("get_new_blocks")
            return got

        def touch_(blocks: Any) -> None:
            blocks = list(blocks)
            touch(blocks)
            for b in blocks:
                if b.is_null:
                    continue
                if self.ref.get(b.block_id, 0) == 0 and b.block_id in self.queue:
                    self.queue.remove(b.block_id)
                self.ref[b.block_id] = self.ref.get(b.block_id, 0) + 1
            self._compare("touch")

        def free_blocks_(ordered: Any) -> None:
            ordered = list(ordered)
            if self._in_request_free:
                self._passed += [b.block_id for b in ordered if not b.is_null]
                free_blocks(ordered)
                return
            if self._where is not None:
                where = self._where
                at = [where.get(b.block_id, -1) for b in ordered if not b.is_null]
                if any(a <= b for a, b in zip(at, at[1:])) or -1 in at:
                    self._add(Violation("pool.free_queue_order", "allocate_slots freed blocks that left the "
                                        "window other than right to left (upstream _remove_blocks_in_range)",
                                        {"blocks": [b.block_id for b in ordered][:12], "positions": at[:12]}))
            self._release(ordered)
            free_blocks(ordered)
            self._compare("free_blocks")

        def allocate_slots_(*args: Any, **kwargs: Any) -> Any:
            self._where = {b.block_id: i for m in managers for table in m.req_to_blocks.values()
                           for i, b in enumerate(table) if not b.is_null}
            try:
                return allocate_slots(*args, **kwargs)
            finally:
                self._where = None

        def free(request: Any) -> None:
            rid = request.request_id
            tables = [list(reversed(m.req_to_blocks.get(rid, []))) for m in managers]
            self._in_request_free, self._passed = True, []
            try:
                request_free(request)
            finally:
                self._in_request_free = False
            expected = [b.block_id for t in tables for b in t if not b.is_null]
            if sorted(self._passed) != sorted(expected):
                self._add(Violation("pool.free_queue_order", "KVCacheManager.free returned other blocks than "
                                    "the request held", {"request": rid, "got": sorted(self._passed)[:12],
                                                         "expected": sorted(expected)[:12]}))
            for table in tables:  # one free_blocks call per group, each table tail-first
                self._release(table)
            self._compare("free")

        pool.get_new_blocks, pool.touch, pool.free_blocks = get_new_blocks, touch_, free_blocks_
        kv_cache_manager.free = free
        kv_cache_manager.allocate_slots = allocate_slots_

    def _release(self, ordered: Any) -> None:
        """Upstream ``BlockPool.free_blocks`` on the model (hash read off the block as freed)."""
        first: list[int] = []
        last: list[int] = []
        for b in ordered:
            if b.is_null:
                continue
            count = self.ref.get(b.block_id, 0) - 1
            self.ref[b.block_id] = count
            if count == 0:
                (first if b.block_hash is None or not self.pool.enable_caching else last).append(b.block_id)
        self.queue[:0] = first
        self.queue += last

    def _compare(self, call: str) -> None:
        if not self.violations:
            self.violations += check_free_queue(self.pool, self, after=call)

    def _add(self, v: Violation) -> None:
        if len(self.violations) < 3:
            self.violations.append(v)


def check_free_queue(pool: Any, model: FreeQueueModel, *, after: str = "step") -> list[Violation]:
    """The pool's free queue, head to tail, equals the model's exactly (``pool.free_queue_order``)."""
    got = pool.free_block_ids()
    expected = model.queue
    if got == expected:
        return []
    at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    lo = max(at - 2, 0)
    return [Violation("pool.free_queue_order", f"after {after}: free queue not in upstream's order",
                      {"first_difference": at, "got": got[lo:lo + 10], "expected": expected[lo:lo + 10],
                       "free": len(got), "model_free": len(expected)})]
