"""Attribute a target's failing example to a bug-zoo flaw, so one defect does not hide the others.

On a real vLLM release one defect (say, a one-block pool that starts) can make every
failing property shrink to the same example. This module is the zoo's analogue of
:mod:`kvverify.props.known`: a failing example on a target is re-run on the reference
with each bug-zoo flaw (:mod:`kvverify.flaws`) switched on, one at a time; a flaw
*explains* the failure when the faithful reference passes the example, and the reference
with that flaw alone violates every invariant the target violated (same names).

Opt-in, general, and never aimed at a release (``pytest`` options, registered by
:mod:`kvverify.pytest_attribution`):

* ``--attribute-flaws``: the failure still fails, and its message names the explaining
  flaw(s) (``explained by zoo flaw NAME``), so a report says which defect it is.
* ``--absorb-flaws NAMES`` (comma-separated, or ``all``): a failure explained by one of
  these flaws records ``event("explained by zoo flaw NAME")`` and does not fail, so
  Hypothesis keeps searching for failures that no identified defect explains.
  ``kvverify releases`` uses it for its later passes (``docs/releases.md``).
* ``--attribution-log PATH``: every attribution is appended as one JSON line.

Only checks routed through :func:`kvverify.props.known.assert_or_known` (those that can
re-run the same case on the reference) are attributed in-test; ``kvverify releases``
attributes the rest by replaying their reports on the reference
(:func:`kvverify.releases.explain.explain_report`).

A release can ship several zoo flaws, and an example can need two of them at once (a pool
one block short *and* a chunk that rounds down to 0 tokens). When no single flaw reproduces
a failure, pairs are tried: a combination is named ``A + B`` (:data:`COMBINED`), and only
when neither flaw alone reproduces it. In-test, pairs are drawn from the absorbed flaws only
(already identified on this release; cheap), so a later pass does not stop on an example
that two identified defects explain together; ``explain_report`` tries every pair.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kvverify import flaws
from kvverify.invariants.base import Violation


@dataclass(frozen=True)
class Mode:
    """What to do with a target's failing example: name its flaw, absorb it, log it."""

    name: bool = False
    absorb: frozenset[str] = frozenset()
    log_path: str | None = None

    @property
    def active(self) -> bool:
        return self.name or bool(self.absorb)


_mode = Mode()


def configure(*, name: bool = False, absorb: Iterable[str] = (), log_path: str | None = None) -> Mode:
    """Set the process-wide mode (the pytest plugin calls this in every xdist worker).

    ``absorb`` holds flaw names, ``"A + B"`` combinations (each part is absorbed: a failure
    they explain together is absorbed, see :func:`absorb_or_name`) or ``"all"``; an unknown
    name is a ``ConfigError``.
    """
    global _mode
    names: set[str] = set()
    for item in absorb:
        for part in (p.strip() for p in item.split(",")):
            if not part:
                continue
            if part == "all":
                names.update(flaws.CATALOG)
            else:
                names.update(flaws.check_name(f) for f in parts(part))
    _mode = Mode(name=name or bool(names), absorb=frozenset(names), log_path=log_path)
    return _mode


def mode() -> Mode:
    """The current mode."""
    return _mode


#: how a combination of flaws that explains a failure only together is named: ``A + B``
COMBINED = " + "


def combination(names: Iterable[str]) -> str:
    """The name of flaws ``names`` switched on together (sorted, joined by :data:`COMBINED`)."""
    return COMBINED.join(sorted(names))


def parts(explanation: str) -> list[str]:
    """The flaws an explanation switches on: ``"A + B"`` -> ``["A", "B"]``, ``"A"`` -> ``["A"]``."""
    return [p.strip() for p in explanation.split(COMBINED.strip()) if p.strip()]


def explaining_flaws(violations: Sequence[Violation],
                     on_reference: Callable[[], Sequence[Violation]],
                     candidates: Iterable[str] | None = None,
                     pair_candidates: Iterable[str] | None = None) -> list[str]:
    """The flaws with which the reference reproduces ``violations`` (every name among them).

    The caller has already seen the faithful reference pass the same case. A rerun that
    raises counts as not reproducing (the flaw does not explain this failure). When no
    single flaw does, the pairs drawn from ``pair_candidates`` (none by default) are tried,
    each returned as ``"A + B"`` (:func:`combination`).
    """
    wanted = {v.name for v in violations}

    def reproduces(names: Sequence[str]) -> bool:
        with flaws.only(*names):
            try:
                got = {v.name for v in on_reference()}
            except Exception:  # noqa: BLE001 - a crashing rerun explains nothing
                return False
        return bool(wanted) and wanted <= got

    found = [f for f in sorted(candidates if candidates is not None else flaws.CATALOG) if reproduces([f])]
    if found or pair_candidates is None:
        return found
    return [combination(pair) for pair in itertools.combinations(sorted(set(pair_candidates)), 2)
            if reproduces(pair)]


def absorb_or_name(violations: Sequence[Violation],
                   on_reference: Callable[[], Sequence[Violation]]) -> bool:
    """In attribution mode: ``True`` when an absorbed flaw explains the failure (an event is
    recorded and the caller must not fail); otherwise notes the explaining flaws, if any,
    so the failure names them, and returns ``False``."""
    m = _mode
    if not m.active:
        return False
    from hypothesis import event, note
    from hypothesis.control import currently_in_test_context

    # pairs only among the absorbed flaws: identified on this target already, and few
    found = explaining_flaws(violations, on_reference, pair_candidates=m.absorb if len(m.absorb) > 1 else None)
    in_test = currently_in_test_context()
    _log(m, violations, found)
    absorbed = [f for f in found if set(parts(f)) <= m.absorb]
    if absorbed:
        if in_test:
            event("explained by zoo flaw " + absorbed[0])
        return True
    if in_test:
        note("explained by zoo flaw " + " | ".join(found) if found else "explained by no zoo flaw")
    return False


def _log(m: Mode, violations: Sequence[Violation], found: Sequence[str]) -> None:
    if not m.log_path:
        return
    line = json.dumps({"violations": sorted({v.name for v in violations}), "flaws": list(found),
                       "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]})
    try:  # one short O_APPEND write per line: safe across xdist workers
        fd = os.open(m.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass
