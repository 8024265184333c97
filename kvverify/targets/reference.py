"""The reference model as a target (flaws apply through :mod:`kvverify.flaws`)."""

from __future__ import annotations

from typing import Mapping, Sequence

from kvverify.reference.block_sizes import resolve_kv_cache_block_sizes
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadResult, WorkloadSpec, run_workload
from kvverify.reference.planner import KVCacheConfig, StartupPlan, plan_kv_cache
from kvverify.reference.specs import KVCacheSpec
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

    def scheduler(self, plan: StartupPlan):
        """A fresh scheduler over the plan (block sizes resolved as the engine does)."""
        from kvverify.reference.scheduler import Scheduler
        return Scheduler(plan.vllm_config, plan.kv_cache_config)

    def kv_cache_manager(self, plan: StartupPlan):
        """A fresh ``KVCacheManager`` over the plan's pool, block sizes as the engine resolves them."""
        from kvverify.reference.kv_cache_manager import KVCacheManager
        return KVCacheManager.from_config(plan.kv_cache_config, plan.vllm_config)

    def admit_on_empty_pool(self, plan: StartupPlan, num_tokens: int) -> tuple[bool, dict]:
        """Ask ``allocate_slots(full_sequence_must_fit=True)`` to admit a prompt of ``num_tokens``."""
        from kvverify.reference.request import Request
        kvm = self.kv_cache_manager(plan)
        req = Request("probe", list(range(num_tokens)), 1, block_hasher=kvm.request_block_hasher)
        blocks, hit = kvm.get_computed_blocks(req)
        chunk = min(num_tokens - hit, plan.vllm_config.max_num_batched_tokens)
        need = kvm.get_num_blocks_to_allocate_full(req, blocks, hit)
        free = kvm.get_num_free_blocks()
        got = kvm.allocate_slots(req, chunk, hit, blocks, full_sequence_must_fit=True,
                                 has_scheduled_reqs=False)
        return got is not None, {"gate_charged_blocks": need, "free_blocks": free}
