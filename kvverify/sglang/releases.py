"""SGLang's release matrix: the unmodified SGLang properties on each installed release.

For every venv ``<root>/sglang-X.Y.Z`` (``$KVVERIFY_SGLANG_VENVS``, default ``/work/venvs``),
``pytest properties/test_sglang.py --target sglang`` runs in that venv with its reports in a
directory of their own. Each failure's report is then

* **attributed** by replaying it on the SGLang reference with each SGLang zoo flaw switched on
  (the flaw that reproduces the same violation is the defect the release shipped; the
  faithful reference reproducing it makes it a finding of the newest code);
* **replayed** on its own release (exit 1: reproduced) and on every later installed release
  until one passes (exit 0: the first release that fixed it).

Results go to ``docs/sglang-releases.json`` and ``docs/sglang-releases.md`` (atomic writes),
and the README block between the ``kvverify sglang-releases`` markers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvverify.sglang import flaws as sglang_flaws

ROOT = Path(__file__).resolve().parents[2]
VENV_RE = re.compile(r"^sglang-(\d+\.\d+\.\d+(?:\.post\d+)?)$")


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def installed(root: str | None = None) -> dict[str, Path]:
    """``version -> venv`` for every ``sglang-X.Y.Z`` venv with a python, oldest first."""
    base = Path(root or os.environ.get("KVVERIFY_SGLANG_VENVS", "/work/venvs"))
    found = {}
    if base.is_dir():
        for d in base.iterdir():
            m = VENV_RE.match(d.name)
            if m and (d / "bin" / "python").exists():
                found[m.group(1)] = d
    return dict(sorted(found.items(), key=lambda kv: version_key(kv[0])))


@dataclass
class Failure:
    test: str
    report: str
    violation: str
    attributed: list[str] = field(default_factory=list)
    faithful_reference_fails: bool = False
    replays: dict[str, int] = field(default_factory=dict)  # version -> exit code
    first_pass: str | None = None


@dataclass
class ReleaseRun:
    version: str
    outcomes: dict[str, str]  # test -> passed | failed | xfailed | skipped: reason
    failures: list[Failure]
    seconds: float
    install_seconds: int | None = None


def _env(reports: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"KVVERIFY_REPORTS_DIR": str(reports), "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def _parse_junit(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "?")
        status = "passed"
        for child in case:
            if child.tag == "skipped":
                msg = child.get("message", "")
                status = "xfailed" if child.get("type") == "pytest.xfail" or msg.startswith("known finding") \
                    else f"skipped: {msg}"[:200]
            elif child.tag in ("failure", "error"):
                status = "failed"
        out[name] = status
    return out


def replay(venv: Path, report: Path, flaws: list[str] | None = None, target: str | None = None) -> int:
    """``kvverify replay REPORT`` in ``venv`` (exit 1: reproduced, 0: passes, else an error)."""
    args = ["replay", str(report)]
    if target:
        args += ["--target", target]
    for f in flaws or []:
        args += ["--flaw", f]
    code = f"import sys; from kvverify.cli import main; sys.exit(main({args!r}))"
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, check=False)
    return done.returncode


def reference_replay(report: Path, flaws: list[str]) -> bool:
    """Does the SGLang reference (with exactly ``flaws`` on) reproduce the report's violation?"""
    from kvverify.reports.replay import replay_report
    from kvverify.reports.store import load_report
    data = load_report(report)
    outcome = replay_report(data, target="sglang-reference", flaw_names=flaws, fix_names=[])
    return outcome.status == "reproduced"


