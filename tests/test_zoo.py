"""The bug zoo: every flaw has every fact, is caught from a cold start, and README says so.

In the spirit of Hypothesis's own ``tests/quality``: each flaw's catching property runs
derandomized with no example database; it must fail within the flaw's budget
(:class:`kvverify.flaws.Budget`) and shrink to a case at the boundary. The run is one fresh
``kvverify zoo --json`` process, the same context as ``kvverify zoo --record``, which wrote
``docs/zoo.json`` and README's bug-zoo table: the table must be that record, and the fresh
run must catch every flaw with the recorded property and shrunk counterexample (examples and
seconds move between machines and contexts, so they are recorded, not compared). The
unflawed reference passes the same properties (``pytest properties/``).
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvverify import flaws, zoo_record
from kvverify.errors import KVVerifyError
from kvverify.hypothesis_hooks import strategies_of
from kvverify.lemmas import catching
from kvverify.zoo import CATCHERS

ROOT = Path(__file__).resolve().parents[1]
RERECORD = "if the change is intended, run `kvverify zoo --record` and commit docs/zoo.json and README.md"


# ------------------------------------------------------------ the catalogue: every fact, resolvable

@functools.cache
def _switch_sites() -> dict[str, list[str]]:
    """flaw name -> the kvverify modules calling ``flaws.is_on(name)`` (ast)."""
    sites: dict[str, list[str]] = {}
    for path in sorted((ROOT / "kvverify").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "is_on"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "flaws"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                sites.setdefault(str(node.args[0].value), []).append(path.relative_to(ROOT).as_posix())
    return sites


@pytest.mark.parametrize("name", list(flaws.CATALOG))
def test_every_flaw_has_every_fact(name: str) -> None:
    flaw = flaws.CATALOG[name]
    assert name.isidentifier() and flaw.upstream and flaw.symptom and flaw.defect, name
    assert _switch_sites().get(name) == [flaw.switched_in], \
        f"{name}: flaws.is_on({name!r}) must be called in {flaw.switched_in} and nowhere else"
    assert flaw.caught_by.startswith("kvverify.props."), flaw.caught_by
    prop = flaw.catching_property()
    assert strategies_of(prop) is not None, f"{flaw.caught_by} is not a kvverify.hypothesis_hooks.given property"
    assert CATCHERS[name] is prop and prop.__name__ == flaw.property_name
    assert flaw.budget.examples >= 1 and flaw.budget.shrunk_len >= 2 and flaw.budget.shrunk_blocks >= 1, flaw.budget
    assert flaw.regression.startswith("kvverify.zoo_cases.") and callable(flaw.regression_case()), flaw.regression
    lemmas = [lemma.name for lemma in catching(name)]
    assert bool(lemmas) != bool(flaw.no_lemma), (
        f"{name}: either a lemma lists it in `catches` ({lemmas}) or `no_lemma` says why none does, not both")


def test_zoo_runs_the_catalogue() -> None:
    assert list(CATCHERS) == list(flaws.CATALOG)
    assert not set(_switch_sites()) - set(flaws.CATALOG), "a switched flaw is missing from the catalogue"


@pytest.mark.parametrize("prop", sorted(set(CATCHERS.values()), key=lambda f: f.__name__),
                         ids=lambda f: f.__name__)
def test_catching_properties_pass_unflawed(prop: Any) -> None:
    """The same properties pass on the faithful reference (quick run)."""
    from hypothesis import HealthCheck, settings

    from kvverify.hypothesis_hooks import rebuild
    from kvverify.targets import get_target

    rebuild(prop, settings=settings(max_examples=60, derandomize=True, database=None, deadline=None,
                                    suppress_health_check=list(HealthCheck)))(target=get_target("reference"))


# ------------------------------------------------------------ README's table == the recorded run

def readme_problems(readme: str, data: dict[str, Any]) -> list[str]:
    """Why README's bug-zoo table is not the record ``data`` of the catalogue's flaws."""
    out = []
    section = zoo_record.readme_section(readme)
    if section is None:
        return ["README.md has no generated bug-zoo table (markers missing)"]
    if section != zoo_record.render(data):
        out.append("README's bug-zoo table is not render(docs/zoo.json): it was edited by hand or not regenerated")
    rows = data["results"]
    if [r["flaw"] for r in rows] != list(flaws.CATALOG):
        out.append(f"docs/zoo.json records {[r['flaw'] for r in rows]}, the catalogue is {list(flaws.CATALOG)}")
    for r in rows:
        f = flaws.CATALOG.get(r["flaw"])
        if f is not None and (r["upstream"], r["property"]) != (f.upstream, f.property_name):
            out.append(f"{r['flaw']}: recorded {r['upstream']!r} / {r['property']!r}, the catalogue says "
                       f"{f.upstream!r} / {f.property_name!r}")
        if not r["caught"] or r["error"]:
            out.append(f"{r['flaw']}: the recorded run did not catch it cleanly ({r['error'] or 'escaped'})")
    return out


def _shrunk(counterexample: str) -> dict[str, str]:
    return dict(p.split("=", 1) for part in counterexample.split("; ") for p in part.split(" ") if "=" in p)


def run_problems(data: dict[str, Any], fresh: list[dict[str, Any]]) -> list[str]:
    """Why a fresh zoo run does not reproduce the record, or misses a flaw's budget."""
    out = []
    recorded = {r["flaw"]: r for r in data["results"]}
    if [r["flaw"] for r in fresh] != list(recorded):
        return [f"the fresh run ran {[r['flaw'] for r in fresh]}, the record holds {list(recorded)}"]
    for r in fresh:
        name, budget = r["flaw"], flaws.CATALOG[r["flaw"]].budget
        if not r["caught"]:
            out.append(f"{name} escaped {r['property']} after {r['examples']} examples")
            continue
        if r["error"]:
            out.append(f"{name}: the property crashed instead of reporting: {r['error']}")
        if r["examples"] > budget.examples:
            out.append(f"{name}: caught after {r['examples']} examples, its budget is {budget.examples}")
        shrunk = _shrunk(r["counterexample"])
        if int(shrunk.get("L", 0)) > budget.shrunk_len or int(shrunk.get("N", 0)) > budget.shrunk_blocks:
            out.append(f"{name}: shrunk only to {r['counterexample']} (budget L <= {budget.shrunk_len}, "
                       f"N <= {budget.shrunk_blocks})")
        rec = recorded[name]
        if (r["property"], r["counterexample"]) != (rec["property"], rec["counterexample"]):
            out.append(f"{name}: caught by {r['property']} with {r['counterexample']!r}; docs/zoo.json records "
                       f"{rec['property']} with {rec['counterexample']!r}")
    return out


