"""Checks of an allocated KV cache's layout against its plan, each returning violations.

Every check is a plain function ``check_X(alloc, ...) -> list[Violation]`` over a
:class:`~kvverify.harness.allocation.KVCacheAllocation`, so a test can hand it a
deliberately wrong plan (or a wrong allocation) and see the named check fail. Here: the
structure (coverage, one backing, bytes, sizes, block counts, typed views, the null block),
addressing and sharing (every block addressable, views disjoint or aliased as planned) and
the CUDA allocator's accounting. The data check, poison, is :mod:`kvverify.harness.poison`;
running them all on one allocation, :mod:`kvverify.harness.run`.
Data-dependent parts need real memory: on ``meta`` they are skipped and the reason is
recorded in the report, never silently dropped.

Names (``CHECKS``): ``harness.layer_coverage``, ``harness.single_backing``,
``harness.total_bytes``, ``harness.tensor_size``, ``harness.num_blocks``,
``harness.typed_views``, ``harness.null_block``, ``harness.block_addressable``,
``harness.views_disjoint``, ``harness.planned_aliasing``, ``harness.poison``,
``harness.cuda_memory_allocated``, ``harness.cuda_mem_get_info``.
"""

from __future__ import annotations

from typing import Any

from kvverify.harness._torch import require_torch
from kvverify.harness.allocation import KVCacheAllocation, LayerAllocation
from kvverify.harness.geometry import (
    expected_bytes,
    find_forbidden_overlaps,
    planned_regions,
    tensor_extent,
    view_shape,
)
from kvverify.invariants.base import Violation

LAYER_COVERAGE = "harness.layer_coverage"
SINGLE_BACKING = "harness.single_backing"
TOTAL_BYTES = "harness.total_bytes"
TENSOR_SIZE = "harness.tensor_size"
NUM_BLOCKS = "harness.num_blocks"
TYPED_VIEWS = "harness.typed_views"
NULL_BLOCK = "harness.null_block"
BLOCK_ADDRESSABLE = "harness.block_addressable"
VIEWS_DISJOINT = "harness.views_disjoint"
PLANNED_ALIASING = "harness.planned_aliasing"
POISON = "harness.poison"
CUDA_MEMORY_ALLOCATED = "harness.cuda_memory_allocated"
CUDA_MEM_GET_INFO = "harness.cuda_mem_get_info"

CHECKS = (LAYER_COVERAGE, SINGLE_BACKING, TOTAL_BYTES, TENSOR_SIZE, NUM_BLOCKS, TYPED_VIEWS, NULL_BLOCK,
          BLOCK_ADDRESSABLE, VIEWS_DISJOINT, PLANNED_ALIASING, POISON, CUDA_MEMORY_ALLOCATED,
          CUDA_MEM_GET_INFO)

MAX_PER_CHECK = 8          # witnesses reported per check (the total count goes in evidence)
CUDA_ROUNDING_SLACK = 2 * 2**20  # caching-allocator rounding tolerated by cuda_memory_allocated
CHUNK_BYTES = 64 * 2**20   # data passes touch at most this many bytes per torch op

NO_DATA = "device {device!r} holds no data (shapes and sizes only): data-dependent part skipped"


def _cap(out: list[Violation], total: int, name: str) -> list[Violation]:
    if total > len(out) and out:
        last = out[-1]
        out[-1] = Violation(name, last.reason, {**last.evidence, "total_found": total})
    return out


# --- plan-vs-allocation structure ---------------------------------------------------------


def check_layer_coverage(alloc: KVCacheAllocation) -> list[Violation]:
    """Every group layer is placed in exactly one KVCacheTensor, and only group layers are."""
    cfg = alloc.config
    out: list[Violation] = []
    group_layers = {n: gi for gi, g in enumerate(cfg.kv_cache_groups) for n in g.layer_names}
    for name, gi in group_layers.items():
        places = alloc.placements.get(name, [])
        if not places:
            out.append(Violation(LAYER_COVERAGE, f"layer {name} of group {gi} is in no KVCacheTensor",
                                 {"layer": name, "group": gi}))
        elif len(places) > 1:
            out.append(Violation(LAYER_COVERAGE, f"layer {name} is placed {len(places)} times",
                                 {"layer": name, "placements": places}))
    for name, places in alloc.placements.items():
        if name not in group_layers:
            out.append(Violation(LAYER_COVERAGE, f"tensor places layer {name}, which is in no group",
                                 {"layer": name, "placements": places}))
    seen: dict[str, int] = {}
    for gi, g in enumerate(cfg.kv_cache_groups):
        for n in g.layer_names:
            if n in seen:
                out.append(Violation(LAYER_COVERAGE, f"layer {n} is in groups {seen[n]} and {gi}",
                                     {"layer": n, "groups": [seen[n], gi]}))
            seen[n] = gi
    return _cap(out[:MAX_PER_CHECK], len(out), LAYER_COVERAGE)


