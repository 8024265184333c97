"""Naming a release's failure: its counterexample report replayed on the reference, faithful and
with each bug-zoo flaw switched on (then each pair), and the defects of a pass built from its
JUnit outcomes and reports.

The in-test half of attribution (``--attribute-flaws`` / ``--absorb-flaws``, while a property
runs on a target) is :mod:`kvverify.props.attribution`; this half needs a recorded report, so
it lives with the release matrix, above :mod:`kvverify.reports`.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvverify import flaws, reports
from kvverify.props.attribution import combination
from kvverify.props.findings import FIXED_BY
from kvverify.releases.defects import Defect
from kvverify.releases.junit import Outcome, attributed_in_test, counterexample_line, defect_line


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


def report_example_line(report: Mapping[str, Any], limit: int = 400) -> str:
    """The report's shrunk example on one line: the zoo table's summary (``B= L= M=; source=
    N= need=; layers=``) when the example decodes, else Hypothesis's failing-case note."""
    try:
        from kvverify.reports.serialize import decode
        from kvverify.zoo import describe_example
        text = describe_example({k: decode(v) for k, v in (report.get("example") or {}).items()})
    except Exception:  # noqa: BLE001 - fall back to the recorded note
        text = ""
    if not text:
        notes = (report.get("run") or {}).get("hypothesis_notes") or []
        text = re.sub(r"\s+", " ", str(notes[0])) if notes else ""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def report_violation_line(report: Mapping[str, Any]) -> str:
    """The report's own violation (one failure of a test that found several has its own report):
    ``[name] reason (evidence)`` for an invariant (a dotted lower-case name), ``Name: reason`` for
    an exception the property raised."""
    v = report.get("violation") or {}
    name, reason = str(v.get("name") or ""), str(v.get("reason") or "")
    if not name:
        return ""
    if is_invariant_name(name):
        ev = v.get("evidence") or {}
        shown = ", ".join(f"{k}={ev[k]}" for k in ev) if isinstance(ev, dict) else ""
        return f"[{name}] {reason}" + (f" ({shown})" if shown else "")
    return f"{name}: {reason}"


def reports_by_nodeid(directory: Path, repo_root: Path) -> dict[str, list[str]]:
    """The counterexample reports in ``directory`` (not below it), by the node id that wrote them
    (``run.nodeid``; JUnit under xdist does not carry the tests' user properties)."""
    found: dict[str, list[str]] = {}
    for p in sorted(directory.glob("*.json")):
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("kvverify.report"):
            continue
        nodeid = (data.get("run") or {}).get("nodeid")
        if nodeid:
            shown = os.path.relpath(p, repo_root) if p.resolve().is_relative_to(repo_root.resolve()) else str(p)
            found.setdefault(nodeid, []).append(shown)
    return found


def attribute(outcomes: Sequence[Outcome], repo_root: Path, pass_no: int,
              report_dir: Path | None = None) -> list[Defect]:
    """The defects of one pass: a :class:`Defect` per failing test and report (its JUnit case's
    report property, else the reports in ``report_dir`` it wrote), each named by
    :func:`explain_report`; a failure without a report keeps its in-test attribution."""
    by_node = reports_by_nodeid(report_dir, repo_root) if report_dir is not None else {}
    defects = []
    for o in outcomes:
        if o.status != "failed":
            continue
        paths = [p for p in o.reports if p.endswith(".json")] or by_node.get(o.nodeid, [])
        report_paths: list[str | None] = list(paths) or [None]
        for rp in report_paths:
            found, ref, example = attributed_in_test(o), False, counterexample_line(o)
            violation = defect_line(o)
            if rp is not None:
                path = Path(rp) if Path(rp).is_absolute() else repo_root / rp
                try:
                    report = reports.load_report(path)
                    example = report_example_line(report) or example
                    violation = report_violation_line(report) or violation
                    explained = explain_report(report)
                    # the failure's in-test note may belong to another of its failures (an
                    # ExceptionGroup has one report each): fall back to it for a single report only
                    found = explained["flaws"] or (found if len(report_paths) == 1 else [])
                    ref = bool(explained["reference_reproduces"])
                except Exception as e:  # noqa: BLE001 - an unreadable report is said, not fatal
                    print(f"  could not attribute {rp}: {type(e).__name__}: {e}", file=sys.stderr)
            defects.append(Defect(o.nodeid, violation, example, rp, found, ref, found_in_pass=pass_no))
    return defects
