"""Profile one hot path with cProfile and print the top functions.

    python -m benchmarks.profile detect mamba_align_zero_chunk [--seed 0]
    python -m benchmarks.profile prop kvverify.props.runtime:test_predictor_equals_allocator [-n 200]
    python -m benchmarks.profile pool [--blocks 100000]
    python -m benchmarks.profile scheduler

Writes ``benchmarks/results/<what>.prof`` (open with ``python -m pstats`` or snakeviz).
For a sampling view of a whole run: ``pip install py-spy`` then
``py-spy record -o profile.svg -- python -m benchmarks.run --only detect``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path
from typing import Sequence

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile")
    ap.add_argument("what", choices=("detect", "prop", "pool", "scheduler"))
    ap.add_argument("name", nargs="?", help="the flaw (detect) or module:property (prop)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-n", "--max-examples", type=int, default=200)
    ap.add_argument("--blocks", type=int, default=100_000)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)

    if args.what == "detect":
        from benchmarks.detect import detect_one
        thunk = lambda: print(detect_one(args.name, args.seed, 1000))  # noqa: E731
    elif args.what == "prop":
        from benchmarks.props import PROPERTIES, measure_property
        match = [p for p in PROPERTIES if p[1].endswith(args.name) or p[1] == args.name]
        if not match:
            ap.error(f"unknown property {args.name}; one of {[p[1] for p in PROPERTIES]}")
        suite, path, fixes_on = match[0]
        thunk = lambda: print(measure_property(suite, path, fixes_on, args.max_examples))  # noqa: E731
    elif args.what == "pool":
        from benchmarks.runtime import bench_pool
        thunk = lambda: print(bench_pool(args.blocks))  # noqa: E731
    else:
        from benchmarks.runtime import FULL, VC, _config, bench_scheduler, workload
        thunk = lambda: print(bench_scheduler("full", VC, _config(1500, FULL), workload(128)))  # noqa: E731

    out = ROOT / "benchmarks" / "results" / f"{args.what}{'-' + args.name.split(':')[-1] if args.name else ''}.prof"
    out.parent.mkdir(parents=True, exist_ok=True)
    prof = cProfile.Profile()
    prof.runcall(thunk)
    prof.dump_stats(str(out))
    stats = pstats.Stats(prof).strip_dirs()
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    print(f"profile written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
