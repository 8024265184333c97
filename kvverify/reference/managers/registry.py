"""Spec type -> manager class (upstream ``KVCacheSpecRegistry.get_manager_class`` and
``get_manager_for_kv_cache_spec``), derived from the kinds registry
(:mod:`kvverify.reference.kinds`, read at call time: it imports the manager modules)."""

from __future__ import annotations

from kvverify.errors import KVVerifyError
from kvverify.reference import kinds
from kvverify.reference.managers.base import SingleTypeKVCacheManager, behaviour_spec
from kvverify.reference.pool import BlockPool
from kvverify.reference.specs import KVCacheSpec


def get_manager_class(kv_cache_spec: KVCacheSpec) -> type[SingleTypeKVCacheManager]:
    """The manager type of a group spec (a uniform-type group uses its layers' type); the
    nearest registered class in the spec's MRO decides, as upstream's registry walk."""
    inner = behaviour_spec(kv_cache_spec)
    kind = kinds.kind_of(inner)
    if kind is None or kind.manager_cls is None:
        why = kind.no_manager_reason if kind is not None else "not a registered spec kind"
        raise KVVerifyError(f"no KV cache manager for spec type {type(inner).__name__} ({why})")
    return kind.manager_cls


def get_manager_for_kv_cache_spec(kv_cache_spec: KVCacheSpec, block_pool: BlockPool, *,
                                  max_in_flight_tokens: int, max_model_len: int,
                                  enable_caching: bool, kv_cache_group_id: int,
                                  scheduler_block_size: int) -> SingleTypeKVCacheManager:
    """Build the group's manager; recycling specs get their admission cap from the formula
    that also sizes them at startup (one source of truth, PR #40946)."""
    manager_cls = get_manager_class(kv_cache_spec)
    cap = None
    if manager_cls.recycles_blocks:
        cap = kinds.admission_cap(behaviour_spec(kv_cache_spec), max_in_flight_tokens, max_model_len)
    return manager_cls(kv_cache_spec, block_pool, enable_caching=enable_caching,
                       kv_cache_group_id=kv_cache_group_id,
                       scheduler_block_size=scheduler_block_size,
                       max_admission_blocks_per_request=cap)
