"""The tensor plan matches the block count (guards the planner's tensor arithmetic).

Tensor sizes = num_blocks x bytes per block, total <= memory, equal pages within a
hybrid, the same num_blocks on every worker, disjoint byte ranges for a group's layers.
"""

from __future__ import annotations

from kvverify.invariants.base import Violation
from kvverify.reference.planner import StartupPlan, bytes_per_block, per_layer_spec
from kvverify.reference.specs import UniformTypeKVCacheSpecs


def check_plan(plan: StartupPlan) -> list[Violation]:
    out: list[Violation] = []
    blocks = {c.num_blocks for c in plan.kv_cache_configs}
    if len(blocks) > 1:
        out.append(Violation("plan.same_num_blocks", "workers disagree on num_blocks",
                             {"num_blocks": sorted(blocks)}))
    for w, (cfg, mem) in enumerate(zip(plan.kv_cache_configs, plan.available_memory)):
        groups = cfg.kv_cache_groups
        if not groups:
            continue
        bpb = bytes_per_block(groups)
        expected = bpb * cfg.num_blocks
        for t in cfg.kv_cache_tensors:
            if t.size != expected:
                out.append(Violation("plan.tensor_size", "tensor size is not num_blocks x bytes per block",
                                     {"worker": w, "layers": t.layers, "size": t.size, "expected": expected}))
            end = t.offset + len(t.layers) * t.layer_stride
            if end > t.size:
                out.append(Violation("plan.tensor_bounds", "layer regions run past the tensor",
                                     {"worker": w, "layers": t.layers, "end": end, "size": t.size}))
        if expected > mem and plan.vllm_config.num_gpu_blocks_override is None:
            out.append(Violation("plan.fits_memory", "allocation exceeds available memory",
                                 {"worker": w, "allocated": expected, "memory": mem}))
        pages = {per_layer_spec(g, n).page_size_bytes for g in groups for n in g.layer_names}
        uniform_type = len(groups) == 1 and isinstance(groups[0].kv_cache_spec, UniformTypeKVCacheSpecs)
        if len(groups) > 1 and len(pages) > 1 and not uniform_type:
            out.append(Violation("plan.equal_pages", "hybrid groups have different page sizes",
                                 {"worker": w, "pages": sorted(pages)}))
        out.extend(_overlaps(w, cfg))
    return out


def _overlaps(worker: int, cfg) -> list[Violation]:
    """Layers of one group must own disjoint byte ranges of the backing."""
    out: list[Violation] = []
    by_group: dict[int, list[tuple[int, int, str]]] = {}
    layer_group = {n: i for i, g in enumerate(cfg.kv_cache_groups) for n in g.layer_names}
    for t in cfg.kv_cache_tensors:
        for li, name in enumerate(t.layers):
            start = t.offset + li * t.layer_stride
            by_group.setdefault(layer_group.get(name, -1), []).append(
                (start, start + t.block_stride * cfg.num_blocks, name))
    for gi, ranges in by_group.items():
        ranges.sort()
        for (s0, e0, n0), (s1, e1, n1) in zip(ranges, ranges[1:]):
            if s1 < e0:
                out.append(Violation("plan.disjoint_layers", "two layers of one group share bytes",
                                     {"worker": worker, "group": gi, "layers": (n0, n1),
                                      "ranges": ((s0, e0), (s1, e1))}))
    return out
