"""Grouping layers into KV cache groups (upstream: ``kv_cache_planning.get_kv_cache_groups``).

1. No specs (attention-free) -> no groups.
2. All layers mergeable -> one group.
3. Same type and block size, different pages -> one ``UniformTypeKVCacheSpecs`` group.
4. Otherwise hybrid: unify page sizes, bucket layers by spec, split each bucket into
   ``cdiv(n, group_size)`` interleaved groups.
With ``disable_hybrid_kv_cache_manager`` SWA / chunked layers are first promoted to
full attention.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from kvverify.reference import kinds
from kvverify.reference.config import VllmConfig
from kvverify.errors import KVVerifyError
from kvverify.reference.ops import cdiv
from kvverify.reference.specs import AttentionSpec, FullAttentionSpec, KVCacheSpec, MambaSpec
from kvverify.reference.specs import MLAAttentionSpec, SlidingWindowSpec, UniformTypeKVCacheSpecs


@dataclass(frozen=True)
class KVCacheGroupSpec:
    """Layers sharing one block table (upstream ``KVCacheGroupSpec``)."""

    layer_names: tuple[str, ...]
    kv_cache_spec: KVCacheSpec


class GroupingError(KVVerifyError):
    """The layer specs cannot be grouped (e.g. pages that cannot be unified)."""


def create_kv_cache_group_specs(specs: Mapping[str, KVCacheSpec],
                                grouped_layer_names: list[list[str]]) -> list[KVCacheGroupSpec]:
    groups = []
    for names in grouped_layer_names:
        layer_specs = [specs[n] for n in names]
        groups.append(KVCacheGroupSpec(tuple(names), type(layer_specs[0]).merge(layer_specs)))
    return groups


def is_kv_cache_spec_uniform(specs: Mapping[str, KVCacheSpec]) -> bool:
    """All layers merge into one spec (``is_kv_cache_spec_uniform``)."""
    if not specs:
        return True
    values = list(specs.values())
    try:
        type(values[0]).merge(values)
    except (AssertionError, ValueError):
        return False
    return True


def _promote_local_kv_cache_specs(specs: dict[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    """``--disable-hybrid-kv-cache-manager``: SWA / chunked layers allocate like full attention."""
    if is_kv_cache_spec_uniform(specs) or UniformTypeKVCacheSpecs.is_uniform_type(specs):
        return dict(specs)
    values = specs.values()
    has_full = any(isinstance(s, FullAttentionSpec) for s in values)
    has_local = any(kinds.is_recycling(s) for s in values)
    full_sizes = {s.block_size for s in values if isinstance(s, FullAttentionSpec)}
    full_block_size = next(iter(full_sizes)) if len(full_sizes) == 1 else None
    promoted = dict(specs)
    if has_full and has_local:
        for name, spec in specs.items():
            if not kinds.is_recycling(spec) or not isinstance(spec, AttentionSpec):
                continue
            block_size = full_block_size or spec.block_size
            padded = None
            if spec.page_size_padded is not None:
                padded = max(spec.page_size_padded,
                             spec.real_page_size_bytes * block_size // spec.block_size)
            promoted[name] = FullAttentionSpec(
                block_size=block_size, num_kv_heads=spec.num_kv_heads, head_size=spec.head_size,
                dtype=spec.dtype, head_size_v=spec.head_size_v, page_size_padded=padded,
                sliding_window=getattr(spec, "sliding_window", None),
                attention_chunk_size=getattr(spec, "attention_chunk_size", None))
    if not (is_kv_cache_spec_uniform(promoted) or UniformTypeKVCacheSpecs.is_uniform_type(promoted)):
        raise GroupingError("Failed to promote local KV cache specs to one unified type.")
    return promoted


def unify_kv_cache_spec_page_size(specs: dict[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    """Make every page equal (``unify_kv_cache_spec_page_size``).

    Smaller attention pages that divide the largest grow their block size by the
    ratio (why hybrid groups end up with different ``B``); Mamba pages and non-MLA
    attention pages that do not divide it are padded up.
    """
    page_sizes = {s.page_size_bytes for s in specs.values()}
    if len(page_sizes) <= 1:
        return specs
    max_page = max(page_sizes)
    unified: dict[str, KVCacheSpec] = {}
    for name, spec in specs.items():
        page = spec.page_size_bytes
        if page == max_page:
            unified[name] = spec
        elif isinstance(spec, MambaSpec):
            unified[name] = replace(spec, page_size_padded=max_page)
        elif max_page % page == 0:
            unified[name] = replace(spec, block_size=spec.block_size * (max_page // page))
        elif isinstance(spec, AttentionSpec) and not isinstance(spec, MLAAttentionSpec):
            unified[name] = replace(spec, page_size_padded=max_page)
        else:
            raise GroupingError(
                f"Layer {name}: page size {page} does not divide the maximum page size {max_page} "
                "and cannot be padded (padding is only supported for non-MLA attention layers).")
    return unified


def _get_kv_cache_groups_uniform_page_size(specs: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """Hybrid grouping: bucket by spec, then split buckets into interleaved groups."""
    same_type: dict[KVCacheSpec, list[str]] = defaultdict(list)
    for name, spec in specs.items():
        same_type[spec].append(name)
    layer_buckets: list[list[str]] = []
    spec_buckets: list[list[KVCacheSpec]] = []
    for spec, names in same_type.items():
        for bucket_names, bucket_specs in zip(layer_buckets, spec_buckets):
            try:
                type(bucket_specs[0]).merge([*bucket_specs, spec])
            except (AssertionError, ValueError):
                continue
            bucket_names.extend(names)
            bucket_specs.append(spec)
            break
        else:
            layer_buckets.append(list(names))
            spec_buckets.append([spec])
    min_layers = min(len(b) for b in layer_buckets)
    max_layers = max(len(b) for b in layer_buckets)
    group_size = max_layers if max_layers < min_layers * 1.5 else min_layers
    grouped: list[list[str]] = []
    for names in layer_buckets:
        num_groups = cdiv(len(names), group_size)
        for i in range(num_groups):
            grouped.append(names[i::num_groups])
    return create_kv_cache_group_specs(specs, grouped)


def get_kv_cache_groups(vllm_config: VllmConfig,
                        kv_cache_spec: Mapping[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """Split the model's layers into KV cache groups (``get_kv_cache_groups``)."""
    specs = dict(kv_cache_spec)
    if vllm_config.disable_hybrid_kv_cache_manager:
        specs = _promote_local_kv_cache_specs(specs)
    if not specs:
        return []
    if is_kv_cache_spec_uniform(specs):
        return create_kv_cache_group_specs(specs, [list(specs)])
    uniform = UniformTypeKVCacheSpecs.from_specs(specs)
    if uniform is not None:
        return [KVCacheGroupSpec(tuple(specs), uniform)]
    # Prefer each layer's cache semantics; if pages cannot be unified, try the
    # allocation-only fallback before failing (upstream, same order).
    try:
        unified = unify_kv_cache_spec_page_size(specs)
    except GroupingError:
        fallback = _try_get_full_allocation_fallback_groups(specs)
        if fallback is None:
            raise
        return fallback
    return _get_kv_cache_groups_uniform_page_size(unified)


