"""``kvverify mutate`` (kvverify/mutate/, kvverify/cli/mutate.py) on a stand-in ``vllm`` package.

No vLLM needed: a tiny package named ``vllm`` with a ``vllm/v1/core/block_pool.py`` and a tiny
test file stand in for the engine and the suites; they exercise the mutant overlay, the runs
(CPU limit, no leftover processes), the JUnit comparison (kill kinds), the report and the
command's error paths. One test runs a real mutant of the installed vLLM (skipped without it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvverify.cli import main
from kvverify.errors import ConfigError, KVVerifyError
from kvverify.mutate import engine, modules, outcomes, report
from kvverify.mutate import run as runner
from kvverify.mutate.generate import Mutant, Selection, mutants
from kvverify.targets import overlay

POOL = '''"""stand-in block pool"""


def get_num_free_blocks(num_blocks, held):
    if held > num_blocks:
        raise ValueError("more held than exist")
    return num_blocks - held - 1


class BlockPool:
    def usable(self, num_blocks):
        return num_blocks - 1
'''

SUITE = '''from vllm.v1.core.block_pool import BlockPool, get_num_free_blocks


def test_free_blocks():
    assert get_num_free_blocks(10, 3) == 6


def test_refuses_overdraw():
    try:
        get_num_free_blocks(1, 5)
    except ValueError:
        return
    raise AssertionError("no refusal")


def test_usable():
    assert BlockPool().usable(4) == 3
'''


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A stand-in ``vllm`` (on PYTHONPATH for subprocesses), its suite, a cache dir."""
    site = tmp_path / "site"
    core = site / "vllm" / "v1" / "core"
    core.mkdir(parents=True)
    for d in (site / "vllm", site / "vllm" / "v1", core):
        (d / "__init__.py").write_text("")
    (core / "block_pool.py").write_text(POOL)
    (core / "other.py").write_text("X = 1\n")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_fake_pool.py").write_text(SUITE)
    monkeypatch.setenv("PYTHONPATH", str(site))
    return {"site": site, "source": site / "vllm", "suite": suite, "cache": tmp_path / "cache"}


def _hand_mutants() -> list[Mutant]:
    """Mutants written by hand (no mutmut needed): two the stand-in suite kills, one it does not."""
    rel = "vllm/v1/core/block_pool.py"
    out = []
    for i, (old, new) in enumerate((("- held - 1", "- held + 1"), ("if held > num_blocks", "if held < num_blocks"),
                                    ("if held > num_blocks", "if held >= num_blocks")), 1):
        text = POOL.replace(old, new)
        out.append(Mutant(f"pool:get_num_free_blocks:{i}", "pool", rel, "get_num_free_blocks", 5, text,
                          f"--- a/{rel}\n+++ b/{rel}\n@@ -5 +5 @@\n-{old}\n+{new}\n"))
    return out


def _pool_mutants(fake: dict[str, Path], selection: Selection = Selection()) -> tuple[int, list[Mutant]]:
    pytest.importorskip("mutmut")
    return mutants(modules.MODULES["pool"], modules.locate(modules.MODULES["pool"], fake["source"]), selection)


def test_mutants_come_from_mutmuts_operators_with_stable_names(fake: dict[str, Path]) -> None:
    total, every = _pool_mutants(fake)
    assert total == len(every) > 5
    names = [m.name for m in every]
    assert len(set(names)) == len(names)
    assert "pool:get_num_free_blocks:1" in names and any(n.startswith("pool:BlockPool.usable:") for n in names)
    for m in every:
        assert m.source != POOL and m.diff.startswith("--- a/vllm/v1/core/block_pool.py")
        compile(m.source, m.path, "exec")  # every mutant is a valid file
    assert any("-    return num_blocks - held - 1" in m.diff and "+    return num_blocks - held + 1" in m.diff
               for m in every)
    _, again = _pool_mutants(fake, Selection(3, 7))
    _, same = _pool_mutants(fake, Selection(3, 7))
    assert [m.name for m in again] == [m.name for m in same] and len(again) == 3
    _, one = _pool_mutants(fake, Selection(names=("pool:get_num_free_blocks:1",)))
    assert [m.name for m in one] == ["pool:get_num_free_blocks:1"]
    with pytest.raises(KVVerifyError, match="unknown mutant"):
        _pool_mutants(fake, Selection(names=("pool:nope:1",)))


