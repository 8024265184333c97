"""The defect model: one attributed failure of a release (:class:`Defect`), what one release's
run found (:class:`ReleaseResult`), and how a failure is named within its release.

Both are plain dataclasses stored as JSON (``asdict``; :mod:`.store`), read back with
``Defect(**d)`` / ``ReleaseResult(**d)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kvverify.props.attribution import COMBINED, parts

#: a replay that exits 1, but not with the recorded violation (an adapter crash, another violation);
#: the other exit statuses are ``kvverify replay``'s: 1 reproduced, 0 passes, 2 cannot replay
REPLAY_DIFFERENT = 3


@dataclass
class Defect:
    """One failing (test, example) of a release, attributed."""

    test: str
    violation: str
    counterexample: str
    report: str | None
    flaws: list[str]
    reference_reproduces: bool = False
    replay_on_release: int | None = None  # exit status of `kvverify replay` on the release (1 = reproduced)
    found_in_pass: int = 1
    #: the later installed releases the report was replayed on, oldest first, with the exit
    #: status (1 still fails, 0 passes: the first 0 is where upstream fixed it)
    forward: dict[str, int | None] = field(default_factory=dict)
    #: ``kvverify replay``'s status word for the replay on the release (reproduced, passes, ...)
    replay_status: str = ""
    #: the same, per later release replayed on
    forward_status: dict[str, str] = field(default_factory=dict)

    @property
    def fixed_in(self) -> str | None:
        """The first later installed release on which the report's replay passes (exit 0)."""
        return next((v for v, rc in self.forward.items() if rc == 0), None)

    @property
    def is_crash(self) -> bool:
        """An exception, not an invariant violation, that no zoo flaw explains."""
        return not self.flaws and not self.reference_reproduces and bool(self.report) \
            and not self.violation.startswith(("[", "AssertionError"))

    @property
    def no_report_reason(self) -> str:
        """Why a failure has no counterexample report (empty when it has one)."""
        if self.report:
            return ""
        v = self.violation
        if "FailedHealthCheck" in v:
            return "Hypothesis health check: no example could run (the strategy or the adapter rejects all)"
        if "test_finding_reproduces_on_vllm" in self.test or "DID NOT RAISE" in v:
            return "an expectation about a finding on this release (test_differential), not an example"
        if v.startswith("[XPASS(strict)]"):
            return "a strict xfail passed: the release lacks a finding the test expects, not an example"
        if v.startswith("["):
            return "a violation without a report: the property does not write one (a reporting gap)"
        return "no falsifying example: the test raised before or outside a property example"

    @property
    def label(self) -> str:
        """The defect's name: the zoo flaw(s) explaining it (``A | B``: either; ``A + B``: both
        together), else what is known about it."""
        if self.flaws:
            return " | ".join(self.flaws)
        if self.reference_reproduces:
            return "reference fails too"
        # a defect comes with a counterexample report; a failure without one (a health check,
        # an expectation about a finding, a crash outside a property) is the suite's or the
        # adapter's problem until shown otherwise
        if not self.report:
            return "no counterexample (suite / adapter)"
        if self.is_crash:
            return f"crash: {self.violation.split(':', 1)[0][:40]} (adapter until shown otherwise)"
        return "unexplained"


@dataclass
class ReleaseResult:
    """Everything ``docs/releases.md`` says about one release."""

    version: str
    venv: str
    run_seconds: float = 0.0
    install_seconds: float | None = None
    venv_bytes: int | None = None
    returncode: int | None = None
    passes: int = 0
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # pass 1, asdict(Outcome)
    defects: list[dict[str, Any]] = field(default_factory=list)
    when: str = ""
    note: str = ""

    def defect_objects(self) -> list[Defect]:
        """:attr:`defects` as :class:`Defect` objects (copies: changing them changes nothing here)."""
        return [Defect(**d) for d in self.defects]


def add_defects(result: ReleaseResult, new: Sequence[Defect]) -> list[Defect]:
    """Append the defects not yet recorded (same test, flaws and violation); returns those."""
    known_keys = {(d["test"], tuple(d["flaws"]), d["violation"]) for d in result.defects}
    fresh = [d for d in new if (d.test, tuple(d.flaws), d.violation) not in known_keys]
    result.defects.extend(asdict(d) for d in fresh)
    return fresh


def resolved_labels(defects: Sequence[Defect]) -> list[str]:
    """Each defect's name within its release. A failure more than one zoo flaw (or pair) reproduces
    (say ``null_block_not_reserved | override_ignored_in_check`` on a one-block override pool) is
    named by the one candidate made only of flaws that some other failure of the same release
    needs alone; otherwise it keeps every candidate."""
    sole = {d.flaws[0] for d in defects if len(d.flaws) == 1 and COMBINED not in d.flaws[0]}
    out = []
    for d in defects:
        picked = [f for f in d.flaws if set(parts(f)) <= sole]
        out.append(picked[0] if len(d.flaws) > 1 and len(picked) == 1 else d.label)
    return out
