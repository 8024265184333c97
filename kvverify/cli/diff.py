"""``kvverify diff --base <release | venv | source tree>``: what did my change to vLLM break?
(:mod:`kvverify.regression`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kvverify.regression
from kvverify.cli.common import Formatter
from kvverify.errors import ConfigError


def add_diff_parser(sub: Any) -> None:
    """Register ``diff`` on the ``kvverify`` subparsers."""
    d = sub.add_parser("diff", formatter_class=Formatter, description=kvverify.regression.__doc__,
                       help="the suite on a base vLLM and on yours; only what changed (exit 1: a new failure)")
    d.add_argument("--base", required=True, metavar="X.Y.Z|PATH",
                   help="the vLLM to compare against: an installed release (found with --venvs), a venv, or a "
                        "vLLM source tree (a checkout of the base commit)")
    d.add_argument("--head", default=None, metavar="PATH",
                   help="the vLLM under test (default: the one this interpreter imports, an editable checkout say)")
    d.add_argument("--python", default=None, metavar="PATH",
                   help="interpreter for a source-tree side (default: this one)")
    d.add_argument("--venvs", action="append", default=[], metavar="DIR",
                   help="where to look for a release venv (default as `kvverify releases`)")
    d.add_argument("--reports-root", default=None, metavar="DIR",
                   help="per-side JUnit, logs and counterexample reports (default reports/diff)")
    d.add_argument("--workers", type=int, default=2, help="pytest-xdist workers per side (0: no xdist)")
    d.add_argument("--profile", default="ci", help="Hypothesis profile (default ci: derandomized)")
    d.add_argument("--timeout", type=float, default=1800.0, help="seconds per side")
    d.add_argument("--only", action="append", default=[], metavar="PATH[::TEST]",
                   help="run these property files / node ids instead of properties/ (repeatable)")
    d.add_argument("--json", action="store_true", help="print one JSON object (progress goes to stderr)")
    d.set_defaults(func=cmd_diff)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def cmd_diff(args: argparse.Namespace) -> int:
    from kvverify.regression import compare, render, run, sides
    from kvverify.releases import replays, venvs

    root = repo_root()
    if args.workers < 0:
        raise ConfigError("workers", args.workers, "an integer >= 0")
    python = Path(args.python) if args.python else None
    sources = [Path(p) for p in args.venvs] or venvs.default_sources(root)
    base = sides.resolve(args.base, field_name="base", python=python, sources=sources)
    head = sides.resolve(args.head, field_name="head", python=python, sources=sources) if args.head \
        else sides.current(python)
    out = Path(args.reports_root) if args.reports_root else root / "reports" / "diff"
    t0 = time.monotonic()
    runs = []
    for name, side in (("base", base), ("head", head)):
        runs.append(run.run_side(side, sides.vllm_version(side, root), root, out / name, workers=args.workers,
                                 profile=args.profile, timeout=args.timeout, only=args.only, name=name))
    b, h = runs
    broken = [f"{name} ({r.side.label}): {r.error}" for name, r in (("base", b), ("head", h)) if r.error]
    if broken:
        print("kvverify diff: cannot compare, a side did not run:\n  " + "\n  ".join(broken), file=sys.stderr)
        return 2

    def replay(side: sides.Side, reports: Sequence[str]) -> replays.Answers:
        return replays.replay_on(Path(side.where), reports, root, python=side.python, extra_env=side.env)

    changes = compare.compare(b, h)
    compare.confirm(changes, b.side, h.side, replay)
    seconds = time.monotonic() - t0
    if args.json:
        print(json.dumps(render.to_json(b, h, changes, seconds), indent=1))
    else:
        print(render.to_text(b, h, changes, seconds))
    return 1 if any(c.counts_as_new_failure for c in changes) else 0
