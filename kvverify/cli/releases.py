"""``kvverify releases``: the unmodified suite against every installed vLLM release.

For each release venv (built by ``scripts/install-vllm-target.sh --version X.Y.Z``) it runs
``python -m pytest properties/ --target vllm -n 2 --hypothesis-profile=ci`` (the same
``--ignore`` list as ``.ci/run``'s vllm step) with JUnit XML output and the release's own
report directory (``reports/releases/X.Y.Z/``), then writes ``docs/releases.md``: release x
property -> passes / FAILS (defect, shrunk counterexample, report) / known finding (xfail) /
skipped (reason), a release x defect summary, and install / run times.

Distinct defects: every failure's report is replayed on the reference, faithful and with
each bug-zoo flaw switched on, then each pair when no single flaw does
(:func:`kvverify.props.attribution.explain_report`); the flaw (or ``A + B`` pair) whose
replay reproduces the release's violation names the defect. Later passes re-run only the
failing tests with ``--absorb-flaws <the flaws identified so far>``, so failures identified
defects explain (alone or two together) no longer stop Hypothesis and the search shrinks to
the next defect (or to one no zoo flaw explains), until a pass identifies nothing new.

Replays: each failure's report is replayed on the release's own venv (expected exit 1), then
on the later installed releases, oldest first, until it passes (exit 0: the first release
that fixed it) — one process per venv (:func:`replay_on`, the same
:func:`kvverify.reports.replay_report` as ``kvverify replay``), so the vLLM import is paid
once and each replay is one example. A failure without a report says why it has none.

Results are kept per release (``reports/releases/X.Y.Z/result.json``, written atomically);
``--release X`` re-runs X only, ``--render-only`` re-renders the page from them. The page's
data goes to ``docs/releases.json`` too, and the README's real-release zoo table (between
:data:`README_BEGIN` and :data:`README_END`) is generated from it. Parsing uses only the
standard library (``xml.etree``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvverify.cli.common import Formatter
from kvverify.errors import ConfigError

#: the same files .ci/run's vllm step leaves out (reference-only suites: z3 backends, lemmas, harness)
IGNORED = ("properties/test_arith_backends.py", "properties/test_lemmas.py",
           "properties/test_lemma_models.py", "properties/test_harness.py",
           "properties/test_recorded_differential.py")
ENV_VENVS = "KVVERIFY_RELEASE_VENVS"
#: written by scripts/install-vllm-target.sh once the lock is installed and verified, and once
#: kvverify is installed in the venv
STAMPS = (".kvverify-vllm-lock.stamp", ".kvverify-self.stamp")
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(?:\.post\d+)?$")
_DIST_RE = re.compile(r"^vllm-(\d+\.\d+\.\d+(?:\.post\d+)?)\.dist-info$")


# ----------------------------------------------------------------------------- discovery
@dataclass(frozen=True)
class ReleaseVenv:
    """One installed release: its vLLM version and its venv."""

    version: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of ``X.Y.Z[.postN]``."""
    return tuple(int(p) for p in re.findall(r"\d+", version))


def venv_vllm_version(path: Path) -> str | None:
    """The vLLM version installed in venv ``path`` (from its ``vllm-X.Y.Z.dist-info``), or None."""
    if not (path / "bin" / "python").exists():
        return None
    for site in sorted(path.glob("lib/python3*/site-packages")):
        for d in site.glob("vllm-*.dist-info"):
            m = _DIST_RE.match(d.name)
            if m:
                return m.group(1)
    return None


def default_sources(repo_root: Path) -> list[Path]:
    """``$KVVERIFY_RELEASE_VENVS`` (os.pathsep-separated), else the install script's default
    venvs in the checkout (``.venv-vllm``, ``.venv-vllm-X.Y.Z``) and ``../venvs/vllm-X.Y.Z``."""
    env = os.environ.get(ENV_VENVS, "")
    if env.strip():
        return [Path(p) for p in env.split(os.pathsep) if p.strip()]
    return [repo_root, repo_root.parent / "venvs"]


def discover(sources: Iterable[Path]) -> list[ReleaseVenv]:
    """Release venvs in ``sources``: each is a venv, or a directory holding ``vllm-*`` /
    ``.venv-vllm*`` venvs. Only venvs the install script finished (its lock stamp) count;
    one venv per version (the first found), sorted by version."""
    found: dict[str, ReleaseVenv] = {}
    seen: set[Path] = set()
    for src in sources:
        src = Path(src)
        candidates = [src] if (src / "bin" / "python").exists() else sorted(
            p for p in (src.iterdir() if src.is_dir() else [])
            if p.is_dir() and (p.name.startswith("vllm-") or p.name.startswith(".venv-vllm")))
        for cand in candidates:
            real = cand.resolve()
            if real in seen:
                continue
            seen.add(real)
            version = venv_vllm_version(cand)
            if version is None or not all((cand / s).exists() for s in STAMPS):  # not (yet) installed
                continue
            if version not in found:
                found[version] = ReleaseVenv(version, cand)
    return sorted(found.values(), key=lambda r: version_key(r.version))


