"""``PrefillAdder`` (``managers/schedule_policy.py``): which waiting requests join a prefill batch.

The budget is ``rem_total_tokens = available + evictable - total_offset``, where the offset
starts at the running requests' remaining decode (``(max_new - len(output)) *
new_token_ratio``) and each admitted request adds ``ceil_paged(extend) + page_size + max_new``
(no ``max_new`` for a chunk). A request is admitted iff its charge ``extend + max_new +
page_size`` is *strictly* below ``rem_total_tokens`` (``PrefillBudget.check_prefill``); a
prompt longer than the chunk budget is cut at a page boundary and continues next round.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from kvverify.sglang import arith
from kvverify.sglang.allocator import BaseAllocator
from kvverify.sglang.config import CLIP_MAX_NEW_TOKENS
from kvverify.sglang.radix_cache import RadixCache
from kvverify.sglang.request import Req


class AddReqResult(enum.Enum):
    CONTINUE = "continue"  # try the next one
    NO_TOKEN = "no_token"  # not enough KV budget (for this one, or after it, for the next)
    OTHER = "other"        # a compute budget (chunk, input tokens) is spent


class PrefillAdder:
    def __init__(self, page_size: int, tree_cache: RadixCache, allocator: BaseAllocator,
                 running: Sequence[Req], new_token_ratio: float, rem_input_tokens: int,
                 rem_chunk_tokens: int | None) -> None:
        self.page_size = page_size
        self.tree_cache = tree_cache
        self.allocator = allocator
        self.rem_input_tokens = rem_input_tokens
        self.rem_chunk_tokens = rem_chunk_tokens
        self.total_offset: float = sum(min(r.max_new_tokens - len(r.output_ids), CLIP_MAX_NEW_TOKENS)
                                       * new_token_ratio for r in running)
        #: what is allocated at once (no future decode): ``PrefillBudget.current_offset``
        self.current_offset: float = 0
        self.can_run_list: list[Req] = []
        self.extend_lens: dict[str, int] = {}
        self.new_chunked_req: Req | None = None

    @property
    def rem_total_tokens(self) -> float:
        return self.allocator.available_size() + self.tree_cache.evictable_size() - self.total_offset

    def _reserve(self, extend_len: int, max_new: int) -> None:
        paged = int(arith.ceil_paged_tokens(extend_len, self.page_size))
        self.total_offset += paged + self.page_size + max_new
        self.current_offset += paged + self.page_size
        self.rem_input_tokens -= paged
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= paged

    def add_chunked_req(self, req: Req) -> Req | None:
        """The next chunk of the request being chunk-prefilled; ``None`` once it is the last."""
        remaining = len(req.fill_ids) - req.prefilled
        limit = remaining if self.rem_chunk_tokens is None else min(remaining, self.rem_chunk_tokens)
        if limit < remaining:  # cut at a page boundary (of the whole sequence)
            limit = int(arith.floor_paged_tokens(req.prefilled + limit, self.page_size)) - req.prefilled
        if limit <= 0:
            return req
        self.can_run_list.append(req)
        self.extend_lens[req.rid] = limit
        self._reserve(limit, 0)
        return req if limit < remaining else None

    def add_one_req(self, req: Req, has_chunked_req: bool) -> AddReqResult:
        """Admit ``req`` (its prefix already matched) or say why not."""
        max_new = min(max(req.max_new_tokens - len(req.output_ids), 0), CLIP_MAX_NEW_TOKENS)
        prefix_len = len(req.prefix_pages) * self.page_size
        extend_len = len(req.fill_ids) - prefix_len
        charge = arith.prefill_charge(extend_len, max_new, self.page_size)
        # the request's own prefix is pinned while it is judged: not evictable for it
        if req.last_node is not None:
            self.tree_cache.inc_lock_ref(req.last_node)
        try:
            if not arith.prefill_admits(charge, self.rem_total_tokens):
                return AddReqResult.NO_TOKEN
        finally:
            if req.last_node is not None:
                self.tree_cache.dec_lock_ref(req.last_node)
        paged_extend = int(arith.ceil_paged_tokens(extend_len, self.page_size))
        if self.rem_chunk_tokens is None and self.can_run_list and paged_extend >= self.rem_input_tokens:
            return AddReqResult.OTHER
        is_chunked = False
        if self.rem_chunk_tokens is not None and paged_extend > self.rem_chunk_tokens:
            if has_chunked_req:
                return AddReqResult.OTHER
            end = int(arith.floor_paged_tokens(prefix_len + int(arith.floor_paged_tokens(
                self.rem_chunk_tokens, self.page_size)), self.page_size))
            extend_len = end - prefix_len
            if extend_len <= 0:
                return AddReqResult.OTHER
            is_chunked = True
        if req.last_node is not None:  # held until the request finishes or is retracted
            self.tree_cache.inc_lock_ref(req.last_node)
        self.can_run_list.append(req)
        self.extend_lens[req.rid] = extend_len
        if is_chunked:
            self.new_chunked_req = req
        self._reserve(extend_len, 0 if is_chunked else max_new)
        return self.budget_state()

    def budget_state(self) -> AddReqResult:
        """After a commit, the verdict for the *next* candidate (upstream's ``budget_state``):
        the request just added is in ``can_run_list`` whatever this says."""
        remaining_current = self.allocator.available_size() + self.tree_cache.evictable_size() - self.current_offset
        if self.rem_total_tokens <= 0 or remaining_current <= 0:
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0 or (self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0):
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE
