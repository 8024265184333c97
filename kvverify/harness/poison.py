"""The poison check: a write to one block of one layer changes nothing else.

Data-dependent, so it needs real memory (``cpu`` or ``cuda``; skipped on ``meta``): the
backing is filled with seeded random bytes, each probe writes one block through its typed
view, and every byte outside that block's planned page must be unchanged, while the pages
the plan overlays on it must read the new bytes (:func:`check_poison`). Up to
``SNAPSHOT_BYTES`` the comparison is with one snapshot of the backing; above it, with
chunked int64 word sums (no second copy).
"""

from __future__ import annotations

import random
from typing import Any, Mapping

from kvverify.harness._torch import require_torch
from kvverify.harness.allocation import KVCacheAllocation, LayerAllocation, region_of_view
from kvverify.harness.checks import CHUNK_BYTES, MAX_PER_CHECK, PLANNED_ALIASING, POISON
from kvverify.harness.geometry import Region, overlapping_blocks, planned_regions
from kvverify.invariants.base import Violation

SNAPSHOT_BYTES = 4 * 2**30  # poison compares with one full snapshot up to this size, else word sums


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


__all__ = ["SNAPSHOT_BYTES", "check_poison"]
