"""``kvverify check`` at any length: wall time and peak memory of the whole command, per L.

Each row is one fresh ``kvverify check ... --json`` process (its import included), measured
from outside: wall seconds and the child's peak resident memory (``os.wait4``'s
``ru_maxrss``). Two tables:

* **growth**: L = 10^3 ... 10^8 for a full-attention, a hybrid sliding-window, a chunked-local and
  a Mamba model, with a pool the request fits (``--num-gpu-blocks-override 10^9``) and
  ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` (so every length is planned and both runs go the whole way:
  the worst case; a refusal stops after one step);
* **catalog at 10^7**: every catalog model, the same way.

The runs advance by events (:mod:`kvverify.eventrun`): the cost follows the stretches and the
picture rows, not L. Numbers, never assertions (``tests/test_benchmarks_smoke.py`` checks only
that the rows exist).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

GROWTH_MODELS = ("llama-3.1-8b", "gemma-3-27b", "llama-4-scout-17b-16e", "falcon-mamba-7b")
LENGTHS = tuple(10**k for k in range(3, 9))
POOL = str(10**9)


def measure(model: str, length: int) -> dict[str, Any]:
    """One ``kvverify check`` process: wall s, peak RSS MB, and what it decided."""
    argv = [sys.executable, "-c", "import sys; from kvverify.cli import main; sys.exit(main(sys.argv[1:]))",
            "check", "--model", model, "--max-model-len", str(length), "--num-gpu-blocks-override", POOL, "--json"]
    env = {**os.environ, "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    row: dict[str, Any] = {"model": model, "max_model_len": length, "wall_s": round(wall, 3),
                           "peak_mb": round(usage.ru_maxrss / 1024, 1), "exit": proc.returncode}
    try:
        r = json.loads(stdout)
        row.update(headline=r["headline"], runs={run["split"]: {"steps": run["steps"], "seconds": run["seconds"],
                                                                "how": run.get("how")}
                                                 for run in r["servable_runs"]})
    except (ValueError, KeyError):
        row["error"] = stderr.decode(errors="replace")[-300:]
    return row


def run(quick: bool = False) -> dict[str, Any]:
    lengths = LENGTHS[:3] if quick else LENGTHS
    models = GROWTH_MODELS[:2] if quick else GROWTH_MODELS
    from kvverify import catalog

    growth = [measure(m, length) for m in models for length in lengths]
    catalog_rows = [] if quick else [measure(m, 10**7) for m in catalog.list_models()]
    return {"growth": growth, "catalog": catalog_rows}


def tables(data: dict[str, Any]) -> list[Any]:
    from rich.table import Table

    growth = Table(title="kvverify check: wall s / peak MB by max_model_len (a fitting pool, both runs)")
    growth.add_column("model")
    lengths = sorted({r["max_model_len"] for r in data["growth"]})
    for length in lengths:
        growth.add_column(f"L = 10^{len(str(length)) - 1}", justify="right")
    for model in dict.fromkeys(r["model"] for r in data["growth"]):
        cells = []
        for length in lengths:
            row = next(r for r in data["growth"] if r["model"] == model and r["max_model_len"] == length)
            cells.append(f"{row['wall_s']:.2f} s / {row['peak_mb']:.0f} MB" + ("" if row["exit"] == 0 else " !"))
        growth.add_row(model, *cells)
    out = [growth]
    if data["catalog"]:
        cat = Table(title="every catalog model at max_model_len 10^7 (a fitting pool, both runs)")
        for col in ("model", "exit", "wall s", "peak MB", "prompt-heavy steps", "decode-heavy steps"):
            cat.add_column(col, justify="left" if col == "model" else "right")
        for r in data["catalog"]:
            runs = r.get("runs", {})
            cat.add_row(r["model"], str(r["exit"]), f"{r['wall_s']:.2f}", f"{r['peak_mb']:.0f}",
                        f"{runs.get('prompt-heavy', {}).get('steps', 0):,}",
                        f"{runs.get('decode-heavy', {}).get('steps', 0):,}")
        out.append(cat)
    return out


def markdown(data: dict[str, Any]) -> str:
    """The tables docs/performance.md shows (``scripts/regen_docs.py``), from a committed run."""
    lengths = sorted({r["max_model_len"] for r in data["growth"]})
    head = "| model | " + " | ".join(f"L = 10^{len(str(n)) - 1}" for n in lengths) + " |"
    lines = [head, "| --- |" + " ---: |" * len(lengths)]
    for model in dict.fromkeys(r["model"] for r in data["growth"]):
        cells = []
        for n in lengths:
            r = next(r for r in data["growth"] if r["model"] == model and r["max_model_len"] == n)
            cells.append(f"{r['wall_s']:.2f} s, {r['peak_mb']:.0f} MB")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines += ["", "| model (L = 10^7) | exit | wall s | peak MB | prompt-heavy steps | decode-heavy steps |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in data["catalog"]:
        runs = r.get("runs", {})
        lines.append(f"| {r['model']} | {r['exit']} | {r['wall_s']:.2f} | {r['peak_mb']:.0f} | "
                     f"{runs.get('prompt-heavy', {}).get('steps', 0):,} | {runs.get('decode-heavy', {}).get('steps', 0):,} |")
    before = data.get("before_after")
    if before:
        lines += ["", "| llama-3.1-8b | block source | " + " | ".join(f"L = 10^{k}" for k in before["exponents"]) + " |",
                  "| --- | --- |" + " ---: |" * len(before["exponents"])]
        for row in before["rows"]:
            cells = [("—" if c is None else f"{c['wall_s']:.1f} s, {c['peak_mb']:.0f} MB") for c in row["cells"]]
            lines.append(f"| {row['tree']} | {row['source']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m benchmarks.check: measure, print, write docs/check-benchmark.json
    from pathlib import Path

    from rich.console import Console

    result = run()
    doc = Path(__file__).resolve().parents[1] / "docs" / "check-benchmark.json"
    old = json.loads(doc.read_text()) if doc.exists() else {}
    if "before_after" in old:
        result["before_after"] = old["before_after"]  # measured once against the tree before the event runs
    result["machine"] = {"nproc": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()]}
    doc.write_text(json.dumps(result, indent=1) + "\n")
    for t in tables(result):
        Console(width=160).print(t)
