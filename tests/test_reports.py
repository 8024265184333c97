"""Counterexample reports: content, exact replay, idempotence, concurrent writers, pytest hook.

A property is made to fail by switching a bug-zoo flaw on (``null_block_not_reserved``,
#35541) and running ``test_startup_check_passes_implies_servable`` under small,
derandomized settings; the seed case (32 blocks, L = 512, B = 16) is its explicit example,
so the failure is immediate and the same on every run.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, settings

from kvverify import flaws, reports
from kvverify.hypothesis_hooks import rebuild
from kvverify.cli import main
from kvverify.reference.config import VllmConfig
from kvverify.props import startup
from kvverify.reference.specs import FullAttentionSpec, SlidingWindowSpec
from kvverify.strategies import StartupCase
from kvverify.targets import get_target

FLAW = "null_block_not_reserved"
SEED_CASE = StartupCase(
    VllmConfig(block_size=16, max_model_len=512, num_gpu_blocks_override=32),
    ({"model.layers.0.self_attn": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)},),
    "override", None, 32, 32)


def _run_failing(tmp_path: Path, *, explicit: bool = True, found_by: str = "test") -> Path:
    """Run the property (a fresh wrapper: the shared function is never mutated) with the flaw on."""
    prop = startup.test_startup_check_passes_implies_servable
    body = inner = prop.hypothesis.inner_test
    if explicit:  # on a fresh body: the property's own @example list is never shared or grown
        body = example(case=SEED_CASE, outputs=1)(functools.wraps(inner, updated=())(
            lambda *a, **k: inner(*a, **k)))
    test = rebuild(prop, inner=body, settings=settings(
        max_examples=300, derandomize=True, database=None, deadline=None, print_blob=False,
        phases=[Phase.explicit, Phase.generate, Phase.shrink] if explicit else [Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck)))
    with reports.instrument([test]) as sink, flaws.enabled(FLAW):
        with pytest.raises(AssertionError) as info:
            test(target=get_target("reference"))
    capture = sink.for_exception(info.value)
    assert capture is not None and capture.flaws == (FLAW,)
    return reports.report_failure(capture, found_by=found_by, directory=tmp_path)


@pytest.fixture
def report_path(tmp_path: Path) -> Path:
    return _run_failing(tmp_path)


def test_report_content(report_path: Path) -> None:
    data = json.loads(report_path.read_text())
    assert report_path.name == f"{data['id']}.json"
    assert data["id"].startswith("test_startup_check_passes_implies_servable-")
    assert data["kind"] == "property" and data["target"] == "reference" and data["flaws"] == [FLAW]
    v = data["violation"]
    assert v["name"] == "startup.too_loose"
    assert v["reason"] == ("startup check passed but a max_model_len request does not complete on the "
                           "runtime pool")
    ev = v["evidence"]
    assert (ev["num_blocks"], ev["usable_blocks"], ev["blocks_needed"]) == (32, 31, 32)
    assert ev["stall"] == "head_of_line" and ev["running"] == 0 and ev["waiting"] == 1
    assert data["resembles"][0]["flaw"] == FLAW and "#35541" in data["resembles"][0]["upstream"]
    # the configuration as tables: every VllmConfig field, every layer spec
    rows = {r["field"]: r for r in data["configuration"]["vllm_config"]}
    assert set(rows) == set(VllmConfig.__dataclass_fields__)
    assert rows["num_gpu_blocks_override"]["value"] == 32 and rows["num_gpu_blocks_override"]["changed"]
    (layer,) = data["configuration"]["workers"][0]
    assert layer["type"] == "FullAttentionSpec" and layer["block_size"] == 16 and layer["page_size_bytes"] == 65536
    # the operation trace of the workload that stalled
    trace = data["trace"]
    assert trace["requests"][0]["prompt_tokens"] == 511 and trace["outcome"]["stall_reason"] == "head_of_line"
    assert trace["rows"] == [[1, 0, 1, 31, 0]]
    # relative paths only: outside the working directory, the bare name (run from the report's directory)
    assert data["replay"]["command"] == f"kvverify replay {report_path.name}"
    assert data["replay"]["run_from"] == "the report's directory"
    assert data["replay"]["pytest"].startswith("python -m pytest 'properties/test_startup.py::")
    md = report_path.with_suffix(".md").read_text()
    for text in (v["reason"], "kvverify replay", "## Evidence", "## Configuration", "## Layer specs",
                 "## Operation trace", "#35541", "| **num_gpu_blocks_override** | 32 |"):
        assert text in md, text


def test_replay_reproduces_and_passes_without_the_flaw(report_path: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(report_path)]) == 1  # reproduced: still failing with the flaw on
    assert "reproduced" in capsys.readouterr().out
    data = json.loads(report_path.read_text())
    data["flaws"] = []
    unflawed = tmp_path / "unflawed.json"
    unflawed.write_text(json.dumps(data))
    assert main(["replay", str(unflawed)]) == 0  # the faithful reference serves it
    assert "not reproduced" in capsys.readouterr().out
    assert main(["replay", "--without-flaws", str(report_path)]) == 0
    outcome = reports.replay_path(report_path)
    assert outcome.reproduced and outcome.violation["name"] == "startup.too_loose"


def test_shrunk_failure_is_small_and_replays(tmp_path: Path) -> None:
    path = _run_failing(tmp_path, explicit=False)
    data = json.loads(path.read_text())
    ev = data["violation"]["evidence"]
    assert ev["blocks_needed"] == ev["num_blocks"] == ev["usable_blocks"] + 1 <= 2
    assert main(["replay", str(path)]) == 1


def test_same_failure_same_file_same_content(tmp_path: Path) -> None:
    first = _run_failing(tmp_path)
    files = (first, first.with_suffix(".md"), first.with_suffix(".svg"))  # the .svg: the run's timeline
    before = [f.read_bytes() for f in files]
    second = _run_failing(tmp_path)
    assert second == first
    assert [f.read_bytes() for f in files] == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f.name for f in files)


def test_example_round_trips(report_path: Path) -> None:
    data = json.loads(report_path.read_text())
    case = reports.decode(data["example"]["case"])
    assert case == SEED_CASE and hash(case.kv_cache_specs[0]["model.layers.0.self_attn"])
    swa = SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=2, sliding_window=7)
    value = {"t": (1, (2, 3)), "s": frozenset({swa}), "f": 0.5, "spec": swa}
    assert reports.decode(json.loads(json.dumps(reports.encode(value)))) == value


def test_lemma_counterexample_report_replays(tmp_path: Path) -> None:
    from kvverify.cli.lemmas import run_lemmas

    (result,) = run_lemmas(FLAW, ["null_block_override"])
    assert result.result == "counterexample" and not result.ok
    path = reports.report_lemma(result, directory=tmp_path)
    data = json.loads(path.read_text())
    assert data["kind"] == "lemma" and data["z3_model"]["values"] and data["flaws"] == [FLAW]
    assert "## Z3 model" in path.with_suffix(".md").read_text()
    assert main(["replay", str(path)]) == 1
    assert main(["replay", "--without-flaws", str(path)]) == 0


# --- concurrency: two workers writing the same report, and different ones -----------------


def _writer(directory: str, report: dict, rounds: int) -> None:
    for _ in range(rounds):
        reports.write_report(report, directory)


def _reader(directory: str, name: str, rounds: int, errors) -> None:  # noqa: ANN001 - a Manager list
    path = Path(directory) / name
    for _ in range(rounds):
        try:
            json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except json.JSONDecodeError as e:  # a torn file: the writers are not atomic
            errors.append(str(e))


def test_two_workers_never_corrupt_reports(report_path: Path, tmp_path: Path) -> None:
    shared = json.loads(report_path.read_text())
    other = dict(shared, id="test_other_property-0123456789", property="test_other_property")
    third = dict(shared, id="test_third_property-9876543210", property="test_third_property")
    out = tmp_path / "concurrent"
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    with ctx.Manager() as manager:
        errors = manager.list()
        procs = [ctx.Process(target=_writer, args=(str(out), shared, 50)),
                 ctx.Process(target=_writer, args=(str(out), shared, 50)),
                 ctx.Process(target=_writer, args=(str(out), other, 50)),
                 ctx.Process(target=_writer, args=(str(out), third, 50)),
                 ctx.Process(target=_reader, args=(str(out), f"{shared['id']}.json", 400, errors))]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        assert list(errors) == []
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"{r['id']}.{ext}" for r in (shared, other, third) for ext in ("json", "md", "svg"))
    for r in (shared, other, third):
        assert json.loads((out / f"{r['id']}.json").read_text()) == r


# --- the index --------------------------------------------------------------------------


def test_report_index(report_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--dir", str(tmp_path)]) == 0
    md = (tmp_path / "index.md").read_text()
    page = (tmp_path / "index.html").read_text()
    assert report_path.stem in md and "startup.too_loose" in md
    assert page.startswith("<!doctype html>") and "<style>" in page
    assert "startup.too_loose" in page and f"kvverify replay {reports.display_path(report_path)}" in page
    for external in ("<script", "<link", "src=", 'href="http'):
        assert external not in page  # self-contained
    assert "1 counterexample report" in capsys.readouterr().out


# --- the pytest hook ----------------------------------------------------------------------

DEMO = textwrap.dedent('''
    import pytest
    from hypothesis import Phase, given, settings, strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

    from kvverify.invariants.base import Violation, assert_no_violations
    from kvverify.targets import get_target


    @pytest.fixture(scope="session")
    def target():
        return get_target("reference")


    FAST = settings(database=None, derandomize=True, max_examples=50, deadline=None, stateful_step_count=10,
                    phases=[Phase.explicit, Phase.generate, Phase.shrink])


    @FAST
    @given(n=st.integers(0, 1000))
    def test_demo_small(target, n):
        assert_no_violations([Violation("demo.too_big", "n exceeds ten", {"n": n})] if n > 10 else [])


    @pytest.mark.xfail(strict=True, raises=AssertionError, reason="finding DEMO: a known finding")
    @FAST
    @given(n=st.integers(0, 1000))
    def test_demo_known(target, n):
        assert n < 5, "known"


    def test_plain_failure():
        assert False, "not a property: no report"


    class Counter(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.n = 0

        @rule(k=st.integers(1, 3))
        def add(self, k):
            self.n += k

        @invariant()
        def small(self):
            assert_no_violations([Violation("demo.counter", "the counter passed 4", {"n": self.n})]
                                 if self.n > 4 else [])


    TestCounter = Counter.TestCase
    TestCounter.settings = settings(FAST, print_blob=True)
''')


def _pytest(tmp_path: Path, reports_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KVVERIFY_REPORTS_DIR=str(reports_dir))
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "kvverify.pytest_reports",
                           "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path / "test_demo.py"), *extra],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_pytest_hook_writes_reports_but_not_for_xfail(tmp_path: Path) -> None:
    (tmp_path / "test_demo.py").write_text(DEMO)
    out = tmp_path / "reports"
    run = _pytest(tmp_path, out)
    assert run.returncode == 1, run.stdout + run.stderr
    machine_report, written = sorted(out.glob("*.json"))
    data = json.loads(written.read_text())
    assert written.name.startswith("test_demo_small-") and data["violation"]["name"] == "demo.too_big"
    assert data["example"] == {"n": 11} and data["run"]["found_by"] == "pytest"
    assert "kvverify counterexample reports" in run.stdout and written.name in run.stdout
    assert main(["replay", str(written)]) == 1  # resolved from the test file, replayed exactly
    machine = json.loads(machine_report.read_text())
    assert machine_report.name.startswith("Counter-") and machine["kind"] == "stateful"
    assert machine["violation"]["name"] == "demo.counter" and machine["example"]["reproduce_failure"]
    assert machine["trace"]["program"][0] == "state = Counter()"
    assert any(step.startswith("state.add(k=") for step in machine["trace"]["program"])
    assert main(["replay", str(machine_report)]) == 1  # the @reproduce_failure blob, replayed

    again = _pytest(tmp_path, out, "--kvverify-report-xfail", "-k", "known")
    assert again.returncode == 0  # the xfail is still an expected failure
    names = sorted(p.name.split("-")[0] for p in out.glob("*.json"))
    assert names == ["Counter", "test_demo_known", "test_demo_small"]
    known = json.loads(next(out.glob("test_demo_known-*.json")).read_text())
    assert "finding DEMO" in known["known_finding"]