def run_release(version: str, venv: Path, work: Path) -> ReleaseRun:
    reports = work / f"reports-{version}"
    if reports.is_dir() and not reports.is_symlink():
        import shutil
        shutil.rmtree(reports)  # this run's reports only (a previous run's would be counted again)
    reports.mkdir(parents=True, exist_ok=True)
    junit = work / f"{version}.xml"
    t0 = time.perf_counter()
    subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "properties/test_sglang.py", "--target", "sglang",
                    "--hypothesis-profile=ci", "-q", "-p", "no:cacheprovider", "-n", "2", f"--junitxml={junit}"],
                   cwd=ROOT, env=_env(reports), capture_output=True, text=True, timeout=1800, check=False)
    seconds = time.perf_counter() - t0
    outcomes = _parse_junit(junit) if junit.exists() else {"(pytest)": "failed: no junit written"}
    failures = []
    for rep in sorted(reports.glob("*.json")):
        data = json.loads(rep.read_text())
        if data.get("known_finding"):
            continue  # a strict known failure's report (SG1): not a release defect
        fail = Failure(test=str(data.get("property")), report=str(rep),
                       violation=str((data.get("violation") or {}).get("name")))
        fail.faithful_reference_fails = reference_replay(rep, [])
        fail.attributed = [f for f in sglang_flaws.CATALOG if not fail.faithful_reference_fails
                           and reference_replay(rep, [f])]
        failures.append(fail)
    install = None
    meta = venv / ".kvverify-install.json"
    if meta.is_file():
        install = json.loads(meta.read_text()).get("install_seconds")
    return ReleaseRun(version, outcomes, failures, round(seconds, 1), install)


def replay_forward(runs: list[ReleaseRun], venvs: dict[str, Path]) -> None:
    order = [r.version for r in runs if r.version in venvs]
    for run in runs:
        if run.version not in venvs:
            continue
        i = order.index(run.version)
        for fail in run.failures:
            for later in order[i:]:
                code = replay(venvs[later], Path(fail.report))
                fail.replays[later] = code
                if code == 0:
                    fail.first_pass = later
                    break


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise OSError(f"refusing to write through {path}: not a regular file")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def zoo_rows(runs: list[ReleaseRun]) -> list[tuple[str, str, str]]:
    """``(flaw, upstream, caught in real release)`` per SGLang flaw."""
    rows = []
    for name, flaw in sglang_flaws.CATALOG.items():
        hits = [(r.version, f) for r in runs for f in r.failures if name in f.attributed]
        if not hits:
            rows.append((name, flaw.upstream, "not found in the releases run"))
            continue
        versions = sorted({v for v, _ in hits}, key=version_key)
        fixed = sorted({f.first_pass for _, f in hits if f.first_pass}, key=version_key)
        rows.append((name, flaw.upstream, f"{', '.join(versions)} ({len(hits)} failures; first pass (exit 0) on "
                                          f"{', '.join(fixed) or 'none installed'})"))
    return rows


def finding_line(runs: list[ReleaseRun]) -> str:
    """Where finding SG1's strict known failure reproduced (and where it could not run)."""
    shows = [r.version for r in runs if r.outcomes.get("test_sglang_finding_sg1") == "xfailed"]
    cannot = [r.version for r in runs if str(r.outcomes.get("test_sglang_finding_sg1", "")).startswith("skipped")]
    fixed = [r.version for r in runs if r.outcomes.get("test_sglang_finding_sg1") == "failed"]
    line = f"Finding SG1 reproduces (strict known failure) on: {', '.join(shows) or 'none'}"
    if cannot:
        line += f"; not runnable on {', '.join(cannot)} (the admission capability is missing there)"
    if fixed:
        line += f"; no longer on {', '.join(fixed)} (the strict xfail passed: update the finding)"
    return line + "."


