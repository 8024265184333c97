"""Nightly -> pull request -> laptop, end to end on a planted flaw (docs/nightly.md).

A nightly-profile fuzz run with a bug-zoo flaw switched on finds a counterexample and saves it
in its database (with its shard's key manifest); the merge builds tomorrow's database; a
PR-style pytest run under the ``replay`` profile (explicit + reuse only, read-only) over that
database fails with the same counterexample and writes the same report; a PR without the
defect replays it and passes; a developer's ``dev`` profile reads it through the nightly
artifact. The commands are the workflows' (.github/workflows/nightly.yml, ci.yml).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from zipfile import ZipFile

import pytest
from hypothesis import Phase, settings
from hypothesis.database import InMemoryExampleDatabase
from hypothesis.stateful import run_state_machine_as_test

from kvverify import profiles
from kvverify.exampledb import NIGHTLY_ARTIFACT, ScopedDatabase

ROOT = Path(__file__).resolve().parents[1]
FLAW = "null_block_not_reserved"
PROP = "test_startup_check_passes_implies_servable"
NODE = f"properties/test_startup.py::{PROP}"
KVVERIFY = [sys.executable, "-c", "import sys; from kvverify.cli import main; sys.exit(main())"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HYPOTHESIS_", "KVVERIFY_", "PYTEST_", "GITHUB_")) and k != "CI"}
    return {**env, **extra}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _night(root: Path) -> dict:
    """One night: the nightly shard's fuzz run (as the workflow runs it), then the merge."""
    shard = root / "shard-0"  # what a shard artifact holds
    out = subprocess.run(
        [*KVVERIFY, "fuzz", "--profile", "nightly", "--flaw", FLAW, "-k", PROP, "--seconds", "30", "--no-progress",
         "--json", "--reports-dir", str(shard / "reports"), "--owned-keys", str(shard / "nightly-owned.json"),
         "--owner", "reference 1/1"],
        cwd=ROOT, env=_env(KVVERIFY_DB=str(shard / "nightly-db")), capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    found = [p for p in summary["properties"] if p["name"] == PROP]
    assert found and found[0]["status"] == "FAILED" and len(found[0]["reports"]) == 1
    report = json.loads(Path(found[0]["reports"][0]).read_text())
    merged = root / "merged"
    m = subprocess.run([sys.executable, "-m", "kvverify.nightly", "merge", "--into", str(merged), str(shard)],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert m.returncode == 0 and "owned key(s)" in m.stdout, m.stdout + m.stderr
    return {"root": root, "merged": merged, "report": report}


def test_the_loop_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One night, then the PR that still has the defect, the PR that fixed it, and a laptop
    (one test: the night is a subprocess run worth sharing)."""
    night = _night(tmp_path / "night")
    _pr_replay_fails_with_the_same_report(night, tmp_path)
    _a_pr_without_the_defect_replays_it_and_passes(night, monkeypatch)
    _the_dev_profile_reads_the_nightly_artifact(night, tmp_path, monkeypatch)


def _pr_replay_fails_with_the_same_report(night: dict, tmp_path: Path) -> None:
    """ci.yml's replay step: the night's counterexample fails the PR, same report."""
    merged: Path = night["merged"]
    before = _files(merged)
    assert before, "the merge wrote no example"
    pr = subprocess.run(
        [sys.executable, "-m", "pytest", NODE, "--flaw", FLAW, "--hypothesis-profile=replay", "-q",
         "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0"],
        cwd=ROOT, env=_env(KVVERIFY_DB=str(merged), KVVERIFY_REPORTS_DIR=str(tmp_path / "pr"), CI="true"),
        capture_output=True, text=True, timeout=300)
    assert pr.returncode == 1, pr.stdout[-3000:]
    assert "1 failed" in pr.stdout
    night_report = night["report"]
    again = tmp_path / "pr" / f"{night_report['id']}.json"
    assert again.is_file(), f"no report {again.name}; the PR run wrote {sorted(p.name for p in (tmp_path / 'pr').glob('*'))}"
    pr_report = json.loads(again.read_text())
    assert pr_report["example"] == night_report["example"], "not the night's counterexample"
    assert pr_report["violation"] == night_report["violation"]
    assert pr_report["run"]["found_by"] == "pytest" and night_report["run"]["found_by"] == "fuzz"
    assert _files(merged) == before, "the replay profile wrote to the nightly database"


def _a_pr_without_the_defect_replays_it_and_passes(night: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same saved example, replayed with the flaw off (the fix landed): it passes."""
    from kvverify.hypothesis_hooks import rebuild
    from kvverify.props import startup
    from kvverify.targets import get_target
    from kvverify.cli.common import flaws_on

    monkeypatch.setenv("KVVERIFY_DB", str(night["merged"]))
    prop = getattr(startup, PROP)
    with profiles.scoped(f"reference+flaw={FLAW}"):
        replay = settings.get_profile("replay")
        target = get_target("reference")
        with flaws_on([FLAW]), pytest.raises(AssertionError, match="startup.too_loose"):
            rebuild(prop, settings=replay)(target=target)  # still defective: fails from the database alone
        rebuild(prop, settings=replay)(target=target)  # fixed: the night's example passes


def _the_dev_profile_reads_the_nightly_artifact(night: dict, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer with GITHUB_TOKEN set (and not CI): the artifact the nightly uploads
    (here its cached download, zipped as actions/upload-artifact zips nightly-db/) feeds the
    dev profile's reuse phase: the night's counterexample fails on the laptop first time."""
    from kvverify.cli.common import flaws_on
    from kvverify.hypothesis_hooks import rebuild
    from kvverify.props import startup
    from kvverify.targets import get_target

    cache = tmp_path / "hyp" / "github-artifacts" / NIGHTLY_ARTIFACT
    cache.mkdir(parents=True)
    stamp = datetime.now(timezone.utc).isoformat().replace(":", "_")
    with ZipFile(cache / f"{stamp}.zip", "w") as zf:
        for name, data in _files(night["merged"]).items():
            zf.writestr(name, data)
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(tmp_path / "hyp"))
    monkeypatch.setenv("GITHUB_TOKEN", "a token")
    monkeypatch.setenv("KVVERIFY_GITHUB_REPO", "acme/kvverify")
    monkeypatch.delenv("CI", raising=False)
    prop = getattr(startup, PROP)
    with profiles.scoped(f"reference+flaw={FLAW}"):
        dev = settings.get_profile("dev")
        assert "GitHubArtifactDatabase" in repr(dev.database)
        only_reuse = settings(dev, phases=[Phase.reuse])  # nothing generated: the example must come from the artifact
        with flaws_on([FLAW]), pytest.raises(AssertionError, match="startup.too_loose"):
            rebuild(prop, settings=only_reuse)(target=get_target("reference"))


def test_fuzz_and_pytest_use_the_same_key_for_a_state_machine() -> None:
    """``kvverify fuzz`` runs a machine through a counting subclass; Hypothesis keys a machine
    by its source and signature, so the subclass keeps the machine's: what the nightly saves
    for a machine, pytest's ``Machine.TestCase`` replays."""
    from kvverify.cli import fuzz as F
    from kvverify.props.pool_machine import PoolMachine

    def keys(run) -> set[bytes]:
        db = ScopedDatabase(InMemoryExampleDatabase(), "reference")
        run(settings(database=db, max_examples=2, phases=[Phase.reuse, Phase.generate], deadline=None))
        return db.touched

    pytest_keys = keys(lambda s: run_state_machine_as_test(PoolMachine, settings=s))
    prop = F.FuzzProperty("PoolMachine", PoolMachine, "stateful", PoolMachine.__module__)
    fuzz_keys = keys(lambda s: F._fuzz_machine(prop, s, None, False, None, [], None))
    assert pytest_keys and fuzz_keys == pytest_keys and prop.status == "ok"
