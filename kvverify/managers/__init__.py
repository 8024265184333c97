"""Per-type KV cache managers over one shared block pool, and their coordinator.

Upstream: ``vllm/v1/core/single_type_kv_cache_manager.py`` and
``vllm/v1/core/kv_cache_coordinator.py``. One module per manager type.
"""

from kvverify.managers.base import SingleTypeKVCacheManager, behaviour_spec
from kvverify.managers.chunked_local import ChunkedLocalAttentionManager
from kvverify.managers.coordinator import KVCacheCoordinator
from kvverify.managers.cross_attention import CrossAttentionManager
from kvverify.managers.full_attention import FullAttentionManager
from kvverify.managers.mamba import MambaManager
from kvverify.managers.registry import get_manager_class, get_manager_for_kv_cache_spec
from kvverify.managers.sliding_window import SlidingWindowManager

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
