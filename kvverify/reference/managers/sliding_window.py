"""Sliding-window attention: blocks behind the window are recycled.

Upstream ``SlidingWindowManager``. Skipped tokens ``max(0, n - W + 1 - E)``
(``E = extra_retained_tokens``); the admission cap is
``SlidingWindowSpec.max_admission_blocks_per_request``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kvverify.reference import arith
from kvverify.errors import KVVerifyError
from kvverify.reference.managers.base import SingleTypeKVCacheManager, behaviour_spec
from kvverify.reference.ops import cdiv
from kvverify.reference.pool import BlockHashList, BlockPool, KVCacheBlock, resolve_block_hashes
from kvverify.reference.specs import KVCacheSpec, SlidingWindowSpec


def _window_of(spec: KVCacheSpec) -> SlidingWindowSpec:
    inner = behaviour_spec(spec)
    if not isinstance(inner, SlidingWindowSpec):
        raise KVVerifyError(f"SlidingWindowManager needs a SlidingWindowSpec, got {type(inner).__name__}")
    return inner


def contiguous_blocks_for_hit(sliding_window: int, block_size: int) -> int:
    """Blocks a hit must find in a row to cover a window: ``cdiv(W - 1, B)``."""
    return cdiv(sliding_window - 1, block_size)


class SlidingWindowManager(SingleTypeKVCacheManager):
    """Keeps the last ``W - 1 (+E)`` tokens' blocks; older slots become null blocks."""

    recycles_blocks: ClassVar[bool] = True

    def __init__(self, kv_cache_spec: KVCacheSpec, block_pool: BlockPool, **kwargs) -> None:
        super().__init__(kv_cache_spec, block_pool, **kwargs)
        inner = _window_of(kv_cache_spec)
        self.sliding_window = inner.sliding_window
        self.extra_retained_tokens = inner.extra_retained_tokens

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """``max(0, n - W + 1 - E)``: tokens before the next token's window."""
        return arith.sliding_window_skipped_tokens(num_computed_tokens, self.sliding_window,
                                                   self.extra_retained_tokens)

    def reachable_block_mask(self, start_block: int, end_block: int,
                             retention_interval: int | None = None,
                             reachable_boundaries: Sequence[int] = ()) -> list[bool] | None:
        """The ``need = cdiv(W - 1, B)`` blocks a hit needs, ending on each boundary it can land on
        (upstream ``SlidingWindowManager.reachable_block_mask``, no EAGLE).

        ``retention_interval`` None: a tail at every hit-alignment boundary (dense); 0: only the
        tails ending at ``reachable_boundaries`` (the replay boundary ``num_prompt - 1`` and a
        shared-prefix junction, aligned down); ``k > 0``: a tail per ``k``-token segment too.
        """
        alignment = self.cache_hit_alignment_tokens
        block_size = self.block_size
        if alignment % block_size != 0:
            return None
        need = contiguous_blocks_for_hit(self.sliding_window, block_size)
        mask = [False] * (end_block - start_block)
        segment = alignment if retention_interval is None else (retention_interval or None)
        if segment is not None:
            per_segment = segment // block_size
            if need >= per_segment:
                return None
            for i in range(start_block, end_block):
                if i % per_segment >= per_segment - need:
                    mask[i - start_block] = True
        if retention_interval is not None:
            for boundary in reachable_boundaries:
                end = boundary // alignment * alignment // block_size
                for j in range(max(start_block, end - need), min(end_block, end)):
                    mask[j - start_block] = True
        return mask

    @classmethod
    def find_longest_cache_hit(cls, block_hashes: BlockHashList, max_length: int,
                               kv_cache_group_ids: Sequence[int], block_pool: BlockPool,
                               kv_cache_spec: KVCacheSpec,
                               alignment_tokens: int) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """Right-to-left scan for ``cdiv(W - 1, B)`` contiguous cached blocks.

        Blocks before the found run are null (outside the window). Without a full run,
        the leading run from block 0 (if any) is the hit, aligned down.
        """
        inner = _window_of(kv_cache_spec)
        block_size = kv_cache_spec.block_size
        hashes = resolve_block_hashes(block_hashes, block_pool.hash_block_size, block_size)
        need = contiguous_blocks_for_hit(inner.sliding_window, block_size)
        max_num_blocks = min(max_length // block_size, len(hashes))
        null = block_pool.null_block
        computed: tuple[list[KVCacheBlock], ...] = tuple(
            [null] * max_num_blocks for _ in kv_cache_group_ids)
        contiguous = 0
        match_found = False
        for i in range(max_num_blocks - 1, -1, -1):
            cached = block_pool.get_cached_block(hashes[i], kv_cache_group_ids)
            if cached:
                if (contiguous == 0 and block_size != alignment_tokens
                        and ((i + 1) * block_size) % alignment_tokens != 0):
                    continue
                for blocks, blk in zip(computed, cached):
                    blocks[i] = blk
                contiguous += 1
                if contiguous >= need:
                    for blocks in computed:
                        del blocks[i + contiguous:]
                    match_found = True
                    break
            else:
                contiguous = 0
        if not match_found:
            for blocks in computed:
                del blocks[contiguous:]
            while (computed and block_size != alignment_tokens
                   and len(computed[0]) * block_size % alignment_tokens != 0):
                for blocks in computed:
                    blocks.pop()
        hit_length = len(computed[0]) * block_size if computed else 0
        return computed, hit_length