def test_scheduler_scope_is_its_kv_functions_and_lines() -> None:
    sched = modules.MODULES["scheduler"]
    assert sched.accepts("_free_blocks", "anything")
    assert not sched.accepts("update_from_output", "self.kv_cache_manager.free(request)")
    assert sched.accepts("schedule", "new_blocks = self.kv_cache_manager.allocate_slots(")
    assert not sched.accepts("schedule", "structured_output_request_ids = {}")
    with pytest.raises(ConfigError, match="module"):
        modules.select(["nope"])


def test_a_module_is_named_by_its_name_or_the_file_a_contributor_touched() -> None:
    pool = modules.MODULES["pool"]
    for name in ("pool", "vllm/v1/core/block_pool.py", "block_pool.py", "./vllm/v1/core/block_pool.py",
                 "/src/vllm/vllm/v1/core/block_pool.py"):
        assert modules.select([name]) == [pool], name
    assert modules.select(["sched/scheduler.py", "scheduler"]) == [modules.MODULES["scheduler"]]
    with pytest.raises(ConfigError, match=r"known: planner \(vllm/v1/core/kv_cache_utils.py\)"):
        modules.select(["vllm/v1/core/sched/output.py"])


def test_mutant_overlay_replaces_one_file_and_leaves_the_install_alone(fake: dict[str, Path]) -> None:
    text = POOL.replace("- 1\n", "+ 1\n")
    ov = overlay.build_mutant("vllm/v1/core/block_pool.py", text, source=fake["source"], cache=fake["cache"])
    core = ov.path / "vllm" / "v1" / "core"
    assert (core / "block_pool.py").read_text() == text and not (core / "block_pool.py").is_symlink()
    assert (core / "other.py").is_symlink()
    assert (fake["source"] / "v1" / "core" / "block_pool.py").read_text() == POOL
    again = overlay.build_mutant("vllm/v1/core/block_pool.py", text, source=fake["source"], cache=fake["cache"])
    assert again.path == ov.path  # keyed by content
    other = overlay.build_mutant("vllm/v1/core/block_pool.py", POOL + "#\n", source=fake["source"],
                                 cache=fake["cache"])
    assert other.path != ov.path
    with pytest.raises(KVVerifyError, match="existing vllm/"):
        overlay.build_mutant("vllm/v1/core/missing.py", text, source=fake["source"], cache=fake["cache"])


def _suite(fake: dict[str, Path]) -> runner.Suite:
    return runner.Suite("guarantee", (str(fake["suite"]),), target=False)


def test_a_mutant_run_counts_kills_by_kind_and_shows_survivors(fake: dict[str, Path], tmp_path: Path) -> None:
    picked = _hand_mutants()
    every = picked
    root = Path(__file__).resolve().parents[1]
    bases = engine.baselines(sys.executable, [_suite(fake)], root, engine.Limits(min_cpu=30))
    assert bases[0].usable == 3 and bases[0].left_out == []
    results = engine.run(sys.executable, picked, bases, root=root, source=fake["source"],
                         limits=engine.Limits(min_cpu=30), workers=2)
    assert [r.mutant.name for r in results] == [m.name for m in picked]
    kinds = {r.mutant.name: report.kill_kind(r) for r in results}
    # 1: an assertion of the (stand-in) guarantee suite; 2: the refusal fires on a valid input, a
    # ValueError (a crash); 3: `>=` differs only at held == num_blocks, which the suite never feeds
    assert kinds == {"pool:get_num_free_blocks:1": "property", "pool:get_num_free_blocks:2": "crash",
                     "pool:get_num_free_blocks:3": None}
    data = report.summarize(results, {"pool": len(every)}, {})
    row = data["modules"]["pool"]
    assert row["run"] == 3 and row["killed"] == 2 and row["survived"] == 1
    assert row["killed"] == sum(row[k] for k in report.KINDS)
    md = report.render_markdown(data, command="kvverify mutate --target vllm --module pool", bases=bases)
    assert "| `pool` |" in md and "kvverify mutate --target vllm --module pool" in md
    for m in data["mutants"]:
        if m["status"] == "survived":
            assert f"### `{m['name']}`" in md and m["diff"].rstrip() in md
    assert not list(fake["cache"].glob("mutant-*")), "mutant overlays are removed after the run"


