"""Regression mode, ``kvverify diff --base`` (issue 27, item 3), on fakes.

The comparison is pure (:func:`kvverify.regression.compare.compare` / ``confirm``); the
command is run end to end with two fake "venvs" whose ``python`` answers the three things
``kvverify diff`` asks of a side: its vLLM version, the suite (a JUnit file and a
counterexample report, as pytest with kvverify's plugin writes them) and a replay batch.
The real thing (two vLLM venvs, a few minutes) is measured in docs/contributors.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from kvverify.regression import compare as cmp
from kvverify.regression.run import SideRun
from kvverify.regression.sides import Side, resolve
from kvverify.releases.defects import Defect
from kvverify.releases.junit import Outcome

ROOT = Path(__file__).resolve().parents[1]
T = "properties/test_startup.py::test_startup_check_passes_implies_servable"


def _run(label: str, statuses: dict[str, str], defects: list[Defect] = (), message: str = "") -> SideRun:
    side = Side(label, Path("/x/bin/python"), "venv", "/x")
    return SideRun(side, "0.33.0", 0, 1.0,
                   outcomes={n: Outcome(n, s, message if s == "failed" else "") for n, s in statuses.items()},
                   defects=list(defects))


def test_compare_reports_only_what_changed() -> None:
    base = _run("base", {T: "passed", "p::same_fail": "failed", "p::fixed": "failed", "p::gained": "skipped",
                         "p::ok": "passed", "p::finding": "xfailed"},
                [Defect("p::fixed", "[x] y", "", "b.json", [])])
    head = _run("head", {T: "failed", "p::same_fail": "failed", "p::fixed": "passed", "p::gained": "failed",
                         "p::ok": "passed", "p::finding": "failed"},
                [Defect(T, "[startup.not_servable] z", "B=16 L=2", "h.json", ["null_block_not_reserved"])])
    head.outcomes["p::finding"] = Outcome("p::finding", "failed", "[XPASS(strict)] F1")
    got = {c.nodeid: c.kind for c in cmp.compare(base, head)}
    assert got == {T: "new_failure", "p::fixed": "new_pass", "p::gained": "new_failure", "p::finding": "finding_gone"}
    (new,) = [c for c in cmp.compare(base, head) if c.nodeid == T]
    assert new.failures[0]["flaws"] == ["null_block_not_reserved"] and new.failures[0]["report"] == "h.json"


def test_confirm_replays_each_change_on_the_other_side() -> None:
    """A head failure whose counterexample fails on the base too is not new (the base's run did
    not reach it); a new pass whose base counterexample still fails on the head is not fixed."""
    base = _run("base", {T: "passed", "p::b": "passed", "p::fixed": "failed"},
                [Defect("p::fixed", "[x] y", "", "fixed.json", [])])
    head = _run("head", {T: "failed", "p::b": "failed", "p::fixed": "passed"},
                [Defect(T, "[a] b", "", "new.json", []), Defect("p::b", "[a] b", "", "old.json", [])])
    changes = cmp.compare(base, head)
    asked: list[tuple[str, list[str]]] = []

    def replay(side: Side, reports: list[str]) -> dict:
        asked.append((side.label, list(reports)))
        return {"new.json": (0, "passes"), "old.json": (1, "reproduced"), "fixed.json": (1, "reproduced")}
    cmp.confirm(changes, base.side, head.side, replay)
    kinds = {c.nodeid: c.kind for c in changes}
    assert kinds == {T: "new_failure", "p::b": "also_on_base", "p::fixed": "still_failing"}
    assert asked == [("base", ["new.json", "old.json"]), ("head", ["fixed.json"])]
    assert next(c for c in changes if c.nodeid == T).replays == {"new.json": "exit 0 (passes)"}


def test_sides_name_a_release_a_venv_or_a_source_tree(tmp_path: Path) -> None:
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    assert resolve(str(venv), field_name="base").kind == "venv"
    tree = tmp_path / "checkout"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("")
    src = resolve(str(tree / "vllm"), field_name="base")
    assert src.kind == "source" and src.env["PYTHONPATH"].split(":")[0] == str(tree)
    for bad in (str(tmp_path), "9.9.9", "no/such/path"):
        try:
            resolve(bad, field_name="base", sources=[tmp_path])
        except Exception as e:  # noqa: BLE001
            assert "base=" in str(e), e
        else:
            raise AssertionError(f"{bad} accepted")


_FAKE_PYTHON = '''#!{python}
"""A fake vLLM venv's python: the suite (JUnit + a report), a replay batch, the version."""
import json, os, sys
FAIL = {fail!r}
REPLAY_EXIT = {replay_exit}
args = sys.argv[1:]
if args[:1] == ["-c"]:
    print("0.33.0" if not FAIL else "0.33.1.dev1+gfake")
