"""The reference model as a target (flaws apply through :mod:`kvverify.flaws`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kvverify.reference import planner
from kvverify.reference.block_sizes import (
    BlockSizeError,
    resolve_cache_hit_alignment_tokens,
    resolve_kv_cache_block_sizes,
    validate_coordinator_block_sizes,
)
from kvverify.reference.config import VllmConfig
from kvverify.reference.connector import ConnectorScript
from kvverify.reference.driver import SchedulerLike, WorkloadResult, WorkloadSpec, run_workload
from kvverify.reference.kv_cache_manager import KVCacheManager
from kvverify.reference.planner import KVCacheConfig, StartupPlan, plan_kv_cache
from kvverify.reference.scheduler import Scheduler
from kvverify.reference.specs import KVCacheSpec
from kvverify.errors import StartupCheckError
from kvverify.reference.steptrace import StepRecorder
from kvverify.targets.base import Capability, Feature
from kvverify.targets.vllm.support import REFERENCE_RELEASE


class ReferenceTarget:
    """The reference behind the :class:`~kvverify.targets.base.Target` contract: every
    capability and every feature; it mirrors the pinned vLLM release, so every known finding
    is in it (its fixes are options: :mod:`kvverify.fixes`)."""

    name = "reference"
    version = REFERENCE_RELEASE
    capabilities = frozenset(Capability)
    reference_behaviours: frozenset[str] = frozenset()  # the pin's rules (kvverify/behaviours.py)

    def lacks(self, feature: Feature) -> str | None:
        """Nothing: the reference has every feature."""
        return None

    def expects_finding(self, finding: str) -> bool:
        """Every known finding: the reference mirrors the release they were found in."""
        return True

    def finding_replay_masked(self, finding: str) -> str | None:
        """No replay is masked: the reference has no other defect that fails it first."""
        return None

    # -- planner --

    def plan(self, vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]],
             available_memory: Sequence[int] | None = None) -> StartupPlan:
        """:func:`kvverify.reference.planner.plan_kv_cache` (upstream ``get_kv_cache_configs`` + the check)."""
        return plan_kv_cache(vllm_config, kv_cache_specs, available_memory)

    def initialize_engine_core(self, vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]],
                               available_memory: Sequence[int] | None = None) -> StartupPlan:
        """:func:`kvverify.reference.engine_core.initialize_engine_core`: the plan after the engine
        core's startup hooks (``SchedulerConfig``'s budget check, the late chunked-prefill disables)."""
        from kvverify.reference.engine_core import initialize_engine_core
        return initialize_engine_core(vllm_config, kv_cache_specs, available_memory)

    def max_concurrency(self, plan: StartupPlan) -> float:
        """``get_max_concurrency_for_kv_cache_config`` on the plan (what the engine logs)."""
        return planner.get_max_concurrency_for_kv_cache_config(plan.vllm_config, plan.kv_cache_config)

    def estimate_max_model_len(self, vllm_config: VllmConfig, kv_cache_spec: Mapping[str, KVCacheSpec],
                               available_memory: int) -> int:
        """Upstream's public ``estimate_max_model_len``, as the reference mirrors it."""
        return planner.estimate_max_model_len(vllm_config, kv_cache_spec, available_memory)

    def check_enough_kv_cache_memory(self, vllm_config: VllmConfig, kv_cache_spec: Mapping[str, KVCacheSpec],
                                     available_memory: int) -> str | None:
        """Upstream's public ``check_enough_kv_cache_memory``: ``None`` if it passes, else its message."""
        try:
            planner.check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)
        except StartupCheckError as e:
            return str(e)
        return None

    # -- block sizes --

    def resolve_block_sizes(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig) -> tuple[int, int]:
        """``resolve_kv_cache_block_sizes``."""
        return resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)

    def coordinator_accepts(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig,
                            scheduler_block_size: int, hash_block_size: int) -> str | None:
        """The coordinator constructor's block-size assertions: ``None`` if they pass, else the error."""
        try:
            validate_coordinator_block_sizes(kv_cache_config, scheduler_block_size, hash_block_size,
                                             vllm_config.enable_prefix_caching)
        except BlockSizeError as e:
            return f"{type(e).__name__}: {e}"
        return None

    def resolve_cache_hit_alignment_tokens(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig,
                                           scheduler_block_size: int, hash_block_size: int) -> int:
        """``resolve_cache_hit_alignment_tokens``."""
        return resolve_cache_hit_alignment_tokens(kv_cache_config, vllm_config, scheduler_block_size,
                                                  hash_block_size)

    # -- runtime --

    def kv_cache_manager(self, plan: StartupPlan) -> KVCacheManager:
        """A fresh ``KVCacheManager`` over the plan's pool, block sizes as the engine resolves them."""
        return KVCacheManager.from_config(plan.kv_cache_config, plan.vllm_config)

    def admit_on_empty_pool(self, plan: StartupPlan, num_tokens: int) -> tuple[bool, dict[str, int]]:
        """Ask ``allocate_slots(full_sequence_must_fit=True)`` to admit a prompt of ``num_tokens``."""
        from kvverify.reference.request import Request
        kvm = self.kv_cache_manager(plan)
        req = Request("probe", list(range(num_tokens)), 1, block_hasher=kvm.request_block_hasher)
        blocks, hit, _ = kvm.get_computed_blocks(req)
        chunk = min(num_tokens - hit, plan.vllm_config.max_num_batched_tokens)
        need = kvm.get_num_blocks_to_allocate_full(req, blocks, hit)
        free = kvm.get_num_free_blocks()
        got = kvm.allocate_slots(req, chunk, hit, blocks, full_sequence_must_fit=True,
                                 has_scheduled_reqs=False)
        return got is not None, {"gate_charged_blocks": need, "free_blocks": free}

    # -- scheduler --

    def scheduler(self, plan: StartupPlan) -> Scheduler:
        """A fresh scheduler over the plan (block sizes resolved as the engine does)."""
        return Scheduler(plan.vllm_config, plan.kv_cache_config)

    def run_workload(self, plan: StartupPlan, workload: Sequence[WorkloadSpec], *,
                     max_steps: int | None = None, keep_trace: bool = True,
                     scheduler: SchedulerLike | None = None,
                     on_step: Callable[[SchedulerLike, int], None] | None = None,
                     recorder: StepRecorder | None = None) -> WorkloadResult:
        """:func:`kvverify.reference.driver.run_workload` on the plan's pool."""
        return run_workload(plan.vllm_config, plan.kv_cache_config, workload, max_steps=max_steps,
                            keep_trace=keep_trace, scheduler=scheduler, on_step=on_step,
                            recorder=recorder)

    # -- KV connector --

    def connector_scheduler(self, plan: StartupPlan, script: ConnectorScript | None) -> Scheduler:
        """A fresh scheduler over the plan with the scripted connector (:mod:`kvverify.reference.sched`)."""
        return Scheduler(plan.vllm_config, plan.kv_cache_config, connector=script)

    def run_connector_workload(self, plan: StartupPlan, workload: Sequence[WorkloadSpec],
                               script: ConnectorScript | None, *, max_steps: int | None = None,
                               keep_trace: bool = True, scheduler: SchedulerLike | None = None,
                               on_step: Callable[[SchedulerLike, int], None] | None = None) -> WorkloadResult:
        """:func:`kvverify.reference.driver.run_workload` through the connector scheduler."""
        return run_workload(plan.vllm_config, plan.kv_cache_config, workload, max_steps=max_steps,
                            keep_trace=keep_trace, connector=script,
                            scheduler=scheduler or self.connector_scheduler(plan, script), on_step=on_step)