# ------------------------------------------------------------------------- JUnit parsing
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


def report_example_line(report: Mapping[str, Any], limit: int = 400) -> str:
    """The report's shrunk example on one line: the zoo table's summary (``B= L= M=; source=
    N= need=; layers=``) when the example decodes, else Hypothesis's failing-case note."""
    try:
        from kvverify.reports.serialize import decode
        from kvverify.zoo import describe_example
        text = describe_example({k: decode(v) for k, v in (report.get("example") or {}).items()})
    except Exception:  # noqa: BLE001 - fall back to the recorded note
        text = ""
    if not text:
        notes = (report.get("run") or {}).get("hypothesis_notes") or []
        text = re.sub(r"\s+", " ", str(notes[0])) if notes else ""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def report_violation_line(report: Mapping[str, Any]) -> str:
    """The report's own violation (one failure of a test that found several has its own report):
    ``[name] reason (evidence)`` for an invariant (a dotted lower-case name), ``Name: reason`` for
    an exception the property raised."""
    v = report.get("violation") or {}
    name, reason = str(v.get("name") or ""), str(v.get("reason") or "")
    if not name:
        return ""
    if re.fullmatch(r"[a-z_0-9]+(?:\.[a-z_0-9\-]+)+", name):
        ev = v.get("evidence") or {}
        shown = ", ".join(f"{k}={ev[k]}" for k in ev) if isinstance(ev, dict) else ""
        return f"[{name}] {reason}" + (f" ({shown})" if shown else "")
    return f"{name}: {reason}"


def attributed_in_test(o: Outcome) -> list[str]:
    """Flaws an ``--attribute-flaws`` note names in the failure (``explained by zoo flaw A | B``)."""
    for line in o.detail.splitlines():
        m = re.search(r"explained by zoo flaw (.+)$", line)
        if m:
            return [n.strip() for n in m.group(1).split("|") if n.strip()]
    return []


# ----------------------------------------------------------------------------- running
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


def pytest_command(python: Path | str, *, junit: Path, reports_dir: Path, workers: int, profile: str,
                   only: Sequence[str] = (), absorb: Sequence[str] = ()) -> list[str]:
    """The per-release pytest command line (``only``: node ids to re-run instead of properties/)."""
    cmd = [str(python), "-m", "pytest", *(only or ["properties/"]), "--target", "vllm",
           "--hypothesis-profile", profile, "-q", "-p", "no:cacheprovider", "-rsx",
           "-o", "junit_family=xunit1", f"--junitxml={junit}", "--kvverify-reports-dir", str(reports_dir)]
    cmd += ["-n", str(workers)] if workers > 0 else ["-p", "no:xdist"]
    cmd += [f"--ignore={p}" for p in IGNORED]
    cmd += ["--attribute-flaws"]
    if absorb:
        cmd += ["--absorb-flaws", ",".join(absorb)]
    return cmd


def release_env(reports_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               KVVERIFY_REPORTS_DIR=str(reports_dir))
    return env


def _install_info(venv: Path) -> tuple[float | None, int | None]:
    info = venv / ".kvverify-install.json"
    seconds = None
    if info.exists():
        try:
            seconds = float(json.loads(info.read_text()).get("install_seconds"))
        except (ValueError, TypeError, OSError):
            seconds = None
    total = 0
    for dirpath, _dirs, files in os.walk(venv):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return seconds, total


def reports_by_nodeid(directory: Path, repo_root: Path) -> dict[str, list[str]]:
    """The counterexample reports in ``directory`` (not below it), by the node id that wrote them
    (``run.nodeid``; JUnit under xdist does not carry the tests' user properties)."""
    found: dict[str, list[str]] = {}
    for p in sorted(directory.glob("*.json")):
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("kvverify.report"):
            continue
        nodeid = (data.get("run") or {}).get("nodeid")
        if nodeid:
            shown = os.path.relpath(p, repo_root) if p.resolve().is_relative_to(repo_root.resolve()) else str(p)
            found.setdefault(nodeid, []).append(shown)
    return found


