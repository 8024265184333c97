"""When upstream introduced (or replaced) each part of the KV-cache API the adapter probes.

:func:`~.compat.detect` records every symbol it looks for as present or absent
(``Compat.present`` / ``Compat.absent``, by module path). An absence is *known* when the
history below explains it, and anything else is drift — a :class:`~.compat.DriftError`
naming the symbol and the release, never a crash, a pass or a defect:

* a symbol of the oldest measured layer is needed by every release (a release without
  it predates what the adapter was measured on);
* a symbol introduced later is absent only in a release older than its layer: no symbol
  of a *later* layer may be present (a release between two measured ones may have part
  of the next layer, never a later one), and a release that has part of the newest layer
  (the pin's, or a dev build after it) must have all of it;
* a symbol upstream removed is absent only where its replacement is present.

The layers are named after the first measured release that has them (docs/vllm-target.md,
"How drift is absorbed"), but nothing reads a version: a release is placed by the newest
layer it has. So a contributor's checkout of vLLM main passes when it has the API the pin
has, and a rename or removal in it is named here before any property runs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

_IFACE = "vllm.v1.kv_cache_interface"
_UTILS = "vllm.v1.core.kv_cache_utils"
_PLANNING = "vllm.v1.core.kv_cache_planning"
_MANAGER = "vllm.v1.core.kv_cache_manager.KVCacheManager"
_SCHED = "vllm.v1.core.sched.scheduler.Scheduler"
_CONNECTOR = "vllm.distributed.kv_transfer.kv_connector.v1.base"

#: The layers, oldest first: (the first measured release that has them, their symbols).
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("0.14.1", frozenset({
        "vllm.config.CacheConfig", "vllm.config.SchedulerConfig", "vllm.config.VllmConfig",
        "vllm.v1.core.block_pool.BlockHashToBlockMap", "vllm.v1.core.block_pool.BlockHashToBlockMap._cache",
        "vllm.v1.core.block_pool.BlockPool",
        "vllm.v1.core.kv_cache_coordinator.KVCacheCoordinator",
        "vllm.v1.core.kv_cache_coordinator.KVCacheCoordinator.get_num_blocks_to_allocate",
        "vllm.v1.core.kv_cache_coordinator.get_kv_cache_coordinator",
        _MANAGER, f"{_MANAGER}.allocate_slots",
        f"{_UTILS}._auto_fit_max_model_len", f"{_UTILS}._check_enough_kv_cache_memory",
        f"{_UTILS}.check_enough_kv_cache_memory",
        f"{_UTILS}.estimate_max_model_len", f"{_UTILS}.get_kv_cache_configs",
        "vllm.v1.core.sched.output.SchedulerOutput", "vllm.v1.core.sched.scheduler.Scheduler", f"{_SCHED}.schedule",
        _IFACE, f"{_IFACE}.ChunkedLocalAttentionSpec", f"{_IFACE}.KVCacheConfig", f"{_IFACE}.KVCacheSpec",
        f"{_IFACE}.KVCacheTensor", f"{_IFACE}.SlidingWindowSpec", f"{_IFACE}.UniformTypeKVCacheSpecs",
        "vllm.v1.outputs.ModelRunnerOutput", "vllm.v1.request.Request",
        # the scheduler-side KV connector API (Compat.kv_connector, kv_supports_hma)
        "vllm.config.KVTransferConfig", "vllm.v1.outputs.KVConnectorOutput",
        f"{_CONNECTOR}.KVConnectorBase_V1", f"{_CONNECTOR}.SupportsHMA",
    })),
    ("0.18.1", frozenset({f"{_UTILS}._project_kv_cache_groups_to_worker", f"{_SCHED}.skipped_waiting",
                          "vllm.config.VllmConfig.num_speculative_tokens",
                          # the connector's landed / failed loads (Compat.transfer_state)
                          f"{_SCHED}.finished_recving_kv_req_ids", f"{_SCHED}.failed_recving_kv_req_ids"})),
    ("0.19.1", frozenset({f"{_MANAGER}.can_fit_full_sequence"})),
    ("0.20.0", frozenset({
        f"{_UTILS}.resolve_kv_cache_block_sizes",
        f"{_IFACE}.ChunkedLocalAttentionSpec.max_admission_blocks_per_request",
        f"{_IFACE}.SlidingWindowSpec.max_admission_blocks_per_request",
        f"{_IFACE}.UniformTypeKVCacheSpecs.max_memory_usage_pages",
    })),
    ("0.22.0", frozenset({
        f"{_UTILS}._pool_bytes_per_block", "vllm.v1.core.block_pool.BlockPool.cached_block_hashes_by_block",
        "vllm.v1.core.single_type_kv_cache_manager.register_all_kvcache_specs",
        f"{_MANAGER}.allocate_slots(full_sequence_must_fit)",
    })),
    ("0.25.0", frozenset({f"{_SCHED}.schedule:pad_spec_decode",
                          # fenced (deferred) frees and the async-load gate's in-flight prefills (#44560)
                          f"{_SCHED}.processed_step_seq", f"{_SCHED}.sched_step_seq", f"{_SCHED}.deferred_frees",
                          f"{_SCHED}.defer_block_free", f"{_SCHED}._inflight_prefills"})),
    ("0.27.1", frozenset({"vllm.config.VllmConfig.max_in_flight_tokens", "vllm.v1.request.Request.shared_prefix_boundary"})),
    ("0.28.0", frozenset({"vllm.config.VllmConfig.num_lookahead_tokens"})),
    ("0.29.0", frozenset({
        "vllm.v1.attention.backends.utils.get_supported_kv_cache_layouts",
        "vllm.v1.attention.backends.utils.resolve_kv_cache_layout", f"{_IFACE}.KVCacheSpec.prefix_cacheable",
    })),
    ("0.31.0", frozenset({"vllm.config.VllmConfig.num_prefill_lookahead_tokens",
                          "vllm.v1.core.sched.scheduler.Scheduler.kv_holding_waiting",
                          f"{_SCHED}.deferred_waiting",
                          # the async-load gate's speculative step (#57104): a method in 0.31.0,
                          # an int computed per group from 0.32.0
                          "vllm.v1.core.sched.scheduler.Scheduler._spec_decode_step_blocks",
                          # a new one-token decode padded with nothing running too (F10's shape)
                          f"{_SCHED}.schedule~pad_when_idle"})),
    ("0.32.0", frozenset({f"{_UTILS}.resolve_cache_hit_alignment_tokens"})),
    ("0.33.0", frozenset({
        "vllm.v1.core.kv_cache_config_builder", "vllm.v1.core.kv_cache_config_builder.get_kv_cache_config_builder",
        f"{_PLANNING}.get_kv_cache_configs", f"{_PLANNING}.get_global_kv_cache_groups",
        f"{_UTILS}.get_global_kv_cache_groups", f"{_PLANNING}._auto_fit_max_model_len",
        f"{_PLANNING}._check_enough_kv_cache_memory", f"{_PLANNING}._pool_bytes_per_block",
        f"{_PLANNING}._pool_bytes_per_block_from_builder", f"{_PLANNING}._project_kv_cache_groups_to_worker",
        f"{_PLANNING}.check_enough_kv_cache_memory", f"{_PLANNING}.estimate_max_model_len",
    })),
)

#: symbols upstream removed -> the symbol that replaced them (its presence explains the absence)
REPLACED: dict[str, str] = {
    f"{_MANAGER}.can_fit_full_sequence": f"{_MANAGER}.allocate_slots(full_sequence_must_fit)",
    f"{_UTILS}.check_enough_kv_cache_memory": f"{_PLANNING}.check_enough_kv_cache_memory",
    f"{_UTILS}.estimate_max_model_len": f"{_PLANNING}.estimate_max_model_len",
    # 0.31 split the one skipped queue: block holders are drained first from their own
    f"{_SCHED}.skipped_waiting": f"{_SCHED}.kv_holding_waiting",
}

_LAYER_OF = {sym: i for i, (_, syms) in enumerate(LAYERS) for sym in syms}


def layer_of(symbol: str) -> int | None:
    """The index in :data:`LAYERS` of the layer that introduced ``symbol`` (``None``: unknown)."""
    return _LAYER_OF.get(symbol)


def newest_layer(present: Collection[str]) -> int:
    """The newest layer of which the release has at least one symbol (0 when none)."""
    return max((i for s in present if (i := _LAYER_OF.get(s)) is not None), default=0)


def why_absent(symbol: str, present: Collection[str]) -> str | None:
    """Why the release may lack ``symbol`` (``None``: it may not — drift)."""
    replacement = REPLACED.get(symbol)
    if replacement is not None and replacement in present:
        return f"replaced by {replacement}"
    k = _LAYER_OF.get(symbol)
    if k is None or k == 0:
        return None
    m = newest_layer(present)
    last = len(LAYERS) - 1
    if k > m or (k == m and m != last):
        return f"introduced with the {LAYERS[k][0]} layer, which this release predates"
    return None


def unexplained_absences(absent: Collection[str], present: Collection[str]) -> list[str]:
    """The absent symbols the history does not explain, sorted (empty: no drift)."""
    return sorted(s for s in absent if why_absent(s, present) is None)


def drift_message(version: str, drift: Sequence[str], present: Collection[str] = ()) -> str:
    """What a :class:`~.compat.DriftError` says: the release, each symbol, why it is drift."""
    m = newest_layer(present) if present else None
    parts = []
    for s in drift:
        k = _LAYER_OF.get(s)
        if k is None:
            parts.append(f"{s} (kvverify/targets/vllm/history.py does not know this symbol)")
        elif k == 0:
            parts.append(f"{s} (every release the adapter was measured on has it)")
        elif s in REPLACED:
            parts.append(f"{s} (removed, but its replacement {REPLACED[s]} is missing too)")
        else:
            newer = f", although it has symbols of the {LAYERS[m][0]} layer" if m is not None and m >= k else ""
            parts.append(f"{s} (introduced with the {LAYERS[k][0]} layer{newer})")
    return (f"vLLM {version}: unknown drift of the KV-cache API: missing {'; '.join(parts)}. "
            "The adapter does not know this API (an adapter gap, not a defect of the release, and no test "
            "ran): teach kvverify/targets/vllm/compat.py and history.py the change")


__all__ = ["LAYERS", "REPLACED", "drift_message", "layer_of", "newest_layer", "unexplained_absences", "why_absent"]
