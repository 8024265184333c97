"""``kvverify releases`` and the release infrastructure, without installing any release:
JUnit parsing, the matrix rendering, venv discovery, the install script's arguments, and
flaw attribution (kvverify/props/attribution.py, kvverify/releases/explain.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvverify import flaws
from kvverify.cli import main
from kvverify.errors import ConfigError
from kvverify.invariants.base import Violation
from kvverify.props import attribution
from kvverify.releases import explain, runs
from kvverify.releases.defects import REPLAY_DIFFERENT, Defect, ReleaseResult, resolved_labels
from kvverify.releases.explain import report_violation_line, reports_by_nodeid
from kvverify.releases.junit import Outcome, attributed_in_test, counterexample_line, defect_line, parse_junit
from kvverify.releases.page import SUMMARY_SCHEMA, _forward, render, summary
from kvverify.releases.readme import README_BEGIN, README_END, update_readme, zoo_real_release_section
from kvverify.releases.replays import replay_batch_main, replay_command, replay_defects, replay_on
from kvverify.releases.store import load_results, write_result
from kvverify.releases.suite import IGNORED, pytest_command
from kvverify.releases.venvs import (
    ENV_VENVS,
    STAMPS,
    UNLOCKED_FREEZE,
    ReleaseVenv,
    default_sources,
    discover,
    version_key,
)

REPO = Path(__file__).resolve().parents[1]

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="7" time="12.0">
 <testcase classname="properties.test_plan" name="test_plan_ok" file="properties/test_plan.py" line="3" time="0.5"/>
 <testcase classname="properties.test_startup" name="test_startup_check_passes_implies_servable"
           file="kvverify/props/startup.py" line="9" time="4.25">
  <properties><property name="kvverify_report" value="reports/releases/0.27.1/test_x-abc.json"/></properties>
  <failure message="AssertionError: [startup.not_servable] the check passes but nothing runs">E   AssertionError: [startup.not_servable] the check passes but nothing runs (num_blocks=1)
E   Falsifying example: test_startup_check_passes_implies_servable(
E       target=&lt;VllmTarget&gt;,
E       case=Case(num_blocks=1),
E   )
E   explained by zoo flaw null_block_not_reserved | override_ignored_in_check
</failure>
 </testcase>
 <testcase classname="properties.test_admission" name="test_known[F2]" file="properties/test_admission.py" time="1">
  <skipped type="pytest.xfail" message="finding F2: chunked-local cap"/>
 </testcase>
 <testcase classname="properties.test_runtime" name="test_needs_prefill_lookahead" file="properties/test_runtime.py" time="0">
  <skipped type="pytest.skip" message="vLLM 0.27.1 has no num_prefill_lookahead">properties/test_runtime.py:5: vLLM 0.27.1 has no num_prefill_lookahead</skipped>
 </testcase>
 <testcase classname="properties.test_runtime" name="test_other" file="properties/test_runtime.py" time="0">
  <skipped type="pytest.skip" message="vLLM 0.27.1 has no num_prefill_lookahead"/>
 </testcase>
 <testcase classname="properties.test_block_sizes" name="test_strict" file="properties/test_block_sizes.py" time="0">
  <failure message="[XPASS(strict)] finding F9">[XPASS(strict)] finding F9</failure>
 </testcase>
 <testcase classname="properties.test_differential.TestPlans" name="test_boom" time="0">
  <error message="failed on setup with &quot;ImportError: no module&quot;">ImportError</error>
 </testcase>
</testsuite></testsuites>
"""


def _junit(tmp_path: Path) -> Path:
    p = tmp_path / "junit.xml"
    p.write_text(JUNIT)
    return p


def test_parse_junit_statuses_nodeids_and_reports(tmp_path: Path) -> None:
    outs = {o.nodeid: o for o in parse_junit(_junit(tmp_path))}
    assert outs["properties/test_plan.py::test_plan_ok"].status == "passed"
    failed = outs["properties/test_startup.py::test_startup_check_passes_implies_servable"]
    assert failed.status == "failed" and failed.seconds == 4.25
    assert failed.reports == ("reports/releases/0.27.1/test_x-abc.json",)
    assert outs["properties/test_admission.py::test_known[F2]"].status == "xfailed"
    assert outs["properties/test_runtime.py::test_needs_prefill_lookahead"].status == "skipped"
    assert outs["properties/test_block_sizes.py::test_strict"].status == "failed"  # strict XPASS fails
    # the node id comes from the classname (xunit1's file names where the body is defined);
    # without a file attribute the class part of the classname stays in the node id
    assert outs["properties/test_differential.py::TestPlans::test_boom"].status == "error"


def test_defect_counterexample_and_in_test_attribution_lines(tmp_path: Path) -> None:
    failed = next(o for o in parse_junit(_junit(tmp_path)) if o.name.startswith("test_startup"))
    assert defect_line(failed) == "[startup.not_servable] the check passes but nothing runs (num_blocks=1)"
    line = counterexample_line(failed)
    assert line.startswith("Falsifying example: test_startup_check_passes_implies_servable(")
    assert "case=Case(num_blocks=1)" in line and "\n" not in line
    assert attributed_in_test(failed) == ["null_block_not_reserved", "override_ignored_in_check"]
    assert len(counterexample_line(failed, limit=40)) == 40


def _result(version: str, outcomes, defects, **kw) -> ReleaseResult:
    from dataclasses import asdict
    return ReleaseResult(version, f"/v/vllm-{version}", outcomes=[asdict(o) for o in outcomes],
                           defects=[asdict(d) for d in defects], passes=2, run_seconds=200.0,
                           install_seconds=130.0, venv_bytes=2 * 2**30, returncode=1, **kw)


