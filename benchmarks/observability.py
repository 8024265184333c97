"""What Hypothesis' observability (the nightly coverage table) costs a fuzzing run, as a ratio.

    python -m benchmarks.observability [--seconds 30] [--reps 2]

Alternates ``kvverify fuzz --profile nightly`` runs without and with
``HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1`` (+ ``--coverage-json``, which folds and empties the
observation file after every batch), each a fresh process and database, and reports the CPU
time per 1,000 examples of each (child user + system time: less sensitive than wall time to
other load on a shared machine) and their ratio. Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(seconds: float, observe: bool) -> tuple[int, float]:
    """(examples, CPU seconds) of one fuzz process."""
    with tempfile.TemporaryDirectory(prefix="kvobs-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPOTHESIS_", "KVVERIFY_"))}
        env.update(KVVERIFY_DB=f"{tmp}/db", HYPOTHESIS_STORAGE_DIRECTORY=f"{tmp}/hyp")
        cmd = [sys.executable, "-c", "import sys; from kvverify.cli import main; sys.exit(main())", "fuzz",
               "--profile", "nightly", "--seconds", str(seconds), "--no-progress", "--json",
               "--reports-dir", f"{tmp}/reports"]
        if observe:
            env.update(HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY="1", HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER="1")
            cmd += ["--coverage-json", f"{tmp}/coverage.json"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=seconds * 10 + 120)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return int(json.loads(out.stdout)["examples"]), cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args(argv)
    per_k: dict[bool, list[float]] = {False: [], True: []}
    print("| run | observability | examples | CPU s | CPU s / 1,000 examples |\n|---:|---|---:|---:|---:|")
    for rep in range(1, args.reps + 1):
        for observe in (False, True):
            n, cpu = one_run(args.seconds, observe)
            per_k[observe].append(1000 * cpu / max(n, 1))
            print(f"| {rep} | {'on' if observe else 'off'} | {n:,} | {cpu:.1f} | {per_k[observe][-1]:.2f} |")
    off, on = statistics.median(per_k[False]), statistics.median(per_k[True])
    print(f"\nmedian CPU s per 1,000 examples: off {off:.2f}, on {on:.2f}; ratio on/off {on / off:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
