"""The bug zoo: every flaw of every engine has every fact, is caught from a cold start, and
README says so.

In the spirit of Hypothesis's own ``tests/quality``: each flaw's catching property runs
derandomized with no example database; it must fail within the flaw's budget
(:class:`kvverify.flaws.Budget`) and shrink to a case at the boundary. The run is one fresh
``kvverify zoo --json`` process, the same context as ``kvverify zoo --record``, which wrote
``docs/zoo.json`` and README's bug-zoo table: the table must be that record, and the fresh
run must catch every flaw with the recorded property and shrunk counterexample (examples and
seconds move between machines and contexts, so they are recorded, not compared). The
unflawed reference passes the same properties (``pytest properties/``). Every engine's
catalogue (:data:`kvverify.engines.ENGINES`: vLLM's, SGLang's) is held to the same facts.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvverify import engines, zoo_record
from kvverify.errors import KVVerifyError
from kvverify.hypothesis_hooks import strategies_of
from kvverify.lemmas import catching
from kvverify.zoo import CATCHERS

ROOT = Path(__file__).resolve().parents[1]
RERECORD = "if the change is intended, run `kvverify zoo --record` and commit docs/zoo.json and README.md"
#: every engine's flaws, name -> Flaw (vLLM's first)
CATALOG = engines.flaw_catalog()


# ------------------------------------------------------------ the catalogue: every fact, resolvable

@functools.cache
def _switch_sites() -> dict[str, list[str]]:
    """flaw name -> the kvverify modules calling ``flaws.is_on(name)`` (ast; ``flaws`` is the
    engine's flaws module, :mod:`kvverify.flaws` or :mod:`kvverify.sglang.flaws`)."""
    sites: dict[str, list[str]] = {}
    for path in sorted((ROOT / "kvverify").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "is_on"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "flaws"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                sites.setdefault(str(node.args[0].value), []).append(path.relative_to(ROOT).as_posix())
    return sites


@pytest.mark.parametrize("name", list(CATALOG))
def test_every_flaw_has_every_fact(name: str) -> None:
    flaw, engine = CATALOG[name], engines.engine_of_flaw(name)
    assert name.isidentifier() and flaw.upstream and flaw.symptom and flaw.defect, name
    assert _switch_sites().get(name) == [flaw.switched_in], \
        f"{name}: flaws.is_on({name!r}) must be called in {flaw.switched_in} and nowhere else"
    assert flaw.caught_by.startswith(engine.properties), (flaw.caught_by, engine.properties)
    prop = flaw.catching_property()
    assert strategies_of(prop) is not None, f"{flaw.caught_by} is not a kvverify.hypothesis_hooks.given property"
    assert CATCHERS[name] is prop and prop.__name__ == flaw.property_name
    assert engines.engine_of_property(prop.__module__) is engine, prop.__module__
    assert flaw.budget.examples >= 1 and flaw.budget.shrunk_len >= 2 and flaw.budget.shrunk_blocks >= 1, flaw.budget
    assert flaw.regression == f"{engine.zoo_cases}.{name}" and callable(flaw.regression_case()), flaw.regression
    lemmas = [lemma.name for lemma in catching(name)]
    assert bool(lemmas) != bool(flaw.no_lemma), (
        f"{name}: either a lemma lists it in `catches` ({lemmas}) or `no_lemma` says why none does, not both")
    if engine.name != "vllm":  # the recorded corpus is vLLM 0.33.0's (properties/test_recorded_differential.py)
        assert flaw.not_in_recorded, f"{name}: say why the recorded vLLM corpus cannot see it"


def test_zoo_runs_the_catalogue() -> None:
    assert list(CATCHERS) == list(CATALOG)
    assert not set(_switch_sites()) - set(CATALOG), "a switched flaw is missing from the catalogue"


def test_engines_route_each_name_to_one_catalogue() -> None:
    """One table: every flaw and fix name belongs to exactly one engine, which switches it."""
    seen: dict[str, str] = {}
    for engine in engines.ENGINES.values():
        for name in [*engine.flaws.CATALOG, *engine.fixes.CATALOG]:
            assert name not in seen, f"{name} is in both {seen[name]}'s and {engine.name}'s catalogue"
            seen[name] = engine.name
    for name in CATALOG:
        engine = engines.engine_of_flaw(name)
        with engines.enabled(flaws=[name]):
            assert engine.flaws.active() == {name} and engines.active_flaws() == {name}
    with pytest.raises(KVVerifyError, match="unknown flaw; known: "):
        engines.engine_of_flaw("no_such_flaw")


@pytest.mark.parametrize("prop", sorted(set(CATCHERS.values()), key=lambda f: f.__name__),
                         ids=lambda f: f.__name__)
def test_catching_properties_pass_unflawed(prop: Any) -> None:
    """The same properties pass on the faithful reference of their engine (quick run)."""
    from hypothesis import HealthCheck, settings

    from kvverify.hypothesis_hooks import rebuild
    from kvverify.targets import get_engine_target, reference_of

    target = get_engine_target(reference_of(engines.engine_of_property(prop.__module__).name))
    rebuild(prop, settings=settings(max_examples=60, derandomize=True, database=None, deadline=None,
                                    suppress_health_check=list(HealthCheck)))(target=target)


# ------------------------------------------------------------ README's table == the recorded run

def readme_problems(readme: str, data: dict[str, Any]) -> list[str]:
    """Why README's bug-zoo tables are not the record ``data`` of the catalogues' flaws."""
    out = []
    for engine in engines.ENGINES.values():
        section = zoo_record.readme_section(readme, engine.name)
        if section is None:
            out.append(f"README.md has no generated {engine.title} bug-zoo table (markers missing)")
        elif section != zoo_record.render(data, engine.name):
            out.append(f"README's {engine.title} bug-zoo table is not render(docs/zoo.json): it was edited by hand "
                       "or not regenerated")
    rows = data["results"]
    if [r["flaw"] for r in rows] != list(CATALOG):
        out.append(f"docs/zoo.json records {[r['flaw'] for r in rows]}, the catalogue is {list(CATALOG)}")
    for r in rows:
        f = CATALOG.get(r["flaw"])
        if f is not None and r.get("engine") != engines.engine_of_flaw(f.name).name:
            out.append(f"{r['flaw']}: recorded under engine {r.get('engine')!r}, the catalogue's is "
                       f"{engines.engine_of_flaw(f.name).name!r}")
        if f is not None and (r["upstream"], r["property"]) != (f.upstream, f.property_name):
            out.append(f"{r['flaw']}: recorded {r['upstream']!r} / {r['property']!r}, the catalogue says "
                       f"{f.upstream!r} / {f.property_name!r}")
        if not r["caught"] or r["error"]:
            out.append(f"{r['flaw']}: the recorded run did not catch it cleanly ({r['error'] or 'escaped'})")
    return out


def _shrunk(flaw: str, counterexample: str) -> dict[str, int]:
    """The largest value of each budgeted field in a one-line counterexample (``L=2``,
    ``C=8``, ``seq=2`` ...), keyed by the budget bound it falls under (``len``, ``blocks``)."""
    bounds = engines.engine_of_flaw(flaw).shrunk_bounds
    out: dict[str, int] = {}
    for key, value in re.findall(r"\b(\w+)=(-?\d+)\b", counterexample):
        if key in bounds:
            out[bounds[key]] = max(out.get(bounds[key], 0), abs(int(value)))
    return out


def run_problems(data: dict[str, Any], fresh: list[dict[str, Any]]) -> list[str]:
    """Why a fresh zoo run does not reproduce the record, or misses a flaw's budget."""
    out = []
    recorded = {r["flaw"]: r for r in data["results"]}
    if [r["flaw"] for r in fresh] != list(recorded):
        return [f"the fresh run ran {[r['flaw'] for r in fresh]}, the record holds {list(recorded)}"]
    for r in fresh:
        name, budget = r["flaw"], CATALOG[r["flaw"]].budget
        if not r["caught"]:
            out.append(f"{name} escaped {r['property']} after {r['examples']} examples")
            continue
        if r["error"]:
            out.append(f"{name}: the property crashed instead of reporting: {r['error']}")
        if r["examples"] > budget.examples:
            out.append(f"{name}: caught after {r['examples']} examples, its budget is {budget.examples}")
        shrunk = _shrunk(name, r["counterexample"])
        if not shrunk:
            out.append(f"{name}: the shrunk counterexample {r['counterexample']!r} shows none of the fields its "
                       f"budget bounds ({sorted(engines.engine_of_flaw(name).shrunk_bounds)})")
        elif shrunk.get("len", 0) > budget.shrunk_len or shrunk.get("blocks", 0) > budget.shrunk_blocks:
            out.append(f"{name}: shrunk only to {r['counterexample']} (budget: lengths <= {budget.shrunk_len}, "
                       f"blocks <= {budget.shrunk_blocks})")
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
    """Planted: each of the two checks above fails on what it guards against, for each engine."""
    data = zoo_record.load(ROOT / "docs" / "zoo.json")
    readme = (ROOT / "README.md").read_text()
    assert readme_problems(readme, data) == []
    for engine in engines.ENGINES:
        first = next(r for r in data["results"] if r["engine"] == engine)
        section = zoo_record.readme_section(readme, engine) or ""
        edited = readme.replace(section, section.replace(f"| {first['examples']} |",
                                                         f"| {first['examples'] + 1} |", 1))
        assert edited != readme and any("by hand" in p for p in readme_problems(edited, data)), engine
    dropped = {**data, "results": data["results"][1:]}
    assert any("the catalogue is" in p for p in readme_problems(zoo_record.with_tables(readme, dropped), dropped))
    fresh = [dict(r) for r in data["results"]]
    assert run_problems(data, fresh) == []
    sglang = [i for i, r in enumerate(fresh) if r["engine"] == "sglang"]
    fresh[0]["counterexample"] = fresh[0]["counterexample"].replace("L=", "L=1", 1)
    fresh[1] = {**fresh[1], "caught": False}
    fresh[2] = {**fresh[2], "examples": CATALOG[fresh[2]["flaw"]].budget.examples + 1}
    fresh[sglang[0]]["counterexample"] = fresh[sglang[0]]["counterexample"].replace("C=", "C=99", 1)
    fresh[sglang[1]]["counterexample"] = "(nothing shown)"
    problems = run_problems(data, fresh)
    assert len(problems) == 7 and "docs/zoo.json records" in problems[0] and "escaped" in problems[1] \
        and "budget" in problems[2], problems
    # the SGLang pool beyond its budget, and a counterexample that shows nothing to bound (each
    # also differs from the record)
    assert "shrunk only to" in problems[3] and "docs/zoo.json records" in problems[4], problems
    assert "shows none of the fields" in problems[5] and "docs/zoo.json records" in problems[6], problems


# ------------------------------------------------------------ the recorder

def test_record_writes_the_json_and_the_readme_tables(tmp_path: Path) -> None:
    data = zoo_record.load(ROOT / "docs" / "zoo.json")
    (vb, ve), (sb, se) = zoo_record.markers("vllm"), zoo_record.markers("sglang")
    (tmp_path / "README.md").write_text(f"intro\n{vb}\nSTALE-ROW\n{ve}\nmiddle\n{sb}\nOLD-ROW\n{se}\nrest\n")
    path, readme = zoo_record.write(data, tmp_path)
    assert zoo_record.load(path) == data
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("\nrest\n") and "\nmiddle\n" in text
    assert "STALE-ROW" not in text and "OLD-ROW" not in text  # (a flaw may be named "..._hold_...")
    for engine in ("vllm", "sglang"):
        rows = zoo_record.render(data, engine).splitlines()[2:]
        assert zoo_record.readme_section(text, engine) == zoo_record.render(data, engine) and rows
        assert all(engines.engine_of_flaw(line.split("`")[1]).name == engine for line in rows)
    (tmp_path / "README.md").write_text("no markers")
    with pytest.raises(KVVerifyError, match="markers"):
        zoo_record.write(data, tmp_path)
    (tmp_path / "README.md").write_text(f"{vb}\n{ve}\n")  # SGLang's markers missing
    with pytest.raises(KVVerifyError, match="SGLang"):
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
    assert main(["zoo", "--markdown", "--engine", "sglang"]) == 2
