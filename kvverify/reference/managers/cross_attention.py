"""Cross attention (encoder-decoder): one static allocation for the encoder tokens.

Upstream ``CrossAttentionManager``. The coordinator passes the encoder token count
instead of the decoder's; nothing is prefix-cached and nothing is recycled.

With prefix caching on (upstream defaults it off for encoder-decoder models, but an explicit
``enable_prefix_caching`` is accepted) the first prefix lookup raises
``NotImplementedError`` and ``cache_blocks`` a ``ValueError``, as upstream: finding F8.
Under the fix ``encoder_decoder_prefix_caching_refused`` startup refuses it instead
(:func:`refuse_encoder_decoder_prefix_caching`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvverify import fixes
from kvverify.errors import ConfigError

from kvverify.reference.managers.base import SingleTypeKVCacheManager
from kvverify.reference.pool import BlockHashList, BlockPool, HashableRequest, KVCacheBlock
from kvverify.reference.specs import KVCacheSpec


class CrossAttentionManager(SingleTypeKVCacheManager):
    """Holds ``cdiv(encoder_tokens, B)`` blocks from the first step to the end."""

    def add_local_computed_blocks(self, request_id: str,
                                  new_computed_blocks: Sequence[KVCacheBlock],
                                  num_local_computed_tokens: int,
                                  num_external_computed_tokens: int = 0) -> None:
        """No prefix-cache hits for encoder states."""
        if any(not b.is_null for b in new_computed_blocks):
            raise AssertionError("cross-attention groups never have prefix-cache hits")

    def allocate_external_computed_blocks(self, request_id: str, num_local_computed_tokens: int,
                                          num_external_computed_tokens: int) -> None:
        """Cross attention takes no external KV loads (upstream, same name)."""
        return

    def cache_blocks(self, request: HashableRequest, num_tokens: int,
                     retention_interval: int | None = None, *,
                     replay_boundaries: Sequence[int] = ()) -> None:
        """Encoder states are never shared between requests: upstream raises (finding F8)."""
        raise ValueError("Should not be called as prefix caching is disabled.")

    @classmethod
    def find_longest_cache_hit(cls, block_hashes: BlockHashList, max_length: int,
                               kv_cache_group_ids: Sequence[int], block_pool: BlockPool,
                               kv_cache_spec: KVCacheSpec,
                               alignment_tokens: int) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """Never a hit: upstream raises instead of answering "no hit" (finding F8)."""
        raise NotImplementedError("CrossAttentionManager does not support caching")


def refuse_encoder_decoder_prefix_caching(kv_cache_config: Any, enable_caching: bool) -> None:
    """The fix for finding F8: refuse prefix caching with cross-attention groups at startup."""
    from kvverify.reference.specs import CrossAttentionSpec, iter_layer_specs

    if enable_caching and fixes.is_on("encoder_decoder_prefix_caching_refused") and any(
            isinstance(s, CrossAttentionSpec) for g in kv_cache_config.kv_cache_groups
            for s in iter_layer_specs(g.kv_cache_spec)):
        raise ConfigError("enable_prefix_caching", True,
                          "must be False for encoder-decoder models (cross-attention layers): "
                          "their KV cache cannot be prefix-cached (finding F8)")
