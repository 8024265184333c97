"""Guarantee 3: hash_block_size divides every prefix-cacheable group's block size.

Guards against #51108 (``mamba_hash_fallback_by_block_size``): whatever
``resolve_kv_cache_block_sizes`` returns must be accepted by the coordinator, and an
invalid ``prefix_match_unit`` is a clear error, never an assertion at start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvverify.hypothesis_hooks import is_genuine_failure
from kvverify.reference.block_sizes import BlockSizeError, resolve_kv_cache_block_sizes, validate_coordinator_block_sizes
from kvverify.reference.config import VllmConfig
from kvverify.invariants.base import Violation
from kvverify.reference.ops import gcd, lcm
from kvverify.reference.planner import KVCacheConfig

if TYPE_CHECKING:
    from kvverify.targets.base import BlockSizesTarget


def check_block_sizes(kv_cache_config: KVCacheConfig, vllm_config: VllmConfig,
                      target: BlockSizesTarget | None = None) -> list[Violation]:
    """G3 on ``target``'s own code (its ``resolve_block_sizes`` and ``coordinator_accepts``;
    the reference's functions when ``target`` is ``None``)."""
    from kvverify.targets.base import TargetUnsupported

    sizes = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups]
    try:
        if target is None:
            scheduler, hash_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
        else:
            scheduler, hash_size = target.resolve_block_sizes(kv_cache_config, vllm_config)
    except TargetUnsupported:
        raise  # the target cannot answer (a release without the resolver): not a violation
    except BlockSizeError as e:
        unit = vllm_config.prefix_match_unit
        if unit is not None and "prefix_match_unit" in str(e):
            return []  # a clear, named refusal of an invalid prefix_match_unit is correct
        return [Violation("block_sizes.resolve_error", f"resolve refused a valid config: {e}",
                          {"group_block_sizes": sizes})]
    except Exception as e:  # noqa: BLE001 - any other exception is itself the violation
        if not is_genuine_failure(e):
            raise  # the target rejected the example (a knob the release lacks): not an answer
        return [Violation("block_sizes.crash", f"{type(e).__name__}: {e}", {"group_block_sizes": sizes})]
    out: list[Violation] = []
    if hash_size < 1:
        out.append(Violation("block_sizes.hash_positive", "hash_block_size < 1", {"hash_block_size": hash_size}))
        return out
    cacheable = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups
                 if g.kv_cache_spec.prefix_cacheable]
    hashing = vllm_config.enable_prefix_caching or vllm_config.kv_connector
    if hashing and len(sizes) > 1 and any(b % hash_size for b in cacheable):
        out.append(Violation("block_sizes.hash_divides", "hash_block_size does not divide a group block size",
                             {"hash_block_size": hash_size, "group_block_sizes": sizes}))
    if any(scheduler % b for b in sizes) or scheduler % hash_size:
        out.append(Violation("block_sizes.scheduler_multiple",
                             "scheduler block size is not a common multiple",
                             {"scheduler_block_size": scheduler, "hash_block_size": hash_size,
                              "group_block_sizes": sizes}))
    # the other direction (exact where upstream is exact): the scheduler size is the *least*
    # common multiple, and a hash size finer than the scheduler's is the unit, or the gcd of
    # the prefix-cacheable sizes: never needlessly small (more hashes, shorter hit granules)
    least = lcm(*sizes) if len(sizes) > 1 else vllm_config.block_size
    if scheduler != least:
        out.append(Violation("block_sizes.scheduler_least", "scheduler block size is not the least common multiple",
                             {"scheduler_block_size": scheduler, "lcm": least, "group_block_sizes": sizes}))
    if hashing and len(sizes) > 1 and hash_size != scheduler:
        expected = vllm_config.prefix_match_unit or gcd(*(cacheable or sizes))
        if hash_size != expected:
            out.append(Violation("block_sizes.hash_exact", "hash_block_size is neither the unit nor the gcd of the "
                                 "prefix-cacheable group sizes",
                                 {"hash_block_size": hash_size, "expected": expected, "group_block_sizes": sizes,
                                  "prefix_cacheable": cacheable}))
    rejected: str | None = None
    if target is None:
        try:
            validate_coordinator_block_sizes(kv_cache_config, scheduler, hash_size, vllm_config.enable_prefix_caching)
        except BlockSizeError as e:
            rejected = str(e)
    else:
        rejected = target.coordinator_accepts(kv_cache_config, vllm_config, scheduler, hash_size)
    if rejected is not None:
        out.append(Violation("block_sizes.coordinator_rejects", rejected,
                             {"scheduler_block_size": scheduler, "hash_block_size": hash_size,
                              "group_block_sizes": sizes}))
    return out
