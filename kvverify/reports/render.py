"""Rendering one report as Markdown (the index of all reports: :mod:`kvverify.reports.index`)."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence


def _md_cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        value = json.dumps(value, separators=(", ", ": "))
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def spec_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    return cols


def render_markdown(report: Mapping[str, Any]) -> str:
    v = report.get("violation") or {}
    out = [f"# `{v.get('name')}` — {report.get('property')}", "",
           f"> {v.get('reason')}", ""]
    if report.get("timeline"):
        svg = f"{report.get('id')}.svg"
        per = "rule step" if report["timeline"].get("kind") == "stateful" else "scheduler step"
        out += [f"![timeline: blocks held, free blocks and requests per {per}]({svg})", "",
                f"Timeline of the failing run, step by step: [{svg}]({svg})", ""]
    facts = [("property", ref_text(report.get("property_ref") or {})),
             ("target", report.get("target")),
             ("flaws on", ", ".join(report.get("flaws") or []) or "none (the faithful reference)"),
             ("fixes on", ", ".join(report.get("fixes") or []) or "none")]
    if report.get("behaviours"):
        facts.append(("release rules", ", ".join(report["behaviours"]) + " (its reference replay follows them)"))
    for r in report.get("resembles") or []:
        facts.append(("resembles upstream", f"{r['upstream']} — flaw `{r['flaw']}`: {r['symptom']}"))
    if report.get("known_finding"):
        facts.append(("known finding", report["known_finding"]))
    facts.append(("found by", (report.get("run") or {}).get("found_by")))
    out += md_table(["", ""], facts) + [""]
    replay = report.get("replay") or {}
    out += ["## Replay", "", "```sh", replay.get("command", "")]
    if replay.get("equivalent"):
        out.append(replay["equivalent"])
    if replay.get("pytest"):
        out.append(replay["pytest"])
    out += ["```", ""]
    if not report.get("replayable", True):
        out += [f"*Not exactly replayable: {report.get('not_replayable_because')}*", ""]
    evidence = v.get("evidence") or {}
    if evidence:
        out += ["## Evidence", ""] + md_table(["quantity", "value"], evidence.items()) + [""]
    for other in report.get("other_violations") or []:
        out += [f"Also: `{other.get('name')}` — {other.get('reason')}", ""]
    z3m = report.get("z3_model")
    if z3m:
        out += ["## Z3 model", "", f"case: `{z3m.get('case')}`", ""]
        out += md_table(["variable", "value"], (z3m.get("values") or {}).items()) + [""]
        if z3m.get("params"):
            out += md_table(["parameter", "value"], z3m["params"].items()) + [""]
        out += [f"Replay on the reference: {z3m.get('replay_on_reference')} "
                f"(confirmed: {z3m.get('replay_confirmed')})", ""]
    conf = report.get("configuration") or {}
    if conf.get("lemma"):
        out += ["## Lemma", ""] + md_table(["", ""], conf["lemma"].items()) + [""]
    if conf.get("vllm_config"):
        out += ["## Configuration (`VllmConfig`, every field; **bold** = not the default)", ""]
        out += md_table(["field", "value", "default"],
                         ((f"**{r['field']}**" if r["changed"] else r["field"], r["value"], r["default"])
                          for r in conf["vllm_config"])) + [""]
    for i, rows in enumerate(conf.get("workers") or []):
        cols = spec_columns(rows)
        title = "## Layer specs" + (f" (worker {i})" if len(conf.get("workers") or []) > 1 else "")
        out += [title, ""] + md_table(cols, ([r.get(c, "") for c in cols] for r in rows)) + [""]
    if conf.get("groups"):
        cols = spec_columns(conf["groups"])
        out += ["## KV cache groups", ""] + md_table(cols, ([r.get(c, "") for c in cols]
                                                             for r in conf["groups"])) + [""]
    if conf.get("arguments"):
        out += ["## Other arguments", "", "```json",
                json.dumps(conf["arguments"], indent=2)[:6000], "```", ""]
    trace = report.get("trace")
    if trace and trace.get("program"):
        out += ["## Operation trace (the falsifying program, as Hypothesis ran it)", "", "```python"]
        out += [str(step) for step in trace["program"]] + ["```", ""]
    elif trace:
        out += ["## Operation trace (the last workload the property ran)", ""]
        out += md_table(["request", "prompt tokens", "max tokens", "arrival step"],
                         ((r.get("request_id"), r.get("prompt_tokens"), r.get("max_tokens"),
                           r.get("arrival_step")) for r in trace["requests"] if isinstance(r, dict)))
        oc = trace.get("outcome") or {}
        out += ["", "Outcome: " + ", ".join(f"{k}={oc[k]}" for k in oc if oc[k] not in (None, [], ())), ""]
        rows = [r if r is not None else ["…"] * len(trace["columns"]) for r in trace["rows"]]
        out += md_table(trace["columns"], rows)
        if trace.get("elided_rows"):
            out += ["", f"({trace['elided_rows']} rows elided)"]
        out.append("")
    notes = (report.get("run") or {}).get("hypothesis_notes") or []
    if notes:
        out += ["## Hypothesis output", "", "```", "\n".join(notes)[:8000], "```", ""]
    return "\n".join(out)


def ref_text(ref: Mapping[str, Any]) -> str:
    if ref.get("lemma"):
        return f"lemma `{ref['lemma']}`"
    where = ref.get("module") or ref.get("file") or "?"
    return f"`{where}:{ref.get('name')}`"
