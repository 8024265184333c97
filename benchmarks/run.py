"""Run kvverify's benchmarks, print the tables, write JSON.

    python -m benchmarks.run                 # full: ~10 min on 2 cores
    python -m benchmarks.run --quick         # smoke: under a minute, smaller numbers
    python benchmarks/run.py --only detect,lemmas --json /tmp/bench.json

Sections: ``props`` (examples/s per property, ci profile, one process; plus the wall time
of ``pytest properties/ -n 2 --hypothesis-profile=ci`` unless ``--no-pytest`` or
``--quick``), ``detect`` (time to detect each bug-zoo flaw, 10 seeds), ``lemmas`` (proof
times), ``runtime`` (BlockPool ops/s, scheduler steps/s, 10^3..10^6 blocks), ``check``
(``kvverify check`` wall time and peak memory for max_model_len 10^3..10^8, every catalog model
at 10^7; ``python -m benchmarks.check`` also writes ``docs/check-benchmark.json``). JSON goes to
``--json PATH``, else ``benchmarks/results/<label>-<UTC time>.json`` (git-ignored).
Prints numbers, asserts nothing: the exit code is 0 unless a section crashed.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

if __package__ in (None, ""):  # `python benchmarks/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("runtime", "lemmas", "detect", "props", "check")


def machine() -> dict[str, Any]:
    """What the numbers were measured on (the load average says how busy the machine was)."""
    import hypothesis
    import z3

    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        rev, dirty = "", False
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "implementation": platform.python_implementation(), "platform": platform.platform(),
            "hypothesis": hypothesis.__version__, "z3": z3.get_version_string(),
            "git": rev + ("+dirty" if dirty else ""), "loadavg_start": _loadavg()}


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _module(name: str):
    import importlib
    return importlib.import_module(f"benchmarks.{name}")


def _tables(name: str, data: dict) -> list[Any]:
    mod = _module(name)
    if hasattr(mod, "tables"):
        return mod.tables(data)
    return [mod.table(data)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (smoke test): under a minute")
    ap.add_argument("--json", metavar="PATH", help="write the results here (default benchmarks/results/)")
    ap.add_argument("--only", metavar="SECTIONS", help=f"comma-separated subset of {','.join(SECTIONS)}")
    ap.add_argument("--no-pytest", action="store_true", help="skip the pytest wall-time subprocess")
    ap.add_argument("--label", default=None, help="a name for this run (e.g. before / after)")
    args = ap.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",")] if args.only else list(SECTIONS)
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        ap.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")

    from rich.console import Console

    console = Console() if sys.stdout.isatty() else Console(width=150)
    label = args.label or ("quick" if args.quick else "full")
    results: dict[str, Any] = {"label": label, "quick": args.quick, "argv": list(argv or sys.argv[1:]),
                               "started_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                               "machine": machine(), "sections": {}, "errors": {}}
    console.print(f"[bold]kvverify benchmarks[/bold] ({label}) on {results['machine']['nproc']} cores, "
                  f"Python {results['machine']['python']}, load {results['machine']['loadavg_start']}")
    start = time.perf_counter()
    for name in sections:
        t0 = time.perf_counter()
        try:
            mod = _module(name)
            data = mod.run(quick=args.quick, **({"with_pytest": False} if name == "props" and args.no_pytest
                                                 else {}))
        except Exception:  # noqa: BLE001 - one broken section must not hide the others
            results["errors"][name] = traceback.format_exc()[-2000:]
            console.print(f"[red]section {name} crashed[/red]\n{results['errors'][name]}")
            continue
        data["section_wall_s"] = round(time.perf_counter() - t0, 2)
        results["sections"][name] = data
        for t in _tables(name, data):
            console.print(t)
    results["wall_s"] = round(time.perf_counter() - start, 2)
    results["machine"]["loadavg_end"] = _loadavg()
    path = Path(args.json) if args.json else (
        ROOT / "benchmarks" / "results" / f"{label}-{_dt.datetime.now(_dt.timezone.utc):%Y%m%dT%H%M%SZ}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str))
    console.print(f"total {results['wall_s']:.1f} s; JSON written to {path}")
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
