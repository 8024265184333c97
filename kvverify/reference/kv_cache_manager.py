"""``KVCacheManager``: the scheduler's one door to the KV cache (upstream ``kv_cache_manager.py``).

``allocate_slots`` is where admission passes or fails (0.33.0 order):

1. watermark ``int(watermark * N)``, charged only to WAITING/PREEMPTED requests and
   only when some request is already running (``has_scheduled_reqs``);
2. full-sequence gate (when ``full_sequence_must_fit``): the blocks for
   ``min(num_tokens, L)`` tokens, **with** the SWA/chunked admission cap, plus the
   watermark must fit the free blocks;
3. ``remove_skipped_blocks`` on the processed tokens (frees what left the window);
4. per-step check, **uncapped**: blocks for ``computed + new + lookahead`` (at most
   ``L``) plus the watermark must fit;
5. adopt (touch) prefix hits, allocate, cache the newly full blocks.

It returns ``None`` on failure and never raises on a step its own prediction said
fits (the prediction equals what allocation pulls from the pool).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvverify.reference import arith
from kvverify.errors import ConfigError
from kvverify.reference.validation import require_int
from kvverify.reference.managers import KVCacheCoordinator
from kvverify.reference.pool import (
    BlockPool,
    KVCacheBlock,
    get_request_block_hasher,
    require_count,
)

if TYPE_CHECKING:
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.request import Request


@dataclass(frozen=True)
class KVCacheBlocks:
    """Blocks per KV cache group (upstream ``KVCacheBlocks``)."""

    blocks: tuple[Sequence[KVCacheBlock], ...]

    def get_block_ids(self) -> tuple[list[int], ...]:
        return tuple([b.block_id for b in group] for group in self.blocks)

    @property
    def num_blocks(self) -> int:
        return sum(len(g) for g in self.blocks)


class KVCacheManager:
    """Prefix lookup, admission and allocation over the coordinator (upstream, same name)."""

    def __init__(self, kv_cache_config: Any, max_model_len: int, scheduler_block_size: int,
                 hash_block_size: int, max_in_flight_tokens: int | None = None,
                 enable_caching: bool = True, watermark: float = 0.0,
                 prefix_cache_retention_interval: int | None = 0) -> None:
        require_int("max_model_len", max_model_len, minimum=1)
        if max_in_flight_tokens is None:
            max_in_flight_tokens = max_model_len  # upstream's fallback: cap ~ uncapped
        if not isinstance(watermark, (int, float)) or isinstance(watermark, bool) \
                or not 0 <= watermark < 1:
            raise ConfigError("watermark", watermark, "must be in [0, 1)")
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.coordinator = KVCacheCoordinator(kv_cache_config, max_model_len,
                                              max_in_flight_tokens, enable_caching,
                                              scheduler_block_size, hash_block_size,
                                              retention_interval=prefix_cache_retention_interval)
        self.block_pool: BlockPool = self.coordinator.block_pool
        self.kv_cache_config = kv_cache_config
        self.num_kv_cache_groups = len(kv_cache_config.kv_cache_groups)
        self.watermark_blocks = arith.watermark_blocks(watermark, kv_cache_config.num_blocks)
        self.empty_kv_cache_blocks = KVCacheBlocks(tuple(() for _ in range(self.num_kv_cache_groups)))
        #: the block hasher requests of this engine must carry (None: caching off)
        self.request_block_hasher = (get_request_block_hasher(hash_block_size)
                                     if enable_caching else None)
        #: ``(predicted, pulled)`` of the last successful ``allocate_slots``: the per-step
        #: prediction and the blocks adoption + allocation really took from the free
        #: queue. They are equal unless a flaw is on (predictor == allocator).
        self.last_allocation: tuple[int, int] | None = None
        #: ``(reserved_blocks, free blocks before allocating)`` of the same call
        self.last_reservation: tuple[int, int] | None = None

    @classmethod
    def from_config(cls, kv_cache_config: Any, vllm_config: VllmConfig) -> KVCacheManager:
        """Build it as the engine does: block sizes from ``resolve_kv_cache_block_sizes``."""
        from kvverify.reference.block_sizes import resolve_kv_cache_block_sizes

        scheduler_bs, hash_bs = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
        return cls(kv_cache_config, vllm_config.max_model_len, scheduler_bs, hash_bs,
                   max_in_flight_tokens=vllm_config.max_in_flight_tokens,
                   enable_caching=vllm_config.enable_prefix_caching,
                   watermark=vllm_config.watermark,
                   prefix_cache_retention_interval=vllm_config.prefix_cache_retention_interval)

    # -- lookups --

    @property
    def usage(self) -> float:
        return self.block_pool.get_usage()

    def get_num_free_blocks(self) -> int:
        return self.block_pool.get_num_free_blocks()

    def create_kv_cache_blocks(self, blocks: tuple[Sequence[KVCacheBlock], ...]) -> KVCacheBlocks:
        return KVCacheBlocks(blocks) if any(blocks) else self.empty_kv_cache_blocks

    def get_computed_blocks(self, request: Request) -> tuple[KVCacheBlocks, int, int]:
        """Prefix-cache hit of a new request: ``(blocks per group, hit tokens,
        shared_prefix_boundary)`` (upstream, same name and order).

        At most ``num_tokens - 1`` tokens hit: the last one is recomputed for logits.
        ``shared_prefix_boundary``: where the longest single-group hit ends when a
        sparse-retention group (SWA / Mamba) lags it (``hit + uncached``), else 0.
        """
        if not self.enable_caching:
            return self.empty_kv_cache_blocks, 0, 0
        blocks, hit, uncached = self.coordinator.find_longest_cache_hit(request.block_hashes,
                                                                        request.num_tokens - 1)
        return self.create_kv_cache_blocks(blocks), hit, (hit + uncached if uncached else 0)

    # -- admission and allocation --

    def get_num_blocks_to_allocate_full(self, request: Request,
                                        new_computed_blocks: KVCacheBlocks | None = None,
                                        num_new_computed_tokens: int = 0,
                                        num_encoder_tokens: int = 0) -> int:
        """What the full-sequence gate charges (capped), without allocating anything."""
        blocks = (new_computed_blocks or self.empty_kv_cache_blocks).blocks
        full = min(request.num_tokens, self.max_model_len)
        local = request.num_computed_tokens + num_new_computed_tokens
        return self.coordinator.get_num_blocks_to_allocate(
            request.request_id, full, blocks, num_encoder_tokens, min(local, self.max_model_len),
            full, apply_admission_cap=True)

    def allocate_slots(self, request: Request, num_new_tokens: int,
                       num_new_computed_tokens: int = 0,
                       new_computed_blocks: KVCacheBlocks | None = None,
                       num_lookahead_tokens: int = 0, num_external_computed_tokens: int = 0,
                       delay_cache_blocks: bool = False, num_encoder_tokens: int = 0,
                       full_sequence_must_fit: bool = False, reserved_blocks: int = 0,
                       has_scheduled_reqs: bool = True) -> KVCacheBlocks | None:
        """Add slots for ``num_new_tokens`` (+lookahead); ``None`` when they do not fit.

        ``num_external_computed_tokens``: tokens a KV connector loads (blocks are allocated for
        them, after the local hits are adopted); ``delay_cache_blocks``: an async load, cache
        nothing until it lands; ``reserved_blocks``: free blocks the per-step check must leave
        to other in-flight prefills (the async-load gate of upstream #44560; the full-sequence
        gate does not see it, as upstream's; taken as given, as upstream does, negative too).
        """
        from kvverify.reference.request import RequestStatus

        require_count("num_new_tokens", num_new_tokens)
        require_count("num_new_computed_tokens", num_new_computed_tokens)
        require_count("num_lookahead_tokens", num_lookahead_tokens)
        require_count("num_external_computed_tokens", num_external_computed_tokens)
        require_count("num_encoder_tokens", num_encoder_tokens)
        if num_new_tokens == 0 and num_new_computed_tokens == 0 and num_external_computed_tokens == 0:
            raise ConfigError("num_new_tokens", 0,
                              "must be > 0 when there are no computed tokens to adopt")
        computed_blocks = (new_computed_blocks.blocks if new_computed_blocks is not None
                           else self.empty_kv_cache_blocks.blocks)
        coordinator = self.coordinator
        pool = self.block_pool
        rid = request.request_id
        num_local_computed = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(num_local_computed + num_external_computed_tokens, self.max_model_len)

        watermark = 0
        if has_scheduled_reqs and request.status in (RequestStatus.WAITING,
                                                     RequestStatus.PREEMPTED):
            watermark = self.watermark_blocks

        if full_sequence_must_fit:
            full = min(request.num_tokens, self.max_model_len)
            need_full = coordinator.get_num_blocks_to_allocate(
                rid, full, computed_blocks, num_encoder_tokens, total_computed, full,
                apply_admission_cap=True, num_local_computed_tokens=num_local_computed)
            if not arith.allocation_fits(need_full, watermark, pool.get_num_free_blocks()):
                return None

        num_tokens_main_model = total_computed + num_new_tokens
        num_tokens_need_slot = min(num_tokens_main_model + num_lookahead_tokens,
                                   self.max_model_len)
        coordinator.remove_skipped_blocks(
            rid, max(0, total_computed - request.num_in_flight_tokens))
        need_step = coordinator.get_num_blocks_to_allocate(
            rid, num_tokens_need_slot, computed_blocks, num_encoder_tokens,
            num_local_computed + num_external_computed_tokens, num_tokens_main_model,
            num_local_computed_tokens=num_local_computed)
        if not arith.allocation_fits(need_step, watermark, pool.get_num_free_blocks() - reserved_blocks):
            return None

        free_before = pool.get_num_free_blocks()
        if computed_blocks is not self.empty_kv_cache_blocks.blocks or num_external_computed_tokens > 0:
            coordinator.allocate_new_computed_blocks(rid, computed_blocks, num_local_computed,
                                                     num_external_computed_tokens)
        new_blocks = coordinator.allocate_new_blocks(rid, num_tokens_need_slot,
                                                     num_tokens_main_model, num_encoder_tokens)
        self.last_allocation = (need_step, free_before - pool.get_num_free_blocks())
        self.last_reservation = (reserved_blocks, free_before)
        if delay_cache_blocks:
            return self.create_kv_cache_blocks(new_blocks)
        if self.enable_caching:
            coordinator.cache_blocks(request, min(total_computed + num_new_tokens,
                                                  request.num_tokens))
        return self.create_kv_cache_blocks(new_blocks)

    # -- freeing and bookkeeping --

    def free(self, request: Request) -> None:
        """Free every group's blocks, tail-first (so a chain's tail is evicted first)."""
        self.coordinator.free(request.request_id)

    def pop_blocks_for_free(self, request: Request) -> list[KVCacheBlock]:
        """The request's blocks, bookkeeping dropped, not freed (a deferred free; upstream)."""
        return self.coordinator.pop_blocks_for_free(request.request_id)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Hash the request's full blocks up to ``num_computed_tokens`` (a landed KV load)."""
        if self.enable_caching:
            self.coordinator.cache_blocks(request, num_computed_tokens)

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        self.coordinator.remove_skipped_blocks(request_id, processed_computed_tokens)

    def reset_prefix_cache(self) -> bool:
        return self.coordinator.reset_prefix_cache()

    def new_step_starts(self) -> None:
        self.coordinator.new_step_starts()

    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        return KVCacheBlocks(self.coordinator.get_blocks(request_id))

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return self.get_blocks(request_id).get_block_ids()

    def num_held_blocks(self, request_id: str) -> int:
        """Real blocks the request holds over all groups (null slots excluded)."""
        return sum(m.num_held_blocks(request_id) for m in self.coordinator.single_type_managers)
