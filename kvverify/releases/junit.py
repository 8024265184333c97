"""Reading a release run's pytest ``--junitxml`` file: its test cases, and the lines of a
failure the matrix shows (the violation, the shrunk counterexample, an in-test attribution).

Only the standard library (``xml.etree``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Outcome:
    """One test case of a run: ``status`` is passed / failed / error / xfailed / skipped."""

    nodeid: str
    status: str
    message: str = ""
    detail: str = ""
    seconds: float = 0.0
    reports: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.nodeid.rpartition("::")[2]


def _nodeid(case: ET.Element) -> str:
    """``path::[Class::]name`` from the classname (``properties.test_x[.TestClass]``); xunit1's
    ``file`` attribute names where the function was *defined* (a property body imported from
    kvverify/props/ into a suite file), so it is only the fallback."""
    classname, name = case.get("classname", ""), case.get("name", "")
    parts = [p for p in classname.split(".") if p]
    if not parts:
        return "::".join([case.get("file") or "?", name])
    idx = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
    return "::".join(["/".join(parts[:idx + 1]) + ".py", *parts[idx + 1:], name])


def parse_junit(path: Path | str) -> list[Outcome]:
    """The test cases of a pytest ``--junitxml`` file (xunit1 or xunit2)."""
    root = ET.parse(path).getroot()
    out = []
    for case in root.iter("testcase"):
        status, message, detail = "passed", "", ""
        for child in case:
            tag = child.tag
            if tag in ("failure", "error"):
                status = "failed" if tag == "failure" else "error"
                message, detail = child.get("message", ""), child.text or ""
                if message.startswith("[XPASS(strict)]"):
                    status = "failed"
                break
            if tag == "skipped":
                kind = child.get("type", "")
                status = "xfailed" if kind == "pytest.xfail" else "skipped"
                message, detail = child.get("message", ""), child.text or ""
                break
        reports = tuple(p.get("value", "") for p in case.iter("property") if p.get("name") == "kvverify_report")
        out.append(Outcome(_nodeid(case), status, message, detail, float(case.get("time") or 0.0), reports))
    return out


_VIOLATION_RE = re.compile(r"^(?:E\s+)?(?:\w+Error: )?\s*(\[[\w.\-]+\] .+)$")


def defect_line(o: Outcome) -> str:
    """The first ``[name] reason`` violation line of a failure, else its first message line."""
    for line in o.detail.splitlines():
        m = _VIOLATION_RE.match(line.strip())
        if m:
            return m.group(1).strip()
    return (o.message or o.detail).strip().splitlines()[0][:300] if (o.message or o.detail).strip() else ""


def counterexample_line(o: Outcome, limit: int = 400) -> str:
    """Hypothesis's ``Falsifying example: ...`` / ``Failing test case: ...`` block, on one line
    (truncated to ``limit``), when the failure text carries it."""
    lines = [re.sub(r"^E\s{1,3}", "", ln) for ln in o.detail.splitlines()]
    for i, ln in enumerate(lines):
        m = re.search(r"(Falsifying (?:explicit )?example|Failing test case):", ln)
        if m:
            body = [ln[m.start():]]
            for nxt in lines[i + 1:]:
                body.append(nxt.strip())
                if nxt.strip() == ")":
                    break
            text = re.sub(r"\s+", " ", " ".join(body)).replace("( ", "(").replace(" )", ")")
            return text if len(text) <= limit else text[:limit - 1] + "…"
    return ""


def attributed_in_test(o: Outcome) -> list[str]:
    """Flaws an ``--attribute-flaws`` note names in the failure (``explained by zoo flaw A | B``)."""
    for line in o.detail.splitlines():
        m = re.search(r"explained by zoo flaw (.+)$", line)
        if m:
            return [n.strip() for n in m.group(1).split("|") if n.strip()]
    return []