def test_a_listed_equivalent_counts_apart_and_goes_stale_with_its_code(tmp_path: Path) -> None:
    every = _hand_mutants()
    m = every[0]
    survived = engine.MutantResult(m, {"guarantee": outcomes.Verdict(outcomes.SURVIVED)})
    listed = tmp_path / "eq.txt"
    listed.write_text(f"# comment\n{m.name} {report.digest(m)} [domain] no input reaches it\n")
    eq = report.load_equivalents(listed)
    data = report.summarize([survived], {"pool": 1}, eq)
    assert data["modules"]["pool"]["equivalent"] == 1 and data["mutants"][0]["status"] == "equivalent"
    listed.write_text(f"{m.name} {'0' * 12} [domain] stale\n")
    data = report.summarize([survived], {"pool": 1}, report.load_equivalents(listed))
    assert data["modules"]["pool"]["survived"] == 1 and data["modules"]["pool"]["stale_equivalent"] == 1
    listed.write_text("not a line\n")
    with pytest.raises(KVVerifyError, match="NAME DIGEST"):
        report.load_equivalents(listed)
    # out of scope: listed apart with its reason, not an unexplained survivor, still not killed
    listed.write_text(f"{m.name} {report.digest(m)} [scope] metrics only\n")
    data = report.summarize([survived], {"pool": 1}, {}, report.load_equivalents(listed))
    row = data["modules"]["pool"]
    assert (row["out_of_scope"], row["survived"], row["equivalent"]) == (1, 0, 0)
    assert data["mutants"][0]["equivalent_reason"] == "metrics only"
    md = report.render_markdown(data, command="kvverify mutate", bases=[])
    assert "## Out of the guarantees' scope (1" in md and "metrics only" in md and "## Survivors (0)" in md
    assert "| 0 % (0-79) |" in md  # the kill rate still counts it: 0 of 1
    listed.write_text(f"{m.name} {'0' * 12} [scope] stale\n")
    data = report.summarize([survived], {"pool": 1}, {}, report.load_equivalents(listed))
    assert data["modules"]["pool"]["survived"] == 1 and data["modules"]["pool"]["stale_equivalent"] == 1


def test_kill_kind_order_property_then_differential_then_crash_then_timeout() -> None:
    every = _hand_mutants()
    V = outcomes.Verdict

    def kind(**v: str) -> str | None:
        return report.kill_kind(engine.MutantResult(every[0], {k.replace("_", "-"): V(x) for k, x in v.items()}))

    assert kind(guarantee="assertion", differential="crash") == "property"
    assert kind(guarantee="crash", differential="assertion") == "differential"
    assert kind(guarantee="crash", differential="survived") == "crash"
    # a finding's strict xfail passing under the mutant is a behaviour change, not a guarantee verdict
    assert kind(guarantee="xpassed", differential="survived") == "differential"
    assert kind(guarantee="timeout", differential="survived") == "timeout"
    assert kind(guarantee="survived", differential="survived", vllm_tests="assertion") is None


def test_wilson_interval() -> None:
    lo, hi = report.wilson(8, 10)
    assert 49 < lo < 50 and 94 < hi < 95
    assert report.wilson(0, 0) == (0.0, 100.0)
    assert report.wilson(10, 10)[1] == pytest.approx(100.0)


