"""The coverage table from Hypothesis' observability output (kvverify/nightly/coverage.py):
synthetic observations folded and rendered, shards combined, and a real fuzz run's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kvverify.nightly import coverage

ROOT = Path(__file__).resolve().parents[1]


def _obs(prop: str, status: str, **features: str) -> str:
    return json.dumps({"type": "test_case", "property": prop, "status": status, "features": features}) + "\n"


def test_observations_fold_into_the_table(tmp_path: Path) -> None:
    f = tmp_path / "2026-01-01_testcases.jsonl"
    f.write_text(
        _obs("test_a", "passed", **{"boundary: usable == needed": "", "kinds=['full_attention', 'mamba']": "",
                                    "target:distance": "3"})
        + _obs("test_a", "failed", **{"violation admission.stall.no_progress": "", "off boundary": ""})
        + _obs("test_a", "gave_up", **{"Retried draw from sampled_from([...]) to satisfy filter": ""})
        + _obs("test_b", "passed", **{"explained by known finding F2": "", "kinds": "['mla']"})
        + json.dumps({"type": "info", "property": "test_a"}) + "\n"
        + '{"type": "test_case", "prop'  # a line cut short when the run was killed
    )
    acc = coverage.Accumulator(label="reference 1/2", target="reference")
    acc.add_files(coverage.observation_files(tmp_path), truncate=True)
    assert f.read_text() == "", "the observations were not emptied"
    doc = acc.to_json()
    assert doc["unreadable_lines"] == 1 and doc["shards"] == ["reference 1/2"]
    rows = {r["property"]: r for r in coverage.rows(doc)}
    a, b = rows["test_a"], rows["test_b"]
    assert (a["test cases"], a["failed"], a["invalid"], a["target"]) == (3, 1, 1, "reference")
    assert (a["boundary hits"], a["violations seen"], a["stalls seen"]) == (1, 1, 1)
    assert a["spec kinds drawn"] == "full_attention, mamba" and "Retried draw" not in a["top events"]
    assert "target:" not in a["top events"] and b["explained by a known finding"] == 1

    other = coverage.Accumulator(label="vllm 1/1", target="vllm")
    other.add({"type": "test_case", "property": "test_a", "status": "passed", "features": {}})
    both = coverage.combine([doc, json.loads(json.dumps(other.to_json()))])
    table = coverage.markdown(both, title="Tonight")
    assert table.startswith("### Tonight") and "2 shard(s): reference 1/2, vllm 1/1" in table
    assert "| test_a | reference | 3 |" in table and "| test_a | vllm | 1 |" in table
    assert "could not be read" in table
    assert "No observations" in coverage.markdown(coverage.combine([]))


def test_a_fuzz_run_writes_its_coverage(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPOTHESIS_", "KVVERIFY_"))}
    env.update(HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY="1", HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER="1",
               HYPOTHESIS_STORAGE_DIRECTORY=str(tmp_path / "hyp"), KVVERIFY_DB=str(tmp_path / "db"))
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from kvverify.cli import main; sys.exit(main())", "fuzz",
         "--profile", "nightly", "--seconds", "3", "-k", "test_startup_check_passes_implies_servable",
         "--no-progress", "--json", "--reports-dir", str(tmp_path / "reports"),
         "--coverage-json", str(tmp_path / "coverage.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = coverage.load(tmp_path / "coverage.json")
    row = next(r for r in coverage.rows(doc) if r["property"] == "test_startup_check_passes_implies_servable")
    assert row["test cases"] > 0 and row["boundary hits"] > 0, row
    leftover = sum(p.stat().st_size for p in coverage.observation_files(tmp_path / "hyp" / "observed"))
    assert leftover == 0, "the observations piled up on disk"
    md = subprocess.run([sys.executable, "-m", "kvverify.nightly", "coverage", "--combine",
                         str(tmp_path / "coverage.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert md.returncode == 0 and "| test_startup_check_passes_implies_servable | reference |" in md.stdout
