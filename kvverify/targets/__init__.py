"""Systems under test. Properties talk to a :class:`Target`, not to a module.

``reference`` is the default; the reference with a bug-zoo flaw switched on is the same
target under :func:`kvverify.flaws.enabled`; ``vllm`` adapts an installed vLLM release (the
supported range and the pin: :mod:`kvverify.targets.vllm.support`). ``docs/add-a-target.md``
says how to add one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from kvverify.targets.sglang_contract import SglangTarget


#: target name -> the engine whose contract it offers (vLLM's :class:`Target`, or SGLang's
#: :class:`~kvverify.targets.sglang_contract.SglangTarget`)
TARGET_ENGINES: dict[str, str] = {"reference": "vllm", "vllm": "vllm",
                                  "sglang-reference": "sglang", "sglang": "sglang"}
#: ``--target NAME`` -> the SGLang target the SGLang properties run on (the default
#: ``reference`` run covers both engines' references; ``vllm`` has none)
SGLANG_TARGET_FOR: dict[str, str] = {"reference": "sglang-reference", "sglang-reference": "sglang-reference",
                                     "sglang": "sglang"}


def engine_of(name: str) -> str:
    """The engine a target name belongs to (a clear error for an unknown name)."""
    if name not in TARGET_ENGINES:
        raise ConfigError("target", name, f"unknown target; allowed: {', '.join(TARGET_ENGINES)}")
    return TARGET_ENGINES[name]


def get_sglang_target(name: str) -> SglangTarget:  # imported lazily: the contract imports kvverify.sglang
    """An SGLang target by name: ``sglang-reference`` or ``sglang`` (the installed SGLang)."""
    if name == "sglang-reference":
        from kvverify.targets.sglang_reference import SglangReferenceTarget
        return SglangReferenceTarget()
    if name == "sglang":
        from kvverify.targets.sglang import SglangTarget
        return SglangTarget()
    raise ConfigError("target", name, "unknown SGLang target; allowed: sglang-reference, sglang")


def target_by_report_name(name: str, *, property_module: str = "") -> Any:
    """The target a counterexample report recorded (``reference``, ``vllm``, ``sglang-reference``,
    ``sglang-X.Y.Z`` for the installed SGLang). An SGLang property recorded under
    ``reference`` runs on the SGLang reference."""
    if name.startswith("sglang-") and name != "sglang-reference":
        name = "sglang"
    if property_module.startswith("kvverify.sglang.") and name in SGLANG_TARGET_FOR:
        return get_sglang_target(SGLANG_TARGET_FOR[name])
    return get_target(name)


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
           "SGLANG_TARGET_FOR", "SchedulerLike", "SchedulerTarget", "TARGETS", "TARGET_ENGINES", "Target",
           "TargetBase", "TargetUnsupported", "engine_of", "get_sglang_target", "get_target", "has", "require",
           "target_by_report_name"]
