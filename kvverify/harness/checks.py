"""Checks of an allocated KV cache against its plan, each returning violations.

Every check is a plain function ``check_X(alloc, ...) -> list[Violation]`` over a
:class:`~kvverify.harness.allocation.KVCacheAllocation`, so a test can hand it a
deliberately wrong plan (or a wrong allocation) and see the named check fail.
Data-dependent parts need real memory: on ``meta`` they are skipped and the reason is
recorded in the report, never silently dropped.

Names (``CHECKS``): ``harness.layer_coverage``, ``harness.single_backing``,
``harness.total_bytes``, ``harness.tensor_size``, ``harness.num_blocks``,
``harness.typed_views``, ``harness.null_block``, ``harness.block_addressable``,
``harness.views_disjoint``, ``harness.planned_aliasing``, ``harness.poison``,
``harness.cuda_memory_allocated``, ``harness.cuda_mem_get_info``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kvverify.harness._torch import require_torch
from kvverify.harness.allocation import (
    DEFAULT_MAX_CPU_BYTES,
    KVCacheAllocation,
    LayerAllocation,
    allocate_kv_cache,
    free,
    region_of_view,
)
from kvverify.harness.geometry import (
    Region,
    expected_bytes,
    find_forbidden_overlaps,
    overlapping_blocks,
    page_parts,
    planned_regions,
    tensor_extent,
    view_shape,
)
from kvverify.reference.planner import KVCacheConfig, StartupPlan
from kvverify.reference.specs import KVCacheSpec

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
SNAPSHOT_BYTES = 4 * 2**30  # poison compares with one full snapshot up to this size, else word sums

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


# --- poison --------------------------------------------------------------------------------


def _word_sum(torch: Any, raw: Any, lo: int = 0, hi: int | None = None) -> int:
    """Wrapping sum (mod 2**64) of ``raw[lo:hi]`` as int64 words, chunked, one device sync.

    ``lo`` must be a multiple of 8; bytes past the last whole word are summed as bytes.
    """
    n = int(raw.numel())
    hi = n if hi is None else min(hi, n)
    n8 = n // 8 * 8
    total = torch.zeros((), dtype=torch.int64, device=raw.device)
    mid = min(hi, n8)
    for a in range(lo, mid, CHUNK_BYTES):
        total += raw[a:min(a + CHUNK_BYTES, mid)].view(torch.int64).sum()
    if hi > n8:
        total += raw[max(lo, n8):hi].sum(dtype=torch.int64)
    return int(total) % 2**64


def _probes(alloc: KVCacheAllocation, rng: random.Random, max_layers: int) -> list[tuple[str, int]]:
    names = list(alloc.layers)
    if len(names) > max_layers:
        names = [names[0], names[-1], *rng.sample(names[1:-1], max_layers - 2)]
    probes: list[tuple[str, int]] = []
    for name in names:
        n = alloc.layers[name].num_blocks
        if n <= 0:
            continue
        blocks = {0, min(1, n - 1), n - 1}
        if n > 1:
            blocks.add(rng.randrange(1, n))
        probes.extend((name, b) for b in sorted(blocks))
    return probes


def _witnesses(alloc: KVCacheAllocation, regions: list[Region], x: LayerAllocation, b: int, lo: int,
               hi: int) -> list[tuple[LayerAllocation, int]]:
    """Pages that may see a write to ``[lo, hi)``: those whose *views* or *planned* pages reach it.

    Plus ``x``'s own neighbours of ``b``. A correct plan yields ``x``'s neighbours and
    block ``b`` of the layers overlaid on ``x`` (other groups): a handful of pages.
    """
    out = {(x.name, c): (x, c) for c in (b - 1, b + 1, 0, x.num_blocks - 1) if 0 <= c < x.num_blocks and c != b}
    reach = [(w, region_of_view(w.name, 0, w.group, w.pages)) for w in alloc.layers.values()]
    reach += [(alloc.layers[r.layer], r) for r in regions if r.part == 0 and r.layer in alloc.layers]
    for w, region in reach:
        rng = overlapping_blocks(region, lo, hi)
        if rng is None:
            continue
        for c in {rng[0], rng[1], min(rng[0] + 1, rng[1]), *([b] if rng[0] <= b <= rng[1] else [])}:
            if (w.name, c) != (x.name, b) and c < w.num_blocks:
                out[(w.name, c)] = (w, c)
    return list(out.values())


def _hits(regions: list[Region], addr: int) -> list[list[Any]]:
    """Planned ``(layer, block)`` pages containing byte ``addr`` (evidence for a stray write)."""
    out = []
    for r in regions:
        if r.stride > 0:
            k = (addr - r.start) // r.stride
            if 0 <= k < r.count and r.start + k * r.stride <= addr < r.start + k * r.stride + r.length:
                out.append([r.layer, k])
    return out[:4]


def check_poison(alloc: KVCacheAllocation, *, seed: int = 0, max_probe_layers: int = 16) -> list[Violation]:
    """Write random data into one block of one layer; nothing else may change.

    The backing is first filled with seeded random bytes in ``[1, 255]`` (never zeros,
    which fresh memory may already hold); each probe adds a seeded random non-zero delta
    to every byte of block ``b`` of layer ``x`` through its *typed* view(s), so every byte
    of the block really changes, and subtracts it again afterwards. Checks: (1) the block
    reads back as written; (2) no byte outside the block's planned page changed — a
    comparison with one snapshot up to ``SNAPSHOT_BYTES``, above it the backing's
    wrapping word sum must change exactly as the page's words do (a full-budget cuda
    plan needs no second copy); (3) no other page read through its layer's view changed — the pages whose views
    reach the written page, and ``x``'s neighbouring blocks — except block ``b`` of layers
    of other groups (the planned alias); (4) those planned aliases *do* see the write
    where their planned bytes overlap (reported as ``planned_aliasing``). Probes: blocks
    0 (the null block), 1, N-1 and a random one, of up to ``max_probe_layers`` layers.
    cpu/cuda only (``meta`` holds no data).
    """
    torch = require_torch()
    if not alloc.has_data or alloc.backing is None or not alloc.layers:
        return []
    dev = alloc.backing.device
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    rng = random.Random(seed)
    raw = alloc.backing.view(torch.uint8)
    raw.random_(1, 256, generator=gen)
    regions = planned_regions(alloc.config, alloc.layer_specs)
    planned = {(r.layer, r.part): r for r in regions}
    snapshot = raw.clone() if int(raw.numel()) <= SNAPSHOT_BYTES else None
    s0 = _word_sum(torch, raw) if snapshot is None else 0
    out: list[Violation] = []
    for x_name, b in _probes(alloc, rng, max_probe_layers):
        x = alloc.layers[x_name]
        page_lo = x.planned_start + b * x.planned_stride
        page_hi = page_lo + x.spec.real_page_size_bytes
        witnesses = [(w, c, w.pages[c].clone()) for w, c in _witnesses(alloc, regions, x, b, page_lo, page_hi)]
        lo8, hi8 = page_lo // 8 * 8, -(-page_hi // 8) * 8
        region0 = _word_sum(torch, raw, lo8, hi8) if snapshot is None else 0
        parts_before, deltas = [], []
        for v in x.views:
            bytes_v = v[b].view(torch.uint8)
            parts_before.append(bytes_v.clone())
            deltas.append(torch.randint(1, 256, tuple(bytes_v.shape), dtype=torch.uint8, generator=gen,
                                        device=dev))
        for v, d in zip(x.views, deltas):
            v[b].view(torch.uint8).add_(d)
        for part, (v, pb, d) in enumerate(zip(x.views, parts_before, deltas)):
            now = v[b].view(torch.uint8)
            if not bool((now == pb + d).all()):
                out.append(Violation(POISON, f"block {b} of layer {x_name} (part {part}) does not read back "
                                     "what was written through its view",
                                     {"layer": x_name, "block": b, "part": part,
                                      "bytes_wrong": int((now != pb + d).sum())}))
        lo, hi = max(page_lo, 0), max(min(page_hi, int(raw.numel())), max(page_lo, 0))
        if snapshot is not None:
            if not (torch.equal(raw[:lo], snapshot[:lo]) and torch.equal(raw[hi:], snapshot[hi:])):
                changed_at = (raw != snapshot).nonzero().flatten()
                outside = changed_at[(changed_at < lo) | (changed_at >= hi)]
                first = int(outside[0])
                out.append(Violation(POISON, f"writing block {b} of layer {x_name} changed bytes outside it",
                                     {"layer": x_name, "block": b, "page": [page_lo, page_hi],
                                      "bytes_outside": int(outside.numel()), "first_outside": first,
                                      "planned_pages_hit": _hits(regions, first)}))
        else:  # everything outside the page's words sums as before (mod 2**64)
            changed = (_word_sum(torch, raw) - s0) % 2**64
            in_page = (_word_sum(torch, raw, lo8, hi8) - region0) % 2**64
            if changed != in_page:
                out.append(Violation(POISON, f"writing block {b} of layer {x_name} changed bytes outside it",
                                     {"layer": x_name, "block": b, "page": [page_lo, page_hi],
                                      "sum_change": changed, "page_sum_change": in_page}))
        for w, c, pre in witnesses:
            post = w.pages[c]
            if not bool((post != pre).any()):
                continue
            if w.name != x_name and w.group != x.group and c == b:
                out.extend(_alias_sees_write(planned, x, w, b, pre, post))
                continue
            kind = "that layer" if w.name == x_name else \
                "a layer of the same group" if w.group == x.group else "another group"
            out.append(Violation(POISON, f"writing block {b} of layer {x_name} changed block {c} of "
                                 f"{w.name} ({kind})",
                                 {"layer": x_name, "block": b, "changed_layer": w.name,
                                  "changed_block": c, "group": x.group, "changed_group": w.group}))
        for w, c, pre in witnesses:  # planned aliases that did NOT see the write
            if w.name != x_name and w.group != x.group and c == b and not bool((w.pages[c] != pre).any()):
                out.extend(_alias_sees_write(planned, x, w, b, pre, w.pages[c]))
        for v, d in zip(reversed(x.views), reversed(deltas)):  # undo: the snapshot stays valid
            v[b].view(torch.uint8).sub_(d)
        if len(out) >= MAX_PER_CHECK:
            break
    return out[:MAX_PER_CHECK]


def _alias_sees_write(planned: Mapping[tuple[str, int], Region], x: LayerAllocation,
                      w: LayerAllocation, b: int, pre: Any, post: Any) -> list[Violation]:
    """Where the plan overlays ``w``'s block ``b`` on ``x``'s, ``w`` must read the new bytes."""
    px, pw = planned.get((x.name, 0)), planned.get((w.name, 0))
    if px is None or pw is None:
        return []
    x_lo = px.start + b * px.stride
    w_lo = pw.start + b * pw.stride
    lo = max(x_lo, w_lo)
    hi = min(x_lo + x.spec.real_page_size_bytes, w_lo + w.spec.real_page_size_bytes)
    if hi <= lo:
        return []
    x_now = x.pages[b]
    same = bool((post[lo - w_lo:hi - w_lo] == x_now[lo - x_lo:hi - x_lo]).all())
    moved = bool((post[lo - w_lo:hi - w_lo] != pre[lo - w_lo:hi - w_lo]).all())
    if same and moved:
        return []
    return [Violation(PLANNED_ALIASING, f"layer {w.name} block {b} does not see the write to layer {x.name} "
                      f"block {b} that the plan overlays on it",
                      {"layer": x.name, "alias": w.name, "block": b, "overlap_bytes": hi - lo,
                       "reads_same_bytes": same, "all_changed": moved})]


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


# --- the run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HarnessReport:
    """What one allocation of one worker's plan showed."""

    device: str
    num_blocks: int
    expected_bytes: int
    allocated_bytes: int
    measured_bytes: int | None
    violations: tuple[Violation, ...]
    skipped: dict[str, str]
    checks: tuple[str, ...]
    stats: dict[str, Any]
    views: dict[str, list[list[Any]]]

    @property
    def ok(self) -> bool:
        return not self.violations

    def names(self) -> set[str]:
        return {v.name for v in self.violations}

    def to_dict(self) -> dict[str, Any]:
        def plain(v: Violation) -> dict[str, Any]:
            if hasattr(v, "to_json"):
                return v.to_json()
            return {"name": v.name, "reason": v.reason, "evidence": {k: repr(x) for k, x in v.evidence.items()}}
        return {"device": self.device, "ok": self.ok, "num_blocks": self.num_blocks,
                "expected_bytes": self.expected_bytes, "allocated_bytes": self.allocated_bytes,
                "measured_bytes": self.measured_bytes, "checks": list(self.checks),
                "skipped": dict(self.skipped), "stats": dict(self.stats),
                "violations": [plain(v) for v in self.violations], "views": self.views}

    def summary(self) -> str:
        lines = [f"harness on {self.device}: {len(self.checks)} checks, "
                 f"{'OK' if self.ok else f'{len(self.violations)} violation(s)'}; num_blocks={self.num_blocks}, "
                 f"allocated={self.allocated_bytes} B (planned {self.expected_bytes} B)"
                 + (f", measured={self.measured_bytes} B" if self.measured_bytes is not None else "")]
        lines += [f"  {v}" for v in self.violations]
        lines += [f"  skipped {k}: {r}" for k, r in self.skipped.items()]
        return "\n".join(lines)


