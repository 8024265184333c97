"""The target contract: every method the properties, the CLI and the reports call.

A target is the system under test: the reference (:mod:`kvverify.targets.reference`), the
reference with a bug-zoo flaw on (the same object under :func:`kvverify.flaws.enabled`), or
an adapter over an installed vLLM (:mod:`kvverify.targets.vllm`). Its methods are grouped by
:class:`Capability`, one sub-protocol each; :class:`Target` is all of them. A target lists
the capabilities it offers in ``capabilities``; :func:`kvverify.targets.conformance.check_target`
calls every method of every listed capability with small valid inputs and checks what
comes back (``tests/test_target_conformance.py`` runs it on every target).

The types are the reference's (:class:`StartupPlan`, :class:`KVCacheConfig`, ...): a target
over another engine translates them both ways. An input the target cannot express raises
:class:`TargetUnsupported` (the vLLM adapter turns it into a rejected Hypothesis example).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from kvverify.reference.config import VllmConfig
from kvverify.reference.connector import ConnectorScript
from kvverify.reference.driver import SchedulerLike, WorkloadResult, WorkloadSpec
from kvverify.reference.planner import KVCacheConfig, StartupPlan
from kvverify.reference.specs import KVCacheSpec
from kvverify.steptrace import StepRecorder


class TargetUnsupported(NotImplementedError):
    """The target cannot express this input (e.g. a layout the pinned vLLM refuses to build)."""


class Capability(str, enum.Enum):
    PLANNER = "planner"          # plan_kv_cache: groups, num_blocks, tensors, check, auto-fit
    BLOCK_SIZES = "block_sizes"  # resolve_kv_cache_block_sizes + coordinator acceptance
    RUNTIME = "runtime"          # BlockPool + managers + allocate_slots
    SCHEDULER = "scheduler"      # the step function and the workload driver
    KV_CONNECTOR = "kv_connector"  # the scheduler with a scripted KV connector, batches in flight


@runtime_checkable
class KVCacheManagerLike(Protocol):
    """What the invariants read from a KV cache manager (upstream ``KVCacheManager``'s names).

    ``coordinator.single_type_managers[i].req_to_blocks`` / ``.kv_cache_spec`` and
    ``block_pool`` (free / held ids, ref counts, cached entries) are read by
    :mod:`kvverify.invariants.pool` and :mod:`kvverify.invariants.caps`.
    """

    @property
    def block_pool(self) -> Any: ...

    @property
    def coordinator(self) -> Any: ...

    def get_num_free_blocks(self) -> int: ...

    def num_held_blocks(self, request_id: str) -> int: ...


class PlannerTarget(Protocol):
    """``Capability.PLANNER``: startup planning (upstream ``get_kv_cache_configs`` and the check)."""

    def plan(self, vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]],
             available_memory: Sequence[int] | None = None) -> StartupPlan:
        """Plan the KV cache for one worker's (or each worker's) layer specs, as the engine starts."""
        ...

    def max_concurrency(self, plan: StartupPlan) -> float:
        """``get_max_concurrency_for_kv_cache_config`` on the plan: what the engine logs."""
        ...

    def estimate_max_model_len(self, vllm_config: VllmConfig, kv_cache_spec: Mapping[str, KVCacheSpec],
                               available_memory: int) -> int:
        """Upstream's public ``estimate_max_model_len`` (finding F6: not the planner's)."""
        ...

    def check_enough_kv_cache_memory(self, vllm_config: VllmConfig, kv_cache_spec: Mapping[str, KVCacheSpec],
                                     available_memory: int) -> str | None:
        """Upstream's public ``check_enough_kv_cache_memory``: ``None`` if it passes, else its message."""
        ...


class BlockSizesTarget(Protocol):
    """``Capability.BLOCK_SIZES``: ``resolve_kv_cache_block_sizes`` and the coordinator's acceptance."""

    def resolve_block_sizes(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig) -> tuple[int, int]:
        """``(scheduler_block_size, hash_block_size)``; a refusal is a ``BlockSizeError``."""
        ...

    def coordinator_accepts(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig,
                            scheduler_block_size: int, hash_block_size: int) -> str | None:
        """Build the KV cache coordinator: ``None`` if it accepts the sizes, else its error."""
        ...