def check_single_backing(alloc: KVCacheAllocation) -> list[Violation]:
    """All KVCacheTensors name one backing size (upstream asserts it, then allocates once)."""
    sizes = sorted({t.size for t in alloc.config.kv_cache_tensors})
    if len(sizes) <= 1:
        return []
    by_size = {s: [i for i, t in enumerate(alloc.config.kv_cache_tensors) if t.size == s] for s in sizes}
    return [Violation(SINGLE_BACKING, "KV cache tensors disagree on the size of the one shared backing",
                      {"sizes": sizes, "tensors_by_size": by_size, "allocated": alloc.allocated_bytes})]


def check_total_bytes(alloc: KVCacheAllocation) -> list[Violation]:
    """Bytes allocated equal the plan: ``bytes_per_block * num_blocks`` (null block included)."""
    want = expected_bytes(alloc.config, alloc.layer_specs)
    got = alloc.allocated_bytes
    if got == want:
        return []
    return [Violation(TOTAL_BYTES, "bytes allocated differ from bytes_per_block x num_blocks",
                      {"allocated": got, "expected": want, "num_blocks": alloc.config.num_blocks,
                       "difference": got - want})]


def check_tensor_size(alloc: KVCacheAllocation) -> list[Violation]:
    """Each tensor's layers fit its declared size for ``num_blocks`` blocks."""
    cfg = alloc.config
    out: list[Violation] = []
    for ti, t in enumerate(cfg.kv_cache_tensors):
        if t.offset < 0 or t.layer_stride < 0 or t.block_stride < 0:
            out.append(Violation(TENSOR_SIZE, f"tensor {ti} has a negative offset or stride",
                                 {"tensor": ti, "offset": t.offset, "layer_stride": t.layer_stride,
                                  "block_stride": t.block_stride}))
            continue
        need = tensor_extent(cfg, ti, alloc.layer_specs)
        if need > t.size:
            out.append(Violation(TENSOR_SIZE, f"tensor {ti} is too small for its layers' num_blocks pages",
                                 {"tensor": ti, "layers": list(t.layers[:4]), "num_layers": len(t.layers),
                                  "size": t.size, "needed": need, "short_by": need - t.size,
                                  "num_blocks": cfg.num_blocks}))
    return _cap(out[:MAX_PER_CHECK], len(out), TENSOR_SIZE)


def check_num_blocks(alloc: KVCacheAllocation) -> list[Violation]:
    """Every layer's view(s) address exactly the planned ``num_blocks`` blocks."""
    n = alloc.config.num_blocks
    out = []
    for la in alloc.layers.values():
        got = sorted({int(v.shape[0]) for v in la.views})
        if got != [n]:
            out.append(Violation(NUM_BLOCKS, f"layer {la.name}'s view has {got[0] if len(got) == 1 else got} "
                                 f"blocks, the plan has {n}",
                                 {"layer": la.name, "group": la.group, "view_blocks": got, "planned": n,
                                  "tensor": la.tensor_index, "position": la.position}))
    return _cap(out[:MAX_PER_CHECK], len(out), NUM_BLOCKS)


def check_typed_views(alloc: KVCacheAllocation) -> list[Violation]:
    """Typed views have the backend shape: attention (N, 2, B, H, D), MLA (N, B, H, D), Mamba states."""
    torch = require_torch()
    from kvverify.harness._torch import torch_dtype
    out = []
    for la in alloc.layers.values():
        if la.view_error is not None:
            out.append(Violation(TYPED_VIEWS, f"layer {la.name}: its pages cannot be viewed with its dtype",
                                 {"layer": la.name, "error": la.view_error,
                                  "block_stride": la.planned_stride, "start": la.planned_start}))
            continue
        want = view_shape(la.spec, la.num_blocks)
        got = [(tuple(int(s) for s in v.shape), v.dtype) for v in la.views]
        want_t = [(shape, torch_dtype(dt) if dt != "uint8" else torch.uint8) for shape, dt in want]
        if got != want_t:
            out.append(Violation(TYPED_VIEWS, f"layer {la.name}'s typed views do not have the backend shape",
                                 {"layer": la.name, "got": [[list(s), str(d)] for s, d in got],
                                  "expected": [[list(s), str(d)] for s, d in want_t]}))
    return _cap(out[:MAX_PER_CHECK], len(out), TYPED_VIEWS)


