"""Spec type -> manager class (upstream ``get_manager_for_kv_cache_spec`` and registry)."""

from __future__ import annotations

from kvverify.errors import KVVerifyError
from kvverify.reference.managers.base import SingleTypeKVCacheManager, behaviour_spec
from kvverify.reference.managers.chunked_local import ChunkedLocalAttentionManager
from kvverify.reference.managers.cross_attention import CrossAttentionManager
from kvverify.reference.managers.full_attention import FullAttentionManager
from kvverify.reference.managers.mamba import MambaManager
from kvverify.reference.managers.sliding_window import SlidingWindowManager
from kvverify.reference.pool import BlockPool
from kvverify.reference.specs import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
)

# Order matters: the first isinstance match wins (MLA is a FullAttentionSpec).
MANAGER_CLASSES: tuple[tuple[type[KVCacheSpec], type[SingleTypeKVCacheManager]], ...] = (
    (SlidingWindowSpec, SlidingWindowManager),
    (ChunkedLocalAttentionSpec, ChunkedLocalAttentionManager),
    (MambaSpec, MambaManager),
    (CrossAttentionSpec, CrossAttentionManager),
    (FullAttentionSpec, FullAttentionManager),
)


def get_manager_class(kv_cache_spec: KVCacheSpec) -> type[SingleTypeKVCacheManager]:
    """The manager type of a group spec (a uniform-type group uses its layers' type)."""
    inner = behaviour_spec(kv_cache_spec)
    for spec_cls, manager_cls in MANAGER_CLASSES:
        if isinstance(inner, spec_cls):
            return manager_cls
    raise KVVerifyError(f"no KV cache manager for spec type {type(inner).__name__} "
                        "(encoder-only layers keep no KV cache and form no group)")


def get_manager_for_kv_cache_spec(kv_cache_spec: KVCacheSpec, block_pool: BlockPool, *,
                                  max_in_flight_tokens: int, max_model_len: int,
                                  enable_caching: bool, kv_cache_group_id: int,
                                  scheduler_block_size: int) -> SingleTypeKVCacheManager:
    """Build the group's manager; recycling specs get their admission cap from the spec
    method that also sizes them at startup (one source of truth, PR #40946)."""
    manager_cls = get_manager_class(kv_cache_spec)
    cap = None
    inner = behaviour_spec(kv_cache_spec)
    if manager_cls.recycles_blocks and isinstance(inner, (SlidingWindowSpec,
                                                          ChunkedLocalAttentionSpec)):
        cap = inner.max_admission_blocks_per_request(max_in_flight_tokens, max_model_len)
    return manager_cls(kv_cache_spec, block_pool, enable_caching=enable_caching,
                       kv_cache_group_id=kv_cache_group_id,
                       scheduler_block_size=scheduler_block_size,
                       max_admission_blocks_per_request=cap)