class RuntimeTarget(Protocol):
    """``Capability.RUNTIME``: the ``BlockPool``, managers and ``allocate_slots`` over a plan."""

    def kv_cache_manager(self, plan: StartupPlan) -> KVCacheManagerLike:
        """A fresh ``KVCacheManager`` over the plan's pool, block sizes as the engine resolves them."""
        ...

    def admit_on_empty_pool(self, plan: StartupPlan, num_tokens: int) -> tuple[bool, dict[str, int]]:
        """``allocate_slots(full_sequence_must_fit=True)`` for a ``num_tokens`` prompt on an empty
        pool: admitted?, and ``{"gate_charged_blocks", "free_blocks"}``."""
        ...


class SchedulerTarget(Protocol):
    """``Capability.SCHEDULER``: the scheduler's step function and the workload driver."""

    def scheduler(self, plan: StartupPlan) -> SchedulerLike:
        """A fresh scheduler over the plan, as the engine builds it."""
        ...

    def run_workload(self, plan: StartupPlan, workload: Sequence[WorkloadSpec], *,
                     max_steps: int | None = None, keep_trace: bool = True,
                     scheduler: SchedulerLike | None = None,
                     on_step: Callable[[SchedulerLike, int], None] | None = None,
                     recorder: StepRecorder | None = None) -> WorkloadResult:
        """Run ``workload`` to completion or a detected stall (:func:`kvverify.reference.driver.run_workload`);
        ``scheduler`` is one from :meth:`scheduler` (e.g. to watch its manager); ``recorder``
        (opt-in) collects the per-step trace the timeline pictures draw."""
        ...


class KVConnectorTarget(Protocol):
    """``Capability.KV_CONNECTOR``: the scheduler's KV-transfer paths, driven by a scripted connector.

    The plan's ``vllm_config`` says whether the connector is on (``kv_connector``), how many
    batches are in flight (``max_concurrent_batches``: 2 runs a batch queue) and the speculative
    config (``num_speculative_tokens``); ``script`` (a :class:`~kvverify.reference.connector.ConnectorScript`)
    says what the external cache holds per request and how its transfers behave. The worker's
    transfer report reaches the scheduler through the model-runner output, as on an engine.
    """

    def connector_scheduler(self, plan: StartupPlan, script: ConnectorScript | None) -> SchedulerLike:
        """A fresh scheduler over the plan with the scripted connector (``None``: no connector)."""
        ...

    def run_connector_workload(self, plan: StartupPlan, workload: Sequence[WorkloadSpec],
                               script: ConnectorScript | None, *, max_steps: int | None = None,
                               keep_trace: bool = True, scheduler: SchedulerLike | None = None,
                               on_step: Callable[[SchedulerLike, int], None] | None = None) -> WorkloadResult:
        """Run ``workload`` through the connector scheduler to completion or a detected stall
        (:func:`kvverify.reference.driver.run_workload`; pending transfers are no stall)."""
        ...


class Target(PlannerTarget, BlockSizesTarget, RuntimeTarget, SchedulerTarget, KVConnectorTarget, Protocol):
    """The whole contract. ``capabilities`` says which groups the target really offers."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> frozenset[Capability]: ...


#: capability -> the sub-protocol holding its methods
CAPABILITY_PROTOCOLS: dict[Capability, type] = {
    Capability.PLANNER: PlannerTarget,
    Capability.BLOCK_SIZES: BlockSizesTarget,
    Capability.RUNTIME: RuntimeTarget,
    Capability.SCHEDULER: SchedulerTarget,
    Capability.KV_CONNECTOR: KVConnectorTarget,
}


def capability_methods(capability: Capability) -> tuple[str, ...]:
    """The method names a target offering ``capability`` must have (read off its sub-protocol)."""
    proto = CAPABILITY_PROTOCOLS[capability]
    return tuple(n for n, v in vars(proto).items() if callable(v) and not n.startswith("_"))


__all__ = ["BlockSizesTarget", "CAPABILITY_PROTOCOLS", "Capability", "KVCacheManagerLike", "KVConnectorTarget",
           "PlannerTarget",
           "RuntimeTarget", "SchedulerLike", "SchedulerTarget", "Target", "TargetUnsupported",
           "capability_methods"]
