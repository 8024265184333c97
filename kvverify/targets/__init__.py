"""Systems under test. Properties talk to a :class:`Target`, not to a module.

``reference`` is the default; the reference with a bug-zoo flaw switched on is the same
target under :func:`kvverify.flaws.enabled`; ``vllm`` adapts an installed vLLM release (the
supported range and the pin: :mod:`kvverify.targets.vllm.support`). ``docs/add-a-target.md``
says how to add one.
"""

from __future__ import annotations

import importlib

from kvverify.errors import ConfigError
from kvverify.targets.base import (
    BlockSizesTarget,
    Capability,
    Feature,
    KVCacheManagerLike,
    PlannerTarget,
    RuntimeTarget,
    SchedulerLike,
    SchedulerTarget,
    Target,
    TargetBase,
    TargetUnsupported,
    has,
    require,
)


#: ``--target`` name -> where its class lives, ``module:Class`` (imported when the target is
#: asked for: the vllm adapter's vLLM import happens only then). Adding a target is one entry
#: here (``docs/add-a-target.md``).
TARGETS: dict[str, str] = {
    "reference": "kvverify.targets.reference:ReferenceTarget",
    "vllm": "kvverify.targets.vllm:VllmTarget",
}


def get_target(name: str) -> Target:
    """A fresh target by its ``--target`` name (:data:`TARGETS`); unknown names are a clear error."""
    where = TARGETS.get(name)
    if where is None:
        raise ConfigError("target", name, f"unknown target; allowed: {', '.join(TARGETS)}")
    module, _, cls = where.partition(":")
    target: Target = getattr(importlib.import_module(module), cls)()
    return target


__all__ = ["BlockSizesTarget", "Capability", "Feature", "KVCacheManagerLike", "PlannerTarget", "RuntimeTarget",
           "SchedulerLike", "SchedulerTarget", "TARGETS", "Target", "TargetBase", "TargetUnsupported", "get_target",
           "has", "require"]