def check_allocation(alloc: KVCacheAllocation, *, seed: int = 0, data_checks: bool = True,
                     gpu_memory_utilization: float = 0.9, max_probe_layers: int = 16
                     ) -> tuple[list[Violation], dict[str, str], list[str]]:
    """Run every check on ``alloc``: ``(violations, skipped check -> reason, checks run)``."""
    skipped: dict[str, str] = {}
    ran: list[str] = []
    violations: list[Violation] = []

    def run(name: str, fn: Callable[[], list[Violation]]) -> None:
        ran.append(name)
        violations.extend(fn())

    run(LAYER_COVERAGE, lambda: check_layer_coverage(alloc))
    run(SINGLE_BACKING, lambda: check_single_backing(alloc))
    run(TOTAL_BYTES, lambda: check_total_bytes(alloc))
    run(TENSOR_SIZE, lambda: check_tensor_size(alloc))
    run(NUM_BLOCKS, lambda: check_num_blocks(alloc))
    run(TYPED_VIEWS, lambda: check_typed_views(alloc))
    run(NULL_BLOCK, lambda: check_null_block(alloc))
    run(VIEWS_DISJOINT, lambda: check_views_disjoint(alloc))
    data = data_checks and alloc.has_data
    run(BLOCK_ADDRESSABLE, lambda: check_block_addressable(alloc, data=data))
    run(PLANNED_ALIASING, lambda: check_planned_aliasing(alloc))
    reason = None if alloc.has_data else NO_DATA.format(device=alloc.device)
    if not data_checks:
        reason = "data checks switched off (data_checks=False)"
    if reason is None:
        run(POISON, lambda: check_poison(alloc, seed=seed, max_probe_layers=max_probe_layers))
    else:
        skipped[POISON] = reason
        skipped[BLOCK_ADDRESSABLE + "[data]"] = reason
        skipped[PLANNED_ALIASING + "[data]"] = reason
    if alloc.device.startswith("cuda"):
        run(CUDA_MEMORY_ALLOCATED, lambda: check_cuda_memory(alloc, gpu_memory_utilization=gpu_memory_utilization))
        ran.append(CUDA_MEM_GET_INFO)
    else:
        for name in (CUDA_MEMORY_ALLOCATED, CUDA_MEM_GET_INFO):
            skipped[name] = f"device {alloc.device!r} is not cuda: no memory_allocated / mem_get_info to compare"
    return violations, skipped, ran


