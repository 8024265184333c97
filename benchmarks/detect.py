"""Time to detect each bug-zoo flaw from a cold start — the headline number.

For each flaw, ``kvverify.zoo.run_flaw(flaw, seed=s, shrink=False)`` for ``s`` in
``range(10)``: the flaw's catching property, no example database, up to 1,000 examples,
shrinking off (we time the *finding*, not the minimising). A :class:`~benchmarks.probe.Probe`
counts the property-body calls up to the first *genuine* failure (an ``assume`` rejection
is not one) and the seconds to it. Reported: caught/seeds, median and worst examples and
seconds. Target: every flaw in a median under 2 s and under 1,000 examples.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from benchmarks.probe import Probe, preload_modules

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
    from kvverify import flaws
    from kvverify.zoo import CATCHERS

    runs = [detect_one(flaw, s, max_examples) for s in seeds]
    caught = [r for r in runs if r["caught"]]
    # A missed seed counts at its full budget: the median is over all seeds, not only hits.
    ex = [r["examples"] for r in runs]
    sec = [r["seconds"] for r in runs]
    cpu = [r["cpu_seconds"] for r in runs]
    med_ex, med_s = _median(ex), _median(sec)
    return {
        "flaw": flaw, "upstream": flaws.CATALOG[flaw].upstream, "property": CATCHERS[flaw].__name__,
        "seeds": len(runs), "caught": len(caught),
        "median_examples": med_ex, "worst_examples": max(ex), "median_seconds": round(med_s, 4),
        "worst_seconds": round(max(sec), 4),
        "median_cpu_seconds": round(_median(cpu), 4), "worst_cpu_seconds": round(max(cpu), 4),
        "meets_target": len(caught) * 2 > len(runs) and med_s < TARGET_SECONDS and med_ex < TARGET_EXAMPLES,
        "runs": runs,
    }


def run(quick: bool = False, flaws_only: list[str] | None = None) -> dict:
    from kvverify import flaws

    preload_modules()  # the same constants for Hypothesis whatever ran before
    seeds = range(1) if quick else range(10)
    max_examples = 300 if quick else 1000
    start = time.perf_counter()
    rows = [detect_flaw(f, seeds, max_examples) for f in (flaws_only or list(flaws.CATALOG))]
    return {"seeds": len(seeds), "max_examples": max_examples, "rows": rows,
            "all_meet_target": all(r["meets_target"] for r in rows),
            "wall_s": round(time.perf_counter() - start, 2)}


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
    t.caption = (f"target: median < {TARGET_SECONDS:g} s and < {TARGET_EXAMPLES} examples; "
                 f"examples = property-body calls up to the first genuine failure; section wall {data['wall_s']} s")
    return t
