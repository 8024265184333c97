"""Per-type KV cache managers over one shared block pool, and their coordinator.

Upstream: ``vllm/v1/core/single_type_kv_cache_manager.py`` and
``vllm/v1/core/kv_cache_coordinator.py``. One module per manager type; which spec kind
uses which manager is registered once, in :mod:`kvverify.reference.kinds` (import a
manager class from its module, or look it up with :func:`get_manager_class`).
"""

from kvverify.reference.managers.base import SingleTypeKVCacheManager, behaviour_spec
from kvverify.reference.managers.coordinator import KVCacheCoordinator
from kvverify.reference.managers.registry import get_manager_class, get_manager_for_kv_cache_spec

__all__ = [
    "KVCacheCoordinator",
    "SingleTypeKVCacheManager",
    "behaviour_spec",
    "get_manager_class",
    "get_manager_for_kv_cache_spec",
]
