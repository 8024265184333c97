"""The harness run: every check on one allocation of a plan, and what it showed.

:func:`run_harness` allocates a worker's ``KVCacheConfig`` on a device, runs the checks of
:mod:`kvverify.harness.checks` and :mod:`kvverify.harness.poison` (:func:`check_allocation`:
the data-dependent ones only where the device holds data, each skip with its reason), frees
the memory and returns a :class:`HarnessReport`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kvverify.harness.allocation import DEFAULT_MAX_CPU_BYTES, KVCacheAllocation, allocate_kv_cache, free
from kvverify.harness.checks import (
    BLOCK_ADDRESSABLE,
    CUDA_MEM_GET_INFO,
    CUDA_MEMORY_ALLOCATED,
    LAYER_COVERAGE,
    NO_DATA,
    NULL_BLOCK,
    NUM_BLOCKS,
    PLANNED_ALIASING,
    POISON,
    SINGLE_BACKING,
    TENSOR_SIZE,
    TOTAL_BYTES,
    TYPED_VIEWS,
    VIEWS_DISJOINT,
    check_block_addressable,
    check_cuda_memory,
    check_layer_coverage,
    check_null_block,
    check_num_blocks,
    check_planned_aliasing,
    check_single_backing,
    check_tensor_size,
    check_total_bytes,
    check_typed_views,
    check_views_disjoint,
)
from kvverify.harness.geometry import expected_bytes, page_parts, planned_regions
from kvverify.harness.poison import check_poison
from kvverify.invariants.base import Violation
from kvverify.reference.planner import KVCacheConfig, StartupPlan
from kvverify.reference.specs import KVCacheSpec


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


__all__ = ["HarnessReport", "check_allocation", "run_harness", "run_harness_plan"]
