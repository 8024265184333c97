"""Allocation harness: allocate a plan with torch the way vLLM's model runner does, check it.

torch is optional (``pip install -e '.[torch]'``): importing this package never imports
torch; the functions that need it raise :class:`TorchUnavailableError` with the
install hint. Modules:

* :mod:`~kvverify.harness.geometry` — byte regions of a plan and the overlap rule (no torch);
* :mod:`~kvverify.harness.allocation` — one raw int8 backing, per-layer typed views;
* :mod:`~kvverify.harness.checks` — the named checks of the layout (structure, addressing, CUDA);
* :mod:`~kvverify.harness.poison` — the data check: a write lands only where the plan says;
* :mod:`~kvverify.harness.run` — every check on one allocation, :func:`run_harness`, :class:`HarnessReport`;
* :mod:`~kvverify.harness.mutations` — deliberately wrong plans each check must catch.

Typical use::

    plan = plan_kv_cache(vllm_config, [layer_specs])
    report = run_harness(plan.kv_cache_config, device="cpu")   # or "meta", "cuda"
    assert report.ok, report.summary()
"""

from kvverify.harness._torch import (
    DEVICES,
    HarnessError,
    TorchUnavailableError,
    require_torch,
    torch_available,
)
from kvverify.harness.allocation import KVCacheAllocation, LayerAllocation, allocate_kv_cache
from kvverify.harness.checks import (
    CHECKS,
    Violation,
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
from kvverify.harness.geometry import Region, find_forbidden_overlaps, planned_regions
from kvverify.harness.mutations import MUTATIONS
from kvverify.harness.poison import check_poison
from kvverify.harness.run import HarnessReport, check_allocation, run_harness, run_harness_plan

__all__ = [
    "CHECKS", "DEVICES", "HarnessError", "HarnessReport", "KVCacheAllocation", "LayerAllocation", "MUTATIONS",
    "Region", "TorchUnavailableError", "Violation", "allocate_kv_cache", "check_allocation",
    "check_block_addressable", "check_cuda_memory", "check_layer_coverage", "check_null_block",
    "check_num_blocks", "check_planned_aliasing", "check_poison", "check_single_backing", "check_tensor_size",
    "check_total_bytes", "check_typed_views", "check_views_disjoint", "find_forbidden_overlaps",
    "planned_regions", "require_torch", "run_harness", "run_harness_plan", "torch_available",
]
