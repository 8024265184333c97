"""The structured result every checker returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its name, a one-line reason and the evidence numbers."""

    name: str
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        ev = ", ".join(f"{k}={v}" for k, v in self.evidence.items())
        return f"[{self.name}] {self.reason}" + (f" ({ev})" if ev else "")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "reason": self.reason,
                "evidence": {k: _plain(v) for k, v in self.evidence.items()}}


def _plain(v: Any) -> Any:
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return repr(v)


def first_violation(violations: Sequence[Violation]) -> Violation | None:
    return violations[0] if violations else None


def assert_no_violations(violations: Sequence[Violation]) -> None:
    """Fail with every violation's reason and evidence (used by the properties)."""
    if violations:
        from hypothesis import note
        from hypothesis.control import currently_in_test_context
        if currently_in_test_context():
            for v in violations:
                note(str(v))
        err = AssertionError("\n".join(str(v) for v in violations))
        err.violations = list(violations)  # type: ignore[attr-defined]  # exact evidence for reports
        raise err
