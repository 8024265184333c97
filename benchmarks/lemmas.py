"""Each lemma's proof time (z3), and the total: ``kvverify.cli.lemmas.run_lemmas()``."""

from __future__ import annotations

import time


def run(quick: bool = False) -> dict:
    from kvverify.cli.lemmas import run_lemmas

    start = time.perf_counter()
    results = run_lemmas()
    wall = time.perf_counter() - start
    rows = [{"lemma": r.name, "result": r.result, "ok": r.ok, "finding": r.finding,
             "seconds": round(r.seconds, 4)} for r in results]
    return {"rows": rows, "total_s": round(sum(r["seconds"] for r in rows), 3), "wall_s": round(wall, 3),
            "all_ok": all(r["ok"] for r in rows)}


def table(data: dict):
    from rich.table import Table

    t = Table(title="Lemma proof times (z3)")
    for col in ("lemma", "result", "seconds"):
        t.add_column(col, justify="right" if col == "seconds" else "left")
    for r in sorted(data["rows"], key=lambda r: -r["seconds"]):
        res = r["result"] + (f" (known finding {r['finding']})" if r["finding"] and r["result"] != "proved" else "")
        if not r["ok"]:
            res = f"[red]{res} — NOT AS EXPECTED[/red]"
        t.add_row(r["lemma"], res, f"{r['seconds']:.3f}")
    t.caption = f"{len(data['rows'])} lemmas: {data['total_s']:.2f} s proving, {data['wall_s']:.2f} s wall"
    return t
