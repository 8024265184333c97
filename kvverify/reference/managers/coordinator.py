"""The coordinator: one manager per KV cache group over one shared pool.

Upstream ``kv_cache_coordinator.py``: ``KVCacheCoordinatorNoPrefixCache``,
``UnitaryKVCacheCoordinator`` and ``HybridKVCacheCoordinator`` differ only in how they
find prefix-cache hits, so one class covers the three (``kind`` says which). Block
counts are summed over groups; a block id belongs to at most one group at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvverify.reference.block_sizes import validate_coordinator_block_sizes
from kvverify.errors import ConfigError
from kvverify.reference.validation import require_int
from kvverify.reference.managers.base import SingleTypeKVCacheManager, behaviour_spec
from kvverify.reference.managers.cross_attention import (
    CrossAttentionManager,
    refuse_encoder_decoder_prefix_caching,
)
from kvverify.reference.managers.registry import get_manager_for_kv_cache_spec
from kvverify.reference.ops import cdiv
from kvverify.reference.pool import BlockHash, BlockPool, HashableRequest, KVCacheBlock
from kvverify.reference.specs import FullAttentionSpec, MambaSpec, SlidingWindowSpec

BlocksPerGroup = tuple[Sequence[KVCacheBlock], ...]


class KVCacheCoordinator:
    """Sums the per-group managers (upstream ``KVCacheCoordinator`` and subclasses)."""

    def __init__(self, kv_cache_config: Any, max_model_len: int, max_in_flight_tokens: int,
                 enable_caching: bool, scheduler_block_size: int, hash_block_size: int,
                 retention_interval: int | None = 0) -> None:
        require_int("max_model_len", max_model_len, minimum=1)
        require_int("max_in_flight_tokens", max_in_flight_tokens, minimum=1)
        validate_coordinator_block_sizes(kv_cache_config, scheduler_block_size,
                                         hash_block_size, enable_caching)
        _validate_prefix_cache_retention_interval(retention_interval, scheduler_block_size,
                                                  kv_cache_config)
        refuse_encoder_decoder_prefix_caching(kv_cache_config, enable_caching)
        #: ``prefix_cache_retention_interval``: 0 = only replay-boundary / junction
        #: checkpoints of SWA and Mamba groups, ``k`` = also one per ``k`` tokens, None = dense
        self.retention_interval = retention_interval
        self.kv_cache_config = kv_cache_config
        self.enable_caching = enable_caching
        self.scheduler_block_size = scheduler_block_size
        self.hash_block_size = hash_block_size
        self.block_pool = BlockPool(kv_cache_config.num_blocks, enable_caching, hash_block_size)
        groups = kv_cache_config.kv_cache_groups
        self.single_type_managers: tuple[SingleTypeKVCacheManager, ...] = tuple(
            get_manager_for_kv_cache_spec(
                g.kv_cache_spec, self.block_pool, max_in_flight_tokens=max_in_flight_tokens,
                max_model_len=max_model_len, enable_caching=enable_caching, kv_cache_group_id=i,
                scheduler_block_size=scheduler_block_size)
            for i, g in enumerate(groups))
        if not enable_caching:
            self.kind = "no_prefix_cache"
        elif len(groups) == 1:
            self.kind = "unitary"
        else:
            self.kind = "hybrid"
        # Hybrid lookups: groups with equal specs and manager type are looked up
        # together; full attention first (its scan bounds the others).
        self.attention_groups: list[tuple[Any, list[int], type[SingleTypeKVCacheManager]]] = []
        for i, g in enumerate(groups):
            if not g.kv_cache_spec.prefix_cacheable:
                continue
            cls = type(self.single_type_managers[i])
            for spec, ids, mcls in self.attention_groups:
                if spec == g.kv_cache_spec and mcls is cls:
                    ids.append(i)
                    break
            else:
                self.attention_groups.append((g.kv_cache_spec, [i], cls))
        self.attention_groups.sort(key=lambda t: not _is_full(t[0]))

    # -- counting and allocating --

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: BlocksPerGroup, num_encoder_tokens: int,
                                   total_computed_tokens: int, num_tokens_main_model: int,
                                   apply_admission_cap: bool = False,
                                   num_local_computed_tokens: int | None = None) -> int:
        """``sum_g`` of the groups' predictions (cross attention counts encoder tokens);
        ``num_local_computed_tokens``: the local part of ``total_computed_tokens`` (the rest a
        KV connector loads)."""
        total = 0
        for i, manager in enumerate(self.single_type_managers):
            if isinstance(manager, CrossAttentionManager):
                total += manager.get_num_blocks_to_allocate(
                    request_id, num_encoder_tokens, (), 0, num_encoder_tokens,
                    apply_admission_cap)
            else:
                total += manager.get_num_blocks_to_allocate(
                    request_id, num_tokens, new_computed_blocks[i], total_computed_tokens,
                    num_tokens_main_model, apply_admission_cap,
                    num_local_computed_tokens=num_local_computed_tokens)
        return total

    def allocate_new_computed_blocks(self, request_id: str, new_computed_blocks: BlocksPerGroup,
                                     num_local_computed_tokens: int,
                                     num_external_computed_tokens: int = 0) -> None:
        """Adopt prefix-cache hits in every group, then allocate every group's blocks for the
        connector's external tokens (two phases, upstream issue #33775; no-op for a running
        request)."""
        if any(request_id in m.num_cached_block for m in self.single_type_managers):
            return
        for manager, blocks in zip(self.single_type_managers, new_computed_blocks):
            manager.add_local_computed_blocks(request_id, blocks, num_local_computed_tokens,
                                              num_external_computed_tokens)
        if num_external_computed_tokens > 0:
            for manager in self.single_type_managers:
                manager.allocate_external_computed_blocks(request_id, num_local_computed_tokens,
                                                          num_external_computed_tokens)

    def allocate_new_blocks(self, request_id: str, num_tokens: int, num_tokens_main_model: int,
                            num_encoder_tokens: int = 0) -> tuple[list[KVCacheBlock], ...]:
        """Every group grows its table to cover ``num_tokens`` (encoder tokens for cross)."""
        return tuple(
            m.allocate_new_blocks(
                request_id,
                num_encoder_tokens if isinstance(m, CrossAttentionManager) else num_tokens,
                num_tokens_main_model)
            for m in self.single_type_managers)

    def get_num_cacheable_tokens(self, num_computed_tokens: int) -> int:
        """Hybrid hits land on scheduler-block boundaries: cache only up to one."""
        if self.kind == "hybrid":
            return num_computed_tokens // self.scheduler_block_size * self.scheduler_block_size
        return num_computed_tokens

    def cache_blocks(self, request: HashableRequest, num_computed_tokens: int) -> None:
        """Every caching group hashes its newly full blocks; sparse-retention groups keep only
        what a replay of the prompt (``num_prompt_tokens - 1``) or a junction can reach."""
        num_tokens = self.get_num_cacheable_tokens(num_computed_tokens)
        boundaries = replay_boundaries(getattr(request, "num_prompt_tokens", 0))
        for manager in self.single_type_managers:
            if manager.enable_caching:
                manager.cache_blocks(request, num_tokens, retention_interval=self.retention_interval,
                                     replay_boundaries=boundaries)

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        for manager in self.single_type_managers:
            manager.remove_skipped_blocks(request_id, processed_computed_tokens)

    def free(self, request_id: str) -> None:
        """Each group frees its own table, tail-first, group by group."""
        for manager in self.single_type_managers:
            manager.free(request_id)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Every group's blocks in group order, bookkeeping dropped, nothing freed yet (the
        caller frees them reversed: a deferred free; upstream, same name)."""
        blocks: list[KVCacheBlock] = []
        for manager in self.single_type_managers:
            blocks.extend(manager.pop_blocks_for_free(request_id))
        return blocks

    def reset_prefix_cache(self) -> bool:
        return self.block_pool.reset_prefix_cache()

    def new_step_starts(self) -> None:
        for manager in self.single_type_managers:
            manager.new_step_starts()

    def get_blocks(self, request_id: str) -> tuple[list[KVCacheBlock], ...]:
        return tuple(m.get_blocks(request_id) for m in self.single_type_managers)

    # -- prefix-cache lookups --

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash],
                               max_cache_hit_length: int) -> tuple[tuple[list[KVCacheBlock], ...], int, int]:
        """Per-group hit blocks, the hit length agreed by every group, and
        ``num_uncached_common_prefix_tokens`` (how far the longest single-group hit
        reached past it: a shared prefix a sparse-retention group has not cached; 0
        unless hybrid)."""
        managers = self.single_type_managers
        if self.kind == "no_prefix_cache" or not managers:
            return tuple([] for _ in managers), 0, 0
        if self.kind == "unitary":
            m = managers[0]
            blocks, hit = m.find_longest_cache_hit(block_hashes, max_cache_hit_length, [0],
                                                   self.block_pool, m.kv_cache_spec, m.block_size)
            return blocks, hit, 0
        return self._hybrid_find_longest_cache_hit(block_hashes, max_cache_hit_length)

    def _hybrid_find_longest_cache_hit(
            self, block_hashes: Sequence[BlockHash],
            max_cache_hit_length: int) -> tuple[tuple[list[KVCacheBlock], ...], int, int]:
        """Fixed point: each type accepts or lowers the candidate length; repeat on change.

        Upstream ``HybridKVCacheCoordinator.find_longest_cache_hit`` (no EAGLE drop).
        """
        n = len(self.single_type_managers)
        hit_length = max_cache_hit_length
        hit_blocks: list[list[KVCacheBlock] | None] = [None] * n
        hit_len_by_group = [0] * n
        longest = 0
        simple = (len(self.attention_groups) == 2 and _is_full(self.attention_groups[0][0]))
        alignment = self.scheduler_block_size
        while True:
            curr = hit_length
            for spec, group_ids, cls in self.attention_groups:
                first = group_ids[0]
                if _is_full(spec) and hit_blocks[first] is not None:
                    curr = min(curr, hit_len_by_group[first])
                    continue
                blocks, new_len = cls.find_longest_cache_hit(
                    block_hashes, curr, group_ids, self.block_pool, spec, alignment)
                curr = new_len
                for gid, blks in zip(group_ids, blocks):
                    hit_blocks[gid] = blks
                    hit_len_by_group[gid] = new_len
                longest = max(longest, curr)
            if curr >= hit_length:
                break
            hit_length = curr
            if simple:
                break
        for spec, group_ids, _ in self.attention_groups:
            if not _is_full(spec):
                continue
            num_blocks = cdiv(hit_length, spec.block_size)
            for gid in group_ids:
                group_hit = hit_blocks[gid]
                if group_hit is not None:
                    del group_hit[num_blocks:]
        return tuple(b if b is not None else [] for b in hit_blocks), hit_length, longest - hit_length


