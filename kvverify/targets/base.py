"""The target interface: the small surface every property needs."""

from __future__ import annotations

import enum
from typing import Mapping, Protocol, Sequence

from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadResult, WorkloadSpec
from kvverify.reference.planner import KVCacheConfig, StartupPlan
from kvverify.reference.specs import KVCacheSpec


class Capability(str, enum.Enum):
    PLANNER = "planner"          # plan_kv_cache: groups, num_blocks, tensors, check, auto-fit
    BLOCK_SIZES = "block_sizes"  # resolve_kv_cache_block_sizes + coordinator acceptance
    RUNTIME = "runtime"          # BlockPool + managers + allocate_slots
    SCHEDULER = "scheduler"      # the step function and the workload driver


class Target(Protocol):
    name: str
    capabilities: frozenset[Capability]

    def plan(self, vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]],
             available_memory: Sequence[int] | None = None) -> StartupPlan: ...

    def resolve_block_sizes(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig) -> tuple[int, int]: ...

    def run_workload(self, plan: StartupPlan, workload: Sequence[WorkloadSpec], **kw) -> WorkloadResult: ...

    def admit_on_empty_pool(self, plan: StartupPlan, num_tokens: int) -> tuple[bool, dict]: ...
