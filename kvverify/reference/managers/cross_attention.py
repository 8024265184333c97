"""Cross attention (encoder-decoder): one static allocation for the encoder tokens.

Upstream ``CrossAttentionManager``. The coordinator passes the encoder token count
instead of the decoder's; nothing is prefix-cached and nothing is recycled.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvverify.reference.managers.base import SingleTypeKVCacheManager
from kvverify.reference.pool import BlockHashList, BlockPool, HashableRequest, KVCacheBlock
from kvverify.reference.specs import KVCacheSpec


class CrossAttentionManager(SingleTypeKVCacheManager):
    """Holds ``cdiv(encoder_tokens, B)`` blocks from the first step to the end."""

    def add_local_computed_blocks(self, request_id: str,
                                  new_computed_blocks: Sequence[KVCacheBlock],
                                  num_local_computed_tokens: int) -> None:
        """No prefix-cache hits for encoder states."""
        if any(not b.is_null for b in new_computed_blocks):
            raise AssertionError("cross-attention groups never have prefix-cache hits")

    def cache_blocks(self, request: HashableRequest, num_tokens: int) -> None:
        """Encoder states are never shared between requests."""
        return

    @classmethod
    def find_longest_cache_hit(cls, block_hashes: BlockHashList, max_length: int,
                               kv_cache_group_ids: Sequence[int], block_pool: BlockPool,
                               kv_cache_spec: KVCacheSpec,
                               alignment_tokens: int) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """Never a hit."""
        return tuple([] for _ in kv_cache_group_ids), 0
