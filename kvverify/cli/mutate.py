"""``kvverify mutate --target vllm``: mutation of the installed vLLM's KV-cache modules
(:mod:`kvverify.mutate`); argument parsing and printing only."""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from kvverify.cli.common import Formatter, int_arg
from kvverify.errors import ConfigError
from kvverify.mutate import modules

EQUIVALENTS = Path(__file__).resolve().parents[2] / "docs" / "mutation-engine-equivalent.txt"
OUT_OF_SCOPE = Path(__file__).resolve().parents[2] / "docs" / "mutation-engine-out-of-scope.txt"


def add_mutate_parser(sub: Any) -> None:
    """Register ``mutate`` on the ``kvverify`` subparsers."""
    m = sub.add_parser("mutate", formatter_class=Formatter,
                       help="mutate the installed vLLM's KV-cache modules (an overlay) and run the properties",
                       description=__import__("kvverify.mutate", fromlist=["x"]).__doc__)
    m.add_argument("--target", required=True, help="the engine: vllm")
    m.add_argument("--module", action="append", default=[], metavar="NAME",
                   help="engine module by name or file (repeatable; default all): "
                        + ", ".join(f"{m.name} ({m.path})" for m in modules.MODULES.values()))
    m.add_argument("--sample", type=int_arg("sample", 1), default=None, metavar="N",
                   help="a seeded sample of N mutants per module (default: every mutant)")
    m.add_argument("--seed", type=int_arg("seed", 0), default=0, help="the sample's seed (default 0)")
    m.add_argument("--mutant", action="append", default=[], metavar="NAME",
                   help="only this mutant (MODULE:FUNCTION:N, repeatable)")
    m.add_argument("--list", action="store_true", help="list the selected mutants (name, line) and exit")
    m.add_argument("--python", default=None, metavar="PATH",
                   help="the interpreter with vLLM that runs the suites (default: this one)")
    m.add_argument("--vllm-tests", action="append", default=[], metavar="PATH",
                   help="vLLM's own unit tests (files or directories of a vLLM checkout's tests/) to run on the "
                        "same mutants, beside the properties")
    m.add_argument("--no-differential", action="store_true", help="do not run the live differential")
    m.add_argument("--workers", type=int_arg("workers", 1), default=1, help="mutants run in parallel (default 1)")
    m.add_argument("--cpu-factor", type=float, default=5.0,
                   help="CPU-time limit of a suite run: this many times its unmutated CPU time (at least 60 s)")
    m.add_argument("--equivalents", default=str(EQUIVALENTS), metavar="PATH",
                   help="the equivalent mutants' list (NAME DIGEST [class] reason)")
    m.add_argument("--out-of-scope", default=str(OUT_OF_SCOPE), metavar="PATH",
                   help="surviving faults outside the guarantees' scope, listed apart (NAME DIGEST [class] reason)")
    m.add_argument("--results", default=None, metavar="PATH",
                   help="append each mutant's result to this JSON-lines file as it finishes, and reuse the results "
                        "already in it (resume an interrupted run; the baseline runs again)")
    m.add_argument("--report-only", action="store_true",
                   help="run nothing: report the selected mutants that --results already holds")
    m.add_argument("--output", default=None, metavar="PATH", help="write the Markdown report here")
    m.add_argument("--json", action="store_true", help="print the results as JSON")
    m.set_defaults(func=cmd_mutate)


