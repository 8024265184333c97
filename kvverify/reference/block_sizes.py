"""Scheduler and hash block sizes (upstream: ``kv_cache_utils.resolve_kv_cache_block_sizes``).

Guarantee 3 of the suite: ``hash_block_size`` divides every prefix-cacheable group's
block size, and the scheduler block size is a common multiple of every group's. The
coordinator (``KVCacheCoordinator.__init__``) asserts exactly that at startup;
:func:`validate_coordinator_block_sizes` is that assertion as a clear error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvverify import fixes, flaws

from kvverify.reference import arith
from kvverify.reference.config import VllmConfig
from kvverify.errors import KVVerifyError
from kvverify.reference.ops import gcd, lcm
from kvverify.reference.specs import MambaSpec, iter_layer_specs

if TYPE_CHECKING:
    from kvverify.reference.planner import KVCacheConfig


class BlockSizeError(KVVerifyError):
    """``prefix_match_unit`` / group block sizes that cannot be hashed consistently."""


def _hashing_active(vllm_config: VllmConfig) -> bool:
    return vllm_config.enable_prefix_caching or vllm_config.kv_connector


def _mamba_falls_back(kv_cache_config: KVCacheConfig, vllm_config: VllmConfig) -> bool:
    """A Mamba group outside ``align`` mode breaks divisibility: hash at the scheduler size."""
    specs = [s for g in kv_cache_config.kv_cache_groups for s in iter_layer_specs(g.kv_cache_spec)]
    if flaws.is_on("mamba_hash_fallback_by_block_size"):
        # #51108: tested the block size instead of the cache mode.
        return any(isinstance(s, MambaSpec) and s.block_size != vllm_config.block_size for s in specs)
    return any(isinstance(s, MambaSpec) and s.mamba_cache_mode != "align" for s in specs)


def resolve_kv_cache_block_sizes(kv_cache_config: KVCacheConfig,
                                 vllm_config: VllmConfig) -> tuple[int, int]:
    """Return ``(scheduler_block_size, hash_block_size)``.

    One group (or none): both are the cache block size (a different ``prefix_match_unit``
    is refused while hashing is active). Several: scheduler = lcm of group sizes; hash =
    scheduler when hashing is off or a Mamba group is not ``align``; else
    ``prefix_match_unit`` if set, or the gcd of the prefix-cacheable group sizes.
    """
    groups = kv_cache_config.kv_cache_groups
    if len(groups) <= 1:
        bs = vllm_config.block_size
        unit = vllm_config.prefix_match_unit
        if unit not in (None, bs) and len(groups) == 1 and _hashing_active(vllm_config):
            raise BlockSizeError(
                f"Invalid prefix_match_unit={unit}; with a single KV cache group, prefix-cache "
                f"hits land on the block size ({bs}). Unset it or set it to {bs}.")
        return bs, bs
    sizes = [g.kv_cache_spec.block_size for g in groups]
    scheduler = lcm(*sizes)
    if not _hashing_active(vllm_config) or _mamba_falls_back(kv_cache_config, vllm_config):
        return scheduler, scheduler
    hashing_sizes = [b for g, b in zip(groups, sizes) if g.kv_cache_spec.prefix_cacheable] or sizes
    unit = vllm_config.prefix_match_unit
    hash_size = unit if unit is not None else gcd(*hashing_sizes)
    if not arith.prefix_match_unit_valid(hash_size, hashing_sizes):
        raise BlockSizeError(
            f"Invalid prefix_match_unit={hash_size}; prefix-cacheable KV cache group block "
            f"sizes must be divisible by prefix_match_unit. Got group block sizes={sizes}, "
            f"prefix-cacheable={hashing_sizes}.")
    return scheduler, hash_size


def partial_hash_hits_enabled(groups: Sequence[Any], hash_block_size: int,
                              manager_classes: Sequence[type] | None = None) -> bool:
    """Whether aligned Mamba states allow sub-block prefix-cache hits (upstream, same name).

    Needs a Mamba ``align`` layer whose block is larger than ``hash_block_size``; with
    ``manager_classes`` (one per group) also every other prefix-cacheable group's manager
    must support fine-grained lookups or have ``block_size == hash_block_size``.
    """
    if not any(isinstance(s, MambaSpec) and s.mamba_cache_mode == "align" and s.block_size > hash_block_size
               for g in groups for s in iter_layer_specs(g.kv_cache_spec)):
        return False
    if manager_classes is None:
        return True
    return not any(g.kv_cache_spec.prefix_cacheable and not getattr(cls, "supports_fine_grained_hash_lookup", False)
                   and g.kv_cache_spec.block_size != hash_block_size
                   for g, cls in zip(groups, manager_classes))


def resolve_cache_hit_alignment_tokens(kv_cache_config: KVCacheConfig, vllm_config: VllmConfig,
                                       scheduler_block_size: int, hash_block_size: int) -> int:
    """Token granularity prefix-cache hits land on (upstream, same name).

    ``hash_block_size`` when fine-grained partial hash hits are enabled (prefix caching on,
    several groups, :func:`partial_hash_hits_enabled` with every group's manager class),
    else ``scheduler_block_size``.
    """
    from kvverify.reference.managers.registry import get_manager_class

    groups = kv_cache_config.kv_cache_groups
    if not vllm_config.enable_prefix_caching or len(groups) <= 1:
        return scheduler_block_size
    classes = [get_manager_class(g.kv_cache_spec) for g in groups]
    if partial_hash_hits_enabled(groups, hash_block_size, classes):
        return hash_block_size
    return scheduler_block_size


def validate_coordinator_block_sizes(kv_cache_config: KVCacheConfig, scheduler_block_size: int,
                                     hash_block_size: int, enable_caching: bool) -> None:
    """The coordinator's startup assertions, as a :class:`BlockSizeError`."""
    groups = kv_cache_config.kv_cache_groups
    if hash_block_size < 1 or scheduler_block_size < 1:
        raise BlockSizeError(f"block sizes must be >= 1, got scheduler={scheduler_block_size}, "
                             f"hash={hash_block_size}")
    if scheduler_block_size % hash_block_size or any(
            scheduler_block_size % g.kv_cache_spec.block_size for g in groups):
        raise BlockSizeError(
            f"scheduler_block_size={scheduler_block_size} must be a multiple of hash_block_size="
            f"{hash_block_size} and of every group block size {[g.kv_cache_spec.block_size for g in groups]}")
    if not enable_caching:
        return
    if len(groups) == 1:
        if hash_block_size != groups[0].kv_cache_spec.block_size:
            raise BlockSizeError("UnitaryKVCacheCoordinator assumes hash_block_size == block_size "
                                 f"(got {hash_block_size} and {groups[0].kv_cache_spec.block_size})")
        return
    cacheable = [g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable]
    if any(b % hash_block_size for b in cacheable):
        raise BlockSizeError(
            "Each KV cache group's real block_size must be divisible by hash_block_size. "
            f"block_sizes={cacheable}, hash_block_size={hash_block_size}")
    if fixes.is_on("chunked_local_alignment_checked_at_startup"):
        # finding F7: refuse here what ChunkedLocalAttentionManager.find_longest_cache_hit
        # would assert on the first request (hits align to resolve_cache_hit_alignment_tokens)
        from kvverify.reference.managers.registry import get_manager_class
        classes = [get_manager_class(g.kv_cache_spec) for g in groups]
        alignment = (hash_block_size if partial_hash_hits_enabled(groups, hash_block_size, classes)
                     else scheduler_block_size)
        for g in groups:
            spec = g.kv_cache_spec
            if (getattr(spec, "first_spec", spec).kind == "chunked_local" and spec.prefix_cacheable
                    and spec.block_size != alignment):
                raise BlockSizeError(
                    "KV cache groups with different block sizes are not compatible with chunked local "
                    f"attention: layers {list(g.layer_names)} have block_size={spec.block_size}, cache "
                    f"hits are aligned to {alignment} tokens")