def _attribute(outcomes: Sequence[Outcome], repo_root: Path, pass_no: int,
               report_dir: Path | None = None) -> list[Defect]:
    from kvverify import reports
    from kvverify.props.attribution import explain_report

    by_node = reports_by_nodeid(report_dir, repo_root) if report_dir is not None else {}
    defects = []
    for o in outcomes:
        if o.status != "failed":
            continue
        paths = [p for p in o.reports if p.endswith(".json")] or by_node.get(o.nodeid, [])
        report_paths: list[str | None] = list(paths) or [None]
        for rp in report_paths:
            flaws, ref, example = attributed_in_test(o), False, counterexample_line(o)
            violation = defect_line(o)
            if rp is not None:
                path = Path(rp) if Path(rp).is_absolute() else repo_root / rp
                try:
                    report = reports.load_report(path)
                    example = report_example_line(report) or example
                    violation = report_violation_line(report) or violation
                    explained = explain_report(report)
                    # the failure's in-test note may belong to another of its failures (an
                    # ExceptionGroup has one report each): fall back to it for a single report only
                    flaws = explained["flaws"] or (flaws if len(report_paths) == 1 else [])
                    ref = bool(explained["reference_reproduces"])
                except Exception as e:  # noqa: BLE001 - an unreadable report is said, not fatal
                    print(f"  could not attribute {rp}: {type(e).__name__}: {e}", file=sys.stderr)
            defects.append(Defect(o.nodeid, violation, example, rp, flaws, ref, found_in_pass=pass_no))
    return defects


#: a replay that exits 1, but not with the recorded violation (an adapter crash, another violation)
REPLAY_DIFFERENT = 3


def replay_command(python: Path | str, reports: Sequence[str]) -> list[str]:
    """One process in a release's venv that replays each report as ``kvverify replay REPORT``
    does (:func:`kvverify.reports.replay_report`, exit status ``outcome.exit_code``) and prints
    one JSON line per report: the vLLM import (seconds) is paid once, a replay is one example."""
    return [str(python), "-m", "kvverify.cli.releases", "--replay-batch", *reports]


def _replay_batch_main(paths: Sequence[str]) -> int:
    """``python -m kvverify.cli.releases --replay-batch REPORT...`` (run in a release's venv)."""
    from kvverify import reports
    from kvverify.errors import KVVerifyError

    for path in paths:
        try:
            outcome = reports.replay_report(reports.load_report(path))
            line = {"exit": outcome.exit_code, "status": outcome.status, "detail": outcome.detail[:300]}
        except KVVerifyError as e:  # unreadable / not replayable: kvverify replay exits 2
            line = {"exit": 2, "status": "error", "detail": f"{type(e).__name__}: {e}"[:300]}
        except Exception as e:  # noqa: BLE001 - kvverify replay would die with a traceback (exit 1)
            line = {"exit": 1, "status": "crash", "detail": f"{type(e).__name__}: {e}"[:300]}
        print("KVVERIFY-REPLAY " + json.dumps({"report": path, **line}), flush=True)
    return 0


def replay_on(venv: Path, reports: Sequence[str], repo_root: Path, timeout: float = 900
              ) -> dict[str, tuple[int | None, str]]:
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
    got: dict[str, tuple[int | None, str]] = {}
    for line in out.splitlines():
        if line.startswith("KVVERIFY-REPLAY "):
            try:
                d = json.loads(line.removeprefix("KVVERIFY-REPLAY "))
            except ValueError:
                continue
            rc = int(d["exit"])
            if rc == 1 and d.get("status") != "reproduced":
                rc = REPLAY_DIFFERENT
            got[d["report"]] = (rc, str(d.get("status", "")))
    return {r: got.get(r, (None, why)) for r in reports}


def replay_defects(result: ReleaseResult, venvs: Sequence[ReleaseVenv], repo_root: Path,
                   later_results: Mapping[str, ReleaseResult] | None = None, *,
                   replay: Any = replay_on) -> None:
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


def run_release(rv: ReleaseVenv, repo_root: Path, out_root: Path, *, workers: int, profile: str,
                timeout: float, max_passes: int, replay_check: bool,
                venvs: Sequence[ReleaseVenv] = ()) -> ReleaseResult:
    """Run the suite on one release (pass 1 + attribution passes) and attribute its failures."""
    rel_dir = out_root / rv.version
    # the previous result.json stays until the new one replaces it: a page rendered meanwhile (by
    # another `kvverify releases --release Y`) keeps this release's row
    for old in (rel_dir.iterdir() if rel_dir.exists() else []):
        if old.name != "result.json":
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    rel_dir.mkdir(parents=True, exist_ok=True)
    result = ReleaseResult(rv.version, str(rv.path), when=datetime.datetime.now(datetime.timezone.utc)
                           .strftime("%Y-%m-%d %H:%M UTC"))
    result.install_seconds, result.venv_bytes = _install_info(rv.path)
    absorb: list[str] = []
    only: list[str] = []
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
        fresh = _add_defects(result, _attribute(outcomes, repo_root, pass_no, pdir))
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


