"""Time to detect each bug-zoo flaw from a cold start — the headline number.

For each flaw of every engine (:data:`kvverify.engines.ENGINES`: vLLM's, then SGLang's, each
on its engine's reference), in a fresh Python process (``python -m benchmarks.detect FLAW``),
``kvverify.zoo.run_flaw(flaw, seed=s, shrink=False)`` for ``s`` in ``range(10)``: the
flaw's catching property, no example database, up to 1,000 examples, shrinking off (we
time the *finding*, not the minimising). A :class:`~benchmarks.probe.Probe` counts the
property-body calls up to the first *genuine* failure (an ``assume`` rejection is not one)
and the seconds to it. Reported: caught/seeds, median and worst examples and seconds.
Target: every flaw in a median under 2 s and under 1,000 examples.

One process per flaw, which first imports every kvverify and benchmarks module (the pytest
plugin does the same for kvverify), because Hypothesis mixes constants mined from the source of every *local* module
loaded so far into generation: in a shared process the counts would depend on what ran
before. They are deterministic for a given source tree; an edit to any kvverify module may
move them. The import time is reported apart (``import_s``), not in the seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from benchmarks.probe import Probe, preload_modules

ROOT = Path(__file__).resolve().parent.parent

TARGET_SECONDS = 2.0
TARGET_EXAMPLES = 1000


def detect_one(flaw: str, seed: int, max_examples: int) -> dict:
    from kvverify.zoo import CATCHERS, run_flaw

    with Probe(CATCHERS[flaw]) as probe:
        result = run_flaw(flaw, seed=seed, shrink=False, max_examples=max_examples)
    caught = probe.first_failure_at is not None
    return {
        "seed": seed, "caught": caught,
        "examples": probe.first_failure_at if caught else probe.calls,
        "seconds": round(probe.first_failure_seconds if caught else probe.elapsed, 4),
        "cpu_seconds": round(probe.first_failure_cpu if caught else probe.elapsed_cpu, 4),
        "total_seconds": round(probe.elapsed, 4),
        "draws": probe.generated, "invalid": probe.invalid,
        "zoo_reported_examples": result.examples, "zoo_caught": result.caught,
        "violation": (result.violation or probe.first_failure or "")[:160],
    }


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def detect_flaw(flaw: str, seeds: range, max_examples: int) -> dict:
    from kvverify import engines
    from kvverify.zoo import CATCHERS

    runs = [detect_one(flaw, s, max_examples) for s in seeds]
    caught = [r for r in runs if r["caught"]]
    # A missed seed counts at its full budget: the median is over all seeds, not only hits.
    ex = [r["examples"] for r in runs]
    sec = [r["seconds"] for r in runs]
    cpu = [r["cpu_seconds"] for r in runs]
    med_ex, med_s = _median(ex), _median(sec)
    return {
        "flaw": flaw, "engine": engines.engine_of_flaw(flaw).name, "upstream": engines.flaw(flaw).upstream,
        "property": CATCHERS[flaw].__name__,
        "seeds": len(runs), "caught": len(caught),
        "median_examples": med_ex, "worst_examples": max(ex), "median_seconds": round(med_s, 4),
        "worst_seconds": round(max(sec), 4),
        "median_cpu_seconds": round(_median(cpu), 4), "worst_cpu_seconds": round(max(cpu), 4),
        "meets_target": len(caught) * 2 > len(runs) and med_s < TARGET_SECONDS and med_ex < TARGET_EXAMPLES,
        "runs": runs,
    }


def detect_flaw_cold(flaw: str, seeds: int, max_examples: int, timeout: int = 600) -> dict:
    """:func:`detect_flaw` in a fresh interpreter (see the module docstring)."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.detect", flaw, "--seeds", str(seeds),
                           "--max-examples", str(max_examples)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmarks.detect {flaw} failed (rc={proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(quick: bool = False, flaws_only: list[str] | None = None) -> dict:
    from kvverify import engines

    seeds = 1 if quick else 10
    max_examples = 300 if quick else 1000
    start = time.perf_counter()
    rows = [detect_flaw_cold(f, seeds, max_examples) for f in (flaws_only or list(engines.flaw_catalog()))]
    return {"seeds": seeds, "max_examples": max_examples, "rows": rows,
            "all_meet_target": all(r["meets_target"] for r in rows),
            "wall_s": round(time.perf_counter() - start, 2)}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.detect FLAW [--seeds 10] [--max-examples 1000]``: one JSON line."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.detect")
    ap.add_argument("flaw")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--max-examples", type=int, default=1000)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    preload_modules()  # every kvverify module, as the pytest plugin loads them: the same constants
    import_s = time.perf_counter() - t0
    row = detect_flaw(args.flaw, range(args.seeds), args.max_examples)
    row["import_s"] = round(import_s, 3)
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def table(data: dict):
    from rich.table import Table

    t = Table(title=f"Time to detect each bug-zoo flaw (cold start, {data['seeds']} seeds, shrink off, "
                    f"max_examples={data['max_examples']})")
    for col in ("flaw", "upstream", "caught", "median ex", "worst ex", "median s", "worst s", "median cpu s",
                "target"):
        t.add_column(col, justify="left" if col in ("flaw", "upstream") else "right")
    for r in data["rows"]:
        ok = "[green]met[/green]" if r["meets_target"] else "[red]MISSED[/red]"
        t.add_row(r["flaw"], r["upstream"], f"{r['caught']}/{r['seeds']}", f"{r['median_examples']:g}",
                  str(r["worst_examples"]), f"{r['median_seconds']:.3f}", f"{r['worst_seconds']:.3f}",
                  f"{r['median_cpu_seconds']:.3f}", ok)
    imports = [r.get("import_s", 0) for r in data["rows"]]
    t.caption = (f"target: median < {TARGET_SECONDS:g} s and < {TARGET_EXAMPLES} examples; examples = property-body "
                 f"calls up to the first genuine failure; one fresh process per flaw (import "
                 f"{min(imports):.1f}-{max(imports):.1f} s, not counted); section wall {data['wall_s']} s")
    return t