def test_render_matrix_summary_defects_and_skip_reasons(tmp_path: Path) -> None:
    outs = parse_junit(_junit(tmp_path))
    d1 = Defect("properties/test_startup.py::test_startup_check_passes_implies_servable",
                  "[startup.not_servable] x", "Falsifying example: f(case=1)", "reports/releases/0.27.1/t.json",
                  ["null_block_not_reserved"], replay_on_release=1, forward={"0.28.0": 1, "0.29.0": 0})
    d2 = Defect("properties/test_block_sizes.py::test_strict", "[XPASS(strict)] finding F9", "", None, [],
                  found_in_pass=2)
    old = _result("0.27.1", outs, [d1, d2])
    new = _result("0.33.0", [Outcome(o.nodeid, "passed") for o in outs], [])
    doc = tmp_path / "docs" / "releases.md"
    text = render([old, new], repo_root=tmp_path, doc_path=doc)
    assert "| 0.27.1 | 2.2 min | 2.0 GiB | 3.3 min | 2 | 1 | 2 | 1 | 1 | 2 |" in text
    assert "| null_block_not_reserved | test_startup_check_passes_implies_servable | · |" in text
    assert "| no counterexample (suite / adapter) | test_strict | · |" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| `test_startup.py::test_startup_check"))
    assert row.endswith("| **FAILS** | pass |")
    assert "known finding" in text and "ERROR" in text
    assert "- 2 x vLLM 0.27.1 has no num_prefill_lookahead" in text
    assert "[t.md](../reports/releases/0.27.1/t.md)" in text and "exit 1 (reproduced)" in text
    assert "(pass 2)" in text
    assert "0.28.0: exit 1, 0.29.0: exit 0 → **fixed between 0.28.0 and 0.29.0**" in text
    assert "no report: a strict xfail passed" in text
    assert ("Replays (`kvverify replay`, in each release's venv): 1 failure(s) with a report; 1 reproduce on "
            "0.27.1 (exit 1); 1 pass on a later installed release (exit 0); 1 without a report") in text
    assert "No release has been run yet." in render([], repo_root=tmp_path, doc_path=doc)
    assert "Installed but not run yet: 0.31.0." in render([old], repo_root=tmp_path, doc_path=doc,
                                                            not_run=["0.31.0"])


def _fake_venv(root: Path, name: str, version: str | None, stamp: bool | str = True) -> Path:
    """``stamp``: True (both of the install script's stamps), False (none: a user's venv),
    ``"lock"`` (the lock stamp only: the script is still installing), ``"unlocked"``."""
    v = root / name
    (v / "bin").mkdir(parents=True)
    (v / "bin" / "python").write_text("")
    site = v / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    if version:
        (site / f"vllm-{version}.dist-info").mkdir()
    for s in (STAMPS if stamp in (True, "unlocked") else STAMPS[:1] if stamp == "lock" else ()):
        (v / s).write_text("x")
    if stamp == "unlocked":
        (v / UNLOCKED_FREEZE).write_text("vllm==0.24.0\n")
    return v


def test_discover_venvs_sorted_any_provenance_and_deduplicated(tmp_path: Path) -> None:
    """Any venv with vLLM counts (issue 27: "accepts any venv"), but one the install script is
    still installing; each says where it came from."""
    _fake_venv(tmp_path, "vllm-0.27.1", "0.27.1")
    _fake_venv(tmp_path, "vllm-0.9.2", "0.9.2", stamp=False)  # a user's venv, no stamps
    _fake_venv(tmp_path, "vllm-0.24.0", "0.24.0", stamp="unlocked")
    _fake_venv(tmp_path, "vllm-0.31.0", "0.31.0", stamp="lock")  # being installed: not yet a release venv
    _fake_venv(tmp_path, "vllm-broken", None)  # no vLLM in it
    _fake_venv(tmp_path, "other", "0.20.0")  # not named like a release venv
    single = _fake_venv(tmp_path / "x", ".venv-vllm", "0.33.0")
    dev = _fake_venv(tmp_path / "y", "checkout-venv", "0.33.1.dev3+g1a2b3c4", stamp=False)  # an editable checkout
    found = discover([tmp_path, single, tmp_path, dev])
    assert [(r.version, r.path.name, r.provenance) for r in found] == [
        ("0.9.2", "vllm-0.9.2", "user"), ("0.24.0", "vllm-0.24.0", "unlocked"), ("0.27.1", "vllm-0.27.1", "lock"),
        ("0.33.0", ".venv-vllm", "lock"), ("0.33.1.dev3+g1a2b3c4", "checkout-venv", "user")]
    assert found[0].python == tmp_path / "vllm-0.9.2" / "bin" / "python"
    assert discover([tmp_path / "missing"]) == []


def test_default_sources_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_VENVS, os.pathsep.join(["/a", "/b/vllm-0.27.1"]))
    assert default_sources(tmp_path) == [Path("/a"), Path("/b/vllm-0.27.1")]
    monkeypatch.delenv(ENV_VENVS)
    assert default_sources(tmp_path / "main") == [tmp_path / "main", tmp_path / "venvs"]


def test_pytest_command_uses_ci_ignore_list(tmp_path: Path) -> None:
    assert IGNORED and all((REPO / p).is_file() for p in IGNORED)
    cmd = pytest_command("/v/bin/python", junit=tmp_path / "j.xml", reports_dir=tmp_path, workers=2,
                         profile="ci", absorb=["a", "b"])
    assert cmd[:5] == ["/v/bin/python", "-m", "pytest", "properties/", "--target"]
    assert ["-n", "2"] == cmd[cmd.index("-n"):cmd.index("-n") + 2]
    assert cmd[-2:] == ["--absorb-flaws", "a,b"] and f"--junitxml={tmp_path / 'j.xml'}" in cmd
    assert sorted(a.removeprefix("--ignore=") for a in cmd if a.startswith("--ignore")) == sorted(IGNORED)
    only = pytest_command("p", junit=tmp_path / "j", reports_dir=tmp_path, workers=0, profile="ci",
                          only=["properties/test_x.py::t"])
    assert "properties/" not in only and "properties/test_x.py::t" in only and "no:xdist" in only


def test_ci_vllm_step_ignores_the_suites_list_and_keeps_no_copy(tmp_path: Path) -> None:
    """.ci/run's vllm step reads the reference-only list from kvverify.releases.suite (no copy
    of it): its lines run with a stand-in venv whose python prints the pytest arguments."""
    ci = (REPO / ".ci" / "run").read_text()
    assert not [p for p in IGNORED if p in ci]
    start = ci.index("  IGNORE_TEXT=")
    step = ci[start:ci.index("|| vllm_rc=$?", start)]
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(f'#!/bin/sh\nif [ "$2" = pytest ]; then printf "%s\\n" "$@"; else exec {sys.executable} "$@"; fi\n')
    py.chmod(0o755)
    done = subprocess.run(["bash", "-c", f"set -euo pipefail\nVLLM_VENV={venv}\n{step}"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["-m", "pytest", "properties/", "--target", "vllm", "-n", "2",
                                        "--hypothesis-profile=ci", "-q", "-p", "no:cacheprovider", "-rsx",
                                        *[f"--ignore={p}" for p in IGNORED]]
    printed = subprocess.run([sys.executable, "-m", "kvverify.releases.suite"], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
    assert printed.returncode == 0 and printed.stdout.splitlines() == [f"--ignore={p}" for p in IGNORED]


def test_fixed_between_names_the_last_release_that_still_fails() -> None:
    """A replay that passes on B says upstream fixed it by B, after the last installed release it
    still reproduces on (exit 1); releases it was rejected on (exit 2) or did not reach do not move A."""
    d = Defect("p::t", "[a] x", "", "r.json", ["x"], replay_on_release=1,
               forward={"0.22.0": 1, "0.25.0": 2, "0.27.1": 0, "0.28.0": 0})
    assert d.fixed_in == "0.27.1" and d.fixed_between("0.20.0") == ("0.22.0", "0.27.1")
    assert Defect("p::t", "", "", "r.json", [], forward={"0.22.0": 0}).fixed_between("0.20.0") == ("0.20.0", "0.22.0")
    assert Defect("p::t", "", "", "r.json", [], forward={"0.22.0": 1}).fixed_between("0.20.0") is None


def test_exit_status_is_by_the_releases_asked() -> None:
    """``--release 0.33.0`` exits 0 when 0.33.0 is green, whatever older releases shipped (issue 27)."""
    from kvverify.cli.releases import exit_status
    bad = _result("0.20.0", [], [Defect("p::t", "[a] x", "", None, ["null_block_not_reserved"])])
    good = _result("0.33.0", [], [])
    assert exit_status([bad, good], ["0.33.0"]) == 0
    assert exit_status([bad, good], ["0.20.0"]) == 1
    assert exit_status([bad, good], []) == 1 and exit_status([good], []) == 0


def test_project_files_are_written_only_with_publish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``--publish`` the page goes under the reports root; docs/ and README.md are untouched."""
    from kvverify.cli import releases as cli_releases
    fake_root = tmp_path / "checkout"
    (fake_root / "docs").mkdir(parents=True)
    (fake_root / "README.md").write_text(f"x\n{README_BEGIN}\nSTALE-TABLE\n{README_END}\n")
    monkeypatch.setattr(cli_releases, "repo_root", lambda: fake_root)
    reports = tmp_path / "r"
    assert main(["releases", "--render-only", "--reports-root", str(reports), "--venvs", str(tmp_path / "none")]) == 0
    assert (reports / "releases.md").is_file() and (reports / "releases.json").is_file()
    assert not (fake_root / "docs" / "releases.md").exists() and "STALE-TABLE" in (fake_root / "README.md").read_text()
    assert main(["releases", "--render-only", "--publish", "--reports-root", str(reports),
                 "--venvs", str(tmp_path / "none")]) == 0
    assert (fake_root / "docs" / "releases.md").is_file() and "STALE-TABLE" not in (fake_root / "README.md").read_text()


def test_cli_render_only_and_bad_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "releases.md"
    assert main(["releases", "--render-only", "--reports-root", str(tmp_path / "r"), "--output", str(out)]) == 0
    assert "No release has been run yet." in out.read_text()
    assert main(["releases", "--release", "1.2"]) == 2
    assert "release='1.2'" in capsys.readouterr().err
    assert main(["releases", "--venvs", str(tmp_path), "--release", "0.27.1"]) == 2  # no such venv


# ------------------------------------------------------------------ the install script
def _install(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "scripts" / "install-vllm-target.sh"), *args],
                          capture_output=True, text=True, timeout=60)


def test_install_script_installs_a_release_without_lock_unlocked_and_says_so(tmp_path: Path) -> None:
    """No lock: the release's own metadata, announced loudly (issue 27); a release the index does not
    offer then fails clearly (or the run skips when the index cannot be reached)."""
    r = subprocess.run(["bash", str(REPO / "scripts" / "install-vllm-target.sh"), "--version", "9.9.9",
                        str(tmp_path / "v")], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, KVVERIFY_SKIP_EXIT_CODE="75"))
    assert "UNLOCKED: vLLM 9.9.9 has no lock (constraints/vllm-9.9.9.txt)" in r.stdout
    assert "0.33.0" in r.stdout  # names the releases that have a lock
    assert (r.returncode == 1 and "does not offer vllm==9.9.9" in r.stderr) or r.returncode == 75, r.stdout + r.stderr


def test_install_script_argument_errors() -> None:
    assert _install("--version", "abc").returncode == 2
    assert "needs a value" in _install("--version").stderr
    assert _install("--bogus").returncode == 2
    helped = _install("--help")
    assert helped.returncode == 0 and "--version X.Y.Z" in helped.stdout


def _verify_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("verify_vllm_install", REPO / "scripts" / "verify_vllm_install.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_install_verification_imports_the_adapters_module_list(tmp_path: Path) -> None:
    """The install script keeps no module list of its own: it verifies the adapter's
    ``compat.MODULES``, read from compat.py's source (kvverify is not installed at that step),
    importing each module the release ships as the adapter does; afterwards it asks the adapter."""
    from kvverify.targets.vllm import compat
    verify = _verify_script()
    assert verify.adapter_modules(REPO / "kvverify" / "targets" / "vllm" / "compat.py") == compat.MODULES
    script = (REPO / "scripts" / "install-vllm-target.sh").read_text()
    assert not re.findall(r"[\"']vllm\.v1\.[\w.]+[\"']", script)  # no second list
    assert "verify_vllm_install.py" in script and "kvverify/targets/vllm/compat.py" in script
    assert "vllm_available()" in script
    (tmp_path / "annotated.py").write_text('MODULES: tuple[str, ...] = ("a.b", "c")\n')
    assert verify.adapter_modules(tmp_path / "annotated.py") == ("a.b", "c")
    (tmp_path / "none.py").write_text("OTHER = ('a',)\n")
    with pytest.raises(SystemExit, match="no MODULES"):
        verify.adapter_modules(tmp_path / "none.py")
    # a module the release lacks is skipped (itself or a parent missing); one that fails to import is a failure
    pkg = tmp_path / "fakevllm"
    (pkg / "v1").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text("")  # a module, not a package: fakevllm.utils.hashing cannot exist
    (pkg / "v1" / "__init__.py").write_text("")
    (pkg / "v1" / "broken.py").write_text("import no_such_dependency_of_vllm\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert verify.import_if_shipped("fakevllm.v1") is True
        assert verify.import_if_shipped("fakevllm.v1.missing") is False
        assert verify.import_if_shipped("fakevllm.nothing.here") is False
        assert verify.import_if_shipped("fakevllm.utils.hashing") is False
        with pytest.raises(ModuleNotFoundError, match="no_such_dependency_of_vllm"):
            verify.import_if_shipped("fakevllm.v1.broken")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "fakevllm" or m.startswith("fakevllm.")]:
            del sys.modules[name]


def test_every_lock_pins_its_release_and_cpu_torch() -> None:
    locks = sorted((REPO / "constraints").glob("vllm-*.txt"))
    assert len(locks) >= 10
    for lock in locks:
        version = lock.stem.removeprefix("vllm-")
        text = lock.read_text()
        assert f"\nvllm=={version}\n" in text, lock.name
        assert "\ntorch==2.13.0+cpu\n" in text, lock.name
        pins = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
        assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==\S+", p) for p in pins), lock.name
        assert not any(p.lower().startswith(("nvidia-", "triton")) for p in pins), lock.name


# ------------------------------------------------------------------------- attribution
@pytest.fixture
def attribution_mode():
    yield attribution
    attribution.configure()


def _case(flaw: str) -> tuple[list[Violation], object]:
    """A target violation, and a reference rerun that reproduces it only with ``flaw`` on."""
    seen = [Violation("startup.not_servable", "x")]
    return seen, lambda: list(seen) if flaws.is_on(flaw) else []


def test_explaining_flaws_names_exactly_the_flaw_that_reproduces() -> None:
    seen, rerun = _case("null_block_not_reserved")
    assert attribution.explaining_flaws(seen, rerun) == ["null_block_not_reserved"]
    other = [Violation("other.name", "y")]
    assert attribution.explaining_flaws(other, rerun) == []  # same flaw, different violation: no

    def crashes() -> list[Violation]:
        raise RuntimeError("boom")
    assert attribution.explaining_flaws(seen, crashes) == []


def test_configure_rejects_unknown_flaws(attribution_mode) -> None:
    with pytest.raises(ConfigError, match="flaw"):
        attribution.configure(absorb=["no_such_flaw"])
    assert attribution.configure(absorb=["all"]).absorb == frozenset(flaws.CATALOG)
    assert not attribution.configure().active


def test_check_or_known_absorbs_only_the_absorbed_flaw(attribution_mode, tmp_path: Path) -> None:
    """The hook in props/known.py: a failure on a non-reference target that an absorbed
    flaw explains passes; one it does not explain still fails (the mechanism can fail)."""
    from kvverify.props.known import check_or_known

    class Fake:  # a target without the fix options, as vLLM
        name = "fake"

        def lacks(self, feature: object) -> str:
            return "the fake target has no fix options"

    def check(t) -> list[Violation]:
        if getattr(t, "name", None) == "fake" or flaws.is_on("null_block_not_reserved"):
            return [Violation("startup.not_servable", "x")]
        return []

    with pytest.raises(AssertionError):  # attribution off: the failure is a failure
        check_or_known(Fake(), check)
    log = tmp_path / "attr.jsonl"
    attribution.configure(absorb=["null_block_not_reserved"], log_path=str(log))
    check_or_known(Fake(), check)  # explained by the absorbed flaw: no failure
    assert '"flaws": ["null_block_not_reserved"]' in log.read_text()
    attribution.configure(absorb=["autofit_first_group_only"])
    with pytest.raises(AssertionError):  # explained, but by a flaw that is not absorbed
        check_or_known(Fake(), check)


def test_reports_found_by_the_node_id_that_wrote_them(tmp_path: Path) -> None:
    """Under xdist JUnit lacks the tests' user properties: reports are matched by ``run.nodeid``."""
    import json
    d = tmp_path / "reports" / "releases" / "0.27.1"
    d.mkdir(parents=True)
    (d / "test_a-1.json").write_text(json.dumps({"schema": "kvverify.report/1",
                                                 "run": {"nodeid": "properties/test_plan.py::test_a"}}))
    (d / "junk.json").write_text("{not json")
    (d / "other.json").write_text(json.dumps({"schema": "something else"}))
    assert reports_by_nodeid(d, tmp_path) == {
        "properties/test_plan.py::test_a": ["reports/releases/0.27.1/test_a-1.json"]}


def test_ambiguous_failures_take_the_flaw_another_failure_needs_alone() -> None:
    both = Defect("t::a", "v", "", None, ["null_block_not_reserved", "override_ignored_in_check"])
    alone = Defect("t::b", "v", "", None, ["null_block_not_reserved"])
    other = Defect("t::c", "v", "", None, ["autofit_first_group_only", "swa_admission_uncapped"])
    none = Defect("t::d", "[x.y] v", "", "r.json", [])
    crash = Defect("t::e", "TypeError: f() takes 1 positional argument", "", "r.json", [])
    assert crash.label == "crash: TypeError (adapter until shown otherwise)"
    assert resolved_labels([both, alone, other, none]) == [
        "null_block_not_reserved", "null_block_not_reserved",
        "autofit_first_group_only | swa_admission_uncapped", "unexplained"]
    assert resolved_labels([both]) == ["null_block_not_reserved | override_ignored_in_check"]


# ------------------------------------------------------------------- replays, fixing release
def _venvs(*versions: str) -> list[ReleaseVenv]:
    return [ReleaseVenv(v, Path(f"/v/vllm-{v}")) for v in versions]


def test_replay_defects_on_the_release_then_forward_until_the_first_pass() -> None:
    """Own replay for every failure with a report; then the later releases, oldest first, each
    report until its first exit 0 (the release that fixed it), or until it is a known finding
    (strict xfail) there; one replay call per venv, with only the reports still pending."""
    a = Defect("p.py::test_a", "[a] x", "", "r/a.json", ["null_block_not_reserved"])
    b = Defect("p.py::test_b", "[b] y", "", "r/b.json", ["mamba_align_zero_chunk"])
    c = Defect("p.py::test_c", "[c] z", "", "r/c.json", [], reference_reproduces=True)
    none = Defect("p.py::test_d", "hypothesis.errors.FailedHealthCheck: x", "", None, [])
    crash = Defect("p.py::test_e", "kvverify.errors.ConfigError: x", "", "r/e.json", [])
    result = _result("0.25.0", [], [a, b, c, none, crash])
    answers = {("0.25.0", "r/e.json"): (REPLAY_DIFFERENT, "reproduced (different failure)"),
               ("0.25.0", "r/a.json"): (1, "reproduced"), ("0.25.0", "r/b.json"): (1, "reproduced"),
               ("0.25.0", "r/c.json"): (REPLAY_DIFFERENT, "reproduced (different failure)"),
               ("0.27.1", "r/a.json"): (1, "reproduced"), ("0.27.1", "r/b.json"): (0, "passes"),
               ("0.27.1", "r/c.json"): (1, "reproduced"),
               ("0.29.0", "r/a.json"): (0, "rejected"), ("0.29.0", "r/c.json"): (1, "reproduced")}
    calls: list[tuple[str, list[str]]] = []

    def fake(venv: Path, reports, repo_root: Path):
        version = venv.name.removeprefix("vllm-")
        calls.append((version, list(reports)))
        return {r: answers[(version, r)] for r in reports}

    later = {"0.29.0": ReleaseResult("0.29.0", "/v", outcomes=[{"nodeid": "p.py::test_c", "status": "xfailed"}])}
    replay_defects(result, _venvs("0.22.0", "0.25.0", "0.27.1", "0.29.0", "0.33.0"), REPO, later, replay=fake)
    assert calls == [("0.25.0", ["r/a.json", "r/b.json", "r/c.json", "r/e.json"]),
                     ("0.27.1", ["r/a.json", "r/b.json", "r/c.json"]),  # a crash is not replayed forward
                     ("0.29.0", ["r/a.json", "r/c.json"])]  # b fixed in 0.27.1; c a known finding from 0.29.0
    da, db, dc, dd, de = (Defect(**d) for d in result.defects)
    assert de.is_crash and de.forward == {} and "not replayed forward" in _forward(de, "0.25.0")
    assert (da.replay_on_release, da.forward, da.fixed_in) == (1, {"0.27.1": 1, "0.29.0": 0}, "0.29.0")
    assert (db.forward, db.fixed_in, dc.fixed_in) == ({"0.27.1": 0}, "0.27.1", None)
    assert dc.replay_on_release == REPLAY_DIFFERENT and dd.forward == {} and dd.replay_on_release is None
    assert "Hypothesis health check" in dd.no_report_reason and not da.no_report_reason


def test_replay_on_reads_one_json_line_per_report(tmp_path: Path) -> None:
    """The replay process prints one line per report; exit 1 with another failure is not a
    reproduction; a report the process never answered is (None, why)."""
    venv = tmp_path / "vllm-9.9.9"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text("#!/bin/sh\n"
                  "echo 'noise'\n"
                  "echo 'KVVERIFY-REPLAY {\"report\": \"a.json\", \"exit\": 1, \"status\": \"reproduced\"}'\n"
                  "echo 'KVVERIFY-REPLAY {\"report\": \"b.json\", \"exit\": 1, \"status\": \"crash\"}'\n"
                  "echo 'KVVERIFY-REPLAY {\"report\": \"c.json\", \"exit\": 0, \"status\": \"passes\"}'\n"
                  "exit 3\n")
    py.chmod(0o755)
    got = replay_on(venv, ["a.json", "b.json", "c.json", "d.json"], tmp_path)
    assert got == {"a.json": (1, "reproduced"), "b.json": (REPLAY_DIFFERENT, "crash"), "c.json": (0, "passes"),
                   "d.json": (None, "replay process exited 3")}
    assert replay_on(tmp_path / "missing", ["a.json"], tmp_path) == {"a.json": (None, "no python in the venv")}
    assert replay_command("py", ["x.json"])[1:4] == ["-m", "kvverify.releases.replays", "--replay-batch"]


def test_replay_batch_answers_for_every_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import json
    assert replay_batch_main([str(tmp_path / "nope.json")]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("KVVERIFY-REPLAY ")
    d = json.loads(line.removeprefix("KVVERIFY-REPLAY "))
    assert d["report"].endswith("nope.json") and d["exit"] in (1, 2)


def test_release_run_keeps_the_other_releases(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--release X`` re-runs X only: the other releases' stored results and rows stay."""
    import json
    from dataclasses import asdict
    venvs = tmp_path / "venvs"
    _fake_venv(venvs, "vllm-0.27.1", "0.27.1")
    _fake_venv(venvs, "vllm-0.33.0", "0.33.0")
    root = tmp_path / "rel"
    other = _result("0.33.0", [Outcome("properties/test_a.py::t", "passed")], [])
    write_result(other, root)
    before = (root / "0.33.0" / "result.json").read_text()
    ran: list[str] = []

    def fake_run(rv, repo_root, out_root, **kw):
        ran.append(rv.version)
        r = _result(rv.version, [Outcome("properties/test_a.py::t", "failed")], [])
        write_result(r, out_root)
        return r

    monkeypatch.setattr(runs, "run_release", fake_run)
    out = tmp_path / "releases.md"
    assert main(["releases", "--venvs", str(venvs), "--release", "0.27.1", "--reports-root", str(root),
                 "--output", str(out)]) == 0
    assert ran == ["0.27.1"] and (root / "0.33.0" / "result.json").read_text() == before
    row = next(ln for ln in out.read_text().splitlines() if ln.startswith("| `test_a.py::t`"))
    assert row == "| `test_a.py::t` | **FAILS** | pass |"
    data = json.loads(out.with_suffix(".json").read_text())
    assert [r["version"] for r in data["releases"]] == ["0.27.1", "0.33.0"]
    assert data == summary(load_results(root)) and asdict(other)["version"] == "0.33.0"


# --------------------------------------------------------------- the README's real-release table
def test_zoo_real_release_section_and_readme_update(tmp_path: Path) -> None:
    d1 = Defect("p::test_a", "[a] x", "", "r/a.json", ["null_block_not_reserved"], replay_on_release=1,
                  forward={"0.28.0": 1, "0.29.0": 0})
    d2 = Defect("p::test_b", "[b] x", "", "r/b.json", ["mamba_align_zero_chunk + null_block_not_reserved",
                                                         "mamba_align_zero_chunk + override_ignored_in_check"],
                  replay_on_release=1, forward={"0.27.1": 0})
    d3 = Defect("p::test_c", "[c] x", "", "r/c.json", ["mamba_align_zero_chunk"], replay_on_release=1)
    data = summary([_result("0.25.0", [], [d1, d2, d3]), _result("0.33.0", [], [])])
    assert [f["defect"] for f in data["releases"][0]["failures"]] == [
        "null_block_not_reserved", "mamba_align_zero_chunk + null_block_not_reserved", "mamba_align_zero_chunk"]
    text = zoo_real_release_section(data)
    rows = {ln.split("|")[1].strip(): ln for ln in text.splitlines() if ln.startswith("| `")}
    assert set(rows) == {f"`{n}`" for n in flaws.CATALOG}
    assert rows["`null_block_not_reserved`"] == (
        "| `null_block_not_reserved` | yes | 0.25.0 (1 failure; replays: 1/1 exit 1 on their release, fixed "
        "between 0.28.0 and 0.29.0); 0.25.0 together with `mamba_align_zero_chunk` (1 failure) |")
    assert data["releases"][0]["failures"][0]["fixed_between"] == ["0.28.0", "0.29.0"]
    assert data["releases"][0]["failures"][1]["fixed_between"] == ["0.25.0", "0.27.1"]  # its own release, then
    assert "later releases not replayed yet" in rows["`mamba_align_zero_chunk`"]
    amb = Defect("p::test_d", "[d] x", "", "r/d.json", ["autofit_ignores_null_block + swa_admission_uncapped",
                                                          "null_block_not_reserved + swa_admission_uncapped"])
    rows2 = zoo_real_release_section(summary([_result("0.19.1", [], [amb])]))
    assert ("| `swa_admission_uncapped` | yes | 0.19.1 ambiguous: `autofit_ignores_null_block + swa_admission_uncapped`"
            " or `null_block_not_reserved + swa_admission_uncapped` (1 failure) |") in rows2
    assert "not found in the releases run" in rows["`autofit_first_group_only`"]
    assert "Releases run: 0.25.0, 0.33.0." in text
    readme = tmp_path / "README.md"
    readme.write_text(f"a\n{README_BEGIN}\nold\n{README_END}\nb\n")
    assert update_readme(readme, "NEW")
    assert readme.read_text() == f"a\n{README_BEGIN}\nNEW\n{README_END}\nb\n"
    readme.write_text("no markers")
    assert not update_readme(readme, "NEW") and readme.read_text() == "no markers"


