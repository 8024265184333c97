"""``ScheduleBatch``'s memory paths (``managers/schedule_batch.py``).

``prepare_for_extend`` allocates each request's new pages (evicting the radix cache first;
"Prefill out of memory" if still short); ``check_decode_mem`` asks whether the next decode
step's pages fit (after eviction); ``retract_decode`` retracts requests — least output first,
longest input first among equals — until the kept ones fit, and aborts the last one with a
reason when even it cannot fit (since #19881); ``prepare_for_decode`` allocates the step
("Decode out of memory" if short). Releasing a finished request caches its whole pages
(``cache_finished_req``); releasing a retracted one frees its KV outright.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvverify.sglang import arith, flaws
from kvverify.sglang.allocator import BaseAllocator
from kvverify.sglang.config import RETRACT_DECODE_STEPS
from kvverify.sglang.radix_cache import RadixCache
from kvverify.sglang.request import Req

ABORT_LAST_REQUEST = ("Out of memory even after retracting all other requests in the decode batch. "
                      "Aborting the last request.")


class PrefillOutOfMemory(RuntimeError):
    """``alloc_for_extend``: "Prefill out of memory" (an admission that did not hold)."""


class DecodeOutOfMemory(RuntimeError):
    """``alloc_for_decode``: "Decode out of memory. Try to lower your batch size." """


def alloc_with_eviction(allocator: BaseAllocator, tree_cache: RadixCache, num_pages: int) -> list[int] | None:
    """``alloc_token_slots``: evict the radix cache for the shortfall, then allocate."""
    short = num_pages * allocator.page_size - allocator.available_size()
    if short > 0:
        tree_cache.evict(short)
    return allocator.alloc_pages(num_pages)


def release_finished(req: Req, allocator: BaseAllocator, tree_cache: RadixCache) -> None:
    """``cache_finished_req``: insert the request's whole pages, free duplicates and the tail."""
    p = allocator.page_size
    pages = req.pages
    full = req.seq_len // p
    tokens = req.fill_ids[:full * p]
    if tree_cache.disable:
        free = list(req.own_pages)
    else:
        free = tree_cache.insert(tokens, pages[:full]) + pages[full:]
        free = [pg for pg in free if pg not in req.prefix_pages]
    allocator.free_pages_back(free)
    _unlock(req, tree_cache)
    req.own_pages = []


def release_retracted(req: Req, allocator: BaseAllocator, tree_cache: RadixCache) -> None:
    """``release_req`` without a KV backup: the request's own pages go back at once."""
    allocator.free_pages_back(req.own_pages)
    _unlock(req, tree_cache)
    req.own_pages, req.prefix_pages, req.seq_len, req.prefilled = [], [], 0, 0


def _unlock(req: Req, tree_cache: RadixCache) -> None:
    if req.last_node is not None:
        tree_cache.dec_lock_ref(req.last_node)
        req.last_node = None


class ScheduleBatch:
    def __init__(self, reqs: Sequence[Req], allocator: BaseAllocator, tree_cache: RadixCache,
                 tokens_per_step: int = 1) -> None:
        self.reqs = list(reqs)
        self.allocator = allocator
        self.tree_cache = tree_cache
        self.tokens_per_step = tokens_per_step

    @property
    def page_size(self) -> int:
        return self.allocator.page_size

    def prepare_for_extend(self, extend_lens: dict[str, int]) -> None:
        """Allocate each request's extend (its prefix pages are the radix cache's)."""
        for req in self.reqs:
            if req.seq_len == 0:
                req.seq_len = len(req.prefix_pages) * self.page_size
                req.prefilled = req.seq_len
            n = extend_lens[req.rid]
            need = int(arith.num_new_pages(req.seq_len, n, self.page_size))
            pages = alloc_with_eviction(self.allocator, self.tree_cache, need)
            if pages is None:
                raise PrefillOutOfMemory(f"Prefill out of memory. Try to lower your batch size. "
                                         f"Try to allocate {need * self.page_size} tokens. "
                                         f"Available tokens: {self.allocator.available_size()}")
            req.own_pages += pages
            req.seq_len += n
            req.prefilled += n

    def new_tokens_required_next_decode(self, indices: Sequence[int] | None = None) -> int:
        reqs = self.reqs if indices is None else [self.reqs[i] for i in indices]
        return sum(int(arith.decode_tokens_required(r.seq_len, self.tokens_per_step, self.page_size))
                   for r in reqs)

    def check_decode_mem(self, indices: Sequence[int] | None = None) -> bool:
        """Whether the next decode step fits, after evicting for it."""
        need = self.new_tokens_required_next_decode(indices)
        short = need - self.allocator.available_size()
        if short > 0:
            self.tree_cache.evict(short)
        return self.allocator.available_size() >= need

    def _retract_loop_fits(self, indices: Sequence[int]) -> bool:
        need = sum(int(arith.retract_budget_tokens(self.reqs[i].seq_len, self.tokens_per_step, self.page_size))
                   for i in indices)
        short = need - self.allocator.available_size()
        if short > 0:
            self.tree_cache.evict(short)
        return self.allocator.available_size() >= need

    def retract_decode(self) -> tuple[list[Req], float, list[Req]]:
        """Retract until the kept requests' next decode fits; ``(retracted, new_token_ratio, aborted)``."""
        order = sorted(range(len(self.reqs)),
                       key=lambda i: (len(self.reqs[i].output_ids), -len(self.reqs[i].origin_input_ids)),
                       reverse=True)
        retracted: list[Req] = []
        aborted: list[Req] = []
        first = True
        while first or not self._retract_loop_fits(order):
            if len(order) == 1:
                if flaws.is_on("sglang_retract_asserts_last_request"):
                    raise AssertionError("No space left for only one request")
                break
            first = False
            req = self.reqs[order.pop()]
            release_retracted(req, self.allocator, self.tree_cache)
            req.num_retractions += 1
            retracted.append(req)
        if len(order) <= 1 and order and not self.check_decode_mem(order):
            if flaws.is_on("sglang_retract_raises_last_request"):
                raise ValueError("Out of memory. Please set a smaller number for `--max-running-requests`.")
            last = self.reqs[order.pop()]
            last.finished_reason, last.aborted = f"abort: {ABORT_LAST_REQUEST}", True
            release_retracted(last, self.allocator, self.tree_cache)
            aborted.append(last)
        keep = set(order)
        self.reqs = [r for i, r in enumerate(self.reqs) if i in keep]
        decoded = sum(len(r.output_ids) for r in self.reqs)
        max_new = sum(r.max_new_tokens for r in self.reqs)
        ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.reqs)) / max_new) if max_new else 1.0
        return retracted, ratio, aborted

    def prepare_for_decode(self) -> None:
        """Allocate the next decode step's slots for every request."""
        k = self.tokens_per_step
        for req in self.reqs:
            need = int(arith.num_new_pages(req.seq_len, k, self.page_size))
            pages = alloc_with_eviction(self.allocator, self.tree_cache, need) if need else []
            if pages is None:
                raise DecodeOutOfMemory(f"Decode out of memory. Try to lower your batch size. Try to allocate "
                                        f"{need * self.page_size} tokens. Available tokens: "
                                        f"{self.allocator.available_size()}")
            req.own_pages += pages
            req.seq_len += k
