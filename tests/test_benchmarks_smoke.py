"""Smoke test: ``python -m benchmarks.run --quick`` runs and writes valid JSON.

No timing assertions — these machines are shared and noisy. Only counts and ratios that a
derandomized run makes deterministic: every section ran, every flaw and lemma has a row,
every property produced examples, no strategy throws away most of its draws.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_writes_valid_json(tmp_path: Path) -> None:
    from kvverify import engines
    from kvverify.lemmas import LEMMAS

    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Time to detect" in proc.stdout
    data = json.loads(out.read_text())
    assert data["quick"] is True and not data["errors"]
    assert data["machine"]["nproc"] >= 1 and data["machine"]["python"]
    sections = data["sections"]
    assert set(sections) == {"runtime", "lemmas", "detect", "props", "check"}
    check = sections["check"]
    assert check["growth"] and all(r["exit"] == 0 and r["peak_mb"] > 0 for r in check["growth"])

    detect = sections["detect"]
    assert [r["flaw"] for r in detect["rows"]] == list(engines.flaw_catalog())  # every engine's
    for row in detect["rows"]:
        assert row["seeds"] == len(row["runs"]) >= 1
        assert 0 <= row["caught"] <= row["seeds"]
        assert row["worst_examples"] >= row["median_examples"] >= 1

    lemmas = sections["lemmas"]
    assert len(lemmas["rows"]) == len(LEMMAS)
    assert lemmas["all_ok"], [r for r in lemmas["rows"] if not r["ok"]]

    runtime = sections["runtime"]
    assert [p["num_blocks"] for p in runtime["pool"]] == [1_000, 10_000]
    for p in runtime["pool"]:
        assert p["ops"] > 0 and sum(p["counts"].values()) == p["ops"]
    for s in runtime["scheduler"] + runtime["scheduler_scaling"]:
        assert s["steps"] > 0 and s["finished"] == s["requests"] and not s["stalled"]

    props = sections["props"]
    assert props["rows"]
    for row in props["rows"]:
        assert row["valid"] >= 1, row
        assert "FailedHealthCheck" not in (row["error"] or ""), row
        # no property throws away three draws in four (an assume() or a filter that rejects
        # that much is slow long before Hypothesis's filter_too_much health check fires) ...
        assert row["invalid_fraction"] < 0.75, row
    # ... and over the whole suite most draws are used
    invalid = sum(row["invalid"] for row in props["rows"])
    assert invalid < 0.5 * sum(row["valid"] + row["invalid"] for row in props["rows"])