def test_readme_real_release_table_is_the_matrix_data() -> None:
    """The README's "caught in real release" column is generated from docs/releases.json (written
    by `kvverify releases` with docs/releases.md), never typed by hand."""
    import json
    data = json.loads((REPO / "docs" / "releases.json").read_text())
    assert data["schema"] == SUMMARY_SCHEMA and len(data["releases"]) >= 10
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index(README_BEGIN) + len(README_BEGIN):readme.index(README_END)]
    from kvverify.releases.selected import published_sections
    assert section.strip("\n") == zoo_real_release_section(data, published_sections(REPO))


# ------------------------------------------------------------------- attribution by pairs
def test_pairs_explain_a_failure_no_single_flaw_explains(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release with two zoo flaws can fail on an example that needs both: no single flaw
    reproduces it, the pair does, and it is named ``A + B`` (only when no single flaw does)."""
    from kvverify import reports
    need = {"null_block_not_reserved", "mamba_align_zero_chunk"}

    def fake_replay(report, *, target, flaw_names, fix_names):
        ok = need <= set(flaw_names)
        return reports.ReplayOutcome(ok, "reproduced" if ok else "passes", "")
    monkeypatch.setattr(reports, "replay_report", fake_replay)
    report = {"violation": {"name": "admission.stall.head_of_line"}}
    assert explain.explain_report(report)["flaws"] == ["mamba_align_zero_chunk + null_block_not_reserved"]
    assert explain.explain_report(report, pairs=False)["flaws"] == []
    seen = [Violation("admission.stall.head_of_line", "x")]

    def rerun() -> list[Violation]:
        return list(seen) if need <= flaws.active() else []
    assert attribution.explaining_flaws(seen, rerun) == []  # in-test without candidates: singles only
    assert attribution.explaining_flaws(seen, rerun, pair_candidates=sorted(need) + ["autofit_first_group_only"]) \
        == ["mamba_align_zero_chunk + null_block_not_reserved"]
    assert attribution.parts("a + b") == ["a", "b"] and attribution.parts("a") == ["a"]
    # a crash (an exception's name, not an invariant's) with no message is never put down to a zoo flaw
    crash = {"violation": {"name": "GroupingError"}}
    monkeypatch.setattr(reports, "replay_report", lambda *a, **k: reports.ReplayOutcome(True, "reproduced", ""))
    assert explain.explain_report(crash)["flaws"] == [] and explain.explain_report(report)["flaws"] == []
    assert explain.is_invariant_name("startup.too_loose") and not explain.is_invariant_name("ConfigError")


def test_absorbed_flaws_absorb_a_failure_they_explain_together(attribution_mode) -> None:
    from kvverify.props.known import check_or_known

    class Fake:  # a target without the fix options, as vLLM
        name = "fake"

        def lacks(self, feature: object) -> str:
            return "the fake target has no fix options"

    def check(t) -> list[Violation]:
        both = {"null_block_not_reserved", "mamba_align_zero_chunk"} <= flaws.active()
        return [Violation("admission.stall.head_of_line", "x")] if getattr(t, "name", None) == "fake" or both else []

    attribution.configure(absorb=["null_block_not_reserved"])
    with pytest.raises(AssertionError):  # one of the two is not enough
        check_or_known(Fake(), check)
    attribution.configure(absorb=["null_block_not_reserved", "mamba_align_zero_chunk"])
    check_or_known(Fake(), check)  # both identified: absorbed


def test_combined_labels_resolve_to_the_pair_of_flaws_found_alone() -> None:
    pair = Defect("t::a", "v", "", "r.json", ["mamba_align_zero_chunk + null_block_not_reserved",
                                                "mamba_align_zero_chunk + override_ignored_in_check"])
    alone = [Defect("t::b", "v", "", "r.json", ["null_block_not_reserved"]),
             Defect("t::c", "v", "", "r.json", ["mamba_align_zero_chunk"])]
    assert resolved_labels([pair, *alone])[0] == "mamba_align_zero_chunk + null_block_not_reserved"
    assert resolved_labels([pair])[0] == pair.label  # nothing found alone: both candidates stay


# ------------------------------------------------------------------ the nightly target axis
def test_nightly_fuzzes_reference_and_pin_nightly_and_older_releases_weekly() -> None:
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    on = wf.get("on", wf.get(True))
    crons = [c["cron"] for c in on["schedule"]]
    assert len(crons) == 2 and any(c.endswith("* * 0") for c in crons)  # nightly + weekly (Sunday)
    assert "releases" in on["workflow_dispatch"]["inputs"]
    fuzz = wf["jobs"]["fuzz"]
    assert fuzz["strategy"]["matrix"]["target"] == ["reference", "vllm"] and "if" not in fuzz  # every night
    weekly = next(c for c in crons if c.endswith("* * 0"))
    assert weekly in wf["jobs"]["plan-releases"]["if"] and "inputs.releases" in wf["jobs"]["plan-releases"]["if"]
    steps = " ".join(st.get("run", "") for st in wf["jobs"]["fuzz-releases"]["steps"])
    assert "install-vllm-target.sh --version" in steps and "--target vllm" in steps
    assert wf["jobs"]["fuzz-releases"]["needs"] == "plan-releases"
    # the planning script, run on this checkout: every older release with a lock, not the pin
    plan = next(st["run"] for st in wf["jobs"]["plan-releases"]["steps"] if "run" in st)
    assert plan.startswith("python3 - <<'PY'")
    code = plan.split("\n", 1)[1].rsplit("\nPY", 1)[0]
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "RELEASES": "all"}, timeout=60)
    import json
    older = json.loads(out.stdout.strip().removeprefix("releases="))
    assert len(older) >= 9 and "0.33.0" not in older and older == sorted(older, key=version_key)
    ci = (REPO / ".ci" / "run").read_text()
    assert "--version" not in ci  # .ci/run keeps running the pin only


def test_run_release_keeps_the_old_result_until_the_new_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """While a release re-runs, its previous result.json stays (a page another run renders
    meanwhile keeps the row); its old reports and JUnit files are gone."""
    root = tmp_path / "rel"
    old = _result("0.27.1", [Outcome("properties/test_a.py::t", "failed")], [])
    write_result(old, root)
    (root / "0.27.1" / "old-report.json").write_text("{}")
    (root / "0.27.1" / "pass2").mkdir()
    seen: list[bool] = []

    def fake_pytest(cmd, **kw):
        seen.append((root / "0.27.1" / "result.json").exists() and not (root / "0.27.1" / "old-report.json").exists()
                    and not (root / "0.27.1" / "pass2").exists())
        junit = next(a for a in cmd if a.startswith("--junitxml=")).removeprefix("--junitxml=")
        Path(junit).write_text('<testsuites><testsuite><testcase classname="properties.test_a" name="t"/>'
                               "</testsuite></testsuites>")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(runs.subprocess, "run", fake_pytest)
    rv = ReleaseVenv("0.27.1", tmp_path / "v")
    new = runs.run_release(rv, tmp_path, root, workers=0, profile="ci", timeout=10, max_passes=3, replay_check=True)
    assert seen == [True] and new.passes == 1 and new.returncode == 0
    assert load_results(root)[0].outcomes[0]["status"] == "passed"


def test_a_failure_shows_its_own_reports_violation() -> None:
    """A test that found two failures has two reports: each row shows its report's violation."""
    inv = {"violation": {"name": "startup.too_loose", "reason": "passes", "evidence": {"num_blocks": 1}}}
    crash = {"violation": {"name": "ConfigError", "reason": "MLAAttentionSpec.x is invalid"}}
    assert report_violation_line(inv) == "[startup.too_loose] passes (num_blocks=1)"
    assert report_violation_line(crash) == "ConfigError: MLAAttentionSpec.x is invalid"
    assert report_violation_line({}) == ""
    assert Defect("t", report_violation_line(crash), "", "r.json", []).is_crash
    assert not Defect("t", report_violation_line(inv), "", "r.json", []).is_crash


def test_reattribute_leaves_a_release_whose_run_is_under_way(tmp_path: Path) -> None:
    root = tmp_path / "rel"
    stored = _result("0.20.0", [], [Defect("t::a", "[a] x", "", "r.json", ["null_block_not_reserved"])])
    write_result(stored, root)
    before = (root / "0.20.0" / "result.json").read_text()
    rv = ReleaseVenv("0.20.0", tmp_path / "v")
    assert runs.reattribute(rv, tmp_path, root, replay_check=True) is not None
    assert (root / "0.20.0" / "result.json").read_text() == before  # no JUnit yet: nothing rewritten


def test_a_crash_is_explained_only_by_the_same_error_on_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release that crashes (0.20.0: ``ValueError: Cannot get 1 free blocks from the pool``) is
    explained by the flaw under which the reference fails with the same message (its driver
    records the pool error as evidence); another message, or the same invariant without that
    error, explains nothing."""
    from kvverify import reports
    crash = {"violation": {"name": "ValueError", "reason": "Cannot get 1 free blocks from the pool"}}
    too_loose = {"name": "startup.too_loose", "reason": "r",
                 "evidence": {"error": "PoolExhaustedError: Cannot get 1 free blocks from the pool"}}
    stalled = {"name": "startup.too_loose", "reason": "r", "evidence": {"error": None, "stall": "no_progress"}}

    def fake_replay(report, *, target, flaw_names, fix_names):
        if "swa_cap_on_allocation" in flaw_names:
            return reports.ReplayOutcome(True, "reproduced (different failure)", "", too_loose)
        return reports.ReplayOutcome(True, "reproduced (different failure)", "", stalled)
    monkeypatch.setattr(reports, "replay_report", fake_replay)
    out = explain.explain_report(crash)
    assert out["flaws"] == ["swa_cap_on_allocation"] and out["reference_reproduces"] is False
    other = {"violation": {"name": "ValueError", "reason": "Cannot get 2 free blocks from the pool"}}
    assert explain.explain_report(other)["flaws"] == []
    assert explain.same_crash("m", {"name": "KVVerifyError", "reason": "m"})
    assert not explain.same_crash("m", {"name": "startup.too_loose", "reason": "m"})


def test_same_invariant_with_another_diagnosis_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stall the release diagnoses as head-of-line and the reference with the flaw as no progress
    is the same invariant ("an admitted workload did not finish"): the flaw explains it."""
    from kvverify import reports
    hol = {"name": "admission.stall.head_of_line", "reason": "an admitted workload did not finish"}
    nop = {"name": "admission.stall.no_progress", "reason": "an admitted workload did not finish"}
    assert explain.same_invariant(hol, nop) and not explain.same_invariant(hol, {**nop, "reason": "x"})
    assert not explain.same_invariant({"name": "startup.too_loose", "reason": "r"},
                                          {"name": "startup.needlessly_strict", "reason": "r"})  # two parts only

    def fake_replay(report, *, target, flaw_names, fix_names):
        if "null_block_not_reserved" in flaw_names:
            return reports.ReplayOutcome(True, "reproduced (different failure)", "", nop)
        return reports.ReplayOutcome(False, "rejected", "")
    monkeypatch.setattr(reports, "replay_report", fake_replay)
    assert explain.explain_report({"violation": hol})["flaws"] == ["null_block_not_reserved"]


def test_publishing_one_release_keeps_the_published_ones(tmp_path: Path) -> None:
    """Issue 27: run the new releases only, render from all stored ones. A release published
    with its whole result (``"result"`` in the data) renders again from the data; one published
    before results were stored is carried: its data entry as it was, its page cells and section
    verbatim; the new release is added in version order."""
    import json

    from kvverify.releases import legacy

    outs = parse_junit(_junit(tmp_path))
    d1 = Defect("properties/test_startup.py::test_startup_check_passes_implies_servable",
                "[startup.not_servable] x", "Falsifying example: f(case=1)", "reports/releases/0.27.1/t.json",
                ["null_block_not_reserved"], replay_on_release=1, forward={"0.28.0": 1, "0.29.0": 0})
    doc = tmp_path / "docs" / "releases.md"
    doc.parent.mkdir()
    old = _result("0.27.1", outs, [d1])
    kept = _result("0.33.0", [Outcome(o.nodeid, "passed") for o in outs], [])
    page = render([old, kept], repo_root=tmp_path, doc_path=doc)
    data = summary([old, kept])
    assert data["releases"][1]["result"]["version"] == "0.33.0"
    del data["releases"][0]["result"]  # 0.27.1 was published before results were stored
    doc.write_text(page)
    doc.with_suffix(".json").write_text(json.dumps(data))
    assert [r.version for r in legacy.published(doc.with_suffix(".json"))] == ["0.33.0"]
    carried = legacy.carried(doc.with_suffix(".json"), doc, {"0.33.0", "0.18.1"})
    assert carried.versions == ["0.27.1"]
    new = _result("0.18.1", [Outcome(o.nodeid, "skipped", "Skipped: no gate") for o in outs], [])
    text = render([new, kept], repo_root=tmp_path, doc_path=doc, carried=carried)
    assert "| property | 0.18.1 | 0.27.1 | 0.33.0 |" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| `test_startup.py::test_startup_check"))
    assert row.endswith("| skip | **FAILS** | pass |")
    section = legacy.page_sections(page)["0.27.1"]
    assert section in text and "fixed between 0.28.0 and 0.29.0" in section
    assert legacy.page_rows(page)["0.27.1"] in text  # its row of the Releases table, verbatim
    assert "| null_block_not_reserved | · | test_startup_check_passes_implies_servable | · |" in text
    merged = summary([new, kept], carried)
    assert [e["version"] for e in merged["releases"]] == ["0.18.1", "0.27.1", "0.33.0"]
    assert merged["releases"][1] == data["releases"][0]  # carried as published



def test_committed_page_renders_again_from_the_committed_data() -> None:
    """docs/releases.md is a function of docs/releases.json (the stored results in it) and the
    releases it carries (:mod:`kvverify.releases.legacy`): publishing one release rewrites
    nobody else's rows."""
    from kvverify.releases import legacy

    doc, data = REPO / "docs" / "releases.md", REPO / "docs" / "releases.json"
    page = doc.read_text()
    stored = legacy.published(data)
    carried = legacy.carried(data, doc, {r.version for r in stored})
    not_run = next((ln.removeprefix("Installed but not run yet: ").rstrip(".").split(", ")
                    for ln in page.splitlines() if ln.startswith("Installed but not run yet: ")), [])
    again = render(stored, repo_root=REPO, doc_path=doc, not_run=not_run, carried=carried)
    assert again.rstrip("\n") == page.rstrip("\n")
