"""Allocate a plan the way vLLM's model runner does, and view it per layer.

Upstream (0.33.0, ``vllm/v1/worker/utils.py::allocate_kv_cache``) asserts that every
``KVCacheTensor`` names the same ``size`` ("KV cache tensors must share one backing
allocation"), allocates ONE raw buffer ``torch.zeros(size, dtype=torch.int8)`` and
builds each layer's view with ``torch.as_strided`` at
``offset + l * layer_stride + b * block_stride`` (``create_kv_cache_views``); groups'
tensors overlay the same bytes. Mamba layers receive a ``[B, 1, 1, C]`` byte view
whose pages ``MambaBase.bind_kv_cache`` slices into per-state views.

This module does the same, but never asserts: a plan whose tensors disagree on the
size gets one backing of the largest size (the ``single_backing`` check reports it),
and a layer whose planned pages run past the backing gets a view of only the blocks
that fit (``num_blocks`` / ``tensor_size`` report it), so every check can still run.
Typed views follow the classic backend shapes: attention ``(N, 2, B, H, D)``, MLA
``(N, B, H, D)``, Mamba one ``(N, *state_shape)`` per state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from kvverify.harness._torch import HarnessError, require_torch, resolve_device, torch_dtype
from kvverify.harness.geometry import (
    Region,
    layer_group_index,
    page_parts,
    planned_layer_start,
    resolve_layer_specs,
)
from kvverify.reference.planner import KVCacheConfig
from kvverify.reference.specs import AttentionSpec, KVCacheSpec, MambaSpec

DEFAULT_MAX_CPU_BYTES = 2 * 2**30  # cpu is for small plans; real sizes go to meta


@dataclass
class LayerAllocation:
    """One layer's views into the backing.

    ``pages`` is the raw per-block byte view ``(n, real_page_bytes)`` (uint8);
    ``views`` the typed view(s) a backend would use; ``num_blocks`` how many blocks the
    views address (the plan's ``num_blocks`` unless the backing is too small).
    """

    name: str
    group: int
    spec: KVCacheSpec
    tensor_index: int
    position: int
    planned_start: int
    planned_stride: int
    num_blocks: int
    pages: Any
    views: tuple[Any, ...]
    view_error: str | None = None


@dataclass
class KVCacheAllocation:
    """A worker's allocated KV cache: the backing and every placed layer's views.

    ``measured_bytes`` (cuda) is ``torch.cuda.memory_allocated()`` after minus before;
    ``mem_get_info`` is ``(free, total)`` read just before allocating.
    """

    config: KVCacheConfig
    device: str
    layer_specs: dict[str, KVCacheSpec]
    backing: Any | None
    layers: dict[str, LayerAllocation]
    placements: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    measured_bytes: int | None = None
    memory_allocated_before: int | None = None
    mem_get_info: tuple[int, int] | None = None

    @property
    def has_data(self) -> bool:
        return self.device.split(":")[0] in ("cpu", "cuda")

    @property
    def allocated_bytes(self) -> int:
        if self.backing is None:
            return 0
        return int(self.backing.untyped_storage().nbytes())

    def kv_caches(self) -> dict[str, Any]:
        """Layer name -> typed view (a tuple of state views for Mamba), like upstream's dict."""
        return {n: (la.views if len(la.views) != 1 else la.views[0]) for n, la in self.layers.items()}

    def regions(self) -> list[Region]:
        """The byte regions the *views* address (compare :func:`geometry.planned_regions`)."""
        out = []
        for la in self.layers.values():
            for part, view in enumerate(la.views):
                out.append(region_of_view(la.name, part, la.group, view))
        return out


def region_of_view(layer: str, part: int, group: int, view: Any) -> Region:
    """Where a ``(n, ...)`` view's blocks lie in its storage, in bytes (meta included)."""
    item = view.element_size()
    n = int(view.shape[0])
    span = 1 + sum((int(sz) - 1) * int(st) for sz, st in zip(view.shape[1:], view.stride()[1:]))
    if any(int(sz) == 0 for sz in view.shape[1:]):
        span = 0
    return Region(layer, part, group, int(view.storage_offset()) * item, int(view.stride(0)) * item,
                  span * item, n)


def _blocks_that_fit(start: int, stride: int, page: int, size: int, want: int) -> int:
    if want <= 0 or start < 0 or stride < 0 or start + page > size:
        return 0
    if stride == 0:
        return want
    return min(want, (size - start - page) // stride + 1)


def _typed_views(torch: Any, pages: Any, spec: KVCacheSpec, n: int) -> tuple[tuple[Any, ...], str | None]:
    """Reinterpret ``(n, page)`` bytes as the backend's typed view(s).

    A part that cannot take its dtype (a byte offset or block stride not a multiple of
    the element size: upstream's ``.view(dtype)`` raises there too) keeps its byte view,
    and the first such error is returned for the ``typed_views`` check.
    """
    error: str | None = None

    def typed(part: Any, dtype: str, shape: tuple[int, ...]) -> Any:
        nonlocal error
        try:
            return part.view(torch_dtype(dtype)).view(n, *shape)
        except RuntimeError as e:
            error = error or f"{type(e).__name__}: {str(e).splitlines()[0]}"
            return part

    if isinstance(spec, MambaSpec):
        return tuple(typed(pages[:, off:off + nbytes], dtype, shape)
                     for (off, nbytes), shape, dtype in zip(page_parts(spec), spec.shapes, spec.dtypes)), error
    if isinstance(spec, AttentionSpec):
        b, h, d, dv = spec.block_size, spec.num_kv_heads, spec.head_size, spec.head_size_v
        assert dv is not None
        shape = (2, b, h, d) if dv == d else (b, h, d) if dv == 0 else (b, h, d + dv)
        return (typed(pages, spec.dtype, shape),), error
    return (pages,), None


def allocate_kv_cache(config: KVCacheConfig, device: str = "cpu", *,
                      layer_specs: Mapping[str, KVCacheSpec] | None = None,
                      max_cpu_bytes: int = DEFAULT_MAX_CPU_BYTES) -> KVCacheAllocation:
    """Allocate ``config`` on ``device`` (``cpu``, ``meta`` or ``cuda[:i]``) and view it.

    ``layer_specs`` overrides the per-layer specs the views are built with (default:
    the plan's unified specs), so a test can allocate a plan against specs it does not
    match. Raises :class:`HarnessError` for a cpu plan above ``max_cpu_bytes``.
    """
    torch = require_torch()
    dev = resolve_device(device)
    specs = resolve_layer_specs(config, layer_specs)
    groups = layer_group_index(config)
    alloc = KVCacheAllocation(config=config, device=str(dev), layer_specs=specs, backing=None, layers={})
    for ti, pos, name, _start, _stride in planned_layer_start(config):
        alloc.placements.setdefault(name, []).append((ti, pos))
    if not config.kv_cache_tensors:
        return alloc

    size = max(t.size for t in config.kv_cache_tensors)
    if size < 0:
        raise HarnessError(f"KVCacheTensor.size={size} is negative: nothing to allocate")
    if dev.type == "cpu" and size > max_cpu_bytes:
        raise HarnessError(f"the plan needs {size} bytes, above the cpu limit of {max_cpu_bytes}: "
                           "use device='meta' for real-size plans (or raise max_cpu_bytes)")
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        alloc.mem_get_info = tuple(int(x) for x in torch.cuda.mem_get_info(dev))  # type: ignore[assignment]
        alloc.memory_allocated_before = int(torch.cuda.memory_allocated(dev))
    backing = torch.zeros(size, dtype=torch.int8, device=dev)  # upstream: one raw int8 buffer
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        assert alloc.memory_allocated_before is not None
        alloc.measured_bytes = int(torch.cuda.memory_allocated(dev)) - alloc.memory_allocated_before
    alloc.backing = backing
    raw = backing.view(torch.uint8)

    n_planned = max(config.num_blocks, 0)
    for ti, pos, name, start, stride in planned_layer_start(config):
        if name in alloc.layers:
            continue  # placed twice: reported by the layer_coverage check
        spec = specs.get(name)
        if spec is None:
            continue
        page = spec.real_page_size_bytes
        n = _blocks_that_fit(start, stride, page, size, n_planned)
        storage_offset = max(start, 0)
        pages = torch.as_strided(raw, (n, page), (max(stride, 0), 1), storage_offset=storage_offset)
        views, error = _typed_views(torch, pages, spec, n)
        alloc.layers[name] = LayerAllocation(name, groups.get(name, -1), spec, ti, pos, start, stride,
                                             n, pages, views, error)
    return alloc


def free(alloc: KVCacheAllocation) -> None:
    """Drop the backing and views (and give CUDA memory back to the driver)."""
    alloc.layers.clear()
    alloc.backing = None
    torch = require_torch()
    if alloc.device.startswith("cuda"):
        torch.cuda.empty_cache()


__all__ = ["DEFAULT_MAX_CPU_BYTES", "KVCacheAllocation", "LayerAllocation", "allocate_kv_cache",
           "free", "region_of_view"]
