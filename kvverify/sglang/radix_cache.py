"""``RadixCache`` (``mem_cache/radix_cache.py``): page-granular prefix cache with lock refs
and LRU eviction that returns pages to the allocator.

A node holds one page of tokens (one token when ``page_size == 1``, where upstream's tree is
token-granular; page-granular keys give the same matches). ``match_prefix`` walks whole
pages; ``insert`` adds the pages a finished request wrote (its duplicates of cached pages
are the caller's to free, as ``cache_finished_req`` frees them); ``evict`` frees
least-recently-used unlocked leaves. Upstream orders by ``time.monotonic()``: here a logical
clock, so runs are deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvverify.sglang.allocator import BaseAllocator


@dataclass(eq=False)
class TreeNode:
    key: tuple[int, ...]
    page: int
    parent: TreeNode | None
    children: dict[tuple[int, ...], TreeNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0
    id: int = 0


class RadixCache:
    """The prefix cache over ``allocator``'s pages; ``disable=True`` is ``ChunkCache``-like."""

    def __init__(self, allocator: BaseAllocator, page_size: int, disable: bool = False) -> None:
        self.allocator = allocator
        self.page_size = page_size
        self.disable = disable
        self.root = TreeNode((), 0, None, lock_ref=1)
        self._clock = 0
        self._ids = 0
        self._evictable = 0  # tokens in nodes with lock_ref == 0
        self._protected = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _chunks(self, tokens: Sequence[int]) -> list[tuple[int, ...]]:
        p = self.page_size
        return [tuple(tokens[i:i + p]) for i in range(0, len(tokens) - len(tokens) % p, p)]

    def match_prefix(self, tokens: Sequence[int]) -> tuple[list[int], TreeNode]:
        """The cached pages of the longest whole-page prefix of ``tokens``, and its last node."""
        node, pages = self.root, list[int]()
        if self.disable:
            return pages, node
        now = self._tick()
        for chunk in self._chunks(tokens):
            child = node.children.get(chunk)
            if child is None:
                break
            child.last_access = now
            pages.append(child.page)
            node = child
        return pages, node

    def insert(self, tokens: Sequence[int], pages: Sequence[int]) -> list[int]:
        """Insert ``pages`` (one per whole page of ``tokens``); returns the pages that were
        already cached under another page id (duplicates the caller frees)."""
        duplicates: list[int] = []
        node, now = self.root, self._tick()
        for chunk, page in zip(self._chunks(tokens), pages):
            child = node.children.get(chunk)
            if child is None:
                self._ids += 1
                child = TreeNode(chunk, page, node, last_access=now, id=self._ids)
                node.children[chunk] = child
                self._evictable += self.page_size
            elif child.page != page:
                duplicates.append(page)
            child.last_access = now
            node = child
        return duplicates

    def inc_lock_ref(self, node: TreeNode) -> None:
        while node is not self.root and node is not None:
            if node.lock_ref == 0:
                self._evictable -= self.page_size
                self._protected += self.page_size
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def dec_lock_ref(self, node: TreeNode) -> None:
        while node is not self.root and node is not None:
            if node.lock_ref == 1:
                self._evictable += self.page_size
                self._protected -= self.page_size
            node.lock_ref -= 1
            node = node.parent  # type: ignore[assignment]

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def cached_pages(self) -> list[int]:
        out, stack = [], list(self.root.children.values())
        while stack:
            n = stack.pop()
            out.append(n.page)
            stack.extend(n.children.values())
        return out

    def evict(self, num_tokens: int) -> int:
        """Free least-recently-used unlocked leaves until ``num_tokens`` are freed (or none is
        left); returns the tokens freed."""
        heap = [(n.last_access, n.id, n) for n in self._leaves() if n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, node = heapq.heappop(heap)
            self.allocator.free_pages_back([node.page])
            parent = node.parent
            assert parent is not None
            del parent.children[node.key]
            self._evictable -= self.page_size
            freed += self.page_size
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, parent.id, parent))
        return freed

    def _leaves(self) -> list[TreeNode]:
        out, stack = [], list(self.root.children.values())
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            else:
                out.append(n)
        return out