def write_result(result: ReleaseResult, out_root: Path) -> Path:
    """``reports/releases/X.Y.Z/result.json``, written atomically (another ``kvverify releases
    --release`` may be rendering the page from it at the same time)."""
    path = out_root / result.version / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, json.dumps(asdict(result), indent=1))
    return path


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _add_defects(result: ReleaseResult, new: Sequence[Defect]) -> list[Defect]:
    """Append the defects not yet recorded (same test, flaws and violation); returns those."""
    known_keys = {(d["test"], tuple(d["flaws"]), d["violation"]) for d in result.defects}
    fresh = [d for d in new if (d.test, tuple(d.flaws), d.violation) not in known_keys]
    result.defects.extend(asdict(d) for d in fresh)
    return fresh


def reattribute(rv: ReleaseVenv, repo_root: Path, out_root: Path, *, replay_check: bool,
                venvs: Sequence[ReleaseVenv] = ()) -> ReleaseResult | None:
    """Attribute a stored run again (its JUnit files and reports, every pass), without re-running
    the suite: after the zoo or the attribution changed."""
    rel_dir = out_root / rv.version
    try:
        result = ReleaseResult(**json.loads((rel_dir / "result.json").read_text()))
    except (OSError, ValueError, TypeError):
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
        _add_defects(result, _attribute(outcomes, repo_root, pass_no, pdir))
    if replay_check:
        replay_defects(result, venvs or [rv], repo_root, {r.version: r for r in load_results(out_root)})
    else:  # keep what the earlier replays of the same reports said
        for d in result.defects:
            d.update(earlier.get(d["report"], {}))
    write_result(result, out_root)
    return result


