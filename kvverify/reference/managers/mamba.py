"""Mamba / linear-attention state (upstream ``MambaManager``).

Only the state after the last computed token is needed, so ``n - 1`` tokens are
skipped. Two cache modes:

* ``none`` (prefix caching off): the spec's block is one whole state (its block size
  defaults to max_model_len); a request holds ``1 + S`` blocks (``S`` speculative).
* ``align`` (prefix caching on): block size = the attention block size; block-table
  rows are position-indexed over the whole sequence, but only the running state block
  (plus ``S`` speculative blocks on the first allocation) is really taken each step;
  the rest of the row is null and the previous state block is freed two steps later.

Not modelled (0.33.0 features outside the documented surface): prefill checkpoint
blocks (``num_prefill_checkpoint_blocks`` is accepted, reserved by the startup bound,
but never taken at runtime), fine-grained partial hits and their copy-on-write, KV
connector hand-offs, EAGLE.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kvverify import fixes
from kvverify.reference import arith
from kvverify.errors import KVVerifyError
from kvverify.reference.managers.base import SingleTypeKVCacheManager, behaviour_spec
from kvverify.reference.ops import cdiv
from kvverify.reference.pool import (
    BlockHashList,
    BlockHashWithGroupId,
    BlockPool,
    HashableRequest,
    KVCacheBlock,
    resolve_block_hashes,
)
from kvverify.reference.specs import KVCacheSpec, MambaSpec


class MambaManager(SingleTypeKVCacheManager):
    """State blocks of a Mamba group; see the module docstring for the two modes."""

    supports_fine_grained_hash_lookup: ClassVar[bool] = True

    def __init__(self, kv_cache_spec: KVCacheSpec, block_pool: BlockPool, **kwargs) -> None:
        super().__init__(kv_cache_spec, block_pool, **kwargs)
        inner = behaviour_spec(kv_cache_spec)
        if not isinstance(inner, MambaSpec):
            raise KVVerifyError(f"MambaManager needs a MambaSpec, got {type(inner).__name__}")
        self.mamba_cache_mode = inner.mamba_cache_mode
        if self.enable_caching and self.mamba_cache_mode != "align":
            raise KVVerifyError("Mamba prefix caching requires mamba_cache_mode='align' "
                                f"(got {self.mamba_cache_mode!r})")
        self.num_speculative_blocks: int = inner.num_speculative_blocks
        #: hashes cached this step: a hit on them must wait for the next step
        self.cached_blocks_this_step: set[BlockHashWithGroupId] = set()
        # align-mode bookkeeping (upstream names)
        self.last_state_block_idx: dict[str, int] = {}
        self._num_retired_blocks: dict[str, int] = {}
        self._allocated_block_reqs: set[str] = set()

    @property
    def align(self) -> bool:
        return self.mamba_cache_mode == "align"

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """``n - 1``: only the state after the last computed token is kept."""
        return arith.mamba_skipped_tokens(num_computed_tokens)

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[KVCacheBlock],
                                   total_computed_tokens: int,
                                   num_tokens_main_model: int | None = None,
                                   apply_admission_cap: bool = False,
                                   num_local_computed_tokens: int | None = None) -> int:
        """``none``: as the base with ``S`` blocks of extra tokens; ``align``: at most
        ``1 (+S on first allocation)`` new state blocks plus evictable hits (upstream, warts
        included: the state block a KV connector's tokens take is not counted, and a table longer
        than needed gives a negative count — finding F13, fixed under
        ``mamba_align_counts_loaded_state``)."""
        if (new_computed_blocks and new_computed_blocks[-1].block_hash is not None
                and new_computed_blocks[-1].block_hash in self.cached_blocks_this_step):
            # a state cached this step is not readable yet: force "does not fit"
            return self.block_pool.num_gpu_blocks + 1
        if not self.align:
            num_tokens += self.block_size * self.num_speculative_blocks
            return super().get_num_blocks_to_allocate(
                request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                num_tokens_main_model, apply_admission_cap)
        if num_tokens_main_model is not None:
            num_tokens = num_tokens_main_model  # lookahead slots are not Mamba state
        required = arith.full_attention_blocks(num_tokens, self.block_size) + self.num_speculative_blocks
        num_new = required - len(new_computed_blocks) - len(self.req_to_blocks.get(request_id, ()))
        cap = 1
        if request_id not in self._allocated_block_reqs:
            cap += self.num_speculative_blocks
        if num_new > 0:
            num_new = min(num_new, cap)
        evictable = sum(1 for b in new_computed_blocks if b.ref_cnt == 0 and not b.is_null)
        if fixes.is_on("mamba_align_counts_loaded_state"):
            return self._counted_with_loaded_state(request_id, required, cap, new_computed_blocks,
                                                   total_computed_tokens, num_local_computed_tokens,
                                                   max(num_new, 0) + evictable)
        return num_new + evictable

    def _counted_with_loaded_state(self, request_id: str, required: int, cap: int,
                                   new_computed_blocks: Sequence[KVCacheBlock], total_computed_tokens: int,
                                   num_local_computed_tokens: int | None, unloaded: int) -> int:
        """Finding F13's fix: what allocation really pulls — for a new request with KV-connector
        tokens, the hits the loaded prefix leaves attended (the others are skipped, never
        touched), the loaded state block (``allocate_external_computed_blocks``) and the state
        blocks past it; never a negative count (``unloaded``: the count without loaded tokens)."""
        if (num_local_computed_tokens is None or total_computed_tokens <= num_local_computed_tokens
                or self.req_to_blocks.get(request_id)):
            return unloaded
        skipped = arith.skipped_blocks(self.get_num_skipped_tokens(total_computed_tokens), self.block_size)
        held = max(skipped, len(new_computed_blocks))
        loaded = max(0, cdiv(total_computed_tokens, self.block_size) - held)
        evictable = sum(1 for b in new_computed_blocks[skipped:] if b.ref_cnt == 0 and not b.is_null)
        return loaded + max(0, min(required - held - loaded, cap)) + evictable

    def allocate_new_blocks(self, request_id: str, num_tokens: int,
                            num_tokens_main_model: int | None = None) -> list[KVCacheBlock]:
        """``align``: null-pad the row up to the running state's slot, relocate scratch
        speculative blocks, then take the missing state block(s)."""
        if not self.align:
            num_tokens += self.block_size * self.num_speculative_blocks
            return super().allocate_new_blocks(request_id, num_tokens, num_tokens_main_model)
        if num_tokens_main_model is not None:
            num_tokens = num_tokens_main_model
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        spec = self.num_speculative_blocks
        required = arith.full_attention_blocks(num_tokens, self.block_size) + spec
        if required <= len(req_blocks):
            self._allocated_block_reqs.add(request_id)
            return []
        prev_len = len(req_blocks)
        allocated = request_id in self._allocated_block_reqs
        if allocated:
            self.last_state_block_idx[request_id] = prev_len - 1 - spec
        elif prev_len > 0:
            self.last_state_block_idx[request_id] = prev_len - 1
        num_skipped_blocks = required - spec - 1
        null = self._null_block
        if prev_len < num_skipped_blocks:
            req_blocks.extend([null] * (num_skipped_blocks - prev_len))
        if allocated:
            for idx in range(prev_len - spec, prev_len):
                if idx >= num_skipped_blocks:
                    break
                block = req_blocks[idx]
                req_blocks.append(block)  # keep the scratch block, move it to the end
                req_blocks[idx] = null
        num_new = max(required - len(req_blocks), 0)
        new_blocks = self.block_pool.get_new_blocks(num_new)
        req_blocks.extend(new_blocks)
        self._allocated_block_reqs.add(request_id)
        return new_blocks

    def _remove_blocks_in_range(self, request_id: str, first_block: int, last_block: int) -> None:
        if not self.align:
            super()._remove_blocks_in_range(request_id, first_block, last_block)
            return
        blocks = self.req_to_blocks.get(request_id, [])
        first_block = max(first_block, self._num_retired_blocks.get(request_id, 0))
        last_block = min(last_block, len(blocks))
        if first_block >= last_block:
            return
        freed: list[KVCacheBlock] = []
        null = self._null_block
        for i in range(last_block - 1, first_block - 1, -1):
            if blocks[i].is_null:
                continue  # prefill leaves null gaps between states
            freed.append(blocks[i])
            blocks[i] = null
        if freed:
            self.block_pool.free_blocks(freed)
        self._num_retired_blocks[request_id] = last_block

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        """Free states before the last one; in ``align`` also the state block of two
        steps ago (the previous step's state was copied out of it)."""
        super().remove_skipped_blocks(request_id, processed_computed_tokens)
        if not self.align:
            return
        idx = self.last_state_block_idx.get(request_id)
        if idx is not None and idx < cdiv(processed_computed_tokens, self.block_size) - 1:
            blocks = self.req_to_blocks[request_id]
            if not blocks[idx].is_null:
                self.block_pool.free_blocks([blocks[idx]])
                blocks[idx] = self._null_block

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        self._allocated_block_reqs.discard(request_id)
        self.last_state_block_idx.pop(request_id, None)
        self._num_retired_blocks.pop(request_id, None)
        return super().pop_blocks_for_free(request_id)

    def reachable_block_mask(self, start_block: int, end_block: int,
                             retention_interval: int | None = None,
                             reachable_boundaries: Sequence[int] = ()) -> list[bool] | None:
        """Sparse state-snapshot retention (upstream ``MambaManager.reachable_block_mask``):
        ``None`` dense; 0 only the state block ending on each reachable boundary (aligned
        down); ``k > 0`` also one state per ``k``-token segment."""
        if retention_interval is None:
            return None
        block_size = self.block_size
        alignment = self.cache_hit_alignment_tokens
        mask = [False] * (end_block - start_block)
        if retention_interval:
            per_segment = retention_interval // block_size
            if per_segment <= 1:
                return None
            first = (start_block + per_segment) // per_segment * per_segment - 1
            for i in range(first - start_block, len(mask), per_segment):
                mask[i] = True
        for boundary in reachable_boundaries:
            idx = boundary // alignment * alignment // block_size - 1
            if start_block <= idx < end_block:
                mask[idx - start_block] = True
        return mask

    def cache_blocks(self, request: HashableRequest, num_tokens: int,
                     retention_interval: int | None = None, *,
                     replay_boundaries: Sequence[int] = ()) -> None:
        """Cache full state blocks and remember them as not readable until next step."""
        request_id: str = request.request_id  # type: ignore[attr-defined]
        before = self.num_cached_block.get(request_id, 0)
        super().cache_blocks(request, num_tokens, retention_interval, replay_boundaries=replay_boundaries)
        after = self.num_cached_block.get(request_id, 0)
        blocks = self.req_to_blocks.get(request_id, [])
        for idx in range(before, after):
            block = blocks[idx]
            if not block.is_null and block.block_hash is not None:
                self.cached_blocks_this_step.add(block.block_hash)

    def new_step_starts(self) -> None:
        self.cached_blocks_this_step.clear()

    @classmethod
    def find_longest_cache_hit(cls, block_hashes: BlockHashList, max_length: int,
                               kv_cache_group_ids: Sequence[int], block_pool: BlockPool,
                               kv_cache_spec: KVCacheSpec,
                               alignment_tokens: int) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """Right-to-left: the last cached aligned state wins; earlier slots are null."""
        block_size = kv_cache_spec.block_size
        hashes = resolve_block_hashes(block_hashes, block_pool.hash_block_size, block_size)
        computed: tuple[list[KVCacheBlock], ...] = tuple([] for _ in kv_cache_group_ids)
        for i in range(min(max_length // block_size, len(hashes)) - 1, -1, -1):
            cached = block_pool.get_cached_block(hashes[i], kv_cache_group_ids)
            if not cached:
                continue
            if block_size != alignment_tokens and ((i + 1) * block_size) % alignment_tokens:
                continue
            for blocks, blk in zip(computed, cached):
                blocks.extend([block_pool.null_block] * i)
                blocks.append(blk)
            return computed, (i + 1) * block_size
        return computed, 0