def cmd_mutate(args: argparse.Namespace) -> int:
    """Exit 0: no survivor (beyond listed equivalents and out-of-scope faults); 1: survivors; 2: bad input."""
    # imported here: building the `kvverify` parser must not import the target layer (it would
    # change the import order of the flaw registries every other command relies on)
    from kvverify.mutate import engine, generate, report
    from kvverify.mutate import run as runner
    from kvverify.safefiles import write_text

    if args.target != "vllm":
        raise ConfigError("target", args.target, "engine mutation supports: vllm")
    if args.cpu_factor <= 0:
        raise ConfigError("cpu_factor", args.cpu_factor, "must be > 0")
    chosen = modules.select(args.module)
    python = args.python or runner.default_python()
    source = runner.vllm_source(python)
    files = {m.name: modules.locate(m, source) for m in chosen}
    equivalents = report.load_equivalents(Path(args.equivalents))
    out_of_scope = report.load_equivalents(Path(args.out_of_scope))
    selected: list[generate.Mutant] = []
    in_scope: dict[str, int] = {}
    for m in chosen:
        names = tuple(n for n in args.mutant if n.split(":", 1)[0] == m.name)
        if args.mutant and not names:
            continue
        total, picked = generate.mutants(m, files[m.name], generate.Selection(args.sample, args.seed, names))
        in_scope[m.name] = total
        selected += picked
    unknown = [n for n in args.mutant if n.split(":", 1)[0] not in in_scope]
    if unknown:
        raise ConfigError("mutant", unknown[0], f"no such module in the selection; modules: {', '.join(in_scope)}")
    suites = [runner.guarantee_suite()]
    if not args.no_differential:
        suites.append(runner.differential_suite())
    if args.vllm_tests:
        suites.append(runner.vllm_tests_suite(args.vllm_tests))
    if args.list:
        for mu in selected:
            print(f"{mu.name}\t{mu.path}:{mu.line}\t{report.digest(mu)}")
        return 0
    root = Path(__file__).resolve().parents[2]
    limits = engine.Limits(cpu_factor=args.cpu_factor)
    log = sys.stderr
    print(f"kvverify mutate: {len(selected)} mutants of {', '.join(in_scope)} in {source}; baseline runs "
          f"of {', '.join(s.name for s in suites)}", file=log, flush=True)
    done = report.load_results(Path(args.results)) if args.results else {}
    if args.report_only:
        if not args.results:
            raise ConfigError("report_only", True, "needs --results FILE")
        selected = [m for m in selected if m.name in done]
    bases = [] if args.report_only else engine.baselines(python, suites, root, limits)
    for b in bases:
        print(f"  baseline {b.suite.name}: {b.usable} tests usable, {b.cpu_seconds:.0f} s CPU"
              + (f", left out (failing unmutated): {', '.join(b.left_out)}" if b.left_out else ""), file=log, flush=True)
    lock = threading.Lock()

    def progress(r: "engine.MutantResult") -> None:
        kind = report.kill_kind(r) or "SURVIVED"
        extra = " ".join(f"{s}={v.kind}" for s, v in r.verdicts.items())
        with lock:
            print(f"  {r.mutant.name}: {kind} ({extra})", file=log, flush=True)
            if args.results:
                with open(args.results, "a") as f:
                    f.write(json.dumps(report.record(r)) + "\n")

    # round robin over the modules: an interrupted run has measured every module alike
    by_module = [[m for m in selected if m.module == name and m.name not in done] for name in in_scope]
    todo = [m for round_ in itertools.zip_longest(*by_module) for m in round_ if m is not None]
    previous = signal.signal(signal.SIGTERM, lambda *_: runner.STOP.set())
    try:
        fresh = {r.mutant.name: r for r in engine.run(python, todo, bases, root=root, source=source,
                                                      limits=limits, workers=args.workers, progress=progress)}
    except KeyboardInterrupt:
        runner.STOP.set()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    results = [fresh.get(m.name) or done[m.name] for m in selected]
    data = report.summarize(results, in_scope, equivalents, out_of_scope)
    command = "kvverify mutate " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["mutate"] \
        else "kvverify mutate --target vllm"
    md = report.render_markdown(data, command=command, bases=bases)
    if args.output:
        write_text(args.output, md, what="--output")
    print(report.render_json(data) if args.json else md, end="")
    return 1 if any(m["status"] == "survived" for m in data["mutants"]) else 0


__all__ = ["add_mutate_parser", "cmd_mutate"]
