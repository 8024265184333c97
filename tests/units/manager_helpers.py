"""Shared builders of the manager / coordinator unit examples in ``tests/units/`` (not a test module).

Tiny pools and stand-in requests: ``H`` are distinct block hashes (``b"A"``, ``b"B"``, ...);
``req`` carries only what the managers read; ``cached`` leaves blocks cached and evictable.
"""

from __future__ import annotations

from types import SimpleNamespace

from kvverify.reference.pool import BlockPool

H = [bytes([65 + i]) for i in range(16)]  # b"A", b"B", ...


def pool(n: int = 12, caching: bool = True, hbs: int = 4) -> BlockPool:
    return BlockPool(n, caching, hbs)


def mgr(cls, spec, block_pool: BlockPool, *, gid: int = 0, sbs: int | None = None,
        caching: bool = True, cap: int | None = None):
    """A single-type manager of class ``cls`` over ``block_pool`` (scheduler block size
    defaults to the spec's)."""
    return cls(spec, block_pool, enable_caching=caching, kv_cache_group_id=gid,
               scheduler_block_size=sbs or spec.block_size, max_admission_blocks_per_request=cap)


def req(rid: str, hashes, num_prompt: int = 0, junction: int = 0) -> SimpleNamespace:
    return SimpleNamespace(request_id=rid, block_hashes=list(hashes),
                           num_prompt_tokens=num_prompt, shared_prefix_boundary=junction)


def cached(block_pool: BlockPool, hashes, block_size: int, gid: int = 0, free: bool = True):
    """Take ``len(hashes)`` new blocks, cache them under ``hashes`` (block size = hash
    block size), and (``free``) free them again: ref 0, in the free queue, still cached."""
    blocks = block_pool.get_new_blocks(len(hashes))
    block_pool.cache_full_blocks(req("w", hashes), blocks, 0, len(hashes), block_size, gid)
    if free:
        block_pool.free_blocks(blocks)
    return blocks


def ids(blocks) -> list[int]:
    return [b.block_id for b in blocks]
