"""A suite run's test outcomes (from its JUnit XML) and what changed under a mutant: the kill kind.

A mutant is judged per test, against the same test on the unmutated engine (the baseline):

* ``assertion``: a test that passed (or was a strict known failure) now fails with an assertion
  (``assert``, ``AssertionError``, ``pytest.fail``): the test's own verdict. In the ``guarantee`` suite that is a guarantee property's verdict, in the
  ``differential`` suite the reference-vs-engine comparison's;
* ``crash``: it now fails with another exception — or with an ``AssertionError`` raised inside
  the engine's own package (an upstream ``assert``: the engine crashing, not a property's
  verdict; told by the traceback's raising frame) —, the module does not import (a collection
  error, the test missing), or a test the unmutated engine ran is now skipped (the target
  refused a case it served);
* ``xpassed``: a strict known failure (a finding's ``xfail``) now passes: the finding's
  counterexample no longer reproduces. A behaviour change, not a guarantee property's verdict
  (e.g. managers built with prefix caching off make F10's re-sent cached prompt miss): the
  report counts it with the differential's kills, kind (b);
* ``timeout``: the run hit its CPU-time (or wall) limit.

A test that did not pass on the unmutated engine (failed, errored) is left out of the
comparison: it cannot tell a mutant apart. It is also deselected from the mutants' runs
(:func:`parse_junit_nodeids` gives its pytest node id): a mutant's run stops at its first failure
(``-x``), and a left-out test failing first would end every run before the tests after it
(measured 2026-12-04: 0.33.0's F13 strict xfail passes under the few examples of the
``engine-mutation`` profile, and until then every mutant was judged only by the files before
``test_connector_findings.py``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

#: outcome of one test: passed, failed (assertion), crashed (another exception), skipped, xfailed
PASSED, ASSERTION, CRASH, SKIPPED, XFAILED = "passed", "assertion", "crash", "skipped", "xfailed"
XPASSED = "xpassed"  #: a strict xfail that now passes
TIMEOUT, SURVIVED = "timeout", "survived"

_ASSERTION_PREFIXES = ("assert", "AssertionError", "Failed:")
_XPASS_PREFIX = "[XPASS(strict)]"


@dataclass(frozen=True)
class Outcome:
    """One test's outcome and the first line of its failure message."""

    status: str
    message: str = ""


#: a traceback's raising frame as pytest writes it: ``path:line: ExceptionName``
_RAISED_AT = re.compile(r"^(\S+?):\d+: (\w+)$", re.MULTILINE)
#: a path in the engine's own package (installed or a mutant's overlay), not kvverify's adapter
_ENGINE_PATH = re.compile(r"(^|/)vllm/")


def raised_in_engine(traceback: str) -> bool:
    """Whether the last raising frame of a pytest traceback lies in vLLM's own package."""
    frames = [m for m in _RAISED_AT.finditer(traceback) if m.group(2) != "in"]
    if not frames:
        return False
    path = frames[-1].group(1)
    return bool(_ENGINE_PATH.search(path)) and "kvverify/" not in path


def _failure_status(message: str, traceback: str = "") -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    if first.startswith(_XPASS_PREFIX):
        return XPASSED
    if (first.startswith(_ASSERTION_PREFIXES) or "AssertionError" in first) and not raised_in_engine(traceback):
        return ASSERTION
    return CRASH