def run_harness(config: KVCacheConfig, device: str = "cpu", *,
                layer_specs: Mapping[str, KVCacheSpec] | None = None, seed: int = 0,
                data_checks: bool = True, gpu_memory_utilization: float = 0.9, max_probe_layers: int = 16,
                max_cpu_bytes: int = DEFAULT_MAX_CPU_BYTES) -> HarnessReport:
    """Allocate ``config`` on ``device``, run every check, free the memory, report."""
    alloc = allocate_kv_cache(config, device, layer_specs=layer_specs, max_cpu_bytes=max_cpu_bytes)
    try:
        violations, skipped, ran = check_allocation(alloc, seed=seed, data_checks=data_checks,
                                                    gpu_memory_utilization=gpu_memory_utilization,
                                                    max_probe_layers=max_probe_layers)
        planned = planned_regions(config, alloc.layer_specs)
        starts: dict[tuple[int, int], set[int]] = {}
        for r in planned:
            if r.part == 0:
                starts.setdefault((r.start, r.stride), set()).add(r.group)
        stats = {"layers": len(alloc.layers), "groups": len(config.kv_cache_groups),
                 "tensors": len(config.kv_cache_tensors),
                 "aliased_positions": sum(1 for gs in starts.values() if len(gs) > 1),
                 "page_parts": sum(len(page_parts(la.spec)) for la in alloc.layers.values())}
        views = {la.name: [[list(int(s) for s in v.shape), str(v.dtype).replace("torch.", "")] for v in la.views]
                 for la in alloc.layers.values()}
        return HarnessReport(device=alloc.device, num_blocks=config.num_blocks,
                             expected_bytes=expected_bytes(config, alloc.layer_specs),
                             allocated_bytes=alloc.allocated_bytes, measured_bytes=alloc.measured_bytes,
                             violations=tuple(violations), skipped=skipped, checks=tuple(ran), stats=stats,
                             views=views)
    finally:
        free(alloc)


def run_harness_plan(plan: StartupPlan, device: str = "cpu", **kwargs: Any) -> list[HarnessReport]:
    """:func:`run_harness` on every worker's KVCacheConfig of a startup plan."""
    return [run_harness(cfg, device, **kwargs) for cfg in plan.kv_cache_configs]


__all__ = ["BLOCK_ADDRESSABLE", "CHECKS", "CUDA_MEMORY_ALLOCATED", "CUDA_MEM_GET_INFO", "HarnessReport",
           "LAYER_COVERAGE", "NULL_BLOCK", "NUM_BLOCKS", "PLANNED_ALIASING", "POISON", "SINGLE_BACKING",
           "TENSOR_SIZE", "TOTAL_BYTES", "TYPED_VIEWS", "VIEWS_DISJOINT", "Violation", "check_allocation",
           "check_block_addressable", "check_cuda_memory", "check_layer_coverage", "check_null_block",
           "check_num_blocks", "check_planned_aliasing", "check_poison", "check_single_backing",
           "check_tensor_size", "check_total_bytes", "check_typed_views", "check_views_disjoint",
           "run_harness", "run_harness_plan"]
