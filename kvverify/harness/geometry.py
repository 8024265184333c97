"""Byte geometry of a KV cache plan, without torch.

A *region* is one arithmetic progression of pages in the backing allocation: block
``b`` of layer ``layer`` (state ``part`` for Mamba) occupies
``[start + b * stride, start + b * stride + length)``. Regions come either from the
plan (:func:`planned_regions`: ``offset + l * layer_stride + b * block_stride``) or
from the views a harness built (``kvverify.harness.allocation``); comparing the two is
the ``planned_aliasing`` check.

The sharing rule (upstream ``KVCacheTensor`` docstring): a block id is owned by one
group at a time, so page ``(x, b)`` may overlap page ``(y, b')`` only when ``b == b'``
and ``x``, ``y`` are layers of *different* groups. Anything else is a forbidden
overlap; :func:`find_forbidden_overlaps` finds them in time linear in the number of
regions for correct plans (closed form per pair of equal-stride regions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

from kvverify.reference.dtypes import get_dtype_size
from kvverify.reference.planner import KVCacheConfig, per_layer_spec
from kvverify.reference.specs import AttentionSpec, KVCacheSpec, MambaSpec


@dataclass(frozen=True)
class Region:
    """Pages ``[start + b * stride, ... + length)`` for ``b`` in ``[0, count)``."""

    layer: str
    part: int
    group: int
    start: int
    stride: int
    length: int
    count: int

    def page(self, block: int) -> tuple[int, int]:
        lo = self.start + block * self.stride
        return lo, lo + self.length

    @property
    def lo(self) -> int:
        return min(self.start, self.start + (self.count - 1) * self.stride)

    @property
    def hi(self) -> int:
        return max(self.start, self.start + (self.count - 1) * self.stride) + self.length


@dataclass(frozen=True)
class Overlap:
    """Page ``(a.layer, block_a)`` and page ``(b.layer, block_b)`` share bytes."""

    a: Region
    block_a: int
    b: Region
    block_b: int

    def evidence(self) -> dict[str, object]:
        return {"layer_a": self.a.layer, "group_a": self.a.group, "part_a": self.a.part,
                "block_a": self.block_a, "bytes_a": list(self.a.page(self.block_a)),
                "layer_b": self.b.layer, "group_b": self.b.group, "part_b": self.b.part,
                "block_b": self.block_b, "bytes_b": list(self.b.page(self.block_b))}


def layer_group_index(config: KVCacheConfig) -> dict[str, int]:
    """Layer name -> index of its KV cache group (first one if listed twice)."""
    out: dict[str, int] = {}
    for gi, group in enumerate(config.kv_cache_groups):
        for name in group.layer_names:
            out.setdefault(name, gi)
    return out


def resolve_layer_specs(config: KVCacheConfig,
                        layer_specs: Mapping[str, KVCacheSpec] | None = None) -> dict[str, KVCacheSpec]:
    """The spec each layer is allocated with: the plan's (unified) one unless overridden."""
    specs = {n: per_layer_spec(g, n) for g in config.kv_cache_groups for n in g.layer_names}
    if layer_specs is not None:
        specs.update(layer_specs)
    return specs


def page_parts(spec: KVCacheSpec) -> list[tuple[int, int]]:
    """``(offset in page, bytes)`` of each separately viewed part of one block's page.

    Attention / MLA: one part, the real (unpadded) page. Mamba: one part per state
    (conv, ssm, ...), packed contiguously as upstream ``MambaBase.bind_kv_cache`` does.
    """
    if isinstance(spec, MambaSpec):
        parts, off = [], 0
        for shape, dtype in zip(spec.shapes, spec.dtypes):
            nbytes = math.prod(shape) * get_dtype_size(dtype)
            parts.append((off, nbytes))
            off += nbytes
        return parts
    return [(0, spec.real_page_size_bytes)]


def planned_layer_start(config: KVCacheConfig) -> Iterator[tuple[int, int, str, int, int]]:
    """``(tensor index, position, layer, block-0 byte offset, block stride)`` per placement."""
    for ti, t in enumerate(config.kv_cache_tensors):
        for pos, name in enumerate(t.layers):
            yield ti, pos, name, t.offset + pos * t.layer_stride, t.block_stride


