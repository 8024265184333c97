"""The target contract: every member the properties, the CLI and the reports use.

A target is the system under test: the reference (:mod:`kvverify.targets.reference`), the
reference with a bug-zoo flaw on (the same object under :func:`kvverify.flaws.enabled`), or
an adapter over an installed engine (:mod:`kvverify.targets.vllm`). The contract is a set of
small protocols, and :class:`Target` is all of them:

* :class:`TargetBase` — what every target says about itself: its ``name`` and ``version``,
  the :class:`Capability` groups it offers, which :class:`Feature` it lacks and why, and
  which known findings it has. Properties ask these questions; they never branch on a name.
* one sub-protocol per :class:`Capability` (:data:`CAPABILITY_PROTOCOLS`): the methods of
  that group. A new capability is a new enum member, a new sub-protocol, one entry in
  :data:`CAPABILITY_PROTOCOLS` and its base in :class:`Target` — nothing else changes.

:func:`kvverify.targets.conformance.check_target` calls every member of :class:`TargetBase`
and of every listed capability with small valid inputs and checks what comes back
(``tests/test_target_conformance.py`` runs it on every target). ``docs/add-a-target.md``
walks through adding a target.

The types are the reference's (:class:`StartupPlan`, :class:`KVCacheConfig`, ...): a target
over another engine translates them both ways. An input the target cannot express raises
:class:`TargetUnsupported` (the vLLM adapter turns it into a rejected Hypothesis example); a
property that needs a feature the target lacks calls :func:`require` and skips with the
target's reason.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, Protocol, runtime_checkable

from kvverify.reference.config import VllmConfig
from kvverify.reference.connector import ConnectorScript
from kvverify.reference.driver import SchedulerLike, WorkloadResult, WorkloadSpec
from kvverify.reference.planner import KVCacheConfig, StartupPlan
from kvverify.reference.specs import KVCacheSpec
from kvverify.reference.steptrace import StepRecorder


class TargetUnsupported(NotImplementedError):
    """The target cannot express this input (e.g. a layout the pinned vLLM refuses to build)."""


class Capability(str, enum.Enum):
    PLANNER = "planner"          # plan_kv_cache: groups, num_blocks, tensors, check, auto-fit
    BLOCK_SIZES = "block_sizes"  # resolve_kv_cache_block_sizes + coordinator acceptance
    RUNTIME = "runtime"          # BlockPool + managers + allocate_slots
    SCHEDULER = "scheduler"      # the step function and the workload driver
    KV_CONNECTOR = "kv_connector"  # the scheduler with a scripted KV connector, batches in flight


class Feature(str, enum.Enum):
    """A behaviour a property may need beyond the capability methods. A target answers
    :meth:`TargetBase.lacks` for each: ``None`` (it has it) or why not, in words that name the
    target or release (the skip reason)."""

    #: the proposed fixes of :mod:`kvverify.fixes` are options of this target (the reference):
    #: a failing case is re-run under them (:mod:`kvverify.props.known`), the ``*_under_fix``
    #: tests run on it
    FIX_OPTIONS = "fix_options"
    #: ``run_workload`` feeds each request's ``num_encoder_tokens`` to the engine (cross-attention
    #: blocks are allocated for it)
    ENCODER_INPUTS = "encoder_inputs"
    #: ``coordinator_accepts`` refuses with a message naming the sizes (upstream's bare asserts
    #: carry none)
    NAMED_REFUSALS = "named_refusals"
    #: ``coordinator_accepts`` judges block sizes < 1 (refuses them with a clear error); upstream's
    #: coordinator asserts nothing about them, so they are drawn only for a target with this
    NONPOSITIVE_BLOCK_SIZES = "nonpositive_block_sizes"
    #: SWA / chunked-local admission caps (``max_admission_blocks_per_request``)
    ADMISSION_CAPS = "admission_caps"
    #: the KV cache coordinator receives the scheduler block size, so it judges a
    #: (scheduler, hash) block-size pair
    COORDINATOR_BLOCK_SIZES = "coordinator_block_sizes"
    #: ``resolve_cache_hit_alignment_tokens`` (the granularity prefix-cache hits land on)
    CACHE_HIT_ALIGNMENT = "cache_hit_alignment"


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


class TargetBase(Protocol):
    """What every target answers, whatever capabilities it offers."""

    @property
    def name(self) -> str:
        """The name ``--target`` selects it by (``"reference"``, ``"vllm"``)."""
        ...

    @property
    def version(self) -> str:
        """The engine release it answers for (the reference: the vLLM release it mirrors)."""
        ...

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The capability groups it really offers (their methods may exist on others and skip)."""
        ...

    def lacks(self, feature: Feature) -> str | None:
        """``None`` if it has ``feature``, else why not (a skip reason naming the target / release)."""
        ...

    def expects_finding(self, finding: str) -> bool:
        """Whether known finding ``finding`` (``"F3"``, ``"F6-check"``; ``reports/findings/``)
        exists in it: the finding's strict known failure applies, its replay reproduces.
        Unknown findings are expected (strict)."""
        ...

    def finding_replay_masked(self, finding: str) -> str | None:
        """Why ``finding``'s minimal counterexample cannot show it here (another defect fails
        the replay first), or ``None``: the replay judges it."""
        ...

    @property
    def reference_behaviours(self) -> frozenset[str]:
        """The old release rules (:mod:`kvverify.behaviours`) the reference follows when it re-runs
        a case found here to attribute it (empty: the pin's rules, the reference's own)."""
        ...


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

    def initialize_engine_core(self, vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]],
                               available_memory: Sequence[int] | None = None) -> StartupPlan:
        """The plan after the engine core's startup hooks (``SchedulerConfig``'s budget check, the late
        chunked-prefill disables of ``EngineCore``): ``starts=False`` with the message on a refusal,
        ``plan.vllm_config`` as the Scheduler reads it (finding F14)."""
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

    def resolve_cache_hit_alignment_tokens(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig,
                                           scheduler_block_size: int, hash_block_size: int) -> int:
        """The token granularity prefix-cache hits land on (upstream, same name; needs
        ``Feature.CACHE_HIT_ALIGNMENT``)."""
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