def check_null_block(alloc: KVCacheAllocation) -> list[Violation]:
    """Block 0 (the null block BlockPool keeps) exists in the plan and in every layer's views."""
    cfg = alloc.config
    if not cfg.kv_cache_groups:
        return []
    if cfg.num_blocks < 1:
        return [Violation(NULL_BLOCK, "the plan has no blocks, so no null block",
                          {"num_blocks": cfg.num_blocks})]
    missing = [la.name for la in alloc.layers.values() if any(int(v.shape[0]) < 1 for v in la.views)]
    if missing:
        return [Violation(NULL_BLOCK, f"{len(missing)} layer(s) cannot address block 0 (the null block)",
                          {"layers": missing[:8], "count": len(missing)})]
    return []


# --- addressability and sharing --------------------------------------------------------


def check_block_addressable(alloc: KVCacheAllocation, *, data: bool = True) -> list[Violation]:
    """Block ids ``1..num_blocks-1`` of every layer are inside the backing at their planned pages.

    Geometry (any device): the views reach block ``N - 1`` and its page ends inside the
    backing (``meta`` does not bound-check views); pages are affine in the id, so with
    ``planned_aliasing`` (block 0 and the stride as planned) every id lands where planned.
    Data (cpu/cuda, ``data=True``): write each block's id into its page through the
    layer's byte view and read every page back, so two ids sharing a page show up.
    """
    torch = require_torch()
    n = alloc.config.num_blocks
    size = alloc.allocated_bytes
    out: list[Violation] = []
    for la in alloc.layers.values():
        page = la.spec.real_page_size_bytes
        last_end = la.planned_start + max(n - 1, 0) * la.planned_stride + page
        if n > 1 and (la.num_blocks < n or last_end > size):
            first_bad = la.num_blocks if la.num_blocks < n else n - 1
            out.append(Violation(BLOCK_ADDRESSABLE, f"layer {la.name}: block id {first_bad} is outside "
                                 "the allocated backing",
                                 {"layer": la.name, "block": first_bad, "num_blocks": n,
                                  "page_end": la.planned_start + first_bad * la.planned_stride + page,
                                  "backing_bytes": size}))
    if data and alloc.has_data and not out:
        for la in alloc.layers.values():
            bad = _write_read_block_ids(torch, la)
            if bad is not None:
                out.append(Violation(BLOCK_ADDRESSABLE, f"layer {la.name}: block {bad[0]} reads back block "
                                     f"{bad[1]}'s id: two block ids share a page",
                                     {"layer": la.name, "block": bad[0], "read_back": bad[1]}))
            if len(out) >= MAX_PER_CHECK:
                break
    return out[:MAX_PER_CHECK]


