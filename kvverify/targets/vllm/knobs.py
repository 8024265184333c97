"""Knobs the engine sets on upstream objects, passed only where the release has them (issue 17).

The adapter builds upstream objects itself, so what the engine would have set on them is set
here, by capability (:class:`~.compat.Compat`), never by version; an older release simply
runs without the knob:

* ``CacheConfig.prefix_cache_retention_interval`` (0.33.0: default ``0``, sparse
  sliding-window / Mamba prefix-cache retention; ``None`` = dense), and the same field of
  ``KVCacheConfig``: the engine copies it into every ``KVCacheConfig``
  (``get_kv_cache_config_from_groups``); a ``KVCacheConfig`` the adapter rebuilds from a plan
  must carry it too, or upstream's coordinator silently runs dense.
"""

from __future__ import annotations

from typing import Any

from kvverify.reference.config import VllmConfig
from kvverify.targets.vllm.compat import Compat


def cache_config_kwargs(caps: Compat, config: VllmConfig) -> dict[str, Any]:
    """Extra ``CacheConfig(...)`` keyword arguments the installed release understands."""
    if caps.cache_config_retention:
        return {"prefix_cache_retention_interval": config.prefix_cache_retention_interval}
    return {}


def apply_kv_cache_config_knobs(caps: Compat, kv_cache_config: Any, config: VllmConfig) -> Any:
    """Set on an upstream ``KVCacheConfig`` what the engine would have set on it; returns it."""
    if caps.kv_cache_config_retention:
        kv_cache_config.prefix_cache_retention_interval = config.prefix_cache_retention_interval
    return kv_cache_config


__all__ = ["apply_kv_cache_config_knobs", "cache_config_kwargs"]