elif "--replay-batch" in args:
    for r in args[args.index("--replay-batch") + 1:]:
        print("KVVERIFY-REPLAY " + json.dumps({{"report": r, "exit": REPLAY_EXIT, "status": "passes"}}))
else:
    junit = next(a.split("=", 1)[1] for a in args if a.startswith("--junitxml="))
    reports = args[args.index("--kvverify-reports-dir") + 1]
    case = '<testcase classname="properties.test_startup" name="test_startup_check_passes_implies_servable">'
    if FAIL:
        case += '<failure message="[startup.not_servable] a started engine cannot serve">x</failure>'
        report = {{"schema": "kvverify.report/1", "property": "test_startup_check_passes_implies_servable",
                   "run": {{"nodeid": "{nodeid}"}},
                   "violation": {{"name": "startup.not_servable", "reason": "a started engine cannot serve",
                                  "evidence": {{"usable": 0}}}}}}
        open(os.path.join(reports, "r.json"), "w").write(json.dumps(report))
    case += '</testcase><testcase classname="properties.test_plan" name="test_plan_fits"></testcase>'
    open(junit, "w").write('<testsuites><testsuite>' + case + '</testsuite></testsuites>')
    sys.exit(1 if FAIL else 0)
'''


def _fake_venv(path: Path, *, fail: bool, replay_exit: int = 0) -> Path:
    (path / "bin").mkdir(parents=True)
    py = path / "bin" / "python"
    py.write_text(textwrap.dedent(_FAKE_PYTHON).format(python=sys.executable, fail=fail, replay_exit=replay_exit,
                                                       nodeid=T))
    py.chmod(0o755)
    return path


def test_the_command_reports_a_new_failure_and_exits_1(tmp_path: Path) -> None:
    base, head = _fake_venv(tmp_path / "base", fail=False), _fake_venv(tmp_path / "head", fail=True)
    from kvverify.cli import main
    rc = main(["diff", "--base", str(base), "--head", str(head), "--reports-root", str(tmp_path / "r")])
    assert rc == 1
    # the JSON face: clean JSON on stdout, progress on stderr
    done = subprocess.run([sys.executable, "-c", "from kvverify.cli import main; raise SystemExit(main())", "diff",
                           "--base", str(base), "--head", str(head), "--reports-root", str(tmp_path / "r"), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    data = json.loads(done.stdout)
    assert data["new_failures"] == 1 and data["head"]["vllm"] == "0.33.1.dev1+gfake"
    (change,) = data["changes"]
    assert change["kind"] == "new_failure" and change["test"] == T
    assert change["failures"][0]["violation"].startswith("[startup.not_servable] a started engine cannot serve")
    assert list(change["replays_on_other_side"].values()) == ["exit 0 (passes)"]
    assert "[diff] base" in done.stderr


def test_no_change_exits_0_and_a_broken_side_exits_2(tmp_path: Path) -> None:
    from kvverify.cli import main
    a, b = _fake_venv(tmp_path / "a", fail=False), _fake_venv(tmp_path / "b", fail=False)
    assert main(["diff", "--base", str(a), "--head", str(b), "--reports-root", str(tmp_path / "r")]) == 0
    broken = tmp_path / "broken"
    (broken / "bin").mkdir(parents=True)
    (broken / "bin" / "python").write_text(f"#!{sys.executable}\nimport sys\nprint('ERROR: --target vllm: vLLM "
                                           "0.34.0: unknown drift of the KV-cache API: missing x')\nsys.exit(4)\n")
    (broken / "bin" / "python").chmod(0o755)
    assert main(["diff", "--base", str(a), "--head", str(broken), "--reports-root", str(tmp_path / "r")]) == 2
