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

A release can ship several zoo flaws, and an example can need two of them at once (a pool
one block short *and* a chunk that rounds down to 0 tokens). When no single flaw reproduces
a failure, pairs are tried: a combination is named ``A + B`` (:data:`COMBINED`), and only
when neither flaw alone reproduces it. In-test, pairs are drawn from the absorbed flaws only
(already identified on this release; cheap), so a later pass does not stop on an example
that two identified defects explain together; :func:`explain_report` tries every pair.
"""

from __future__ import annotations

import itertools
import json
import os
import re
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


def is_invariant_name(name: object) -> bool:
    """Whether a report's violation name is an invariant's (``startup.too_loose``: dotted, lower
    case) rather than an exception's type (``GroupingError``: the property crashed)."""
    return isinstance(name, str) and bool(re.fullmatch(r"[a-z0-9_]+(?:\.[a-z0-9_\-]+)+", name))


def same_invariant(recorded: Mapping[str, Any] | None, got: Mapping[str, Any] | None) -> bool:
    """Whether two violations are one invariant with different diagnoses: the same statement
    (``reason``) and the same name but its last part (``admission.stall.head_of_line`` and
    ``admission.stall.no_progress``: "an admitted workload did not finish", stalled differently)."""
    if not recorded or not got:
        return False
    a, b = str(recorded.get("name") or ""), str(got.get("name") or "")
    return (is_invariant_name(a) and is_invariant_name(b) and a.count(".") >= 2
            and a.rpartition(".")[0] == b.rpartition(".")[0] and bool(recorded.get("reason"))
            and recorded.get("reason") == got.get("reason"))


def crash_message(violation: Mapping[str, Any] | None) -> str:
    """A crash's message (``ValueError: Cannot get 1 free blocks from the pool`` -> the text after
    the type), empty when the report records none."""
    return str((violation or {}).get("reason") or "").strip()


def same_crash(message: str, got: Mapping[str, Any] | None) -> bool:
    """Whether a reference replay fails with the crash a release recorded: the replay's violation
    carries an ``error`` (the reference's driver turns a pool error into evidence) or is itself an
    exception, with the same message — the release's exception type is its own (``ValueError``
    upstream, ``PoolExhaustedError`` in the reference), the message is upstream's, mirrored."""
    if not got or not message:
        return False
    texts = [str(got.get("reason") or "")] if not is_invariant_name(got.get("name")) else []
    error = (got.get("evidence") or {}).get("error")
    if error:
        texts.append(str(error).split(": ", 1)[-1])
    return any(t.strip() == message for t in texts)


def explain_report(report: Mapping[str, Any], candidates: Iterable[str] | None = None,
                   pairs: bool = True) -> dict[str, Any]:
    """Replay a counterexample report on the reference: faithful, then with each flaw on,
    then (``pairs``, when no single flaw does) with each pair of flaws on.

    Returns ``{"reference_reproduces": bool, "flaws": [...], "violation": name, "fixes": [...]}``:
    the flaws (or ``"A + B"`` pairs) whose replay on the reference reproduces the recorded
    violation (same name). Used by ``kvverify releases`` for failures recorded on a release.
    A crash (the release raised) is explained only by a replay that fails with the same error
    message (:func:`same_crash`); a crash without a message is never put down to a flaw.

    A known finding's property (:data:`kvverify.props.findings.KNOWN_FAILURES`) fails on a
    release only where the finding's strict xfail does not apply: the release lacks the
    finding. When the faithful reference (which has it) reproduces such a failure, the
    replays are repeated with the finding's fix options on (``"fixes"``): the reference
    without the finding, plus the flaw that makes it agree with the release.
    """
    from kvverify import reports
    from kvverify.props.findings import FIXED_BY

    recorded = (report.get("violation") or {}).get("name")
    crash = None if is_invariant_name(recorded) else crash_message(report.get("violation"))
    if not is_invariant_name(recorded) and not crash:  # an exception without a message: nothing to match
        return {"reference_reproduces": False, "flaws": [], "violation": recorded, "fixes": []}

    def reproduces(flaw_names: list[str], fix_names: list[str]) -> bool:
        try:
            outcome = reports.replay_report(report, target="reference", flaw_names=flaw_names, fix_names=fix_names)
        except Exception:  # noqa: BLE001 - a replay that cannot run explains nothing
            return False
        if crash:  # the release crashed: the reference must fail with the same error message
            return outcome.reproduced and same_crash(crash, outcome.violation)
        # "reproduced" (not "reproduced (different failure)"): the recorded violation's name, or
        # the same invariant with another diagnosis (admission.stall.head_of_line vs .no_progress)
        return outcome.reproduced and (outcome.status == "reproduced"
                                       or same_invariant(report.get("violation"), outcome.violation))

    faithful = reproduces([], [])
    fixes: list[str] = []
    names = sorted(candidates if candidates is not None else flaws.CATALOG)
    if faithful:
        fixes = list(FIXED_BY.get(str(report.get("property") or ""), ()))
        if not fixes or reproduces([], fixes):
            return {"reference_reproduces": True, "flaws": [], "violation": recorded, "fixes": []}
    found = [f for f in names if reproduces([f], fixes)]
    if not found and pairs:
        found = [combination(pair) for pair in itertools.combinations(names, 2) if reproduces(list(pair), fixes)]
    return {"reference_reproduces": faithful, "flaws": found, "violation": recorded, "fixes": fixes}
