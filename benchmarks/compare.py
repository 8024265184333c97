"""Markdown before/after tables from two ``benchmarks.run`` JSON files.

    python -m benchmarks.compare benchmarks/results/before.json benchmarks/results/after.json

Prints the tables ``docs/performance.md`` carries (sections missing from either file are
left out), so the doc can be regenerated from a fresh pair of runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence


def _load(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def _ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return ""
    return f"{a / b:.1f}x"


def detect_table(before: dict, after: dict) -> list[str]:
    b = {r["flaw"]: r for r in before["rows"]}
    out = ["| flaw | caught | median examples | worst examples | median s (wall) | median s (CPU) | worst s (wall) | target |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in after["rows"]:
        o = b.get(r["flaw"], {})
        def cell(k: str, fmt: str = "{:g}", o: dict = o, r: dict = r) -> str:
            return f"{fmt.format(o[k])} → {fmt.format(r[k])}" if k in o else fmt.format(r[k])
        out.append(f"| {r['flaw']} | {o.get('caught', '?')}/{o.get('seeds', '?')} → {r['caught']}/{r['seeds']} | "
                   f"{cell('median_examples')} | {cell('worst_examples')} | {cell('median_seconds', '{:.2f}')} | "
                   f"{cell('median_cpu_seconds', '{:.2f}')} | {cell('worst_seconds', '{:.2f}')} | "
                   f"{'met' if r['meets_target'] else '**missed**'} |")
    return out


def _per_cpu(row: dict) -> float | None:
    return round(row["valid"] / row["cpu_seconds"], 1) if row.get("cpu_seconds") else None


def props_table(before: dict, after: dict) -> list[str]:
    b = {(r["suite"], r["property"]): r for r in before["rows"]}
    out = ["| suite | property | examples/s (wall) before → after | examples per CPU s before → after | "
           "speed-up (CPU) | invalid after | note |",
           "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in after["rows"]:
        o = b.get((r["suite"], r["property"]), {})
        note = (r.get("error") or "")[:60] or (f"under fix {', '.join(r['fixes'])}" if r["fixes"] else "")
        cpu_a = _per_cpu(r)
        cpu_b = _per_cpu(o) if o else None
        out.append(f"| {r['suite']} | {r['property']} | {o.get('examples_per_s', '?')} → {r['examples_per_s']} | "
                   f"{cpu_b if cpu_b is not None else '?'} → {cpu_a} | {_ratio(cpu_a, cpu_b)} | "
                   f"{(r['invalid_fraction'] or 0):.0%} | {note} |")
    tb, ta = sum(r["seconds"] for r in before["rows"]), sum(r["seconds"] for r in after["rows"])
    cb, ca = sum(r["cpu_seconds"] for r in before["rows"]), sum(r["cpu_seconds"] for r in after["rows"])
    out.append(f"| **all** | one process, summed | {tb:.1f} s → {ta:.1f} s | {cb:.1f} CPU s → {ca:.1f} CPU s | "
               f"{_ratio(cb, ca)} | | |")
    return out


def pytest_line(before: dict, after: dict) -> list[str]:
    pb, pa = before.get("pytest"), after.get("pytest")
    if not pa:
        return []
    line = f"`{pa['command']}`: "
    if pb:
        line += (f"{pb['wall_s']:.0f} s → {pa['wall_s']:.0f} s wall"
                 + (f", {pb['cpu_s']:.0f} s → {pa['cpu_s']:.0f} s CPU" if "cpu_s" in pb else f", {pa['cpu_s']:.0f} s CPU after")
                 + f" ({pb['summary']} → {pa['summary']})")
    else:
        line += f"{pa['wall_s']:.0f} s wall, {pa['cpu_s']:.0f} s CPU ({pa['summary']})"
    return [line]


def runtime_tables(before: dict, after: dict) -> list[str]:
    bp = {p["num_blocks"]: p for p in before.get("pool", [])}
    out = ["| N blocks | construct s | ops/s before → after | ns per block moved before → after |",
           "| ---: | ---: | ---: | ---: |"]
    for p in after["pool"]:
        o = bp.get(p["num_blocks"], {})
        nsb = o.get("ns_per_block_move") or (round(1e9 / o["block_moves_per_s"]) if o else None)
        out.append(f"| {p['num_blocks']:,} | {p['construct_s']:.3f} | {o.get('ops_per_s', 0):,} → {p['ops_per_s']:,} | "
                   f"{nsb if nsb else ''} → {p['ns_per_block_move']:,} |")
    bs = {(s["name"], s["num_blocks"]): s for s in before.get("scheduler", []) + before.get("scheduler_scaling", [])}
    out += ["", "| workload | N blocks | steps | steps/s before → after | µs/step after | preemptions |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for s in after["scheduler"] + after["scheduler_scaling"]:
        o = bs.get((s["name"], s["num_blocks"]), {})
        out.append(f"| {s['name']} | {s['num_blocks']:,} | {s['steps']:,} | {o.get('steps_per_s', 0):,} → "
                   f"{s['steps_per_s']:,} | {s['us_per_step']} | {s['preemptions']} |")
    return out


def lemmas_line(before: dict, after: dict) -> list[str]:
    return [f"{len(after['rows'])} lemmas: {before['total_s']:.2f} s → {after['total_s']:.2f} s proving in all; "
            f"slowest: " + ", ".join(f"{r['lemma']} {r['seconds']:.2f} s"
                                      for r in sorted(after["rows"], key=lambda r: -r["seconds"])[:3])]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print(__doc__)
        return 2
    before, after = (_load(a) for a in args)
    bs, as_ = before["sections"], after["sections"]
    m = after["machine"]
    print(f"Machine: {m['nproc']} cores ({m['cpu']}), Python {m['python']}, Hypothesis {m['hypothesis']}, "
          f"z3 {m['z3']}; load average {before['machine'].get('loadavg_start')} (before) / "
          f"{m.get('loadavg_start')} (after)\n")
    for name, render in (("detect", detect_table), ("props", props_table), ("lemmas", lemmas_line),
                         ("runtime", runtime_tables)):
        if name in bs and name in as_:
            print(f"### {name}\n")
            print("\n".join(render(bs[name], as_[name])))
            if name == "props":
                print("\n" + "\n".join(pytest_line(bs[name], as_[name])))
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