def load_results(out_root: Path) -> list[ReleaseResult]:
    """Every stored ``reports/releases/X.Y.Z/result.json``, by version."""
    results = []
    for p in sorted(out_root.glob("*/result.json")):
        try:
            results.append(ReleaseResult(**json.loads(p.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(results, key=lambda r: version_key(r.version))


# ---------------------------------------------------------------------------- rendering
_CELL = {"passed": "pass", "failed": "**FAILS**", "error": "ERROR", "xfailed": "known finding", "skipped": "skip"}


def _mins(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _gb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**30:.1f} GiB"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _link(report: str | None, doc_dir: Path, repo_root: Path) -> str:
    if not report:
        return "(no report)"
    p = Path(report)
    p = p if p.is_absolute() else repo_root / p
    md = p.with_suffix(".md")
    try:
        rel = os.path.relpath(md, doc_dir)
    except ValueError:
        rel = str(md)
    return f"[{md.name}]({rel})"


def resolved_labels(defects: Sequence[Defect]) -> list[str]:
    """Each defect's name within its release. A failure more than one zoo flaw (or pair) reproduces
    (say ``null_block_not_reserved | override_ignored_in_check`` on a one-block override pool) is
    named by the one candidate made only of flaws that some other failure of the same release
    needs alone; otherwise it keeps every candidate."""
    from kvverify.props.attribution import COMBINED, parts

    sole = {d.flaws[0] for d in defects if len(d.flaws) == 1 and COMBINED not in d.flaws[0]}
    out = []
    for d in defects:
        picked = [f for f in d.flaws if set(parts(f)) <= sole]
        out.append(picked[0] if len(d.flaws) > 1 and len(picked) == 1 else d.label)
    return out


_SAID: dict[int | None, str] = {1: "exit 1", 0: "exit 0", REPLAY_DIFFERENT: "exit 1, another failure",
                                2: "exit 2 (cannot replay)", None: "no answer"}


def _own_replay(d: Defect) -> str:
    if not d.report:
        return f"no report: {d.no_report_reason}"
    if d.replay_on_release is None and not d.replay_status:
        return "not run"
    own: dict[int | None, str] = {1: "exit 1 (reproduced)", 0: "exit 0 (NOT reproduced)"}
    said = own.get(d.replay_on_release) or _SAID.get(d.replay_on_release, f"exit {d.replay_on_release}")
    return said + (f": {d.replay_status}" if d.replay_status and d.replay_status != "reproduced" else "")


def _forward(d: Defect) -> str:
    if not d.report:
        return "—"
    if d.is_crash:
        return "— (a crash is not a release defect until shown otherwise: not replayed forward)"
    if not d.forward:
        return "not run" if d.replay_on_release is None else "no later release installed"
    parts = []
    for v, rc in d.forward.items():
        status = d.forward_status.get(v, "")
        parts.append(f"{v}: {_SAID.get(rc, f'exit {rc}')}" + (f" ({status})" if rc == 0 and status else ""))
    fixed = d.fixed_in
    return ", ".join(parts) + (f" → **fixed in {fixed}**" if fixed else " → not fixed in the installed releases")


def render(results: Sequence[ReleaseResult], *, repo_root: Path, doc_path: Path, command: str = "kvverify releases",
           not_run: Sequence[str] = ()) -> str:
    """``docs/releases.md`` from the per-release results."""
    doc_dir = doc_path.parent
    L = ["# The suite against real vLLM releases", "",
         f"Generated by `{command}` (kvverify/cli/releases.py); do not edit by hand. Each release runs",
         "`python -m pytest properties/ --target vllm -n 2 --hypothesis-profile=ci` in its own CPU-only venv",
         "(`scripts/install-vllm-target.sh --version X.Y.Z`, lock `constraints/vllm-X.Y.Z.txt`), with the same",
         "`--ignore` list as `.ci/run`'s vllm step. A failure's defect is named by replaying its report on the",
         "reference with each bug-zoo flaw switched on, then each pair (`A + B`: the example needs both), by",
         "`kvverify/props/attribution.py`; later passes re-run the failing tests with the identified flaws absorbed,",
         "so one defect does not hide the next. Every report is replayed (`kvverify replay`'s code, one process per",
         "venv) on its release (exit 1 = reproduced) and on the later installed releases until it passes (exit 0:",
         "the first release that fixed it; `rejected` = the example no longer gets past the property's assumptions",
         "there, e.g. its startup check now refuses the deployment).",
         "Report links point into `reports/releases/X.Y.Z/` (generated, not committed): rerun to get them.", ""]
    if not_run:
        L += [f"Installed but not run yet: {', '.join(not_run)}.", ""]
    if not results:
        L += ["No release has been run yet.", ""]
        return "\n".join(L)
    # summary per release
    L += ["## Releases", "",
          "| release | install | venv | suite run | passes | pass | FAILS | error | known finding | skip | defects (zoo flaw) |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        counts = {k: 0 for k in _CELL}
        for o in r.outcomes:
            counts[o["status"]] = counts.get(o["status"], 0) + 1
        labels = sorted(set(resolved_labels([Defect(**d) for d in r.defects])))
        L.append(f"| {r.version} | {_mins(r.install_seconds)} | {_gb(r.venv_bytes)} | {_mins(r.run_seconds)} | "
                 f"{r.passes} | {counts['passed']} | {counts['failed']} | {counts['error']} | {counts['xfailed']} | "
                 f"{counts['skipped']} | {_md(', '.join(labels)) or '—'} |")
    L.append("")
    # release x defect
    named = {r.version: list(zip(resolved_labels([Defect(**d) for d in r.defects]), [Defect(**d) for d in r.defects]))
             for r in results}
    labels = sorted({lab for pairs in named.values() for lab, _ in pairs})
    if labels:
        L += ["## Release x defect", "", "A cell lists the properties that failed with that defect "
              "(explained = the reference with that zoo flaw fails the same way on the release's example).", "",
              "| defect | " + " | ".join(r.version for r in results) + " |",
              "|---|" + "---|" * len(results)]
        for lab in labels:
            cells = []
            for r in results:
                tests = sorted({d.test.rpartition("::")[2] for name, d in named[r.version] if name == lab})
                cells.append(_md(", ".join(tests)) if tests else "·")
            L.append(f"| {_md(lab)} | " + " | ".join(cells) + " |")
        L.append("")
    # release x property
    nodeids = sorted({o["nodeid"] for r in results for o in r.outcomes})
    L += ["## Release x property", "", "pass / **FAILS** / known finding (strict xfail) / skip / ERROR "
          "(a test that could not run: an adapter problem, never counted as a defect).", "",
          "| property | " + " | ".join(r.version for r in results) + " |", "|---|" + "---|" * len(results)]
    for nid in nodeids:
        cells = []
        for r in results:
            st = next((o["status"] for o in r.outcomes if o["nodeid"] == nid), None)
            cells.append(_CELL.get(st, "—") if st else "—")
        L.append(f"| `{_md(nid.replace('properties/', ''))}` | " + " | ".join(cells) + " |")
    L.append("")
    # details per release
    L += ["## Per release", ""]
    for r in results:
        L += [f"### vLLM {r.version}", "",
              f"Run {r.when}; venv `{r.venv}`; pytest exit {r.returncode}; {r.passes} pass(es); "
              f"suite {_mins(r.run_seconds)}." + (f" Note: {_md(r.note)}" if r.note else ""), ""]
        if r.defects:
            L += [replay_line(r), "",
                  "| property | defect (zoo flaw) | violation | shrunk counterexample | report | replay on this release "
                  "| replay on later releases |", "|---|---|---|---|---|---|---|"]
            for name, dd in named[r.version]:
                also = [f for f in dd.flaws if f != name]
                shown = name + (f" (also reproduced by: {', '.join(also)})" if also and name in dd.flaws else "")
                L.append(f"| `{_md(dd.test.split('::', 1)[-1])}` (pass {dd.found_in_pass}) | {_md(shown)} | "
                         f"{_md(dd.violation)} | `{_md(dd.counterexample) or '—'}` | "
                         f"{_link(dd.report, doc_dir, repo_root)} | {_md(_own_replay(dd))} | {_md(_forward(dd))} |")
            L.append("")
        errors = [o for o in r.outcomes if o["status"] == "error"]
        for o in errors:
            L.append(f"- ERROR `{o['nodeid']}`: {_md(o['message'][:200])}")
        skips: dict[str, int] = {}
        for o in r.outcomes:
            if o["status"] == "skipped":
                reason = re.sub(r"^Skipped: ", "", o["message"] or "no reason").strip()
                skips[reason] = skips.get(reason, 0) + 1
        if skips:
            L.append(f"Skipped ({sum(skips.values())}):")
            L.append("")
            for reason, n in sorted(skips.items(), key=lambda kv: -kv[1]):
                L.append(f"- {n} x {_md(reason[:300])}")
            L.append("")
    return "\n".join(L)


def replay_line(r: ReleaseResult) -> str:
    """One sentence on the release's replays: how many failures have a report, how many of
    those reproduce on the release (exit 1) and pass on a later one (exit 0)."""
    ds = [Defect(**d) for d in r.defects]
    rep = [d for d in ds if d.report]
    own = sum(d.replay_on_release == 1 for d in rep)
    fixed = sum(d.fixed_in is not None for d in rep)
    unrun = sum(d.replay_on_release is None and not d.replay_status for d in rep)
    text = (f"Replays (`kvverify replay`, in each release's venv): {len(rep)} failure(s) with a report; "
            f"{own} reproduce on {r.version} (exit 1); {fixed} pass on a later installed release (exit 0)")
    if unrun:
        text += f"; {unrun} not replayed yet"
    if len(rep) < len(ds):
        text += f"; {len(ds) - len(rep)} without a report (the table says why; never counted as a release defect)"
    return text + "."


SUMMARY_SCHEMA = "kvverify.releases/1"


def summary(results: Sequence[ReleaseResult]) -> dict[str, Any]:
    """The matrix data committed next to the page (``docs/releases.json``): per release, the
    outcome counts and every failure with its resolved defect name and replay statuses. The
    README's real-release zoo table is generated from it (:func:`zoo_real_release_section`)."""
    out = []
    for r in results:
        counts = {k: 0 for k in _CELL}
        for o in r.outcomes:
            counts[o["status"]] = counts.get(o["status"], 0) + 1
        ds = [Defect(**d) for d in r.defects]
        out.append({
            "version": r.version, "when": r.when, "passes": r.passes, "run_seconds": r.run_seconds,
            "install_seconds": r.install_seconds, "counts": counts,
            "failures": [{"test": d.test, "defect": lab, "flaws": d.flaws, "violation": d.violation[:300],
                          "report": d.report, "found_in_pass": d.found_in_pass,
                          "replay_on_release": d.replay_on_release, "replay_status": d.replay_status,
                          "forward": d.forward, "fixed_in": d.fixed_in,
                          "no_report_reason": d.no_report_reason or None}
                         for lab, d in zip(resolved_labels(ds), ds)]})
    return {"schema": SUMMARY_SCHEMA, "releases": out}


README_BEGIN = "<!-- kvverify releases: real-release zoo table (generated from docs/releases.json; do not edit) -->"
README_END = "<!-- end of the generated real-release zoo table -->"


def zoo_real_release_section(data: Mapping[str, Any]) -> str:
    """The README's real-release zoo table, from :func:`summary`'s data: for each zoo flaw,
    "caught when re-introduced" (every catalogued flaw is: ``kvverify zoo``, tests/test_zoo.py)
    next to the real releases whose own code failed with it, the replays' verdicts, and the
    first release where its reports pass."""
    from kvverify import flaws
    from kvverify.props.attribution import COMBINED, parts

    releases = list(data.get("releases") or [])
    ran = [r["version"] for r in releases]
    L = ["**Caught in real releases** ([docs/releases.md](docs/releases.md), `kvverify releases`): the unmodified",
         "suite on each release's own code (CPU-only). A failure is named by replaying its report on the reference",
         "with each zoo flaw (then each pair) switched on; the report is replayed on the release (`kvverify replay`,",
         "exit 1 = reproduced) and on the later installed releases until it passes (exit 0: the first release",
         "that fixed it). Releases run: " + (", ".join(ran) or "none") + ".", "",
         "| flaw | caught when re-introduced | caught in real release |", "|---|---|---|"]
    for name in flaws.CATALOG:
        alone: dict[str, list[dict[str, Any]]] = {}
        shared: dict[tuple[str, str], int] = {}  # (release, how) -> failures
        for r in releases:
            for f in r.get("failures") or []:
                lab = f.get("defect") or ""
                alternatives = [a.strip() for a in lab.split(" | ")]
                if lab == name:
                    alone.setdefault(r["version"], []).append(f)
                    continue
                if not any(name in parts(a) for a in alternatives):
                    continue
                if len(alternatives) > 1:  # several explanations, this flaw in some
                    how = "ambiguous: " + " or ".join(f"`{a}`" for a in alternatives)
                else:  # one explanation: this flaw together with another
                    how = "together with " + ", ".join(f"`{p}`" for p in parts(lab) if p != name)
                shared[(r["version"], how)] = shared.get((r["version"], how), 0) + 1
        cells = []
        if alone:
            fails = [f for fs in alone.values() for f in fs]
            with_report = [f for f in fails if f.get("report")]
            own = sum(f.get("replay_on_release") == 1 for f in with_report)
            fixed = sorted({f["fixed_in"] for f in with_report if f.get("fixed_in")}, key=version_key)
            forwarded = any(f.get("forward") for f in with_report)
            cell = ", ".join(alone) + f" ({len(fails)} failure{'s' * (len(fails) != 1)}"
            if with_report:
                cell += (f"; replays: {own}/{len(with_report)} exit 1 on their release, "
                         + (f"first pass (exit 0) on {' / '.join(fixed)}" if fixed else
                            "no later installed release passes them" if forwarded else
                            "later releases not replayed yet"))
            cells.append(cell + ")")
        for (version, how), n in sorted(shared.items(), key=lambda kv: (version_key(kv[0][0]), kv[0][1])):
            cells.append(f"{version} {how} ({n} failure{'s' * (n != 1)})")
        L.append(f"| `{name}` | yes | {_md('; '.join(cells) or 'not found in the releases run')} |")
    return "\n".join(L)


def update_readme(readme: Path, section: str) -> bool:
    """Replace the text between :data:`README_BEGIN` and :data:`README_END` in ``readme``
    (re-read just before, written atomically); ``False`` when the markers are missing."""
    text = readme.read_text()
    i, j = text.find(README_BEGIN), text.find(README_END)
    if i < 0 or j < i:
        return False
    new = text[:i + len(README_BEGIN)] + "\n" + section + "\n" + text[j:]
    if new != text:
        _write_atomic(readme, new)
    return True


def results_json(results: Sequence[ReleaseResult]) -> dict[str, Any]:
    return {"releases": [asdict(r) for r in results]}


# --------------------------------------------------------------------------------- CLI
def add_releases_parser(sub: Any) -> None:
    """Register ``releases`` on the ``kvverify`` subparsers."""
    r = sub.add_parser("releases", formatter_class=Formatter,
                       help="run the suite against every installed vLLM release -> docs/releases.md",
                       description=__doc__)
    r.add_argument("--venvs", action="append", default=[], metavar="DIR",
                   help=f"a release venv, or a directory of vllm-X.Y.Z venvs (repeatable; default ${ENV_VENVS}, "
                        "os.pathsep-separated, else .venv-vllm* in the checkout and ../venvs/vllm-*)")
    r.add_argument("--release", action="append", default=[], metavar="X.Y.Z",
                   help="only these releases (repeatable); others keep their stored results")
    r.add_argument("--output", default=None, metavar="PATH",
                   help="the Markdown page (default docs/releases.md; its data goes next to it as .json, and "
                        "only the default page also regenerates the README's real-release zoo table)")
    r.add_argument("--reports-root", default=None, metavar="DIR",
                   help="per-release reports, JUnit and results (default reports/releases)")
    r.add_argument("--workers", type=int, default=2, help="pytest-xdist workers per run (0: no xdist)")
    r.add_argument("--profile", default="ci", help="Hypothesis profile (default ci)")
    r.add_argument("--timeout", type=float, default=1800.0, help="seconds per pytest pass")
    r.add_argument("--max-passes", type=int, default=3,
                   help="attribution passes per release (1: no re-run with identified defects absorbed)")
    r.add_argument("--no-replay-check", action="store_true",
                   help="do not replay the failures' reports (by default each is replayed on its release's venv, "
                        "expected exit 1, then on the later installed releases until one passes: the first "
                        "release that fixed it; one process per venv)")
    r.add_argument("--render-only", action="store_true", help="only re-render from stored results")
    r.add_argument("--reattribute", action="store_true",
                   help="attribute the stored runs again (JUnit + reports) and replay their reports, "
                        "without re-running the suite")
    r.add_argument("--list", action="store_true", help="list the discovered release venvs and exit")
    r.add_argument("--json", action="store_true", help="print the results as JSON")
    r.add_argument("--engine", choices=("vllm", "sglang"), default="vllm",
                   help="sglang: the SGLang properties on every /work/venvs/sglang-X.Y.Z (or "
                        "$KVVERIFY_SGLANG_VENVS) -> docs/sglang-releases.md (kvverify/sglang/releases.py)")
    r.set_defaults(func=cmd_releases)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def cmd_releases(args: argparse.Namespace) -> int:
    if getattr(args, "engine", "vllm") == "sglang":
        from kvverify.sglang import releases as sglang_releases
        if args.render_only:
            runs = sglang_releases.render_stored()
        else:
            runs = sglang_releases.main(args.release or None)
        if args.json:
            import dataclasses
            print(json.dumps([dataclasses.asdict(r) for r in runs], indent=2))
        else:
            print(sglang_releases.render_md(runs))
        return 0
    root = repo_root()
    for v in args.release:
        if not _VERSION_RE.match(v):
            raise ConfigError("release", v, "a vLLM version X.Y.Z")
    if args.max_passes < 1:
        raise ConfigError("max_passes", args.max_passes, "an integer >= 1")
    out_root = Path(args.reports_root) if args.reports_root else root / "reports" / "releases"
    doc = Path(args.output) if args.output else root / "docs" / "releases.md"
    sources = [Path(p) for p in args.venvs] or default_sources(root)
    venvs = discover(sources)
    if args.list:
        for rv in venvs:
            print(f"{rv.version}\t{rv.path}")
        return 0
    if not args.render_only:
        chosen = [rv for rv in venvs if not args.release or rv.version in args.release]
        missing = sorted(set(args.release) - {rv.version for rv in venvs}, key=version_key)
        if missing:
            raise ConfigError("release", ", ".join(missing),
                              f"no venv found (found: {', '.join(rv.version for rv in venvs) or 'none'}; "
                              f"install with scripts/install-vllm-target.sh --version X.Y.Z)")
        if not chosen:
            raise ConfigError("venvs", ", ".join(str(s) for s in sources),
                              "no vLLM release venv found there (scripts/install-vllm-target.sh --version X.Y.Z DIR)")
        for rv in chosen:
            if args.reattribute:
                reattribute(rv, root, out_root, replay_check=not args.no_replay_check, venvs=venvs)
                continue
            run_release(rv, root, out_root, workers=args.workers, profile=args.profile, timeout=args.timeout,
                        max_passes=args.max_passes, replay_check=not args.no_replay_check, venvs=venvs)
    results = load_results(out_root)
    doc.parent.mkdir(parents=True, exist_ok=True)
    ran = {r.version for r in results}
    _write_atomic(doc, render(results, repo_root=root, doc_path=doc,
                              not_run=[rv.version for rv in venvs if rv.version not in ran]) + "\n")
    data = summary(results)
    _write_atomic(doc.with_suffix(".json"), json.dumps(data, indent=1) + "\n")
    if args.output is None and args.reports_root is None:  # the project's page: its README table too
        if not update_readme(root / "README.md", zoo_real_release_section(data)):
            print(f"README.md has no {README_BEGIN!r} marker: its real-release table was not updated",
                  file=sys.stderr)
    if args.json:
        print(json.dumps(results_json(results), indent=1))
    else:
        print(f"wrote {doc} ({len(results)} release(s))")
    return 1 if any(d for r in results for d in r.defects) else 0


if __name__ == "__main__":  # pragma: no cover - the replay process in a release's venv (replay_command)
    if sys.argv[1:2] == ["--replay-batch"]:
        sys.exit(_replay_batch_main(sys.argv[2:]))
    sys.exit("usage: python -m kvverify.cli.releases --replay-batch REPORT... (use `kvverify releases`)")
