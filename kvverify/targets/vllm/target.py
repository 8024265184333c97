""":class:`VllmTarget`: the installed vLLM release behind the target interface."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kvverify import behaviours
from kvverify.errors import ConfigError
from kvverify.reference import specs as kv
from kvverify.reference.config import VllmConfig
from kvverify.reference.connector import ConnectorScript
from kvverify.reference.driver import SchedulerLike, WorkloadResult, WorkloadSpec
from kvverify.reference.driver import run_workload as drive
from kvverify.reference.planner import KVCacheConfig, StartupPlan
from kvverify.reference.steptrace import StepRecorder
from kvverify.targets.base import Capability, Feature
from kvverify.targets.vllm import compat, findings, planner, runtime
from kvverify.targets.vllm.env import Upstream, upstream
from kvverify.targets.vllm.refusals import lacks as release_lacks
from kvverify.targets.vllm.refusals import skip_unsupported
from kvverify.targets.vllm.scheduler import UpstreamScheduler

#: Layout preference a worker reports. ``None``: "any backend" (upstream's default
#: preference, resolves to LBNHC, layer-outer — the layout the reference models).
DEFAULT_SUPPORTED_LAYOUTS: list[str] | None = None

#: Features the adapter never has, whatever the release: why, as the skip says
NEVER: dict[Feature, str] = {
    Feature.FIX_OPTIONS: "fixes are options on the reference",
    Feature.ENCODER_INPUTS: "the vllm target runs decoder-only requests (encoder inputs are not fed upstream)",
    Feature.NAMED_REFUSALS: "vllm target: upstream's coordinator refuses with bare asserts (no message)",
    Feature.NONPOSITIVE_BLOCK_SIZES: ("vllm target: block sizes < 1 never reach upstream's coordinator "
                                      "(it asserts nothing about them)"),
}


class VllmTarget:
    """The installed upstream vLLM (a supported release, :mod:`.support`) behind the target interface.

    ``capabilities`` lists what this release can answer; ``lacking`` says, per capability
    it cannot, why (``Capability.BLOCK_SIZES`` on a release without
    ``resolve_kv_cache_block_sizes``). ``compat`` holds the detected per-release differences;
    :meth:`lacks` answers the :class:`~kvverify.targets.base.Feature` questions from it.
    """

    name = "vllm"

    def __init__(self, supported_layouts: Sequence[str] | None = DEFAULT_SUPPORTED_LAYOUTS) -> None:
        self.up: Upstream = upstream()
        self.compat: compat.Compat = self.up.compat
        self.version = str(self.up.vllm.__version__)
        self.supported_layouts = list(supported_layouts) if supported_layouts else list(self.up.default_layouts)
        lacking = self.compat.lacking()
        self.lacking: dict[Capability, str] = {}
        if "block_sizes" in lacking:
            self.lacking[Capability.BLOCK_SIZES] = f"vLLM {self.version} {lacking['block_sizes']}"
        if "kv_connector" in lacking:
            self.lacking[Capability.KV_CONNECTOR] = f"vLLM {self.version} {lacking['kv_connector']}"
        self.capabilities = frozenset(Capability) - frozenset(self.lacking)
        #: the old rules (:mod:`kvverify.behaviours`) the reference follows to replay like this release
        self.reference_behaviours: frozenset[str] = behaviours.for_compat(self.compat)

    def _release_lacks(self, what: str) -> str:
        return f"vllm target: vLLM {self.version} {what}"

    def lacks(self, feature: Feature) -> str | None:
        """Why this release (or the adapter) lacks ``feature``, or ``None``."""
        if feature in NEVER:
            return NEVER[feature]
        caps = self.compat
        if feature is Feature.ADMISSION_CAPS and caps.admission_caps == "none":
            return self._release_lacks("has no SWA / chunked-local admission caps (no "
                                       "max_admission_blocks_per_request; the gate charges the full sequence): "
                                       "a cap the release does not have cannot be checked")
        if feature is Feature.COORDINATOR_BLOCK_SIZES and not caps.coordinator_block_sizes:
            return self._release_lacks("has no scheduler_block_size in get_kv_cache_coordinator (the Scheduler "
                                       "alone gets it): its coordinator cannot judge a (scheduler, hash) "
                                       "block-size pair")
        if feature is Feature.CACHE_HIT_ALIGNMENT and not caps.cache_hit_alignment:
            return self._release_lacks("has no resolve_cache_hit_alignment_tokens")
        return None

    def expects_finding(self, finding: str) -> bool:
        """Whether known finding ``finding`` (``"F3"``) exists in this release (measured table)."""
        return findings.finding_expected(finding, self.compat, planner.memory_rules(self))

    def finding_replay_masked(self, finding: str) -> str | None:
        """Why ``finding``'s minimal counterexample cannot show it on this release (another
        defect of the release fails it first), or ``None`` (``findings.FINDING_REPLAY_MASKED``)."""
        return findings.finding_replay_masked(finding, self.compat)

    # -- planning --

    def plan(self, vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, kv.KVCacheSpec]],
             available_memory: Sequence[int] | None = None) -> StartupPlan:
        """The release's startup plan (:func:`.planner.plan`)."""
        return planner.plan(self, vllm_config, kv_cache_specs, available_memory)

    def initialize_engine_core(self, vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, kv.KVCacheSpec]],
                               available_memory: Sequence[int] | None = None) -> StartupPlan:
        """The release's own startup hooks around the plan (:mod:`.engine_core`; finding F14)."""
        from kvverify.targets.vllm import engine_core
        return engine_core.initialize_engine_core(self, vllm_config, kv_cache_specs, available_memory)

    def max_concurrency(self, plan: StartupPlan) -> float:
        """Upstream ``get_max_concurrency_for_kv_cache_config`` on the plan (what the engine logs)."""
        u = runtime.build(self, plan, resolve_block_sizes=False)
        return float(self.up.get_max_concurrency_for_kv_cache_config(u.vc, u.scheduler_config))

    def estimate_max_model_len(self, vllm_config: VllmConfig, kv_cache_spec: Mapping[str, kv.KVCacheSpec],
                               available_memory: int) -> int:
        """Upstream's public ``estimate_max_model_len``."""
        return planner.estimate_max_model_len(self, vllm_config, kv_cache_spec, available_memory)

    def check_enough_kv_cache_memory(self, vllm_config: VllmConfig,
                                     kv_cache_spec: Mapping[str, kv.KVCacheSpec], available_memory: int) -> str | None:
        """Upstream's public ``check_enough_kv_cache_memory``: ``None`` if it passes, else the message."""
        return planner.check_enough_kv_cache_memory(self, vllm_config, kv_cache_spec, available_memory)

    # -- block sizes --

    def resolve_block_sizes(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig) -> tuple[int, int]:
        """Upstream ``resolve_kv_cache_block_sizes`` (skips, with the reason, on a release without it)."""
        return planner.resolve_block_sizes(self, kv_cache_config, vllm_config)

    def resolve_cache_hit_alignment_tokens(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig,
                                           scheduler_block_size: int, hash_block_size: int) -> int:
        """Upstream ``resolve_cache_hit_alignment_tokens`` (skips on a release without it)."""
        return planner.resolve_cache_hit_alignment_tokens(self, kv_cache_config, vllm_config,
                                                          scheduler_block_size, hash_block_size)

    def coordinator_accepts(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig,
                            scheduler_block_size: int, hash_block_size: int) -> str | None:
        """Build upstream's KV cache coordinator; ``None`` if it accepts, else its error."""
        return planner.coordinator_accepts(self, kv_cache_config, vllm_config, scheduler_block_size,
                                           hash_block_size)

    # -- runtime --

    def kv_cache_manager(self, plan: StartupPlan) -> runtime.UpstreamKVCacheManager:
        """A fresh upstream ``KVCacheManager`` over the plan's pool, built as the Scheduler builds it."""
        return runtime.kv_cache_manager(self, plan)

    def admit_on_empty_pool(self, plan: StartupPlan, num_tokens: int) -> tuple[bool, dict[str, int]]:
        """Ask the release's full-sequence admission gate to admit a prompt of ``num_tokens``."""
        return runtime.admit_on_empty_pool(self, plan, num_tokens)

    def scheduler(self, plan: StartupPlan) -> UpstreamScheduler:
        """Upstream's ``Scheduler`` for the plan, behind the interface the driver steps."""
        if plan.vllm_config.auto_max_model_len:
            raise ConfigError("max_model_len", -1, "must be resolved before scheduling; plan the startup first")
        if not plan.groups:
            skip_unsupported("scheduling an attention-free model (no KV cache groups)")
        return UpstreamScheduler(self, plan)

    def run_workload(self, plan: StartupPlan, workload: Sequence[WorkloadSpec], *,
                     max_steps: int | None = None, keep_trace: bool = True,
                     scheduler: SchedulerLike | None = None,
                     on_step: Callable[[SchedulerLike, int], None] | None = None,
                     recorder: StepRecorder | None = None, **kw: Any) -> WorkloadResult:
        """Upstream's scheduler through :func:`kvverify.reference.driver.run_workload` (same stall
        detection). Knobs the reference's driver takes and upstream resolves itself skip."""
        if scheduler is not None and not isinstance(scheduler, UpstreamScheduler):
            skip_unsupported("the property passes a reference Scheduler; use target.scheduler(plan)")
        for knob in ("scheduler_block_size", "hash_block_size"):
            if kw.pop(knob, None) is not None:
                skip_unsupported(f"{knob}= is resolved by upstream, not passed in")
        if kw.pop("full_sequence_must_fit", True) is not True:
            skip_unsupported("full_sequence_must_fit=False (the scheduler always gates admission)")
        sched = scheduler or self.scheduler(plan)
        return drive(plan.vllm_config, plan.kv_cache_config, workload, scheduler=sched, max_steps=max_steps,
                     keep_trace=keep_trace, on_step=on_step, recorder=recorder, **kw)

    # -- KV connector --

    def connector_scheduler(self, plan: StartupPlan, script: ConnectorScript | None) -> SchedulerLike:
        """Upstream's Scheduler with the scripted KV connector (:mod:`.connector`)."""
        if Capability.KV_CONNECTOR in self.lacking:
            release_lacks(self.version, self.compat.lacking()["kv_connector"])
        if not plan.groups:
            skip_unsupported("scheduling an attention-free model (no KV cache groups)")
        from kvverify.targets.vllm.connector import ConnectorScheduler
        return ConnectorScheduler(self, plan, script)

    def run_connector_workload(self, plan: StartupPlan, workload: Sequence[WorkloadSpec],
                               script: ConnectorScript | None, **kw: Any) -> WorkloadResult:
        """The connector scheduler through :func:`kvverify.reference.driver.run_workload`."""
        sched = kw.pop("scheduler", None) or self.connector_scheduler(plan, script)
        return drive(plan.vllm_config, plan.kv_cache_config, workload, scheduler=sched, **kw)


__all__ = ["DEFAULT_SUPPORTED_LAYOUTS", "NEVER", "VllmTarget"]
