"""``kvverify releases`` and the release infrastructure, without installing any release:
JUnit parsing, the matrix rendering, venv discovery, the install script's arguments, and
flaw attribution (kvverify/props/attribution.py)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kvverify import flaws
from kvverify.cli import main
from kvverify.cli import releases as R
from kvverify.errors import ConfigError
from kvverify.invariants.base import Violation
from kvverify.props import attribution

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
    outs = {o.nodeid: o for o in R.parse_junit(_junit(tmp_path))}
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
    failed = next(o for o in R.parse_junit(_junit(tmp_path)) if o.name.startswith("test_startup"))
    assert R.defect_line(failed) == "[startup.not_servable] the check passes but nothing runs (num_blocks=1)"
    line = R.counterexample_line(failed)
    assert line.startswith("Falsifying example: test_startup_check_passes_implies_servable(")
    assert "case=Case(num_blocks=1)" in line and "\n" not in line
    assert R.attributed_in_test(failed) == ["null_block_not_reserved", "override_ignored_in_check"]
    assert len(R.counterexample_line(failed, limit=40)) == 40


def _result(version: str, outcomes, defects, **kw) -> R.ReleaseResult:
    from dataclasses import asdict
    return R.ReleaseResult(version, f"/v/vllm-{version}", outcomes=[asdict(o) for o in outcomes],
                           defects=[asdict(d) for d in defects], passes=2, run_seconds=200.0,
                           install_seconds=130.0, venv_bytes=2 * 2**30, returncode=1, **kw)


def test_render_matrix_summary_defects_and_skip_reasons(tmp_path: Path) -> None:
    outs = R.parse_junit(_junit(tmp_path))
    d1 = R.Defect("properties/test_startup.py::test_startup_check_passes_implies_servable",
                  "[startup.not_servable] x", "Falsifying example: f(case=1)", "reports/releases/0.27.1/t.json",
                  ["null_block_not_reserved"], replay_on_release=1, forward={"0.28.0": 1, "0.29.0": 0})
    d2 = R.Defect("properties/test_block_sizes.py::test_strict", "[XPASS(strict)] finding F9", "", None, [],
                  found_in_pass=2)
    old = _result("0.27.1", outs, [d1, d2])
    new = _result("0.33.0", [R.Outcome(o.nodeid, "passed") for o in outs], [])
    doc = tmp_path / "docs" / "releases.md"
    text = R.render([old, new], repo_root=tmp_path, doc_path=doc)
    assert "| 0.27.1 | 2.2 min | 2.0 GiB | 3.3 min | 2 | 1 | 2 | 1 | 1 | 2 |" in text
    assert "| null_block_not_reserved | test_startup_check_passes_implies_servable | · |" in text
    assert "| no counterexample (suite / adapter) | test_strict | · |" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| `test_startup.py::test_startup_check"))
    assert row.endswith("| **FAILS** | pass |")
    assert "known finding" in text and "ERROR" in text
    assert "- 2 x vLLM 0.27.1 has no num_prefill_lookahead" in text
    assert "[t.md](../reports/releases/0.27.1/t.md)" in text and "exit 1 (reproduced)" in text
    assert "(pass 2)" in text
    assert "0.28.0: fails, 0.29.0: passes (**first passes on 0.29.0** of the installed releases)" in text
    assert "No release has been run yet." in R.render([], repo_root=tmp_path, doc_path=doc)
    assert "Installed but not run yet: 0.31.0." in R.render([old], repo_root=tmp_path, doc_path=doc,
                                                            not_run=["0.31.0"])


def _fake_venv(root: Path, name: str, version: str | None, stamp: bool = True) -> Path:
    v = root / name
    (v / "bin").mkdir(parents=True)
    (v / "bin" / "python").write_text("")
    site = v / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    if version:
        (site / f"vllm-{version}.dist-info").mkdir()
    if stamp:
        for s in R.STAMPS:
            (v / s).write_text("x")
    return v


def test_discover_venvs_sorted_stamped_and_deduplicated(tmp_path: Path) -> None:
    _fake_venv(tmp_path, "vllm-0.27.1", "0.27.1")
    _fake_venv(tmp_path, "vllm-0.9.2", "0.9.2")
    _fake_venv(tmp_path, "vllm-0.31.0", "0.31.0", stamp=False)  # being installed: not yet a release venv
    _fake_venv(tmp_path, "vllm-broken", None)  # no vLLM in it
    _fake_venv(tmp_path, "other", "0.20.0")  # not named like a release venv
    single = _fake_venv(tmp_path / "x", ".venv-vllm", "0.33.0")
    found = R.discover([tmp_path, single, tmp_path])
    assert [(r.version, r.path.name) for r in found] == [("0.9.2", "vllm-0.9.2"), ("0.27.1", "vllm-0.27.1"),
                                                         ("0.33.0", ".venv-vllm")]
    assert found[0].python == tmp_path / "vllm-0.9.2" / "bin" / "python"
    assert R.discover([tmp_path / "missing"]) == []


def test_default_sources_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(R.ENV_VENVS, os.pathsep.join(["/a", "/b/vllm-0.27.1"]))
    assert R.default_sources(tmp_path) == [Path("/a"), Path("/b/vllm-0.27.1")]
    monkeypatch.delenv(R.ENV_VENVS)
    assert R.default_sources(tmp_path / "main") == [tmp_path / "main", tmp_path / "venvs"]


def test_pytest_command_uses_ci_ignore_list(tmp_path: Path) -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert sorted(R.IGNORED) == sorted(re.findall(r"--ignore=(\S+\.py)", ci))
    cmd = R.pytest_command("/v/bin/python", junit=tmp_path / "j.xml", reports_dir=tmp_path, workers=2,
                           profile="ci", absorb=["a", "b"])
    assert cmd[:5] == ["/v/bin/python", "-m", "pytest", "properties/", "--target"]
    assert ["-n", "2"] == cmd[cmd.index("-n"):cmd.index("-n") + 2]
    assert cmd[-2:] == ["--absorb-flaws", "a,b"] and f"--junitxml={tmp_path / 'j.xml'}" in cmd
    only = R.pytest_command("p", junit=tmp_path / "j", reports_dir=tmp_path, workers=0, profile="ci",
                            only=["properties/test_x.py::t"])
    assert "properties/" not in only and "properties/test_x.py::t" in only and "no:xdist" in only


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


def test_install_script_rejects_a_release_without_lock() -> None:
    r = _install("--version", "9.9.9", "/nonexistent/venv")
    assert r.returncode == 2
    assert "no lock for vLLM 9.9.9" in r.stderr and "0.33.0" in r.stderr  # names the releases it has


def test_install_script_argument_errors() -> None:
    assert _install("--version", "abc").returncode == 2
    assert "needs a value" in _install("--version").stderr
    assert _install("--bogus").returncode == 2
    helped = _install("--help")
    assert helped.returncode == 0 and "--version X.Y.Z" in helped.stdout


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

    class Fake:
        name = "fake"

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
    assert R.reports_by_nodeid(d, tmp_path) == {
        "properties/test_plan.py::test_a": ["reports/releases/0.27.1/test_a-1.json"]}


def test_ambiguous_failures_take_the_flaw_another_failure_needs_alone() -> None:
    both = R.Defect("t::a", "v", "", None, ["null_block_not_reserved", "override_ignored_in_check"])
    alone = R.Defect("t::b", "v", "", None, ["null_block_not_reserved"])
    other = R.Defect("t::c", "v", "", None, ["autofit_first_group_only", "swa_admission_uncapped"])
    none = R.Defect("t::d", "[x.y] v", "", "r.json", [])
    crash = R.Defect("t::e", "TypeError: f() takes 1 positional argument", "", "r.json", [])
    assert crash.label == "crash: TypeError (adapter until shown otherwise)"
    assert R.resolved_labels([both, alone, other, none]) == [
        "null_block_not_reserved", "null_block_not_reserved",
        "autofit_first_group_only | swa_admission_uncapped", "unexplained"]
    assert R.resolved_labels([both]) == ["null_block_not_reserved | override_ignored_in_check"]