def _junit(tmp_path: Path, body: str) -> dict[str, outcomes.Outcome]:
    test = tmp_path / "test_j.py"
    test.write_text(body)
    junit = tmp_path / "j.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                    "-o", "junit_family=xunit1", f"--junitxml={junit}", str(test)],
                   cwd=tmp_path, capture_output=True, check=False)
    return outcomes.parse_junit(junit)


def test_outcomes_tell_assertions_from_crashes_and_skips(tmp_path: Path) -> None:
    got = _junit(tmp_path, "import pytest\n"
                           "def test_a(): assert 1 == 2\n"
                           "def test_b(): raise ValueError('boom')\n"
                           "@pytest.mark.xfail(strict=True)\ndef test_c(): pass\n"
                           "@pytest.mark.xfail(strict=True)\ndef test_d(): assert 0\n"
                           "def test_e(): pytest.skip('no')\n"
                           "def test_f(): pass\n")
    status = {k.split("::")[1]: v.status for k, v in got.items()}
    assert status == {"test_a": "assertion", "test_b": "crash", "test_c": "xpassed", "test_d": "xfailed",
                      "test_e": "skipped", "test_f": "passed"}
    base = {t: outcomes.Outcome(s) for t, s in (("a", "passed"), ("b", "passed"), ("c", "xfailed"))}
    O = outcomes.Outcome
    assert outcomes.compare(base, dict(base), timed_out=False).kind == "survived"
    assert outcomes.compare(base, {**base, "b": O("crash", "TypeError")}, timed_out=False).kind == "crash"
    assert outcomes.compare(base, {**base, "b": O("crash"), "a": O("assertion")}, timed_out=False).kind == "assertion"
    assert outcomes.compare(base, {**base, "c": O("xpassed", "[XPASS(strict)]")}, timed_out=False).kind == "xpassed"
    assert outcomes.compare(base, {**base, "c": O("xpassed"), "a": O("assertion")}, timed_out=False).kind == "assertion"
    assert outcomes.compare(base, {**base, "a": O("skipped")}, timed_out=False).kind == "crash"
    assert outcomes.compare(base, {}, timed_out=False).kind == "crash"  # nothing ran: the module broke
    assert outcomes.compare(base, dict(base), timed_out=True).kind == "timeout"
    assert outcomes.compare(base, {"a": O("assertion")}, timed_out=False, stopped_early=True).changed == (
        ("a", "assertion: "),)
    assert outcomes.compare(base, {"x.py": O("crash", "ImportError")}, timed_out=False,
                            stopped_early=True).kind == "crash"  # a collection error
    assert outcomes.parse_junit(tmp_path / "missing.xml") == {}