def _try_get_full_allocation_fallback_groups(
        specs: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec] | None:
    """MLA next to sliding-window layers whose pages cannot be unified: allocate the SWA
    layers as full attention, all layers in one ``UniformTypeKVCacheSpecs`` group
    (upstream ``_try_get_full_allocation_fallback_groups``; it logs a warning). ``None``
    when the fallback does not apply (no MLA, no plain SWA, any chunked-local layer, or
    the promoted specs are not of one uniform type)."""
    values = list(specs.values())
    if any(isinstance(s, AttentionSpec) and kinds.is_recycling(s) and not isinstance(s, SlidingWindowSpec)
           for s in values):
        return None  # chunked-local (and any other recycling attention kind but plain SWA)
    has_mla = any(isinstance(s, MLAAttentionSpec) for s in values)
    has_swa = any(isinstance(s, SlidingWindowSpec) for s in values)
    if not (has_mla and has_swa):
        return None
    try:
        promoted = _promote_local_kv_cache_specs(specs)
    except GroupingError:
        return None
    uniform = UniformTypeKVCacheSpecs.from_specs(promoted)
    if uniform is None:
        return None
    return [KVCacheGroupSpec(tuple(promoted), uniform)]


def get_global_kv_cache_groups(vllm_config: VllmConfig,
                               kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]]) -> list[KVCacheGroupSpec]:
    """Group the whole model's layers, all workers' specs merged (``get_global_kv_cache_groups``)."""
    merged: dict[str, KVCacheSpec] = {}
    for worker_specs in kv_cache_specs:
        for name, spec in worker_specs.items():
            if name in merged and merged[name] != spec:
                raise GroupingError(f"layer {name!r} has different KV cache specs on different workers")
            merged.setdefault(name, spec)
    extra = max(0, vllm_config.num_prefill_lookahead_tokens - 1)
    for name, spec in merged.items():
        if isinstance(spec, SlidingWindowSpec):
            merged[name] = replace(spec, extra_retained_tokens=extra)
    return get_kv_cache_groups(vllm_config, merged)


def project_groups_to_worker(groups: list[KVCacheGroupSpec],
                             worker_spec: Mapping[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """Keep only a worker's layers in each group (``_project_kv_cache_groups_to_worker``)."""
    projected = []
    for g in groups:
        names = tuple(n for n in g.layer_names if n in worker_spec)
        if len(names) == len(g.layer_names):
            projected.append(g)
            continue
        spec = g.kv_cache_spec
        if names and isinstance(spec, UniformTypeKVCacheSpecs):
            inner = spec.specs
            spec = UniformTypeKVCacheSpecs(block_size=spec.block_size,
                                           kv_cache_specs=tuple((n, inner[n]) for n in names))
        projected.append(KVCacheGroupSpec(names, spec))
    return projected
