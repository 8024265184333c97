"""What changed between the base's run and the head's, each change confirmed by a replay.

:func:`compare` is pure (two runs' outcomes and attributed failures in, changes out);
:func:`confirm` replays each changed failure's counterexample report on the *other* side
(``replay``: one process per side, :func:`kvverify.releases.replays.replay_on`), because two
derandomized runs on different code need not explore the same examples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kvverify.regression.run import SideRun
from kvverify.regression.sides import Side
from kvverify.releases.defects import Defect
from kvverify.releases.replays import Answers

_FAILED = ("failed", "error")

#: a change's kind: how it counts, in words
KINDS = {
    "new_failure": "new failure (passes on the base, fails on the head)",
    "also_on_base": "fails on the head; its counterexample fails on the base too (not new: the base's run "
                    "did not reach it)",
    "finding_gone": "a strict known failure passes on the head (a known finding is gone: update its expectation)",
    "new_pass": "new pass (fails on the base, passes on the head)",
    "still_failing": "passes on the head, but the base's counterexample still fails there (not fixed)",
}


@dataclass
class Change:
    """One property whose verdict differs between the two sides."""

    kind: str
    nodeid: str
    base: str
    head: str
    #: the failing side's attributed failures (violation, counterexample, report, zoo flaws)
    failures: list[dict[str, Any]] = field(default_factory=list)
    #: report -> "exit N (status)" of its replay on the other side
    replays: dict[str, str] = field(default_factory=dict)

    @property
    def counts_as_new_failure(self) -> bool:
        return self.kind == "new_failure"


def _failures(run: SideRun, nodeid: str) -> list[Defect]:
    return [d for d in run.defects if d.test == nodeid]


def compare(base: SideRun, head: SideRun) -> list[Change]:
    """The properties whose verdict changed, by node id (a property only one side ran counts as
    skipped on the other: a capability the head gained or lost)."""
    changes = []
    for nodeid in sorted(set(base.outcomes) | set(head.outcomes)):
        b = base.outcomes[nodeid].status if nodeid in base.outcomes else "absent"
        h = head.outcomes[nodeid].status if nodeid in head.outcomes else "absent"
        if h in _FAILED and b not in _FAILED:
            xpass = head.outcomes[nodeid].message.startswith("[XPASS(strict)]")
            kind = "finding_gone" if xpass and b == "xfailed" else "new_failure"
            changes.append(Change(kind, nodeid, b, h, [asdict(d) for d in _failures(head, nodeid)]))
        elif b in _FAILED and h not in _FAILED and h != "absent":
            changes.append(Change("new_pass", nodeid, b, h, [asdict(d) for d in _failures(base, nodeid)]))
    return changes


def _said(answer: tuple[int | None, str]) -> str:
    rc, status = answer
    return f"exit {rc}" + (f" ({status})" if status else "") if rc is not None else f"not replayed ({status})"


def confirm(changes: Sequence[Change], base: Side, head: Side,
            replay: Callable[[Side, Sequence[str]], Answers]) -> None:
    """Replay each change's reports on the other side and settle its kind: a new failure whose
    every report also fails on the base (exit 1) is ``also_on_base``; a new pass whose base report
    still fails on the head is ``still_failing``. A change without a report stays as it is."""
    for other, kind in ((base, "new_failure"), (head, "new_pass")):
        todo = [c for c in changes if c.kind == kind]
        reports = sorted({f["report"] for c in todo for f in c.failures if f.get("report")})
        answers = replay(other, reports) if reports else {}
        for c in todo:
            mine = [f["report"] for f in c.failures if f.get("report")]
            c.replays = {r: _said(answers.get(r, (None, "no answer"))) for r in mine}
            if mine and all(answers.get(r, (None, ""))[0] == 1 for r in mine):
                c.kind = "also_on_base" if kind == "new_failure" else "still_failing"


__all__ = ["KINDS", "Change", "compare", "confirm"]
