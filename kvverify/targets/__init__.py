"""Systems under test. Properties talk to a :class:`Target`, not to a module.

One registry, :data:`TARGETS`, with an engine column: ``reference`` (the default) and ``vllm``
(an installed vLLM release; the supported range and the pin:
:mod:`kvverify.targets.vllm.support`) offer vLLM's contract (:mod:`kvverify.targets.base`);
``sglang-reference`` and ``sglang`` (an installed SGLang) offer SGLang's
(:mod:`kvverify.targets.sglang_contract`). The reference with a bug-zoo flaw switched on is the
same target under :func:`kvverify.engines.enabled`. ``docs/add-a-target.md`` says how to add one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from kvverify.engines import ENGINES, engine_of_property
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


@dataclass(frozen=True)
class TargetEntry:
    """One ``--target`` name: the engine whose contract it offers (``"vllm"``: :class:`Target`;
    ``"sglang"``: :class:`~kvverify.targets.sglang_contract.SglangTarget`;
    :data:`kvverify.engines.ENGINES`), where its class lives (``module:Class``, imported when the
    target is asked for: an adapter's engine import happens only then), and whether it is that
    engine's reference."""

    engine: str
    where: str
    reference: bool = False


#: ``--target`` name -> its :class:`TargetEntry`. Adding a target is one entry here
#: (``docs/add-a-target.md``).
TARGETS: dict[str, TargetEntry] = {
    "reference": TargetEntry("vllm", "kvverify.targets.reference:ReferenceTarget", reference=True),
    "vllm": TargetEntry("vllm", "kvverify.targets.vllm:VllmTarget"),
    "sglang-reference": TargetEntry("sglang", "kvverify.targets.sglang_reference:SglangReferenceTarget",
                                    reference=True),
    "sglang": TargetEntry("sglang", "kvverify.targets.sglang:SglangReleaseTarget"),
}


#: the default ``--target``: vLLM's reference, and with it every engine's reference
DEFAULT_TARGET = "reference"


def _entry(name: str) -> TargetEntry:
    entry = TARGETS.get(name)
    if entry is None:
        raise ConfigError("target", name, f"unknown target; allowed: {', '.join(TARGETS)}")
    return entry


def engine_of(name: str) -> str:
    """The engine a target name belongs to (a clear error for an unknown name)."""
    return _entry(name).engine


def reference_of(engine: str) -> str:
    """The ``--target`` name of ``engine``'s reference."""
    return next(n for n, e in TARGETS.items() if e.engine == engine and e.reference)


def targets_for(name: str) -> dict[str, str]:
    """``--target NAME`` -> the target each engine's properties run on: ``reference`` runs every
    engine's reference; any other name its own engine's properties only."""
    if name == DEFAULT_TARGET:
        return {e: reference_of(e) for e in ENGINES}
    return {engine_of(name): name}


def _build(name: str, engine: str) -> object:
    entry = _entry(name)
    if entry.engine != engine:
        raise ConfigError("target", name, f"offers {ENGINES[entry.engine].title}'s contract, not "
                          f"{ENGINES[engine].title}'s; {ENGINES[engine].title} targets: "
                          f"{', '.join(n for n, e in TARGETS.items() if e.engine == engine)}")
    module, _, cls = entry.where.partition(":")
    built: object = getattr(importlib.import_module(module), cls)()
    return built


def get_target(name: str) -> Target:
    """A fresh vLLM-contract target by its ``--target`` name (:data:`TARGETS`); unknown names
    and other engines' targets are a clear error."""
    return cast(Target, _build(name, "vllm"))


def get_sglang_target(name: str) -> SglangTarget:
    """A fresh SGLang target by its ``--target`` name: ``sglang-reference`` or ``sglang`` (the
    installed SGLang)."""
    return cast("SglangTarget", _build(name, "sglang"))


def get_engine_target(name: str) -> Target | SglangTarget:
    """A fresh target of either engine by its ``--target`` name."""
    return get_target(name) if engine_of(name) == "vllm" else get_sglang_target(name)


def target_by_report_name(name: str, *, property_module: str = "") -> Target | SglangTarget:
    """The target a counterexample report recorded (``reference``, ``vllm``, ``sglang-reference``,
    ``sglang-X.Y.Z`` for the installed SGLang), for the engine of its property: a property
    recorded under ``reference`` runs on its own engine's reference."""
    if name.startswith("sglang-") and name not in TARGETS:
        name = "sglang"
    engine = engine_of_property(property_module).name if property_module else engine_of(name)
    return get_engine_target(targets_for(name).get(engine, name))


def release_rules_of(target: Any) -> frozenset[str]:
    """The old release rules (:mod:`kvverify.behaviours`) the reference follows to re-run a case
    found on ``target``: a vLLM target's ``reference_behaviours`` (a member of its contract,
    :class:`~kvverify.targets.base.TargetBase`); none for another engine's target or one the
    registry does not hold (a test's fake)."""
    entry = TARGETS.get(str(target.name)) if target is not None else None
    if entry is None or entry.engine != "vllm":
        return frozenset()
    return frozenset(target.reference_behaviours)


def replays_under_release_rules(target_name: str) -> bool:
    """Whether a replay on ``target_name`` follows a report's recorded rules: only on vLLM's
    reference (a real release follows its own)."""
    entry = TARGETS.get(target_name)
    return entry is not None and entry.engine == "vllm" and entry.reference


__all__ = ["BlockSizesTarget", "Capability", "Feature", "KVCacheManagerLike", "PlannerTarget", "RuntimeTarget",
           "DEFAULT_TARGET", "SchedulerLike", "SchedulerTarget", "TARGETS", "Target", "TargetBase", "TargetEntry",
           "TargetUnsupported", "engine_of", "get_engine_target", "get_sglang_target", "get_target", "has",
           "reference_of", "release_rules_of", "replays_under_release_rules", "require", "target_by_report_name",
           "targets_for"]
