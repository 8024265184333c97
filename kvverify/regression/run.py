"""The suite on one side: the release matrix's pytest command, its JUnit outcomes and the
failures' reports, attributed to zoo flaws (:func:`kvverify.releases.explain.attribute`)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvverify.regression.sides import Side
from kvverify.releases.defects import Defect
from kvverify.releases.explain import attribute
from kvverify.releases.junit import Outcome, parse_junit
from kvverify.releases.suite import pytest_command, release_env


@dataclass
class SideRun:
    """What one side's run gave: outcomes by node id, the attributed failures, how it ended."""

    side: Side
    version: str
    returncode: int
    seconds: float
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    defects: list[Defect] = field(default_factory=list)
    log: Path | None = None
    #: why the run gave no outcomes (no JUnit file: a broken install, unknown drift)
    error: str = ""


def _error_line(log: Path) -> str:
    """The line of pytest's log that says why it stopped before any test (its usage error)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for ln in lines:
        if ln.startswith(("ERROR: ", "kvverify: error", "INTERNALERROR")):
            return ln[:600]
    return (lines[-1][:600] if lines else "")


def run_side(side: Side, version: str, repo_root: Path, out_dir: Path, *, workers: int, profile: str,
             timeout: float, only: Sequence[str] = (), name: str = "side") -> SideRun:
    """Run the suite on ``side`` with its reports in ``out_dir`` (``only``: node ids or files)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*"):
        if old.is_file():
            old.unlink()
    junit, log = out_dir / "junit.xml", out_dir / "pytest.log"
    cmd = pytest_command(side.python, junit=junit, reports_dir=out_dir, workers=workers, profile=profile, only=only)
    env = release_env(out_dir)
    env.update(side.env)
    print(f"[diff] {name}: {side.label} (vLLM {version}): {' '.join(cmd[1:4])} ...", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, cwd=repo_root, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    run = SideRun(side, version, rc, round(time.monotonic() - t0, 1), log=log)
    if not junit.exists():
        run.error = f"pytest exited {rc} without running the suite: {_error_line(log)} (log: {log})"
        return run
    outcomes = parse_junit(junit)
    run.outcomes = {o.nodeid: o for o in outcomes}
    run.defects = attribute(outcomes, repo_root, 1, out_dir)
    if not outcomes:
        run.error = f"pytest exited {rc} and ran no test: {_error_line(log)} (log: {log})"
    return run
