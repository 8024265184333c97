"""Full attention (and MLA): every block is kept until the request ends.

Upstream ``FullAttentionManager`` (coarse, block-aligned hits only: the fine-grained
partial-hit/copy-on-write path of 0.33.0 is not modelled).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kvverify.reference.managers.base import SingleTypeKVCacheManager
from kvverify.reference.ops import cdiv
from kvverify.reference.pool import BlockHashList, BlockPool, KVCacheBlock, resolve_block_hashes
from kvverify.reference.specs import KVCacheSpec


class FullAttentionManager(SingleTypeKVCacheManager):
    """Skips no tokens; hits are the longest run of cached blocks from the start."""

    supports_fine_grained_hash_lookup: ClassVar[bool] = True

    @classmethod
    def find_longest_cache_hit(cls, block_hashes: BlockHashList, max_length: int,
                               kv_cache_group_ids: Sequence[int], block_pool: BlockPool,
                               kv_cache_spec: KVCacheSpec,
                               alignment_tokens: int) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """Left-to-right scan; a miss ends the hit (hashes chain), then align down."""
        block_size = kv_cache_spec.block_size
        hashes = resolve_block_hashes(block_hashes, block_pool.hash_block_size, block_size)
        computed: tuple[list[KVCacheBlock], ...] = tuple([] for _ in kv_cache_group_ids)
        for i in range(min(max_length // block_size, len(hashes))):
            cached = block_pool.get_cached_block(hashes[i], kv_cache_group_ids)
            if not cached:
                break
            for blocks, blk in zip(computed, cached):
                blocks.append(blk)
        hit_length = len(computed[0]) * block_size if computed else 0
        hit_length -= hit_length % alignment_tokens
        num_blocks = cdiv(hit_length, block_size)
        for blocks in computed:
            del blocks[num_blocks:]
        return computed, hit_length
