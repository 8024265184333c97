"""The mutation report: per module killed / survived / equivalent, kills by kind, vLLM's own tests
on the same mutants, 95 % Wilson intervals, and every survivor as a diff.

Each killed mutant is counted once, by the first kind that applies, in this order:

1. ``property``: a guarantee property's own verdict (an assertion in the ``guarantee`` suite);
2. ``differential``: only the reference-vs-engine differential's assertion caught it, or a
   finding's strict ``xfail`` that now passes (``xpassed``: the finding's counterexample no longer
   reproduces, a behaviour change flagged as the differential flags one, not a guarantee verdict);
3. ``crash``: only an engine exception, an import failure or a newly skipped test caught it;
4. ``timeout``: only the CPU-time limit caught it.

A survivor listed in the equivalents file (``NAME DIGEST [class] reason``, one a line; the digest
is of the mutant's diff body, so an entry goes stale when the code around it changes) counts as
equivalent; rates are over the non-equivalent mutants. A survivor listed in the out-of-scope file
(same format) is a real fault no guarantee promises to see (metrics, KV events, a prefix-cache
hit not taken): it stays in the rates as not killed, but is listed apart with its reason instead
of as an unexplained survivor.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvverify.errors import KVVerifyError
from kvverify.mutate.engine import Baseline, MutantResult
from kvverify.mutate.generate import Mutant
from kvverify.mutate.outcomes import ASSERTION, CRASH, TIMEOUT, XPASSED, Verdict

KINDS = ("property", "differential", "crash", "timeout")
_LINE = re.compile(r"^(\S+)\s+([0-9a-f]{12})\s+\[(\w+)\]\s+(.+)$")


def digest(mutant: Mutant) -> str:
    """12 hex digits of the mutant's diff body (the ``-``/``+``/context lines, not line numbers)."""
    body = [ln for ln in mutant.diff.splitlines() if not ln.startswith(("---", "+++", "@@"))]
    return hashlib.sha256("\n".join(body).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Equivalent:
    name: str
    digest: str
    kind: str
    reason: str


def load_equivalents(path: Path | None) -> dict[str, Equivalent]:
    """``name -> Equivalent`` from the list file (``#`` comments); a malformed line is an error."""
    if path is None or not path.is_file():
        return {}
    out: dict[str, Equivalent] = {}
    for i, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise KVVerifyError(f"{path}:{i}: expected `NAME DIGEST [class] reason`, got {line[:80]!r}")
        out[m.group(1)] = Equivalent(*m.groups())
    return out


def kill_kind(result: MutantResult) -> str | None:
    """The first kind (see the module docstring) that killed the mutant, ``None``: it survived
    kvverify's suites (vLLM's own tests are reported beside, never counted here)."""
    v = result.verdicts
    g, d = v.get("guarantee"), v.get("differential")
    if g is not None and g.kind == ASSERTION:
        return "property"
    if (d is not None and d.kind == ASSERTION) or (g is not None and g.kind == XPASSED):
        return "differential"
    ours = [x for name, x in v.items() if name != "vllm-tests"]
    if any(x.kind == CRASH for x in ours):
        return "crash"
    if any(x.kind == TIMEOUT for x in ours):
        return "timeout"
    return None


def wilson(k: int, n: int) -> tuple[float, float]:
    """95 % Wilson score interval of k successes in n trials, in per cent (``(0, 100)`` for n = 0)."""
    if n == 0:
        return (0.0, 100.0)
    z, p = 1.959964, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (100 * max(0.0, centre - half), 100 * min(1.0, centre + half))


def _rate(k: int, n: int) -> str:
    if n == 0:
        return "-"
    lo, hi = wilson(k, n)
    return f"{100 * k / n:.0f} % ({lo:.0f}-{hi:.0f})"


def summarize(results: list[MutantResult], in_scope: dict[str, int],
              equivalents: dict[str, Equivalent],
              out_of_scope: dict[str, Equivalent] | None = None) -> dict[str, Any]:
    """The report's data: per module counts, kinds, vLLM tests, survivors (JSON-ready)."""
    modules: dict[str, dict[str, Any]] = {}
    for name, total in in_scope.items():
        modules[name] = {"in_scope": total, "run": 0, "killed": 0, "survived": 0, "equivalent": 0,
                         "out_of_scope": 0, "stale_equivalent": 0, **{k: 0 for k in KINDS}, "vllm_tests_run": 0,
                         "vllm_tests_killed": 0, "only_vllm_tests": 0, "only_kvverify": 0}
    mutants: list[dict[str, Any]] = []
    for r in results:
        m = r.mutant
        row = modules[m.module]
        row["run"] += 1
        kind = kill_kind(r)
        vt = r.verdicts.get("vllm-tests")
        eq = equivalents.get(m.name)
        scope = (out_of_scope or {}).get(m.name)
        status = "killed" if kind else "survived"
        if kind is None and eq is not None:
            status = "equivalent" if eq.digest == digest(m) else "survived"
            row["stale_equivalent"] += eq.digest != digest(m)
        elif kind is None and scope is not None:
            status = "out_of_scope" if scope.digest == digest(m) else "survived"
            row["stale_equivalent"] += scope.digest != digest(m)
            eq = scope
        row[status] += 1
        if kind:
            row[kind] += 1
        if vt is not None and status != "equivalent":
            row["vllm_tests_run"] += 1
            row["vllm_tests_killed"] += vt.killed
            row["only_vllm_tests"] += vt.killed and not kind
            row["only_kvverify"] += bool(kind) and not vt.killed
        mutants.append({"name": m.name, "module": m.module, "function": m.function, "line": m.line,
                        "digest": digest(m), "status": status, "kind": kind,
                        "verdicts": {s: {"kind": v.kind, "changed": [list(c) for c in v.changed]}
                                     for s, v in r.verdicts.items()},
                        "equivalent_reason": eq.reason if status in ("equivalent", "out_of_scope") and eq else None,
                        "diff": m.diff})
    return {"modules": modules, "mutants": mutants}


def render_markdown(data: dict[str, Any], *, command: str, bases: list[Baseline]) -> str:
    """The report as Markdown: the table, the kinds, vLLM's tests, then each survivor's diff."""
    lines = ["# kvverify mutate: engine mutation report", "", f"Command: `{command}`", ""]
    for b in bases:
        left = b.left_out
        lines.append(f"* suite `{b.suite.name}`: {b.usable} tests pass unmutated ({b.cpu_seconds:.0f} s CPU)"
                     + (f"; left out, failing unmutated: {', '.join(left)}" if left else ""))
    lines += ["", "| module | in scope | run | killed | survived | out of scope | equivalent | kill rate (95 % Wilson) | "
              "property | differential | crash | timeout | guarantee properties alone | vLLM's tests |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    total = {k: 0 for k in ("in_scope", "run", "killed", "survived", "out_of_scope", "equivalent", *KINDS,
                            "vllm_tests_run", "vllm_tests_killed", "only_vllm_tests", "only_kvverify")}
    for name, row in data["modules"].items():
        for k in total:
            total[k] += row[k]
        lines.append(_row(f"`{name}`", row))
    if len(data["modules"]) > 1:
        lines.append(_row("**all**", total))
    lines.append("")
    if total["vllm_tests_run"]:
        lines += ["Side by side on the same (non-equivalent) mutants:", "",
                  "| module | mutants | kvverify's suites kill | vLLM's tests kill | only kvverify | only vLLM's tests |",
                  "|---|---|---|---|---|---|"]
        for name, row in data["modules"].items():
            if row["vllm_tests_run"]:
                n = row["vllm_tests_run"]
                lines.append(f"| `{name}` | {n} | {_rate(row['killed'], n)} | {_rate(row['vllm_tests_killed'], n)} | "
                             f"{row['only_kvverify']} | {row['only_vllm_tests']} |")
        lines.append("")
    survivors = [m for m in data["mutants"] if m["status"] == "survived"]
    lines.append(f"## Survivors ({len(survivors)})")
    for m in survivors:
        vt = m["verdicts"].get("vllm-tests")
        note = f" (vLLM's tests: {vt['kind']})" if vt else ""
        lines += ["", f"### `{m['name']}` digest `{m['digest']}`{note}", "", "```diff", m["diff"].rstrip(), "```"]
    scoped = [m for m in data["mutants"] if m["status"] == "out_of_scope"]
    if scoped:
        lines += ["", f"## Out of the guarantees' scope ({len(scoped)}: not killed, counted in the rates)"]
        for m in scoped:
            lines += ["", f"### `{m['name']}` digest `{m['digest']}`", "", m["equivalent_reason"], "",
                      "```diff", m["diff"].rstrip(), "```"]
    eq = [m for m in data["mutants"] if m["status"] == "equivalent"]
    if eq:
        lines += ["", f"## Equivalent ({len(eq)})", ""]
        lines += [f"* `{m['name']}`: {m['equivalent_reason']}" for m in eq]
    return "\n".join(lines) + "\n"