def test_an_assert_inside_the_engine_is_a_crash_not_a_verdict(tmp_path: Path) -> None:
    """An upstream ``assert`` failing under a mutant is the engine crashing (kind c); an assertion
    raised by the test's own code (a property's verdict) stays an assertion (kind a)."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    (tmp_path / "vllm" / "eng.py").write_text("def step():\n    assert 1 == 2\n")
    got = _junit(tmp_path, "from vllm.eng import step\n"
                           "def test_engine(): step()\n"
                           "def test_verdict():\n    raise AssertionError('[release.pool_not_whole] free=1')\n")
    status = {k.split("::")[1]: v.status for k, v in got.items()}
    assert status == {"test_engine": "crash", "test_verdict": "assertion"}
    assert outcomes.raised_in_engine("kvverify/targets/vllm/scheduler.py:159: in step\n"
                                     "/x/ovc/mutant-1/vllm/v1/core/kv_cache_manager.py:782: AssertionError")
    assert not outcomes.raised_in_engine("/x/vllm/v1/core/kv_cache_manager.py:782: in f\n"
                                         "kvverify/invariants/base.py:40: AssertionError")


def test_a_looping_run_hits_its_cpu_limit_and_leaves_no_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    suite_dir = tmp_path / "loop"
    suite_dir.mkdir()
    (suite_dir / "test_loop.py").write_text(
        "import subprocess, sys\n"
        "def test_loop():\n"
        f"    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"    open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "    while True:\n        pass\n")
    started = time.monotonic()
    r = runner.run_suite(sys.executable, runner.Suite("guarantee", (str(suite_dir),), target=False),
                         root=tmp_path, overlay=None, cpu_limit=2, wall_limit=60)
    assert r.timed_out and time.monotonic() - started < 60
    child = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the run's child {child} is still alive")


def test_bad_input_is_a_clear_error_exit_2(fake: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["mutate", "--target", "sglang"]) == 2
    assert "engine mutation supports: vllm" in capsys.readouterr().err
    assert main(["mutate", "--target", "vllm", "--module", "nope"]) == 2
    assert "unknown engine module" in capsys.readouterr().err
    assert main(["mutate", "--target", "vllm", "--sample", "0"]) == 2
    # the stand-in vllm has a pool but no planner: a vLLM without the module
    assert main(["mutate", "--target", "vllm", "--module", "planner", "--python", sys.executable]) == 2
    assert "has no vllm/v1/core/kv_cache_utils.py" in capsys.readouterr().err
    monkeypatch.setenv("PYTHONPATH", str(fake["site"].parent / "empty"))
    assert main(["mutate", "--target", "vllm", "--python", sys.executable]) == 2
    assert "needs vLLM installed" in capsys.readouterr().err
    monkeypatch.setenv("PYTHONPATH", str(fake["site"]))
    pytest.importorskip("mutmut")
    assert main(["mutate", "--target", "vllm", "--module", "pool", "--python", sys.executable,
                 "--vllm-tests", str(fake["site"] / "missing"), "--list"]) == 2
    assert "--vllm-tests: no such file" in capsys.readouterr().err


def test_list_prints_the_selected_mutants(fake: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mutmut")
    assert main(["mutate", "--target", "vllm", "--module", "pool", "--python", sys.executable,
                 "--sample", "2", "--seed", "3", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(ln.startswith("pool:") and "vllm/v1/core/block_pool.py:" in ln for ln in lines)


VLLM_PYTHON = os.environ.get("KVVERIFY_VLLM_PYTHON", "")


@pytest.mark.skipif(not VLLM_PYTHON or not Path(VLLM_PYTHON).exists(),
                    reason="set KVVERIFY_VLLM_PYTHON to a vLLM venv's python (two real suite runs, minutes)")
def test_a_real_vllm_mutant_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ret = None`` in the real BlockPool.get_new_blocks: the guarantee suite crashes on it."""
    pytest.importorskip("mutmut")
    out = tmp_path / "r.md"
    rc = main(["mutate", "--target", "vllm", "--python", VLLM_PYTHON, "--module", "pool", "--no-differential",
               "--mutant", "pool:BlockPool.get_new_blocks:3", "--json", "--output", str(out)])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["mutants"][0]["kind"] in ("crash", "property")
    assert "| `pool` |" in out.read_text()


def test_results_lines_round_trip_and_resume(fake: dict[str, Path], tmp_path: Path) -> None:
    every = _hand_mutants()
    r = engine.MutantResult(every[0], {"guarantee": outcomes.Verdict("crash", (("t::x", "crash: TypeError"),))})
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(report.record(r)) + "\n" + '{"torn": ')
    back = report.load_results(path)
    assert list(back) == [every[0].name]
    got = back[every[0].name]
    assert got.verdicts == r.verdicts and got.mutant.diff == every[0].diff and report.kill_kind(got) == "crash"
    assert report.load_results(tmp_path / "none.jsonl") == {}
    pytest.importorskip("mutmut")  # --report-only still selects the mutants by generating them
    every = _pool_mutants(fake)[1]
    path.write_text(json.dumps(report.record(engine.MutantResult(every[0], r.verdicts))) + "\n")
    out = tmp_path / "r.md"
    assert main(["mutate", "--target", "vllm", "--module", "pool", "--python", sys.executable, "--report-only",
                 "--results", str(path), "--mutant", every[0].name, "--output", str(out)]) == 0  # killed
    assert "| `pool` |" in out.read_text() and "| 1 | 1 | 0 | 0 |" in out.read_text()


