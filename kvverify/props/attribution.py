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
attributes the rest by replaying their reports on the reference (:func:`explain_report`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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

    ``absorb`` holds flaw names or ``"all"``; an unknown name is a ``ConfigError``.
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
                names.add(flaws.check_name(part))
    _mode = Mode(name=name or bool(names), absorb=frozenset(names), log_path=log_path)
    return _mode


def mode() -> Mode:
    """The current mode."""
    return _mode


def explaining_flaws(violations: Sequence[Violation],
                     on_reference: Callable[[], Sequence[Violation]],
                     candidates: Iterable[str] | None = None) -> list[str]:
    """The flaws with which the reference reproduces ``violations`` (every name among them).

    The caller has already seen the faithful reference pass the same case. A rerun that
    raises counts as not reproducing (the flaw does not explain this failure).
    """
    wanted = {v.name for v in violations}
    found = []
    for flaw in sorted(candidates if candidates is not None else flaws.CATALOG):
        with flaws.only(flaw):
            try:
                got = {v.name for v in on_reference()}
            except Exception:  # noqa: BLE001 - a crashing rerun explains nothing
                continue
        if wanted and wanted <= got:
            found.append(flaw)
    return found


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

    found = explaining_flaws(violations, on_reference)
    in_test = currently_in_test_context()
    _log(m, violations, found)
    absorbed = [f for f in found if f in m.absorb]
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


def explain_report(report: Mapping[str, Any], candidates: Iterable[str] | None = None) -> dict[str, Any]:
    """Replay a counterexample report on the reference: faithful, then with each flaw on.

    Returns ``{"reference_reproduces": bool, "flaws": [...], "violation": name}``: the flaws
    whose replay on the reference reproduces the recorded violation (same name). Used by
    ``kvverify releases`` for failures recorded on a release.
    """
    from kvverify import reports

    recorded = (report.get("violation") or {}).get("name")

    def reproduces(flaw_names: list[str]) -> bool:
        try:
            outcome = reports.replay_report(report, target="reference", flaw_names=flaw_names, fix_names=[])
        except Exception:  # noqa: BLE001 - a replay that cannot run explains nothing
            return False
        # "reproduced" (not "reproduced (different failure)"): the recorded violation's name
        return outcome.reproduced and outcome.status == "reproduced"

    faithful = reproduces([])
    found = [] if faithful else [f for f in sorted(candidates if candidates is not None else flaws.CATALOG)
                                 if reproduces([f])]
    return {"reference_reproduces": faithful, "flaws": found, "violation": recorded}