def planned_regions(config: KVCacheConfig,
                    layer_specs: Mapping[str, KVCacheSpec] | None = None) -> list[Region]:
    """The regions the plan promises, one per (placed layer, page part)."""
    specs = resolve_layer_specs(config, layer_specs)
    groups = layer_group_index(config)
    out = []
    for _ti, _pos, name, start, stride in planned_layer_start(config):
        spec = specs.get(name)
        if spec is None:
            continue
        for part, (off, nbytes) in enumerate(page_parts(spec)):
            out.append(Region(name, part, groups.get(name, -1), start + off, stride, nbytes,
                              config.num_blocks))
    return out


def expected_bytes(config: KVCacheConfig, layer_specs: Mapping[str, KVCacheSpec] | None = None) -> int:
    """``bytes_per_block * num_blocks``: the largest group's pages times the block count."""
    specs = resolve_layer_specs(config, layer_specs)
    if not config.kv_cache_groups:
        return 0
    bpb = max(sum(specs[n].page_size_bytes for n in g.layer_names) for g in config.kv_cache_groups)
    return bpb * config.num_blocks


def tensor_extent(config: KVCacheConfig, tensor_index: int,
                  layer_specs: Mapping[str, KVCacheSpec] | None = None) -> int:
    """One past the last byte any layer of the tensor needs for ``num_blocks`` blocks."""
    specs = resolve_layer_specs(config, layer_specs)
    t = config.kv_cache_tensors[tensor_index]
    end = 0
    n = config.num_blocks
    if n <= 0:
        return t.offset
    for pos, name in enumerate(t.layers):
        spec = specs.get(name)
        if spec is None:
            continue
        start = t.offset + pos * t.layer_stride
        end = max(end, start + max(0, (n - 1) * t.block_stride) + spec.real_page_size_bytes)
    return end


# --- forbidden overlaps ------------------------------------------------------------------


def _aliasing_allowed(a: Region, b: Region) -> bool:
    """Same block id, different layers of different groups: the planned cross-group alias."""
    return a.layer != b.layer and a.group != b.group and a.group >= 0 and b.group >= 0


def overlapping_blocks(b: Region, lo: int, hi: int) -> tuple[int, int] | None:
    """Block ids of ``b`` whose page meets ``[lo, hi)``, as an inclusive range, or None."""
    if b.count <= 0 or hi <= lo or b.length <= 0:
        return None
    if b.stride == 0:
        return (0, b.count - 1) if b.start < hi and lo < b.start + b.length else None
    if b.stride < 0:
        return None  # negative strides are reported by the tensor geometry check
    # start + k*s < hi  and  lo < start + k*s + length
    kmax = (hi - 1 - b.start) // b.stride
    kmin = (lo - b.start - b.length) // b.stride + 1
    kmin, kmax = max(kmin, 0), min(kmax, b.count - 1)
    return (kmin, kmax) if kmin <= kmax else None


def pair_overlap(a: Region, b: Region) -> Overlap | None:
    """A forbidden overlap between pages of ``a`` and ``b`` (``a is b`` allowed), or None."""
    same = a is b
    allowed_same_block = same or _aliasing_allowed(a, b)
    if a.count <= 0 or b.count <= 0 or a.length <= 0 or b.length <= 0:
        return None
    if a.stride == b.stride and a.stride > 0:
        s = a.stride
        d = a.start - b.start
        # page a[i] meets b[j]  <=>  -a.length < d + (i - j) * s < b.length, k = i - j
        kmin = (-a.length - d) // s + 1
        kmax = -((d - b.length) // s) - 1
        kmin, kmax = max(kmin, -(b.count - 1)), min(kmax, a.count - 1)
        if kmin > kmax:
            return None
        ks = [k for k in (0, 1, -1, kmin, kmax) if kmin <= k <= kmax]
        for k in sorted(set(ks), key=abs):
            if k == 0 and allowed_same_block:
                continue
            i, j = (k, 0) if k >= 0 else (0, -k)
            if i < a.count and j < b.count:
                return Overlap(a, i, b, j)
        return None
    # General case (different or zero strides): walk the blocks of the shorter region.
    first, second, swapped = (a, b, False) if a.count <= b.count else (b, a, True)
    for i in range(first.count):
        lo, hi = first.page(i)
        rng = overlapping_blocks(second, lo, hi)
        if rng is None:
            continue
        kmin, kmax = rng
        hit = next((c for c in (kmin, kmax, kmin + 1) if kmin <= c <= kmax
                    and not (c == i and allowed_same_block)), None)
        if hit is None:
            continue
        return Overlap(second, hit, first, i) if swapped else Overlap(first, i, second, hit)
    return None


def find_forbidden_overlaps(regions: Sequence[Region], limit: int = 8) -> tuple[list[Overlap], int]:
    """Forbidden overlaps among ``regions`` (each region also against itself).

    Returns up to ``limit`` witnesses and the total count of offending region pairs.
    A sweep over the regions' byte extents only compares regions whose extents meet.
    """
    found: list[Overlap] = []
    total = 0
    live = [r for r in regions if r.count > 0 and r.length > 0]
    for r in live:
        ov = pair_overlap(r, r)
        if ov is not None:
            total += 1
            if len(found) < limit:
                found.append(ov)
    order = sorted(live, key=lambda r: r.lo)
    active: list[Region] = []
    for r in order:
        active = [x for x in active if x.hi > r.lo]
        for x in active:
            ov = pair_overlap(x, r)
            if ov is not None:
                total += 1
                if len(found) < limit:
                    found.append(ov)
        active.append(r)
    return found, total


def part_itemsizes(spec: KVCacheSpec) -> list[int]:
    """Element size in bytes of each page part's typed view."""
    if isinstance(spec, MambaSpec):
        return [get_dtype_size(d) for d in spec.dtypes]
    if isinstance(spec, AttentionSpec):
        return [get_dtype_size(spec.dtype)]
    return [1]


def alignment_problems(config: KVCacheConfig,
                       layer_specs: Mapping[str, KVCacheSpec] | None = None) -> list[dict[str, object]]:
    """Page parts whose byte offset or block stride is not a multiple of their element size.

    Such a part cannot be viewed with its dtype: upstream's ``.view(dtype)`` in
    ``create_kv_cache_views`` / ``MambaBase.bind_kv_cache`` raises (e.g. a 2-byte bf16
    conv state followed by an fp32 SSM state). Nothing in the spec or the plan rules
    it out, so the harness reports it (``harness.typed_views``) instead of crashing.
    """
    specs = resolve_layer_specs(config, layer_specs)
    out: list[dict[str, object]] = []
    for _ti, _pos, name, start, stride in planned_layer_start(config):
        spec = specs.get(name)
        if spec is None:
            continue
        for part, ((off, _n), item) in enumerate(zip(page_parts(spec), part_itemsizes(spec))):
            if (start + off) % item or stride % item:
                out.append({"layer": name, "part": part, "offset": start + off, "block_stride": stride,
                            "itemsize": item})
    return out


def view_shape(spec: KVCacheSpec, num_blocks: int) -> list[tuple[tuple[int, ...], str]]:
    """The typed view shape(s) and dtype(s) of one layer (used for reports without torch).

    Attention ``(N, 2, B, H, D)`` (K and V; ``(N, B, H, D + Dv)`` when ``Dv != D``),
    MLA ``(N, B, H, D)``, Mamba one ``(N, *state_shape)`` per state.
    """
    if isinstance(spec, MambaSpec):
        return [((num_blocks, *shape), dtype) for shape, dtype in zip(spec.shapes, spec.dtypes)]
    if isinstance(spec, AttentionSpec):
        b, h, d, dv = spec.block_size, spec.num_kv_heads, spec.head_size, spec.head_size_v
        assert dv is not None
        if dv == d:
            return [((num_blocks, 2, b, h, d), spec.dtype)]
        if dv == 0:
            return [((num_blocks, b, h, d), spec.dtype)]
        return [((num_blocks, b, h, d + dv), spec.dtype)]
    return [((num_blocks, spec.real_page_size_bytes), "uint8")]


__all__ = ["Overlap", "Region", "alignment_problems", "expected_bytes", "find_forbidden_overlaps",
           "layer_group_index", "overlapping_blocks", "page_parts", "pair_overlap", "part_itemsizes",
           "planned_layer_start", "planned_regions", "resolve_layer_specs", "tensor_extent", "view_shape"]
