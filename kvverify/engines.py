"""The engines kvverify verifies, and each one's bug zoo and fixes: the one routing table.

vLLM's flaws live in :mod:`kvverify.flaws` and its fixes in :mod:`kvverify.fixes`; SGLang's
in :mod:`kvverify.sglang.flaws` and :mod:`kvverify.sglang.fixes`. Each is a catalogue over
:class:`kvverify.switches.Switches` (its own context variable). Whoever takes a flaw or fix
*name* — ``--flaw`` / ``--fix`` on pytest and the CLI, the zoo, the lemmas, the reports and
their replay — asks this module which engine holds it, and switches it there:

    with engines.enabled(flaws=["null_block_not_reserved", "sglang_retract_counts_tokens"]):
        ...  # each on in its own engine's catalogue

:data:`ENGINES` lists the engines in order (vLLM first: its zoo rows come first). Adding an
engine is one :class:`Engine` entry here and its targets in
:data:`kvverify.targets.TARGETS` (with its ``engine`` column).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvverify import fixes as vllm_fixes
from kvverify import flaws as vllm_flaws
from kvverify.errors import ConfigError
from kvverify.flaws import Flaw
from kvverify.sglang import fixes as sglang_fixes
from kvverify.sglang import flaws as sglang_flaws


class Catalogue(Protocol):
    """A catalogue module of named switches (a flaws or fixes module)."""

    @property
    def CATALOG(self) -> Mapping[str, Any]: ...  # noqa: N802 - the modules' constant

    def active(self) -> frozenset[str]: ...

    def enabled(self, *names: str) -> contextlib.AbstractContextManager[None]: ...

    def only(self, *names: str) -> contextlib.AbstractContextManager[None]: ...

    def set_global(self, names: Iterable[str]) -> None: ...


@dataclass(frozen=True)
class Engine:
    """One engine: where its flaws and fixes are, which modules hold its properties, and how
    its zoo measures a shrunk counterexample.

    * ``properties``: the module prefix of its property bodies (a property's engine is the one
      whose prefix its module starts with; anything else is vLLM's);
    * ``zoo_cases``: the module of its flaws' regression cases (:attr:`Flaw.regression`);
    * ``shrunk_bounds``: counterexample field -> the :class:`~kvverify.flaws.Budget` bound it
      must stay within (``"len"``: ``shrunk_len``, ``"blocks"``: ``shrunk_blocks``); the zoo's
      quality test reads them off each flaw's one-line shrunk counterexample.
    """

    name: str
    title: str
    flaws: Catalogue
    fixes: Catalogue
    properties: str
    zoo_cases: str
    shrunk_bounds: Mapping[str, str] = field(default_factory=dict)

    @property
    def flaw_catalog(self) -> Mapping[str, Flaw]:
        catalog: Mapping[str, Flaw] = self.flaws.CATALOG
        return catalog


ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine(name="vllm", title="vLLM", flaws=vllm_flaws, fixes=vllm_fixes, properties="kvverify.props.",
           zoo_cases="kvverify.zoo_cases", shrunk_bounds={"L": "len", "N": "blocks"}),
    Engine(name="sglang", title="SGLang", flaws=sglang_flaws, fixes=sglang_fixes, properties="kvverify.sglang.",
           zoo_cases="kvverify.sglang.zoo_cases",
           # the pool (tokens), each request's length, a byte budget's size; the pool in pages
           shrunk_bounds={"C": "len", "input_len": "len", "seq": "len", "bytes": "len", "pages": "blocks"}),
)}


def get(name: str) -> Engine:
    """An engine by name (a clear error naming the field for an unknown one)."""
    if name not in ENGINES:
        raise ConfigError("engine", name, f"unknown engine; allowed: {', '.join(ENGINES)}")
    return ENGINES[name]


def flaw_catalog() -> dict[str, Flaw]:
    """Every engine's flaws, name -> :class:`~kvverify.flaws.Flaw`, vLLM's first."""
    return {n: f for e in ENGINES.values() for n, f in e.flaw_catalog.items()}


def fix_names() -> list[str]:
    """Every engine's fix options, vLLM's first."""
    return [n for e in ENGINES.values() for n in e.fixes.CATALOG]


def _owner(kind: str, name: str) -> Engine:
    for e in ENGINES.values():
        if name in (e.flaws if kind == "flaw" else e.fixes).CATALOG:
            return e
    known = list(flaw_catalog()) if kind == "flaw" else fix_names()
    raise ConfigError(kind, name, f"unknown {kind}; known: {', '.join(known)}")


def engine_of_flaw(name: str) -> Engine:
    """The engine whose zoo holds flaw ``name`` (a ``ConfigError`` listing them all if none)."""
    return _owner("flaw", name)


def engine_of_fix(name: str) -> Engine:
    """The engine whose fixes hold ``name`` (a ``ConfigError`` listing them all if none)."""
    return _owner("fix", name)


def engine_of_property(module: str) -> Engine:
    """The engine whose contract a property (its module) is stated over; a property outside
    every engine's package (a suite file's own state machine) is the first engine's, vLLM's."""
    for e in ENGINES.values():
        if module.startswith(e.properties):
            return e
    return next(iter(ENGINES.values()))


def flaw(name: str) -> Flaw:
    """The catalogued :class:`~kvverify.flaws.Flaw` named ``name``, whichever engine's."""
    return engine_of_flaw(name).flaw_catalog[name]