def test_stop_ends_a_run_in_progress_and_its_processes(tmp_path: Path) -> None:
    import threading

    suite_dir = tmp_path / "slow"
    suite_dir.mkdir()
    (suite_dir / "test_slow.py").write_text("import time\ndef test_slow():\n    time.sleep(600)\n")
    timer = threading.Timer(1.0, runner.STOP.set)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KVVerifyError, match="interrupted"):
            runner.run_suite(sys.executable, runner.Suite("guarantee", (str(suite_dir),), target=False),
                             root=tmp_path, overlay=None, cpu_limit=60, wall_limit=600)
    finally:
        timer.cancel()
        runner.STOP.clear()
    assert time.monotonic() - started < 60


def test_a_test_failing_unmutated_is_deselected_so_it_cannot_stop_a_mutants_run(tmp_path: Path) -> None:
    """The baseline's left-out tests are deselected from a mutant's runs: with ``-x`` a left-out
    test failing first would end the run before the tests after it, and the mutant would count as
    survived although a later test kills it (what happened with F13's strict xfail passing under
    the ``engine-mutation`` profile)."""

    suite_dir = tmp_path / "props"
    suite_dir.mkdir()
    flag = tmp_path / "mutated"
    (suite_dir / "test_a.py").write_text("import pytest\n"
                                         "@pytest.mark.xfail(strict=True)\ndef test_fails_unmutated():\n    pass\n")
    (suite_dir / "test_b.py").write_text(
        "import pathlib, pytest\n"
        "class TestK:\n"
        f"    @pytest.mark.parametrize('x', [1, 2])\n"
        f"    def test_killer(self, x):\n        assert not pathlib.Path({str(flag)!r}).exists()\n")
    suite = runner.Suite("guarantee", ("props",), target=False)
    [base] = engine.baselines(sys.executable, [suite], tmp_path, engine.Limits())
    assert base.left_out == ["props.test_a::test_fails_unmutated"]
    assert base.deselect == ["props/test_a.py::test_fails_unmutated"]
    assert base.nodeids["props.test_b.TestK::test_killer[2]"] == "props/test_b.py::TestK::test_killer[2]"
    flag.write_text("a mutant")
    stopped = runner.run_suite(sys.executable, suite, root=tmp_path, overlay=None, cpu_limit=60, wall_limit=120,
                               first_failure=True)
    assert outcomes.compare(base.outcomes, stopped.outcomes, timed_out=False, stopped_early=True).kind == "survived"
    judged = runner.run_suite(sys.executable, suite, root=tmp_path, overlay=None, cpu_limit=60, wall_limit=120,
                              first_failure=True, deselect=base.deselect)
    verdict = outcomes.compare(base.outcomes, judged.outcomes, timed_out=False, stopped_early=True)
    assert verdict.kind == "assertion" and verdict.changed[0][0].startswith("props.test_b.TestK::test_killer")


def test_every_differential_file_runs_as_the_differential_not_as_guarantees() -> None:
    """A reference-vs-engine comparison counts as kill kind (b), never as a guarantee property's
    verdict: each ``properties/test_*differential*.py`` is in the differential suite or is
    reference-only, and the guarantee suite leaves them all out (the connector differential was
    once counted as guarantees)."""
    root = Path(__file__).resolve().parents[1]
    files = {f"properties/{p.name}" for p in (root / "properties").glob("test_*differential*.py")}
    assert files and files <= set(runner.DIFFERENTIAL) | set(runner._NOT_VLLM), files
    ignored = {a.removeprefix("--ignore=") for a in runner.guarantee_suite().args if a.startswith("--ignore=")}
    assert files <= ignored
    assert set(runner.differential_suite().args) == set(runner.DIFFERENTIAL)
