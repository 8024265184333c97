"""Chunked local attention (Llama 4): only the current chunk of ``C`` tokens is attended.

Upstream ``ChunkedLocalAttentionManager``. Skipped tokens ``floor(n / C) * C``; the
admission cap is ``ChunkedLocalAttentionSpec.max_admission_blocks_per_request``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kvverify.reference import arith
from kvverify.errors import KVVerifyError
from kvverify.reference.managers.base import SingleTypeKVCacheManager, behaviour_spec
from kvverify.reference.pool import BlockHashList, BlockPool, KVCacheBlock, resolve_block_hashes
from kvverify.reference.specs import ChunkedLocalAttentionSpec, KVCacheSpec


def _chunk_of(spec: KVCacheSpec) -> int:
    inner = behaviour_spec(spec)
    if not isinstance(inner, ChunkedLocalAttentionSpec):
        raise KVVerifyError("ChunkedLocalAttentionManager needs a ChunkedLocalAttentionSpec, "
                            f"got {type(inner).__name__}")
    return inner.attention_chunk_size


class ChunkedLocalAttentionManager(SingleTypeKVCacheManager):
    """Blocks of finished chunks are recycled; null blocks take their slots."""

    recycles_blocks: ClassVar[bool] = True

    def __init__(self, kv_cache_spec: KVCacheSpec, block_pool: BlockPool, **kwargs) -> None:
        super().__init__(kv_cache_spec, block_pool, **kwargs)
        self.attention_chunk_size = _chunk_of(kv_cache_spec)

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """``floor(n / C) * C``: every token before the current chunk."""
        return arith.chunked_local_skipped_tokens(num_computed_tokens, self.attention_chunk_size)

    @classmethod
    def find_longest_cache_hit(cls, block_hashes: BlockHashList, max_length: int,
                               kv_cache_group_ids: Sequence[int], block_pool: BlockPool,
                               kv_cache_spec: KVCacheSpec,
                               alignment_tokens: int) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """Blocks of earlier chunks count as computed (null); scan the current chunk."""
        block_size = kv_cache_spec.block_size
        if block_size != alignment_tokens:
            raise KVVerifyError(
                "KV cache groups with different block sizes are not compatible with chunked "
                f"local attention (block_size={block_size}, alignment={alignment_tokens})")
        chunk = _chunk_of(kv_cache_spec)
        hashes = resolve_block_hashes(block_hashes, block_pool.hash_block_size, block_size)
        max_num_blocks = max_length // block_size
        start_idx = max_length // chunk * chunk if max_length > 0 else 0
        start_block = start_idx // block_size
        null = block_pool.null_block
        computed: tuple[list[KVCacheBlock], ...] = tuple(
            [null] * start_block for _ in kv_cache_group_ids)
        for i in range(start_block, min(max_num_blocks, len(hashes))):
            cached = block_pool.get_cached_block(hashes[i], kv_cache_group_ids)
            if not cached:
                break
            for blocks, blk in zip(computed, cached):
                blocks.append(blk)
        hit_length = len(computed[0]) * block_size if computed else 0
        return computed, hit_length
