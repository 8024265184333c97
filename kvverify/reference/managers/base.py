"""The per-group manager base class (upstream ``SingleTypeKVCacheManager``).

One manager per KV cache group; every manager of an engine draws from the same
:class:`~kvverify.reference.pool.BlockPool`. A manager keeps, per request, the block table
``req_to_blocks[request_id]`` (null blocks stand in for recycled slots) and how many of
its leading blocks are already in the prefix cache (``num_cached_block``).

The admission cap (``max_admission_blocks_per_request``, SWA and chunked-local only) is
applied by :meth:`get_num_blocks_to_allocate` **only** when ``apply_admission_cap`` is
true, i.e. on the full-sequence gate; the per-step prediction is uncapped so that it
equals what :meth:`allocate_new_blocks` pulls from the pool (PR #40027).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kvverify import flaws

from kvverify.reference import arith
from kvverify.reference.pool import BlockHashList, BlockPool, HashableRequest, KVCacheBlock
from kvverify.reference.specs import KVCacheSpec, UniformTypeKVCacheSpecs


def behaviour_spec(spec: KVCacheSpec) -> KVCacheSpec:
    """The spec whose type and window decide behaviour (first layer of a uniform group)."""
    if isinstance(spec, UniformTypeKVCacheSpecs):
        return spec.first_spec
    return spec


class SingleTypeKVCacheManager:
    """KV cache logic of one group of one attention type (upstream, same name)."""

    #: whether the admission cap of the spec applies to this manager type
    recycles_blocks: ClassVar[bool] = False
    #: whether its hit lookup can land on a ``hash_block_size`` finer than its block
    #: (upstream, same name: full attention and Mamba)
    supports_fine_grained_hash_lookup: ClassVar[bool] = False

    def __init__(self, kv_cache_spec: KVCacheSpec, block_pool: BlockPool, *,
                 enable_caching: bool, kv_cache_group_id: int, scheduler_block_size: int,
                 max_admission_blocks_per_request: int | None = None) -> None:
        self.kv_cache_spec = kv_cache_spec
        self.spec = behaviour_spec(kv_cache_spec)
        self.block_size: int = kv_cache_spec.block_size
        self.block_pool = block_pool
        self.enable_caching = enable_caching
        self.kv_cache_group_id = kv_cache_group_id
        self.scheduler_block_size = scheduler_block_size
        #: hit alignment pushed by the coordinator (scheduler block size, no fine hits)
        self.cache_hit_alignment_tokens = scheduler_block_size
        self.max_admission_blocks_per_request = max_admission_blocks_per_request
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        self.num_cached_block: dict[str, int] = {}
        self._null_block = block_pool.null_block

    # -- prediction and allocation --

    def _required_blocks(self, num_tokens: int, apply_admission_cap: bool) -> int:
        # flaws swa_cap_on_allocation (#39866) and swa_admission_uncapped (#39734) live in
        # the shared formula, so the lemmas prove against exactly this arithmetic
        return arith.admission_required_blocks(num_tokens, self.block_size,
                                               self.max_admission_blocks_per_request, apply_admission_cap)

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[KVCacheBlock],
                                   total_computed_tokens: int,
                                   num_tokens_main_model: int | None = None,
                                   apply_admission_cap: bool = False,
                                   num_local_computed_tokens: int | None = None) -> int:
        """Blocks the request must take from the pool to hold ``num_tokens`` slots.

        Upstream ``get_num_blocks_to_allocate``: ``R = cdiv(num_tokens, B)`` (capped only
        when ``apply_admission_cap``); a running request needs ``max(R - held, 0)``; a
        new one subtracts the skipped and hit blocks and adds the hits that sit in the
        free queue (touching them takes them out of it).
        """
        required = self._required_blocks(num_tokens, apply_admission_cap)
        held = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:
            # running request: no new prefix-cache hits
            return arith.new_blocks_for_running(required, held)
        skipped_blocks = arith.skipped_blocks(
            self.get_num_skipped_tokens(total_computed_tokens), self.block_size)
        num_local_computed_blocks = len(new_computed_blocks) + held
        num_new = arith.max_(required - arith.max_(skipped_blocks, num_local_computed_blocks), 0)
        skip_hits = arith.max_(0, skipped_blocks - held)
        evictable = 0
        if not flaws.is_on("evictable_hits_not_counted"):
            evictable = sum(1 for b in new_computed_blocks[skip_hits:]
                            if b.ref_cnt == 0 and not b.is_null)
        return num_new + evictable

    def add_local_computed_blocks(self, request_id: str,
                                  new_computed_blocks: Sequence[KVCacheBlock],
                                  num_local_computed_tokens: int,
                                  num_external_computed_tokens: int = 0) -> None:
        """Adopt prefix-cache hits: touch them, null-pad the skipped head (upstream, same
        name). The skipped head is counted over local **and** external computed tokens."""
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        if req_blocks:
            raise AssertionError(f"request {request_id} already holds blocks")
        skipped_blocks = arith.skipped_blocks(
            self.get_num_skipped_tokens(num_local_computed_tokens + num_external_computed_tokens),
            self.block_size)
        if skipped_blocks > 0:
            new_computed_blocks = new_computed_blocks[skipped_blocks:]
        if self.enable_caching:
            self.block_pool.touch(new_computed_blocks)
        elif any(not b.is_null for b in new_computed_blocks):
            raise AssertionError("computed blocks must be empty when prefix caching is off")
        req_blocks.extend([self._null_block] * max(skipped_blocks, 0))
        req_blocks.extend(new_computed_blocks)
        self.num_cached_block[request_id] = len(req_blocks)

    def allocate_external_computed_blocks(self, request_id: str, num_local_computed_tokens: int,
                                          num_external_computed_tokens: int) -> None:
        """Blocks for the tokens a KV connector will load (upstream, same name): the table grows
        to ``cdiv(local + external, B)`` slots, skipped external tokens excluded (they land on
        null slots). Runs after every group adopted its local hits (upstream issue #33775)."""
        total = num_local_computed_tokens + num_external_computed_tokens
        skipped = self.get_num_skipped_tokens(total)
        if skipped > 0:
            num_external_computed_tokens = min(total - skipped, num_external_computed_tokens)
        if num_external_computed_tokens <= 0:
            return
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        num_new = max(0, arith.full_attention_blocks(total, self.block_size) - len(req_blocks))
        req_blocks.extend(self.block_pool.get_new_blocks(num_new))

    def allocate_new_blocks(self, request_id: str, num_tokens: int,
                            num_tokens_main_model: int | None = None) -> list[KVCacheBlock]:
        """Grow the table to ``cdiv(num_tokens, B)`` blocks (upstream ``allocate_new_blocks``)."""
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        num_new = arith.full_attention_blocks(num_tokens, self.block_size) - len(req_blocks)
        if num_new <= 0:
            return []
        new_blocks = self.block_pool.get_new_blocks(num_new)
        req_blocks.extend(new_blocks)
        return new_blocks

    # -- prefix cache --

    def reachable_block_mask(self, start_block: int, end_block: int,
                             retention_interval: int | None = None,
                             reachable_boundaries: Sequence[int] = ()) -> list[bool] | None:
        """Which new full blocks can ever serve a hit; ``None`` = all (dense; full attention)."""
        return None

    def cache_blocks(self, request: HashableRequest, num_tokens: int,
                     retention_interval: int | None = None, *,
                     replay_boundaries: Sequence[int] = ()) -> None:
        """Hash the request's newly full blocks (upstream ``cache_blocks``).

        Sparse-retention managers (SWA, Mamba) keep only the blocks
        :meth:`reachable_block_mask` marks: under ``retention_interval`` 0 those a replay
        boundary or the request's ``shared_prefix_boundary`` can reach.
        """
        if not self.kv_cache_spec.prefix_cacheable:
            return
        request_id: str = request.request_id  # type: ignore[attr-defined]
        num_cached = self.num_cached_block.get(request_id, 0)
        num_hashed_tokens = len(request.block_hashes) * self.block_pool.hash_block_size
        num_full = min(num_tokens, num_hashed_tokens) // self.block_size
        if num_cached >= num_full:
            return
        boundaries = [*replay_boundaries]
        junction = getattr(request, "shared_prefix_boundary", 0)
        if junction:
            boundaries.append(junction)
        mask = self.reachable_block_mask(num_cached, num_full, retention_interval, boundaries)
        self.block_pool.cache_full_blocks(
            request, self.req_to_blocks[request_id], num_cached, num_full, self.block_size,
            self.kv_cache_group_id, block_mask=mask)
        self.num_cached_block[request_id] = num_full

    @classmethod
    def find_longest_cache_hit(cls, block_hashes: BlockHashList, max_length: int,
                               kv_cache_group_ids: Sequence[int], block_pool: BlockPool,
                               kv_cache_spec: KVCacheSpec,
                               alignment_tokens: int) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """Longest prefix hit ``<= max_length`` common to all groups; ``(blocks, tokens)``."""
        raise NotImplementedError

    # -- freeing --

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Drop the request's bookkeeping and return its blocks, leading null slots trimmed,
        without freeing them (upstream, same name: the caller frees them, reversed)."""
        blocks = self.req_to_blocks.pop(request_id, [])
        self.num_cached_block.pop(request_id, None)
        head = next((i for i, b in enumerate(blocks) if not b.is_null), len(blocks))
        return blocks[head:]

    def free(self, request_id: str) -> None:
        """Free the request's blocks tail-first (upstream ``free``)."""
        self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Tokens no longer attended to (their blocks may be recycled). Default: none."""
        return 0

    def _remove_blocks_in_range(self, request_id: str, first_block: int, last_block: int) -> None:
        """Free ``[first, last)`` right to left, stopping at an already-null slot."""
        blocks = self.req_to_blocks.get(request_id)
        if blocks is None or first_block >= last_block:
            return
        last_block = min(last_block, len(blocks))
        freed: list[KVCacheBlock] = []
        null = self._null_block
        for i in range(last_block - 1, first_block - 1, -1):
            if blocks[i] is null:
                break
            freed.append(blocks[i])
            blocks[i] = null
        if freed:
            self.block_pool.free_blocks(freed)

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        """Free blocks that left the attention window; null blocks take their slots."""
        skipped = self.get_num_skipped_tokens(processed_computed_tokens)
        if skipped <= 0:
            return
        blocks = self.req_to_blocks.get(request_id)
        if blocks is None:
            return
        num_skipped_blocks = min(arith.skipped_blocks(skipped, self.block_size), len(blocks))
        self._remove_blocks_in_range(request_id, 0, num_skipped_blocks)

    def new_step_starts(self) -> None:
        """Hook run at the start of every scheduler step."""
        return

    # -- read-only views --

    def get_blocks(self, request_id: str) -> list[KVCacheBlock]:
        """The request's block table (null blocks included); empty when unknown."""
        return self.req_to_blocks.get(request_id, [])

    def num_held_blocks(self, request_id: str) -> int:
        """Real (non-null) blocks the request holds in this group."""
        return sum(1 for b in self.req_to_blocks.get(request_id, ()) if not b.is_null)