class Target(TargetBase, PlannerTarget, BlockSizesTarget, RuntimeTarget, SchedulerTarget, KVConnectorTarget,
             Protocol):
    """The whole contract. ``capabilities`` says which groups the target really offers."""


#: capability -> the sub-protocol holding its methods
CAPABILITY_PROTOCOLS: dict[Capability, type] = {
    Capability.PLANNER: PlannerTarget,
    Capability.BLOCK_SIZES: BlockSizesTarget,
    Capability.RUNTIME: RuntimeTarget,
    Capability.SCHEDULER: SchedulerTarget,
    Capability.KV_CONNECTOR: KVConnectorTarget,
}


def protocol_members(proto: type) -> dict[str, str]:
    """The members ``proto`` declares itself, in order: name -> ``"method"`` or ``"attribute"``
    (a property or an annotated attribute)."""
    out: dict[str, str] = {}
    for n, v in vars(proto).items():
        if n.startswith("_"):
            continue
        if isinstance(v, property):
            out[n] = "attribute"
        elif callable(v):
            out[n] = "method"
    for n in vars(proto).get("__annotations__", {}):
        if not n.startswith("_"):
            out.setdefault(n, "attribute")
    return out


def capability_methods(capability: Capability) -> tuple[str, ...]:
    """The method names a target offering ``capability`` must have (read off its sub-protocol)."""
    return tuple(protocol_members(CAPABILITY_PROTOCOLS[capability]))


#: the members every target has (read off :class:`TargetBase`)
BASE_MEMBERS: tuple[str, ...] = tuple(protocol_members(TargetBase))


def in_pytest_test() -> bool:
    """A pytest test is running (``PYTEST_CURRENT_TEST`` is set during setup, call, teardown)."""
    return "pytest" in sys.modules and "PYTEST_CURRENT_TEST" in os.environ


def skip_or_raise(reason: str) -> NoReturn:
    """Skip the running pytest test with ``reason``; outside pytest raise :class:`TargetUnsupported`."""
    if in_pytest_test():
        import pytest
        pytest.skip(reason)
    raise TargetUnsupported(reason)


def has(target: TargetBase, feature: Feature) -> bool:
    """Whether ``target`` has ``feature``."""
    return target.lacks(feature) is None


def require(target: TargetBase, feature: Feature) -> None:
    """Go on if ``target`` has ``feature``; else skip the property with the target's reason
    (:func:`skip_or_raise`)."""
    why = target.lacks(feature)
    if why is not None:
        skip_or_raise(why)


def require_capability(target: TargetBase, capability: Capability) -> None:
    """Go on if ``target`` offers ``capability``; else skip the property (:func:`skip_or_raise`)
    naming the target and its release (a release lacking a path is a skip, never a pass)."""
    if capability not in target.capabilities:
        skip_or_raise(f"{target.name} target (vLLM {target.version}) does not offer the {capability.value} "
                      f"capability")


__all__ = ["BASE_MEMBERS", "BlockSizesTarget", "CAPABILITY_PROTOCOLS", "Capability", "Feature", "KVCacheManagerLike",
           "KVConnectorTarget", "PlannerTarget", "RuntimeTarget", "SchedulerLike", "SchedulerTarget", "Target", "TargetBase",
           "TargetUnsupported", "capability_methods", "has", "in_pytest_test", "protocol_members", "require",
           "require_capability", "skip_or_raise"]