def render_md(runs: list[ReleaseRun]) -> str:
    tests = sorted({t for r in runs for t in r.outcomes})
    lines = ["# SGLang releases", "",
             "Generated by `kvverify releases --engine sglang` (do not edit): the unmodified SGLang properties "
             "(`properties/test_sglang.py --target sglang`, `ci` profile) on each installed release, CPU-only.", "",
             "| property | " + " | ".join(r.version for r in runs) + " |",
             "|---|" + "---|" * len(runs)]
    for t in tests:
        cells = []
        for r in runs:
            s = r.outcomes.get(t, "—")
            cells.append("known finding" if s == "xfailed" else ("skip" if s.startswith("skipped") else s))
        lines.append(f"| `{t}` | " + " | ".join(cells) + " |")
    lines += ["", "| release | run s | install s | failures (attributed flaw; first release that passes) |",
              "|---|---:|---:|---|"]
    for r in runs:
        fs = "; ".join(f"`{f.test}` {f.violation}: "
                       + ("faithful reference fails too (a finding)" if f.faithful_reference_fails
                          else (" or ".join(f.attributed) or "unattributed"))
                       + f", first pass {f.first_pass or 'none'}" for f in r.failures) or "none"
        lines.append(f"| {r.version} | {r.seconds} | {r.install_seconds or '—'} | {fs} |")
    skips = sorted({(t, s) for r in runs for t, s in r.outcomes.items() if s.startswith("skipped")})
    if skips:
        lines += ["", "Skips (capabilities a release lacks, read off its code):", ""]
        lines += [f"* `{t}`: {s[len('skipped: '):]}" for t, s in skips]
    lines += ["", "| flaw | upstream | caught in real release |", "|---|---|---|"]
    lines += [f"| `{a}` | {b} | {c} |" for a, b, c in zoo_rows(runs)]
    lines += ["", finding_line(runs)]
    return "\n".join(lines) + "\n"


README_BEGIN = "<!-- kvverify sglang-releases: generated from docs/sglang-releases.json; do not edit -->"
README_END = "<!-- end of the generated SGLang release table -->"


def update_readme(runs: list[ReleaseRun], readme: Path) -> None:
    text = readme.read_text()
    block = [README_BEGIN, f"Releases run: {', '.join(r.version for r in runs)} "
             "([docs/sglang-releases.md](docs/sglang-releases.md)).", "",
             "| flaw | upstream | caught when re-introduced | caught in real release |", "|---|---|---|---|"]
    block += [f"| `{a}` | {b} | yes | {c} |" for a, b, c in zoo_rows(runs)]
    block += ["", finding_line(runs)]
    block.append(README_END)
    new = "\n".join(block)
    if README_BEGIN in text:
        head, rest = text.split(README_BEGIN, 1)
        tail = rest.split(README_END, 1)[1]
        text = head + new + tail
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    _write(readme, text)


def main(versions: list[str] | None = None, *, write: bool = True, work: str | None = None) -> list[ReleaseRun]:
    venvs = installed()
    if versions:
        missing = [v for v in versions if v not in venvs]
        if missing:
            from kvverify.errors import ConfigError
            raise ConfigError("release", missing, f"not installed; installed: {', '.join(venvs) or 'none'}")
        venvs = {v: venvs[v] for v in versions}
    workdir = Path(work or ROOT / "reports" / "sglang-releases")
    workdir.mkdir(parents=True, exist_ok=True)
    fresh = []
    for v, venv in venvs.items():
        print(f"[sglang releases] {v}: running the SGLang properties ...", file=sys.stderr, flush=True)
        fresh.append(run_release(v, venv, workdir))
    stored = {r.version: r for r in load_runs()} if (ROOT / "docs" / "sglang-releases.json").is_file() else {}
    stored.update({r.version: r for r in fresh})  # releases not re-run keep their stored results
    runs = sorted(stored.values(), key=lambda r: version_key(r.version))
    all_venvs = installed()
    for r in runs:
        for f in r.failures:
            f.replays, f.first_pass = {}, None
    replay_forward(runs, {v: p for v, p in all_venvs.items() if v in stored})
    if write:
        _write(ROOT / "docs" / "sglang-releases.json", json.dumps([asdict(r) for r in runs], indent=2) + "\n")
        _write(ROOT / "docs" / "sglang-releases.md", render_md(runs))
        update_readme(runs, ROOT / "README.md")
    return runs


def render_stored() -> list[ReleaseRun]:
    """Re-render ``docs/sglang-releases.md`` and the README block from the stored JSON."""
    runs = load_runs()
    _write(ROOT / "docs" / "sglang-releases.md", render_md(runs))
    update_readme(runs, ROOT / "README.md")
    return runs


def load_runs(path: Path | None = None) -> list[ReleaseRun]:
    data: list[dict[str, Any]] = json.loads((path or ROOT / "docs" / "sglang-releases.json").read_text())
    return [ReleaseRun(d["version"], d["outcomes"], [Failure(**f) for f in d["failures"]], d["seconds"],
                       d.get("install_seconds")) for d in data]
