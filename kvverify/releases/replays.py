"""Replaying a release's failures: each report on its own release (expected exit 1), then on the
later installed releases, oldest first, until it passes (exit 0: the first release that fixed it).

One process per venv (:func:`replay_on`, running ``python -m kvverify.releases.replays
--replay-batch REPORT...`` in that venv), with the same :func:`kvverify.reports.replay_report`
as ``kvverify replay``: the vLLM import is paid once, each replay is one example.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvverify.releases.defects import REPLAY_DIFFERENT, Defect, ReleaseResult
from kvverify.releases.suite import release_env
from kvverify.releases.venvs import ReleaseVenv, version_key

#: report -> (exit status, ``kvverify replay``'s status word); ``None``: no answer
Answers = dict[str, tuple[int | None, str]]
#: :func:`replay_on`'s signature: (venv, reports, repo root) -> answers
Replayer = Callable[[Path, Sequence[str], Path], Answers]
_PREFIX = "KVVERIFY-REPLAY "


def replay_command(python: Path | str, reports: Sequence[str]) -> list[str]:
    """One process in a release's venv that replays each report as ``kvverify replay REPORT``
    does (:func:`kvverify.reports.replay_report`, exit status ``outcome.exit_code``) and prints
    one JSON line per report: the vLLM import (seconds) is paid once, a replay is one example."""
    return [str(python), "-m", "kvverify.releases.replays", "--replay-batch", *reports]


def replay_batch_main(paths: Sequence[str]) -> int:
    """``python -m kvverify.releases.replays --replay-batch REPORT...`` (run in a release's venv)."""
    from kvverify import reports
    from kvverify.errors import KVVerifyError

    for path in paths:
        line: dict[str, Any]
        try:
            outcome = reports.replay_report(reports.load_report(path))
            line = {"exit": outcome.exit_code, "status": outcome.status, "detail": outcome.detail[:300]}
        except KVVerifyError as e:  # unreadable / not replayable: kvverify replay exits 2
            line = {"exit": 2, "status": "error", "detail": f"{type(e).__name__}: {e}"[:300]}
        except Exception as e:  # noqa: BLE001 - kvverify replay would die with a traceback (exit 1)
            line = {"exit": 1, "status": "crash", "detail": f"{type(e).__name__}: {e}"[:300]}
        print(_PREFIX + json.dumps({"report": path, **line}), flush=True)
    return 0


def replay_on(venv: Path, reports: Sequence[str], repo_root: Path, timeout: float = 900) -> Answers:
    """Replay ``reports`` on the release in ``venv``, one process: report -> (exit status,
    status word). Exit 1 with another failure than the recorded one is :data:`REPLAY_DIFFERENT`;
    a report the process did not answer for (a crash, a timeout) is ``(None, why)``."""
    if not reports:
        return {}
    python = venv / "bin" / "python"
    if not python.exists():
        return {r: (None, "no python in the venv") for r in reports}
    try:
        done = subprocess.run(replay_command(python, reports), cwd=repo_root, env=release_env(Path(reports[0]).parent),
                              capture_output=True, text=True, timeout=timeout)
        out, why = done.stdout, f"replay process exited {done.returncode}"
    except subprocess.TimeoutExpired as e:
        out, why = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timed out"
    got: Answers = {}
    for line in out.splitlines():
        if line.startswith(_PREFIX):
            try:
                d = json.loads(line.removeprefix(_PREFIX))
            except ValueError:
                continue
            rc = int(d["exit"])
            if rc == 1 and d.get("status") != "reproduced":
                rc = REPLAY_DIFFERENT
            got[d["report"]] = (rc, str(d.get("status", "")))
    return {r: got.get(r, (None, why)) for r in reports}


def replay_defects(result: ReleaseResult, venvs: Sequence[ReleaseVenv], repo_root: Path,
                   later_results: Mapping[str, ReleaseResult] | None = None, *,
                   replay: Replayer = replay_on) -> None:
    """Replay every failure's report on its own release (expected: exit 1), then on the later
    installed releases, oldest first, until it passes (exit 0): the first release that fixed
    it. One process per release venv (``replay``); a report stops at its first exit 0, or
    where the property is a known finding (strict xfail) in that release's own run."""
    with_report = [d for d in result.defects if d.get("report")]
    own = next((rv for rv in venvs if rv.version == result.version), None)
    if own is None:
        return
    answers = replay(own.path, sorted({d["report"] for d in with_report}), repo_root)
    for d in with_report:
        d["replay_on_release"], d["replay_status"] = answers.get(d["report"], (None, ""))
        d["forward"], d["forward_status"] = {}, {}
    later = sorted((rv for rv in venvs if version_key(rv.version) > version_key(result.version)),
                   key=lambda rv: version_key(rv.version))
    # an exception outside a violation is the adapter's until shown otherwise: no "fixed in" for it
    pending = [d for d in with_report if not Defect(**d).is_crash]
    for rv in later:
        if not pending:
            break
        answers = replay(rv.path, sorted({d["report"] for d in pending}), repo_root)
        known_there = {o["nodeid"] for o in (later_results or {}).get(rv.version, ReleaseResult("", "")).outcomes
                       if o.get("status") == "xfailed"}
        still = []
        for d in pending:
            rc, status = answers.get(d["report"], (None, ""))
            d["forward"][rv.version], d["forward_status"][rv.version] = rc, status
            if rc != 0 and d["test"] not in known_there:
                still.append(d)
        pending = still


if __name__ == "__main__":  # pragma: no cover - the replay process in a release's venv (replay_command)
    if sys.argv[1:2] == ["--replay-batch"]:
        sys.exit(replay_batch_main(sys.argv[2:]))
    sys.exit("usage: python -m kvverify.releases.replays --replay-batch REPORT... (use `kvverify releases`)")
