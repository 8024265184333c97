"""Summarise mutmut 3's verdicts per reference module (docs/mutation.md).

Reads ``mutants/**/*.meta`` (mutmut's own result files) and
``docs/mutation-equivalent.txt`` (mutant name, then the reason it is equivalent), and
writes ``reports/mutation/summary.json`` and ``summary.md`` atomically: per module the
mutants, killed, survived, equivalent, timeouts, no-tests and the kill rate over the
non-equivalent mutants, plus the list of unexplained survivors.

    python scripts/mutation_report.py [MODULE...]
    python scripts/mutation_report.py --select pending|survivors [MODULE...]   (names, one a line)
    python scripts/mutation_report.py --select sample:N[:SEED] [MODULE...]
        a uniform random sample of N mutants per module (seeded, default seed 0; the
        same N and seed always give the same names), for an estimate where the whole
        module does not fit in the time there is
    python scripts/mutation_report.py --sample N[:SEED] [MODULE...]
        the report restricted to that sample, with a 95 % Wilson interval per module
    python scripts/mutation_report.py --fail-under PCT [MODULE...]
        exit 1 when a module's kill rate (over its checked non-equivalent mutants) is below
        PCT, when a mutant survives that docs/mutation-equivalent.txt does not explain, or
        when a mutant was not checked (the nightly's gate, after a full run)
"""

from __future__ import annotations

import json
import math
import os
import random
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


def sample(spec: str, modules: tuple[str, ...], verdicts: dict[str, str]) -> set[str]:
    """``N[:SEED]``: N mutants drawn uniformly per module (each manager file counts
    as part of ``managers``), sorted names shuffled by ``random.Random(SEED)``."""
    n_text, _, seed_text = spec.partition(":")
    try:
        n, seed = int(n_text), int(seed_text or 0)
    except ValueError:
        raise SystemExit(f"mutation_report: sample must be N[:SEED] with integers, got {spec!r}")
    if n < 1:
        raise SystemExit(f"mutation_report: sample size N must be >= 1, got {n}")
    chosen: set[str] = set()
    for mod in modules:
        names = sorted(k for k in verdicts if in_modules(k, (mod,)))
        random.Random(f"{seed}:{mod}").shuffle(names)
        chosen.update(names[:n])
    return chosen


def wilson(killed: int, n: int) -> tuple[float, float]:
    """95 % Wilson score interval of a kill rate, in per cent."""
    if n == 0:
        return (0.0, 100.0)
    z, p = 1.96, killed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (round(100 * max(0.0, centre - half), 1), round(100 * min(1.0, centre + half), 1))


def select(kind: str, modules: tuple[str, ...]) -> list[str]:
    """Mutant names of ``modules`` to (re-)run: ``pending`` (no verdict), ``survivors``,
    or ``sample:N[:SEED]`` (those of the sample still without a verdict)."""
    verdicts = load_verdicts()
    equivalent = load_equivalent()
    if kind.startswith("sample:"):
        chosen = sample(kind.removeprefix("sample:"), modules, verdicts)
        return sorted(k for k in chosen if verdicts[k] == "not checked")
    want = {"pending": ("not checked",), "survivors": ("survived", "no tests", "suspicious")}[kind]
    return sorted(k for k, v in verdicts.items()
                  if in_modules(k, modules) and v in want and k not in equivalent)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--select"]:
        kind, modules = argv[1], tuple(argv[2:]) or ALL
        print("\n".join(select(kind, modules)))
        return 0
    spec = None
    fail_under: float | None = None
    if argv[:1] == ["--fail-under"]:
        try:
            fail_under = float(argv[1])
        except (IndexError, ValueError):
            raise SystemExit("mutation_report: --fail-under needs a percentage, e.g. --fail-under 90")
        if not 0 <= fail_under <= 100:
            raise SystemExit(f"mutation_report: --fail-under must be in [0, 100], got {fail_under}")
        argv = argv[2:]
    if argv[:1] == ["--sample"]:
        spec, argv = argv[1], argv[2:]
    modules = tuple(argv) or ALL
    equivalent = load_equivalent()
    verdicts = load_verdicts()
    if spec is not None:
        chosen = sample(spec, modules, verdicts)
        verdicts = {k: v for k, v in verdicts.items() if k in chosen}
    rows = {}
    survivors: list[str] = []
    for mod in modules:
        names = sorted(k for k in verdicts if in_modules(k, (mod,)))
        c = Counter()
        for k in names:
            v = verdicts[k]
            if k in equivalent and v != "killed":
                # listed with its reason; a listed mutant is not re-run (pending skips it),
                # and one that a test kills counts as killed (its entry is then stale)
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
                         kill_rate=round(100 * killed / non_eq, 1) if non_eq else None,
                         interval=wilson(killed, non_eq) if spec is not None else None)
    tot = Counter()
    for r in rows.values():
        for k, v in r.items():
            if k not in ("kill_rate", "interval"):
                tot[k] += v
    non_eq = tot["mutants"] - tot["equivalent"] - tot["not_checked"]
    overall = round(100 * (tot["killed"] + tot["timeout"]) / non_eq, 1) if non_eq else None
    summary = {"modules": rows, "overall_kill_rate": overall, "survivors": survivors,
               "sample": spec}
    out = ROOT / "reports" / "mutation" / (f"sample-{spec.replace(':', '-')}" if spec else "")
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    lines = ["| module | mutants | killed | timeout | survived | equivalent | no tests | "
             "not checked | kill rate |", "|---|---|---|---|---|---|---|---|---|"]
    for mod, r in rows.items():
        lines.append(f"| `{mod}` | {r['mutants']} | {r['killed']} | {r['timeout']} | "
                     f"{r['survived']} | {r['equivalent']} | {r['no_tests']} | "
                     f"{r['not_checked']} | {r['kill_rate']}% |"
                     + (f" 95 % interval {r['interval'][0]}-{r['interval'][1]} %" if spec else ""))
    lines.append(f"\noverall kill rate (non-equivalent, checked): {overall}%\n")
    lines += ["survivors:"] + [f"- `{s}`" for s in survivors]
    write_atomic(out / "summary.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    if fail_under is not None:
        low = [m for m, r in rows.items() if r["kill_rate"] is not None and r["kill_rate"] < fail_under]
        unchecked = sum(r["not_checked"] for r in rows.values())
        if low or survivors or unchecked:
            print(f"mutation: below {fail_under} %: {low or 'none'}; unexplained survivors: "
                  f"{len(survivors)}; not checked: {unchecked}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