def _row(label: str, row: dict[str, Any]) -> str:
    non_eq = row["run"] - row["equivalent"]
    vt = (f"{_rate(row['vllm_tests_killed'], row['vllm_tests_run'])}" if row["vllm_tests_run"] else "not run")
    return (f"| {label} | {row['in_scope']} | {row['run']} | {row['killed']} | {row['survived']} | "
            f"{row['out_of_scope']} | {row['equivalent']} | {_rate(row['killed'], non_eq)} | {row['property']} | "
            f"{row['differential']} | {row['crash']} | {row['timeout']} | {_rate(row['property'], non_eq)} | {vt} |")


def record(result: MutantResult) -> dict[str, Any]:
    """One mutant's result as a JSON line (``--results``: written as each mutant finishes)."""
    m = result.mutant
    return {"name": m.name, "module": m.module, "path": m.path, "function": m.function, "line": m.line,
            "diff": m.diff, "verdicts": {s: {"kind": v.kind, "changed": [list(c) for c in v.changed]}
                                         for s, v in result.verdicts.items()}}


def from_record(rec: dict[str, Any]) -> MutantResult:
    """The inverse of :func:`record` (the mutated file's text is not kept: ``source`` is empty)."""
    m = Mutant(rec["name"], rec["module"], rec["path"], rec["function"], rec["line"], "", rec["diff"])
    return MutantResult(m, {s: Verdict(v["kind"], tuple((a, b) for a, b in v["changed"]))
                            for s, v in rec["verdicts"].items()})


def load_results(path: Path) -> dict[str, MutantResult]:
    """``name -> result`` of a ``--results`` file (missing file: none); a torn last line is ignored."""
    out: dict[str, MutantResult] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            r = from_record(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue
        out[r.mutant.name] = r
    return out


def render_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


__all__ = ["Equivalent", "KINDS", "digest", "from_record", "kill_kind", "load_equivalents", "load_results",
           "record", "render_json", "render_markdown", "summarize", "wilson"]
