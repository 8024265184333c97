"""Systems under test. Properties talk to a :class:`Target`, not to a module.

``reference`` is the default; the reference with a bug-zoo flaw switched on is the same
target under :func:`kvverify.flaws.enabled`; ``vllm`` adapts an installed vLLM release (0.19.1 … 0.33.0; the pin is 0.33.0).
"""

from __future__ import annotations

from kvverify.errors import ConfigError
from kvverify.targets.base import (
    BlockSizesTarget,
    Capability,
    KVCacheManagerLike,
    PlannerTarget,
    RuntimeTarget,
    SchedulerLike,
    SchedulerTarget,
    Target,
    TargetUnsupported,
)


def get_target(name: str) -> Target:
    """Look a target up by name; unknown names are a clear error."""
    if name == "reference":
        from kvverify.targets.reference import ReferenceTarget
        return ReferenceTarget()
    if name == "vllm":
        from kvverify.targets.vllm import VllmTarget
        return VllmTarget()
    raise ConfigError("target", name, "unknown target; allowed: reference, vllm")


__all__ = ["BlockSizesTarget", "Capability", "KVCacheManagerLike", "PlannerTarget", "RuntimeTarget",
           "SchedulerLike", "SchedulerTarget", "Target", "TargetUnsupported", "get_target"]
