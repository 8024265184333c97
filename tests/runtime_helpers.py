"""Shared helpers of the runtime tests: spec/config builders and structural checks.

(Not a test module. The suite's own invariant checkers live in ``kvverify.invariants``;
these are the minimal checks the runtime's unit tests need.)
"""

from __future__ import annotations

from collections.abc import Sequence

from kvverify.reference.grouping import KVCacheGroupSpec
from kvverify.reference.kv_cache_manager import KVCacheManager
from kvverify.reference.planner import KVCacheConfig
from kvverify.reference.specs import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
)


def full(block_size: int = 16) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=64)


def swa(window: int, block_size: int = 16) -> SlidingWindowSpec:
    return SlidingWindowSpec(block_size=block_size, num_kv_heads=1, head_size=64,
                             sliding_window=window)


def chunked(chunk: int, block_size: int = 16) -> ChunkedLocalAttentionSpec:
    return ChunkedLocalAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=64,
                                     attention_chunk_size=chunk)


def cross(block_size: int = 16) -> CrossAttentionSpec:
    return CrossAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=64)


def mamba(block_size: int, mode: str = "none", spec_blocks: int = 0) -> MambaSpec:
    return MambaSpec(block_size=block_size, shapes=((4, 4),), dtypes=("float32",),
                     mamba_cache_mode=mode, num_speculative_blocks=spec_blocks)


def kv_config(num_blocks: int, *specs: KVCacheSpec) -> KVCacheConfig:
    groups = tuple(KVCacheGroupSpec((f"layer.{i}",), s) for i, s in enumerate(specs))
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=(), kv_cache_groups=groups)


def check_runtime(kvm: KVCacheManager, extra_holders: Sequence[Sequence] = ()) -> None:
    """null ⊎ free ⊎ held = all ids; ref counts = block-table holders; hashes consistent."""
    pool = kvm.block_pool
    holders: dict[int, int] = {}
    for manager in kvm.coordinator.single_type_managers:
        for table in manager.req_to_blocks.values():
            for b in table:
                if not b.is_null:
                    holders[b.block_id] = holders.get(b.block_id, 0) + 1
    for table in extra_holders:
        for b in table:
            holders[b.block_id] = holders.get(b.block_id, 0) + 1
    free_ids = pool.free_block_ids()
    held = set(pool.held_block_ids())
    assert len(free_ids) == len(set(free_ids)) == pool.get_num_free_blocks()
    assert set(free_ids).isdisjoint(held) and 0 not in free_ids and 0 not in held
    assert {0} | set(free_ids) | held == set(range(pool.num_gpu_blocks))
    for bid, cnt in pool.ref_counts().items():
        assert cnt == holders.get(bid, 0), f"block {bid}: ref_cnt {cnt} != holders {holders.get(bid, 0)}"
    for key, block in pool.cached_entries():
        assert block.block_hash == key
    assert {b.block_id for b in pool.blocks if b.block_hash is not None} == \
        {b.block_id for _, b in pool.cached_entries()}
