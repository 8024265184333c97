"""One release's run: the suite in its venv, pass after pass, each failure attributed.

Pass 1 runs all of ``properties/`` (:func:`kvverify.releases.suite.pytest_command`). Later
passes re-run only the failing tests with ``--absorb-flaws <the flaws identified so far>``,
so failures that identified defects explain (alone or two together) no longer stop
Hypothesis and the search shrinks to the next defect (or to one no zoo flaw explains), until
a pass identifies nothing new. Then every report is replayed (:mod:`.replays`) and the
result stored (:mod:`.store`).
"""

from __future__ import annotations

import datetime
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from kvverify.releases.defects import ReleaseResult, add_defects
from kvverify.releases.explain import attribute
from kvverify.releases.junit import parse_junit
from kvverify.releases.replays import replay_defects
from kvverify.releases.store import RESULT, load_results, read_result, write_result
from kvverify.releases.suite import pytest_command, release_env
from kvverify.releases.venvs import ReleaseVenv, install_info, version_key


def run_release(rv: ReleaseVenv, repo_root: Path, out_root: Path, *, workers: int, profile: str,
                timeout: float, max_passes: int, replay_check: bool,
                venvs: Sequence[ReleaseVenv] = (), select: Sequence[str] = ()) -> ReleaseResult:
    """Run the suite on one release (pass 1 + attribution passes) and attribute its failures
    (``select``: pass 1 runs only these test files or node ids, a section of the matrix,
    :mod:`.selected`)."""
    rel_dir = out_root / rv.version
    # the previous result.json stays until the new one replaces it: a page rendered meanwhile (by
    # another `kvverify releases --release Y`) keeps this release's row
    for old in (rel_dir.iterdir() if rel_dir.exists() else []):
        if old.name != RESULT:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    rel_dir.mkdir(parents=True, exist_ok=True)
    result = ReleaseResult(rv.version, str(rv.path), when=datetime.datetime.now(datetime.timezone.utc)
                           .strftime("%Y-%m-%d %H:%M UTC"))
    result.install_seconds, result.venv_bytes = install_info(rv.path)
    absorb: list[str] = []
    only: list[str] = list(select)
    t0 = time.monotonic()
    for pass_no in range(1, max_passes + 1):
        pdir = rel_dir if pass_no == 1 else rel_dir / f"pass{pass_no}"
        pdir.mkdir(parents=True, exist_ok=True)
        junit = pdir / "junit.xml"
        cmd = pytest_command(rv.python, junit=junit, reports_dir=pdir, workers=workers, profile=profile,
                             only=only, absorb=absorb)
        print(f"[{rv.version}] pass {pass_no}: {' '.join(cmd[1:4])} ... "
              + (f"(absorbing {', '.join(absorb)})" if absorb else ""), file=sys.stderr, flush=True)
        with open(pdir / "pytest.log", "w") as log:
            try:
                rc = subprocess.run(cmd, cwd=repo_root, env=release_env(pdir), stdout=log, stderr=subprocess.STDOUT,
                                    timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        if pass_no == 1:
            result.returncode = rc
        result.passes = pass_no
        if not junit.exists():
            result.note = f"pass {pass_no}: pytest exited {rc} without a JUnit file (see {pdir / 'pytest.log'})"
            break
        outcomes = parse_junit(junit)
        if pass_no == 1:
            result.outcomes = [asdict(o) for o in outcomes]
        fresh = add_defects(result, attribute(outcomes, repo_root, pass_no, pdir))
        new_flaws = sorted({f for d in fresh for f in d.flaws} - set(absorb))
        failing = sorted({o.nodeid for o in outcomes if o.status == "failed"})
        if not new_flaws or not failing:
            break
        absorb = sorted(set(absorb) | set(new_flaws))
        only = failing
    result.run_seconds = round(time.monotonic() - t0, 1)
    if replay_check:
        print(f"[{rv.version}] replaying {len([d for d in result.defects if d['report']])} report(s) on "
              f"{rv.version} and on later releases until each passes", file=sys.stderr, flush=True)
        replay_defects(result, venvs or [rv], repo_root, {r.version: r for r in load_results(out_root)})
    write_result(result, out_root)
    return result


def reattribute(rv: ReleaseVenv, repo_root: Path, out_root: Path, *, replay_check: bool,
                venvs: Sequence[ReleaseVenv] = ()) -> ReleaseResult | None:
    """Attribute a stored run again (its JUnit files and reports, every pass), without re-running
    the suite: after the zoo or the attribution changed."""
    rel_dir = out_root / rv.version
    result = read_result(rel_dir / RESULT)
    if result is None:
        return None
    if not (rel_dir / "junit.xml").exists():  # a run of this release is under way (or its files are gone)
        print(f"[{rv.version}] no junit.xml in {rel_dir}: a run is under way? its stored result is kept",
              file=sys.stderr)
        return result
    keep = ("replay_on_release", "replay_status", "forward", "forward_status")
    earlier = {d.get("report"): {k: d.get(k) for k in keep if k in d} for d in result.defects}
    result.defects = []
    pdirs = [rel_dir] + sorted((p for p in rel_dir.glob("pass*") if p.is_dir()), key=lambda p: version_key(p.name))
    for pdir in pdirs:
        if not (pdir / "junit.xml").exists():
            continue
        pass_no = 1 if pdir == rel_dir else int(pdir.name.removeprefix("pass"))
        outcomes = parse_junit(pdir / "junit.xml")
        if pass_no == 1:
            result.outcomes = [asdict(o) for o in outcomes]
        add_defects(result, attribute(outcomes, repo_root, pass_no, pdir))
    if replay_check:
        replay_defects(result, venvs or [rv], repo_root, {r.version: r for r in load_results(out_root)})
    else:  # keep what the earlier replays of the same reports said
        for d in result.defects:
            d.update(earlier.get(d["report"], {}))
    write_result(result, out_root)
    return result
