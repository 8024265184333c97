"""The reference model as a target (flaws apply through :mod:`kvverify.flaws`)."""

from __future__ import annotations

from typing import Mapping, Sequence

from kvverify.block_sizes import resolve_kv_cache_block_sizes
from kvverify.config import VllmConfig
from kvverify.driver import WorkloadResult, WorkloadSpec, run_workload
from kvverify.planner import KVCacheConfig, StartupPlan, plan_kv_cache
from kvverify.specs import KVCacheSpec
from kvverify.targets.base import Capability


class ReferenceTarget:
    name = "reference"
    capabilities = frozenset(Capability)

    def plan(self, vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]],
             available_memory: Sequence[int] | None = None) -> StartupPlan:
        return plan_kv_cache(vllm_config, kv_cache_specs, available_memory)

    def resolve_block_sizes(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig) -> tuple[int, int]:
        return resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)

    def run_workload(self, plan: StartupPlan, workload: Sequence[WorkloadSpec], **kw) -> WorkloadResult:
        return run_workload(plan.vllm_config, plan.kv_cache_config, workload, **kw)
