"""Per-type KV cache managers over one shared block pool, and their coordinator.

Upstream: ``vllm/v1/core/single_type_kv_cache_manager.py`` and
``vllm/v1/core/kv_cache_coordinator.py``. One module per manager type.
"""

from kvverify.reference.managers.base import SingleTypeKVCacheManager, behaviour_spec
from kvverify.reference.managers.chunked_local import ChunkedLocalAttentionManager
from kvverify.reference.managers.coordinator import KVCacheCoordinator
from kvverify.reference.managers.cross_attention import CrossAttentionManager
from kvverify.reference.managers.full_attention import FullAttentionManager
from kvverify.reference.managers.mamba import MambaManager
from kvverify.reference.managers.registry import get_manager_class, get_manager_for_kv_cache_spec
from kvverify.reference.managers.sliding_window import SlidingWindowManager

__all__ = [
    "ChunkedLocalAttentionManager",
    "CrossAttentionManager",
    "FullAttentionManager",
    "KVCacheCoordinator",
    "MambaManager",
    "SingleTypeKVCacheManager",
    "SlidingWindowManager",
    "behaviour_spec",
    "get_manager_class",
    "get_manager_for_kv_cache_spec",
]
