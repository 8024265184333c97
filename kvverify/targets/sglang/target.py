"""``SglangReleaseTarget``: the SGLang contract over the installed release's real objects."""

from __future__ import annotations

from collections.abc import Sequence

from kvverify.sglang.config import SglangConfig
from kvverify.sglang.driver import SglangRequestSpec, SglangSchedulerLike, SglangWorkloadResult
from kvverify.targets.base import TargetUnsupported
from kvverify.targets.sglang import compat, env, probes
from kvverify.targets.sglang_contract import AdmissionProbe, DecodingReqSpec, PoolProbe, RetractProbe, \
    SglangCapability


class SglangReleaseTarget:
    """The installed SGLang. ``sglang_capabilities`` is what this release offers
    (:func:`kvverify.targets.sglang.compat.detect`); ``lacks`` says why not for the rest."""

    def __init__(self) -> None:
        self.version = env.version()
        self.name = f"sglang-{self.version}"
        caps, missing = compat.detect()
        self.sglang_capabilities: frozenset[SglangCapability] = caps
        self._missing: dict[SglangCapability, str] = missing

    def lacks(self, capability: SglangCapability) -> str | None:
        if capability in self.sglang_capabilities:
            return None
        return f"{self.name} does not offer {capability.value} ({self._missing.get(capability, 'not detected')})"

    def derive_pool(self, config: SglangConfig) -> PoolProbe:
        with env.LOCK:
            return probes.derive_pool(config)

    def probe_admission(self, config: SglangConfig, input_len: int, max_new_tokens: int) -> AdmissionProbe:
        with env.LOCK:
            return probes.probe_admission(config, input_len, max_new_tokens)

    def probe_retraction(self, config: SglangConfig, batch: Sequence[DecodingReqSpec]) -> RetractProbe:
        with env.LOCK:
            return probes.probe_retraction(config, batch)

    def scheduler(self, config: SglangConfig) -> SglangSchedulerLike:
        raise TargetUnsupported(self.lacks(SglangCapability.SCHEDULER) or "not offered")

    def run_workload(self, config: SglangConfig, workload: Sequence[SglangRequestSpec]) -> SglangWorkloadResult:
        raise TargetUnsupported(self.lacks(SglangCapability.SCHEDULER) or "not offered")