def _write_read_block_ids(torch: Any, la: LayerAllocation) -> tuple[int, int] | None:
    """Write id ``b`` (4 bytes, little endian, repeated) into page ``b >= 1``; read back."""
    pages = la.pages
    n, page = int(pages.shape[0]), int(pages.shape[1])
    if n <= 1 or page == 0:
        return None
    dev = pages.device
    step = max(1, CHUNK_BYTES // page)

    def code(lo: int, hi: int) -> Any:
        ids = torch.arange(lo, hi, device=dev, dtype=torch.int64)
        id_bytes = torch.stack([(ids >> (8 * k)) & 0xFF for k in range(4)], dim=1).to(torch.uint8)
        return id_bytes.repeat(1, -(-page // 4))[:, :page]

    for lo in range(1, n, step):
        hi = min(n, lo + step)
        pages[lo:hi].copy_(code(lo, hi))
    for lo in range(1, n, step):
        hi = min(n, lo + step)
        got = pages[lo:hi]
        ok = (got == code(lo, hi)).all(dim=1)
        if not bool(ok.all()):
            row = int((~ok).nonzero()[0, 0])
            b = lo + row
            first4 = got[row, :4].to(torch.int64).tolist()
            read = sum(int(x) << (8 * k) for k, x in enumerate(first4[:min(4, page)]))
            return b, read
    return None


def check_views_disjoint(alloc: KVCacheAllocation) -> list[Violation]:
    """No two pages share bytes unless planned: same block id, layers of different groups."""
    found, total = find_forbidden_overlaps(alloc.regions(), limit=MAX_PER_CHECK)
    out = []
    for ov in found:
        why = ("the same layer's blocks" if ov.a.layer == ov.b.layer and ov.a.part == ov.b.part else
               "two states of one layer" if ov.a.layer == ov.b.layer else
               "layers of the same group" if ov.a.group == ov.b.group else
               "different block ids of two groups")
        out.append(Violation(VIEWS_DISJOINT, f"{ov.a.layer} block {ov.block_a} and {ov.b.layer} block "
                             f"{ov.block_b} share bytes ({why})", ov.evidence()))
    return _cap(out, total, VIEWS_DISJOINT)


def check_planned_aliasing(alloc: KVCacheAllocation) -> list[Violation]:
    """Each view addresses the bytes the plan gives its layer, in the one shared backing.

    So layers the plan overlays (the i-th layer of every group) alias the same bytes,
    and nothing else does. Storage identity needs real memory (skipped on meta).
    """
    planned = {(r.layer, r.part): r for r in planned_regions(alloc.config, alloc.layer_specs)}
    out: list[Violation] = []
    for r in alloc.regions():
        p = planned.get((r.layer, r.part))
        if p is None or r.count == 0:
            continue
        if (r.start, r.length) != (p.start, p.length) or (r.count > 1 and r.stride != p.stride):
            out.append(Violation(PLANNED_ALIASING, f"layer {r.layer}'s view (part {r.part}) does not address "
                                 "its planned bytes",
                                 {"layer": r.layer, "part": r.part, "view_start": r.start,
                                  "planned_start": p.start, "view_block_stride": r.stride,
                                  "planned_block_stride": p.stride, "view_page": r.length,
                                  "planned_page": p.length}))
    if alloc.has_data and alloc.backing is not None:
        base = alloc.backing.untyped_storage().data_ptr()
        for la in alloc.layers.values():
            for v in la.views:
                if v.untyped_storage().data_ptr() != base:
                    out.append(Violation(PLANNED_ALIASING, f"layer {la.name}'s view is not in the shared backing",
                                         {"layer": la.name}))
                    break
    return _cap(out[:MAX_PER_CHECK], len(out), PLANNED_ALIASING)


# --- cuda ----------------------------------------------------------------------------------


def check_cuda_memory(alloc: KVCacheAllocation, *, gpu_memory_utilization: float = 0.9) -> list[Violation]:
    """cuda: memory_allocated() grew by the planned bytes; the plan fits mem_get_info's budget.

    The budget at utilisation ``u`` is ``u * total - (total - free)``: what the
    utilisation target leaves once the memory already in use on the device is counted.
    """
    out: list[Violation] = []
    want = expected_bytes(alloc.config, alloc.layer_specs)
    if alloc.measured_bytes is not None:
        got = alloc.measured_bytes
        if not want <= got < want + CUDA_ROUNDING_SLACK:
            out.append(Violation(CUDA_MEMORY_ALLOCATED, "torch.cuda.memory_allocated() grew by other than "
                                 "the planned bytes",
                                 {"measured": got, "planned": want, "difference": got - want,
                                  "requested": alloc.allocated_bytes, "before": alloc.memory_allocated_before,
                                  "slack": CUDA_ROUNDING_SLACK}))
    if alloc.mem_get_info is not None:
        free_b, total = alloc.mem_get_info
        budget = int(total * gpu_memory_utilization) - (total - free_b)
        if want > budget:
            out.append(Violation(CUDA_MEM_GET_INFO, f"the plan needs more than the device leaves at "
                                 f"gpu_memory_utilization={gpu_memory_utilization}",
                                 {"planned": want, "budget": budget, "free": free_b, "total": total,
                                  "gpu_memory_utilization": gpu_memory_utilization}))
    return out


__all__ = ["BLOCK_ADDRESSABLE", "CHECKS", "CHUNK_BYTES", "CUDA_MEMORY_ALLOCATED", "CUDA_MEM_GET_INFO",
           "LAYER_COVERAGE", "MAX_PER_CHECK", "NO_DATA", "NULL_BLOCK", "NUM_BLOCKS", "PLANNED_ALIASING", "POISON",
           "SINGLE_BACKING", "TENSOR_SIZE", "TOTAL_BYTES", "TYPED_VIEWS", "VIEWS_DISJOINT", "Violation",
           "check_block_addressable", "check_cuda_memory", "check_layer_coverage", "check_null_block",
           "check_num_blocks", "check_planned_aliasing", "check_single_backing", "check_tensor_size",
           "check_total_bytes", "check_typed_views", "check_views_disjoint"]
