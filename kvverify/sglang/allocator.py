"""``TokenToKVPoolAllocator`` and ``PagedTokenToKVPoolAllocator`` (``mem_cache/allocator/``).

Both hand out pages (a page is one token for the token allocator). Page 0 (slot 0) is
reserved for padded tokens' dummy writes, so a pool of ``size`` tokens holds pages
``1 .. size // page_size``. Allocation takes pages from the front of the free list;
``free`` returns them to the front (paged, ``need_sort=False``) or the back (token
allocator), as upstream does. ``available_size()`` is free pages x page size.
"""

from __future__ import annotations

from collections.abc import Iterable


class AllocationFailed(RuntimeError):
    """An ``alloc`` that returned ``None`` upstream (the caller decides what that means)."""


class BaseAllocator:
    """The free-page list both allocators share (``BaseTokenToKVPoolAllocator``)."""

    def __init__(self, size: int, page_size: int) -> None:
        self.size = size
        self.page_size = page_size
        self.num_pages = max(size, 0) // page_size
        self.clear()

    def clear(self) -> None:
        self.free_pages: list[int] = list(range(1, self.num_pages + 1))

    def available_size(self) -> int:
        return len(self.free_pages) * self.page_size

    def alloc_pages(self, num_pages: int) -> list[int] | None:
        """``num_pages`` pages from the front of the free list, or ``None`` if short."""
        if num_pages > len(self.free_pages):
            return None
        out, self.free_pages = self.free_pages[:num_pages], self.free_pages[num_pages:]
        return out

    def free_pages_back(self, pages: Iterable[int]) -> None:
        """Return pages to the pool (``free`` / ``free_page_ids``)."""
        pages = list(pages)
        if not pages:
            return
        held = set(self.free_pages)
        for p in pages:
            if p in held or not 1 <= p <= self.num_pages:
                raise AssertionError(f"double free or foreign page {p}")  # upstream's debug-mode check
        self._release(pages)

    def _release(self, pages: list[int]) -> None:
        raise NotImplementedError


class TokenToKVPoolAllocator(BaseAllocator):
    """``page_size == 1``: a slot is a page; freed slots go to the back of the list."""

    def __init__(self, size: int) -> None:
        super().__init__(size, 1)

    def _release(self, pages: list[int]) -> None:
        self.free_pages = self.free_pages + pages


class PagedTokenToKVPoolAllocator(BaseAllocator):
    """Page-aligned allocation; freed pages go to the front (``torch.cat((pages, free_pages))``)."""

    def _release(self, pages: list[int]) -> None:
        self.free_pages = pages + self.free_pages