def _testcases(path: Path) -> list[ET.Element]:
    """The ``testcase`` elements of a pytest ``--junitxml`` file; none if it is missing or
    unreadable (the run died before writing it)."""
    try:
        return list(ET.parse(path).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return []


def parse_junit(path: Path) -> dict[str, Outcome]:
    """``test id -> Outcome`` of a pytest ``--junitxml`` file (xunit1); ``{}`` if it is missing or
    unreadable (the run died before writing it)."""
    out: dict[str, Outcome] = {}
    for case in _testcases(path):
        tid = f"{case.get('classname', '')}::{case.get('name', '')}"
        status, message = PASSED, ""
        for child in case:
            message = (child.get("message") or child.text or "").strip()
            if child.tag == "failure":
                status = _failure_status(message, child.text or "")
            elif child.tag == "error":
                status = CRASH
            elif child.tag == "skipped":
                status = XFAILED if child.get("type") == "pytest.xfail" else SKIPPED
        out[tid] = Outcome(status, message.splitlines()[0][:300] if message else "")
    return out


def parse_junit_nodeids(path: Path) -> dict[str, str]:
    """``test id -> pytest node id`` (``path/test_mod.py::[Class::]name``, relative to the run's
    rootdir) of a pytest ``--junitxml`` file; ``{}`` if it is missing or unreadable. What
    ``--deselect`` takes. Read off the ``classname`` (``path.test_mod[.Class]``, trailing parts
    that start upper-case are classes, pytest's ``Test*`` rule), not xunit1's ``file``: that is
    where the function was defined, which for the suite's re-exported properties is
    ``kvverify/props/...``, not the test module."""
    out: dict[str, str] = {}
    for case in _testcases(path):
        classname, name = case.get("classname", ""), case.get("name", "")
        parts = classname.split(".") if classname else []
        classes: list[str] = []
        while len(parts) > 1 and parts[-1][:1].isupper():
            classes.insert(0, parts.pop())
        if parts:
            out[f"{classname}::{name}"] = "::".join(["/".join(parts) + ".py", *classes, name])
    return out


@dataclass(frozen=True)
class Verdict:
    """A suite's verdict on one mutant: ``kind`` (survived / assertion / crash / timeout) and the
    tests whose outcome changed (``test id -> new outcome``), the first few."""

    kind: str
    changed: tuple[tuple[str, str], ...] = ()

    @property
    def killed(self) -> bool:
        return self.kind != SURVIVED


def compare(baseline: dict[str, Outcome], mutant: dict[str, Outcome], *, timed_out: bool,
            stopped_early: bool = False, keep: int = 5) -> Verdict:
    """The suite's verdict: every test that passed or was a known failure on the unmutated engine,
    compared with the same test under the mutant (see the module docstring). ``stopped_early``:
    the run stopped at its first failure (``-x``), so tests missing after it are not errors."""
    if timed_out:
        return Verdict(TIMEOUT)
    changed: list[tuple[str, str]] = [(tid, f"{CRASH}: {o.message}") for tid, o in mutant.items()
                                      if tid not in baseline and o.status == CRASH]  # collection errors
    for tid, base in baseline.items():
        if base.status not in (PASSED, XFAILED):
            continue
        now = mutant.get(tid)
        if now is None:
            if stopped_early and (changed or any(o.status in (ASSERTION, CRASH, XPASSED) for o in mutant.values())):
                continue
            changed.append((tid, f"{CRASH}: not run (collection error)"))
        elif now.status == base.status:
            continue
        elif now.status in (ASSERTION, CRASH, XPASSED):
            changed.append((tid, f"{now.status}: {now.message}"))
        elif now.status == SKIPPED and base.status == PASSED:
            changed.append((tid, f"{CRASH}: skipped ({now.message})"))
    if not changed and baseline and not mutant:
        changed.append(("<run>", f"{CRASH}: no JUnit result"))
    if not changed:
        return Verdict(SURVIVED)
    if any(c.startswith(ASSERTION) for _, c in changed):
        kind = ASSERTION
    elif any(c.startswith(CRASH) for _, c in changed):
        kind = CRASH
    else:
        kind = XPASSED
    return Verdict(kind, tuple(changed[:keep]))


__all__ = ["ASSERTION", "CRASH", "Outcome", "PASSED", "SKIPPED", "SURVIVED", "TIMEOUT", "Verdict",
           "XFAILED", "compare", "parse_junit", "raised_in_engine"]
