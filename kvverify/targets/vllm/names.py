"""The upstream objects the adapter uses, looked up where the installed release keeps them.

Not a probe (what a release *has* is :func:`.compat.detect`'s): given the capabilities and the
imported modules, :func:`resolve_names` finds each object under the module :class:`.compat.Compat`
says holds it, and names every one the adapter needs but cannot find (:class:`.compat.DriftError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from kvverify.targets.vllm.compat import (_BACKENDS, _BUILDER, _CONNECTOR, _IFACE, _UTILS, Compat,
                                          DriftError)

def _first(modules: Mapping[str, ModuleType | None], name: str, *where: str) -> Any:
    for mod in where:
        m = modules.get(mod)
        value = getattr(m, name, None) if m is not None else None
        if value is not None:
            return value
    return None


def resolve_names(caps: Compat, modules: Mapping[str, ModuleType | None]) -> dict[str, Any]:
    """The upstream objects the adapter uses, looked up where the release keeps them."""
    m = modules.get
    utils = _UTILS
    planner = caps.planner_module
    ns: dict[str, Any] = {
        "iface": m(_IFACE),
        "planning": m(planner),
        "CacheConfig": _first(modules, "CacheConfig", "vllm.config"),
        "SchedulerConfig": _first(modules, "SchedulerConfig", "vllm.config"),
        "VllmConfig": _first(modules, "VllmConfig", "vllm.config"),
        "SamplingParams": _first(modules, "SamplingParams", "vllm.sampling_params"),
        "get_hash_fn_by_name": _first(modules, "get_hash_fn_by_name", "vllm.utils.hashing", "vllm.utils"),
        "get_supported_kv_cache_layouts": _first(modules, "get_supported_kv_cache_layouts", _BACKENDS),
        "resolve_kv_cache_layout": _first(modules, "resolve_kv_cache_layout", _BACKENDS),
        "get_kv_cache_config_builder": _first(modules, "get_kv_cache_config_builder", _BUILDER),
        "get_kv_cache_coordinator": _first(modules, "get_kv_cache_coordinator", "vllm.v1.core.kv_cache_coordinator"),
        "KVCacheManager": _first(modules, "KVCacheManager", "vllm.v1.core.kv_cache_manager"),
        "generate_scheduler_kv_cache_config": _first(modules, "generate_scheduler_kv_cache_config", utils, planner),
        "get_max_concurrency_for_kv_cache_config": _first(modules, "get_max_concurrency_for_kv_cache_config",
                                                          planner, utils),
        "estimate_max_model_len": _first(modules, "estimate_max_model_len", planner, utils),
        "check_enough_kv_cache_memory": _first(modules, "check_enough_kv_cache_memory", planner, utils),
        "get_request_block_hasher": _first(modules, "get_request_block_hasher", utils),
        "init_none_hash": _first(modules, "init_none_hash", utils),
        "resolve_kv_cache_block_sizes": _first(modules, "resolve_kv_cache_block_sizes", utils),
        "resolve_cache_hit_alignment_tokens": _first(modules, "resolve_cache_hit_alignment_tokens", utils),
        "Scheduler": _first(modules, "Scheduler", "vllm.v1.core.sched.scheduler"),
        "register_all_kvcache_specs": _first(modules, "register_all_kvcache_specs",
                                             "vllm.v1.core.single_type_kv_cache_manager"),
        "ModelRunnerOutput": _first(modules, "ModelRunnerOutput", "vllm.v1.outputs"),
        "Request": _first(modules, "Request", "vllm.v1.request"),
        "StructuredOutputManager": _first(modules, "StructuredOutputManager", "vllm.v1.structured_output"),
        # the scheduler-side KV connector API (``Compat.kv_connector``; ``None`` where absent)
        "KVConnectorBase_V1": _first(modules, "KVConnectorBase_V1", _CONNECTOR),
        "KVConnectorMetadata": _first(modules, "KVConnectorMetadata", _CONNECTOR),
        "SupportsHMA": _first(modules, "SupportsHMA", _CONNECTOR),
        "KVConnectorOutput": _first(modules, "KVConnectorOutput", "vllm.v1.outputs"),
        "KVTransferConfig": _first(modules, "KVTransferConfig", "vllm.config"),
    }
    needed = ("iface", "planning", "CacheConfig", "SchedulerConfig", "VllmConfig", "SamplingParams",
              "get_hash_fn_by_name", "get_kv_cache_coordinator", "KVCacheManager",
              "generate_scheduler_kv_cache_config", "get_max_concurrency_for_kv_cache_config",
              "get_request_block_hasher", "init_none_hash", "Scheduler", "ModelRunnerOutput", "Request",
              "StructuredOutputManager")
    missing = [n for n in needed if ns[n] is None]
    if missing:
        raise DriftError(f"vLLM {caps.version}: not found where the adapter looks: {', '.join(missing)}")
    return ns


__all__ = ["resolve_names"]
