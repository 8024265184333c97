"""Pool invariants: partition, ref counts, null block, hash map, free order, usage.

null ⊎ free ⊎ held = all ids; every block's ref count equals its holders; the null
block is never free, held or hashed; every hash-map entry points at a block carrying
that hash and vice versa; usage is in [0, 1].
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


class FreeQueueRecorder:
    """Checks every ``BlockPool`` call against upstream's exact free-queue order.

    Upstream ``FreeKVCacheBlockQueue`` semantics, from the pool's API: ``get_new_blocks(n)``
    hands out the first ``n`` free blocks (LRU eviction order) and leaves the rest in order;
    ``touch`` takes hit blocks with ``ref_cnt == 0`` out of the queue, order otherwise kept;
    ``free_blocks(ordered)`` puts the blocks whose count drops to 0 back: unhashed ones (or
    all, caching off) at the head in the given order, hashed ones at the tail in the given
    order. Wraps the pool instance's methods; ``violations`` collects the first mismatches.
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.violations: list[Violation] = []
        get_new, touch, free = pool.get_new_blocks, pool.touch, pool.free_blocks

        def get_new_blocks(num_blocks: int) -> Any:
            before = pool.free_block_ids()
            got = get_new(num_blocks)
            self._expect("get_new_blocks", [b.block_id for b in got], before[:num_blocks])
            self._expect("get_new_blocks.rest", pool.free_block_ids(), before[num_blocks:])
            return got

        def touch_(blocks: Any) -> None:
            blocks = list(blocks)
            before = pool.free_block_ids()
            taken = {b.block_id for b in blocks if not b.is_null and b.ref_cnt == 0}
            touch(blocks)
            self._expect("touch", pool.free_block_ids(), [i for i in before if i not in taken])

        def free_blocks(ordered: Any) -> None:
            ordered = list(ordered)
            before = pool.free_block_ids()
            counts: dict[int, int] = {}
            first: list[int] = []
            last: list[int] = []
            for b in ordered:
                if b.is_null:
                    continue
                counts[b.block_id] = counts.get(b.block_id, b.ref_cnt) - 1
                if counts[b.block_id] == 0:
                    (first if b.block_hash is None or not pool.enable_caching else last).append(b.block_id)
            free(ordered)
            self._expect("free_blocks", pool.free_block_ids(), first + before + last)

        pool.get_new_blocks, pool.touch, pool.free_blocks = get_new_blocks, touch_, free_blocks

    def _expect(self, call: str, got: list[int], expected: list[int]) -> None:
        if got != expected and len(self.violations) < 3:
            self.violations.append(Violation("pool.free_queue_order", f"{call}: free queue not in upstream's order",
                                             {"got": got[:12], "expected": expected[:12]}))