def replay_boundaries(num_prompt_tokens: int) -> tuple[int, ...]:
    """Positions a later request replaying a prompt can resume at (upstream, same name, no
    EAGLE): a resend of the identical prompt is capped at ``num_prompt_tokens - 1``."""
    return (num_prompt_tokens - 1,)


def _validate_prefix_cache_retention_interval(retention_interval: int | None, scheduler_block_size: int,
                                              kv_cache_config: Any) -> None:
    """Upstream ``_validate_prefix_cache_retention_interval``, as a :class:`ConfigError`.

    A positive interval needs an SWA or Mamba group (upstream tests the group spec's own
    type, so a uniform-type group of SWA layers does not count) and must be a multiple
    of the scheduler block size; 0 and None are always accepted.
    """
    if retention_interval is None:
        return
    if not any(isinstance(g.kv_cache_spec, (SlidingWindowSpec, MambaSpec))
               for g in kv_cache_config.kv_cache_groups):
        if retention_interval == 0:
            return
        raise ConfigError("prefix_cache_retention_interval", retention_interval,
                          "must be 0 or None: this model has no sliding-window or Mamba KV cache "
                          "group, so retention has no effect")
    if retention_interval < 0 or retention_interval % scheduler_block_size:
        raise ConfigError("prefix_cache_retention_interval", retention_interval,
                          f"must be non-negative and a multiple of scheduler_block_size "
                          f"({scheduler_block_size})")


def _is_full(spec: Any) -> bool:
    return isinstance(behaviour_spec(spec), FullAttentionSpec)
