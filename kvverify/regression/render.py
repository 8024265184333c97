"""``kvverify diff``'s output: a short text summary, or one JSON object (``--json``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvverify.regression.compare import KINDS, Change
from kvverify.regression.run import SideRun

SCHEMA = "kvverify.diff/1"


def to_json(base: SideRun, head: SideRun, changes: Sequence[Change], seconds: float) -> dict[str, Any]:
    def side(run: SideRun) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for o in run.outcomes.values():
            counts[o.status] = counts.get(o.status, 0) + 1
        return {"label": run.side.label, "kind": run.side.kind, "where": run.side.where, "vllm": run.version,
                "seconds": run.seconds, "returncode": run.returncode, "counts": counts, "error": run.error or None}

    return {"schema": SCHEMA, "base": side(base), "head": side(head), "seconds": round(seconds, 1),
            "new_failures": sum(c.counts_as_new_failure for c in changes),
            "changes": [{"kind": c.kind, "meaning": KINDS[c.kind], "test": c.nodeid, "base": c.base,
                         "head": c.head, "failures": [{k: f.get(k) for k in ("violation", "counterexample", "report",
                                                                              "flaws")} for f in c.failures],
                         "replays_on_other_side": c.replays} for c in changes]}


def to_text(base: SideRun, head: SideRun, changes: Sequence[Change], seconds: float) -> str:
    L = [f"kvverify diff: base {base.side.label} (vLLM {base.version}, {base.side.kind}) vs head "
         f"{head.side.label} (vLLM {head.version}, {head.side.kind}); {len(head.outcomes)} tests, "
         f"{seconds:.0f} s ({base.seconds:.0f} s + {head.seconds:.0f} s of suite)"]
    if not changes:
        L.append("no change: every property has the same verdict on both sides")
    order = ["new_failure", "finding_gone", "also_on_base", "new_pass", "still_failing"]
    for kind in order:
        group = [c for c in changes if c.kind == kind]
        if not group:
            continue
        L += ["", f"{KINDS[kind]}: {len(group)}"]
        for c in group:
            L.append(f"  {c.nodeid}  [{c.base} -> {c.head}]")
            for f in c.failures:
                named = " | ".join(f.get("flaws") or []) or "no zoo flaw"
                L.append(f"    {f.get('violation') or '(no violation line)'}")
                if f.get("counterexample"):
                    L.append(f"    counterexample: {f['counterexample']}")
                L.append(f"    explained by: {named}; report: {f.get('report') or 'none'}"
                         + (f"; replay on the other side: {c.replays[f['report']]}" if f.get("report") in c.replays
                            else ""))
    new = sum(c.counts_as_new_failure for c in changes)
    L += ["", f"{new} new failure(s)" + (" -> exit 1" if new else "")]
    return "\n".join(L)
