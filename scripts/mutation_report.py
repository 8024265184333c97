"""Summarise mutmut 3's verdicts per reference module (docs/mutation.md).

Reads ``mutants/**/*.meta`` (mutmut's own result files) and
``docs/mutation-equivalent.txt`` (mutant name, then the reason it is equivalent), and
writes ``reports/mutation/summary.json`` and ``summary.md`` atomically: per module the
mutants, killed, survived, equivalent, timeouts, no-tests and the kill rate over the
non-equivalent mutants, plus the list of unexplained survivors.

    python scripts/mutation_report.py [MODULE...]
    python scripts/mutation_report.py --select pending|survivors [MODULE...]   (names, one a line)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALL = ("arith", "planner", "grouping", "block_sizes", "pool", "managers",
       "kv_cache_manager", "scheduler")
# mutmut.stats.status_by_exit_code, restated so this runs without mutmut's config
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests",
          34: "skipped", 36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout",
          255: "timeout", 37: "killed", None: "not checked"}


def module_of(mutant: str) -> str:
    """``arith``, ``managers.full_attention``, ... (a manager file is its own module)."""
    parts = mutant.removeprefix("kvverify.reference.").split(".")
    return ".".join(parts[:2]) if parts[0] == "managers" else parts[0]


def in_modules(mutant: str, modules: tuple[str, ...]) -> bool:
    mod = module_of(mutant)
    return mod in modules or mod.split(".")[0] in modules


def load_equivalent() -> dict[str, str]:
    path = ROOT / "docs" / "mutation-equivalent.txt"
    out: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                out[name] = reason.strip()
    return out


def load_verdicts() -> dict[str, str]:
    verdicts: dict[str, str] = {}
    for meta in (ROOT / "mutants" / "kvverify" / "reference").rglob("*.meta"):
        data = json.loads(meta.read_text())
        for key, code in data["exit_code_by_key"].items():
            verdicts[key] = STATUS.get(code, "suspicious")
    return verdicts


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def select(kind: str, modules: tuple[str, ...]) -> list[str]:
    """Mutant names of ``modules`` to (re-)run: ``pending`` (no verdict) or ``survivors``."""
    verdicts = load_verdicts()
    equivalent = load_equivalent()
    want = {"pending": ("not checked",), "survivors": ("survived", "no tests", "suspicious")}[kind]
    return sorted(k for k, v in verdicts.items()
                  if in_modules(k, modules) and v in want and k not in equivalent)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--select"]:
        kind, modules = argv[1], tuple(argv[2:]) or ALL
        print("\n".join(select(kind, modules)))
        return 0
    modules = tuple(argv) or ALL
    equivalent = load_equivalent()
    verdicts = load_verdicts()
    rows = {}
    survivors: list[str] = []
    for mod in modules:
        names = sorted(k for k in verdicts if in_modules(k, (mod,)))
        c = Counter()
        for k in names:
            v = verdicts[k]
            if v == "survived" and k in equivalent:
                v = "equivalent"
            c[v] += 1
            if v in ("survived", "no tests"):
                survivors.append(k)
        non_eq = len(names) - c["equivalent"] - c["not checked"]
        killed = c["killed"] + c["timeout"]
        rows[mod] = dict(mutants=len(names), killed=c["killed"], timeout=c["timeout"],
                         survived=c["survived"], equivalent=c["equivalent"],
                         no_tests=c["no tests"], not_checked=c["not checked"],
                         suspicious=c["suspicious"] + c["skipped"],
                         kill_rate=round(100 * killed / non_eq, 1) if non_eq else None)
    tot = Counter()
    for r in rows.values():
        for k, v in r.items():
            if k != "kill_rate":
                tot[k] += v
    non_eq = tot["mutants"] - tot["equivalent"] - tot["not_checked"]
    overall = round(100 * (tot["killed"] + tot["timeout"]) / non_eq, 1) if non_eq else None
    summary = {"modules": rows, "overall_kill_rate": overall, "survivors": survivors}
    out = ROOT / "reports" / "mutation"
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    lines = ["| module | mutants | killed | timeout | survived | equivalent | no tests | "
             "not checked | kill rate |", "|---|---|---|---|---|---|---|---|---|"]
    for mod, r in rows.items():
        lines.append(f"| `{mod}` | {r['mutants']} | {r['killed']} | {r['timeout']} | "
                     f"{r['survived']} | {r['equivalent']} | {r['no_tests']} | "
                     f"{r['not_checked']} | {r['kill_rate']}% |")
    lines.append(f"\noverall kill rate (non-equivalent, checked): {overall}%\n")
    lines += ["survivors:"] + [f"- `{s}`" for s in survivors]
    write_atomic(out / "summary.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