def _split(flaw_names: Iterable[str], fix_names_: Iterable[str]) -> dict[str, tuple[list[str], list[str]]]:
    """engine name -> (its flaws, its fixes) among the names (unknown names: a ``ConfigError``)."""
    out: dict[str, tuple[list[str], list[str]]] = {e: ([], []) for e in ENGINES}
    for n in flaw_names:
        out[engine_of_flaw(n).name][0].append(n)
    for n in fix_names_:
        out[engine_of_fix(n).name][1].append(n)
    return out


def active_flaws() -> frozenset[str]:
    """Every engine's flaws on in this context."""
    return frozenset().union(*(e.flaws.active() for e in ENGINES.values()))


def active_fixes() -> frozenset[str]:
    """Every engine's fixes on in this context."""
    return frozenset().union(*(e.fixes.active() for e in ENGINES.values()))


@contextlib.contextmanager
def enabled(flaws: Iterable[str] = (), fixes: Iterable[str] = ()) -> Iterator[None]:
    """These flaws and fixes on (besides those already on), each in its engine's catalogue."""
    split = _split(flaws, fixes)
    with contextlib.ExitStack() as stack:
        for name, (fl, fx) in split.items():
            stack.enter_context(ENGINES[name].flaws.enabled(*fl))
            stack.enter_context(ENGINES[name].fixes.enabled(*fx))
        yield


@contextlib.contextmanager
def only(flaws: Iterable[str] = (), fixes: Iterable[str] = ()) -> Iterator[None]:
    """Exactly these flaws and fixes on, in every engine (nothing inherited)."""
    split = _split(flaws, fixes)
    with contextlib.ExitStack() as stack:
        for name, (fl, fx) in split.items():
            stack.enter_context(ENGINES[name].flaws.only(*fl))
            stack.enter_context(ENGINES[name].fixes.only(*fx))
        yield


def set_global(flaws: Iterable[str] | None = None, fixes: Iterable[str] | None = None) -> None:
    """Exactly these flaws (and/or fixes) on for the rest of this context, in every engine
    (``None``: leave that kind as it is)."""
    split = _split(flaws or (), fixes or ())
    for name, (fl, fx) in split.items():
        if flaws is not None:
            ENGINES[name].flaws.set_global(fl)
        if fixes is not None:
            ENGINES[name].fixes.set_global(fx)


__all__ = ["Catalogue", "ENGINES", "Engine", "active_fixes", "active_flaws", "enabled", "engine_of_fix",
           "engine_of_flaw", "engine_of_property", "fix_names", "flaw", "flaw_catalog", "get", "only",
           "set_global"]