def test_readme_zoo_table_is_the_recorded_run() -> None:
    data = zoo_record.load(ROOT / "docs" / "zoo.json")
    problems = readme_problems((ROOT / "README.md").read_text(), data)
    assert not problems, "\n".join(problems) + f"\n({RERECORD})"


def test_a_fresh_zoo_run_catches_every_flaw_as_recorded() -> None:
    """One ``kvverify zoo --json`` process (the recorder's context): every flaw caught within its
    budget, by the recorded property, shrunk to the recorded counterexample."""
    proc = subprocess.run([sys.executable, "-c", "from kvverify.cli import main; raise SystemExit(main(['zoo', "
                           "'--json']))"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1) and proc.stdout.strip(), proc.stderr[-3000:]
    fresh = json.loads(proc.stdout)
    for r in fresh:
        print(f"{r['flaw']}: caught by {r['property']} after {r['examples']} examples, {r['seconds']:.2f}s; "
              f"shrunk: {r['counterexample']}")
    problems = run_problems(zoo_record.load(ROOT / "docs" / "zoo.json"), fresh)
    assert not problems, "\n".join(problems) + f"\n({RERECORD})"


def test_the_checks_catch_a_hand_edit_a_moved_example_and_an_escape() -> None:
    """Planted: each of the two checks above fails on what it guards against."""
    data = zoo_record.load(ROOT / "docs" / "zoo.json")
    readme = (ROOT / "README.md").read_text()
    assert readme_problems(readme, data) == []
    first = data["results"][0]
    edited = readme.replace(f"| {first['examples']} |", f"| {first['examples'] + 1} |", 1)
    assert edited != readme and any("by hand" in p for p in readme_problems(edited, data))
    dropped = {**data, "results": data["results"][1:]}
    assert any("the catalogue is" in p for p in readme_problems(zoo_record.with_section(
        readme, zoo_record.render(dropped)), dropped))
    fresh = [dict(r) for r in data["results"]]
    assert run_problems(data, fresh) == []
    fresh[0]["counterexample"] = fresh[0]["counterexample"].replace("L=", "L=1", 1)
    fresh[1] = {**fresh[1], "caught": False}
    fresh[2] = {**fresh[2], "examples": flaws.CATALOG[fresh[2]["flaw"]].budget.examples + 1}
    problems = run_problems(data, fresh)
    assert len(problems) == 3 and "docs/zoo.json records" in problems[0] and "escaped" in problems[1] \
        and "budget" in problems[2], problems


# ------------------------------------------------------------ the recorder

def test_record_writes_the_json_and_the_readme_table(tmp_path: Path) -> None:
    data = zoo_record.load(ROOT / "docs" / "zoo.json")
    (tmp_path / "README.md").write_text(f"intro\n{zoo_record.README_BEGIN}\nstale\n{zoo_record.README_END}\nrest\n")
    path, readme = zoo_record.write(data, tmp_path)
    assert zoo_record.load(path) == data
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("\nrest\n") and "stale" not in text
    assert zoo_record.readme_section(text) == zoo_record.render(data)
    (tmp_path / "README.md").write_text("no markers")
    with pytest.raises(KVVerifyError, match="markers"):
        zoo_record.write(data, tmp_path)
    (tmp_path / "bad.json").write_text('{"schema": "other"}')
    with pytest.raises(KVVerifyError, match="not a recorded zoo run"):
        zoo_record.load(tmp_path / "bad.json")


def test_render_escapes_cells_and_shows_an_escape() -> None:
    row = {"flaw": "f", "upstream": "#1 | #2", "caught": False, "property": "p", "examples": 7, "seconds": 1.234,
           "counterexample": "", "error": None}
    line = zoo_record.render({"results": [row]}).splitlines()[2]
    assert line == "| `f` | #1 \\| #2 | `p` | ESCAPED after 7 | 1.23 |  |"


def test_record_and_markdown_run_every_flaw() -> None:
    from kvverify.cli import main
    assert main(["zoo", "--record", "null_block_not_reserved"]) == 2
