"""``kvverify``: the command line.

    kvverify                      the default run: check a catalog model, prove, bug zoo, fuzz 20 s
    kvverify check ...            will this model + memory + max_model_len start, and really serve?
    kvverify fuzz --seconds N     run the property suites for a time budget
    kvverify prove                the Z3 boundary lemmas
    kvverify zoo                  every historical vLLM defect re-introduced, and caught
    kvverify replay REPORT        re-run a counterexample report exactly
    kvverify report               index of all reports (Markdown + one self-contained HTML page)
    kvverify harness ...          allocate a plan with torch and check it
    kvverify models               the model catalog
    kvverify releases             the suite against every installed vLLM release -> docs/releases.md
    kvverify findings             the findings: fix option, vLLM patch, upstream-style test, verified
    kvverify diff --base X        the suite on a base vLLM and on yours: only what changed
    kvverify mutate --target vllm mutate the installed vLLM's KV-cache modules, run the properties

Exit status: 0 all as expected, 1 a check/property/lemma failed (or a flaw escaped),
2 bad input (the message names the field).

Modules: :mod:`~kvverify.cli.check` (the operator's linter), :mod:`~kvverify.cli.fuzz`
(time-boxed fuzzing), :mod:`~kvverify.cli.commands` (prove, zoo, replay, report, models,
the default run), :mod:`~kvverify.cli.common` (byte sizes, argument types, consoles).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from kvverify.cli.check import add_check_parser, load_layout, run_check
from kvverify.cli.commands import (
    DEFAULT_FUZZ_SECONDS,
    add_models_parser,
    add_prove_parser,
    add_replay_parser,
    add_report_parser,
    add_zoo_parser,
    cmd_default,
)
from kvverify.cli.common import (
    EXIT_USAGE,
    Formatter,
    flaw_names,
    human_bytes,
    parse_bytes,
)
from kvverify.cli.fuzz import add_fuzz_parser, discover_properties, run_fuzz
from kvverify.errors import KVVerifyError

_EPILOG = """examples:
  kvverify check --model llama-3.1-8b --max-model-len 131072 --kv-cache-memory-bytes 20GiB
  kvverify check --config-json ./config.json --max-model-len auto --gpu-memory-bytes 80GiB \\
                 --gpu-memory-utilization 0.9 --non-kv-cache-memory-bytes 20GiB --json
  kvverify check --model llama-3.1-8b --max-model-len 512 --num-gpu-blocks-override 32 \\
                 --flaw null_block_not_reserved        # what vLLM before #47272 did
  kvverify fuzz --seconds 300 --profile nightly
  kvverify prove --json
  kvverify zoo
  kvverify replay reports/test_startup_check_passes_implies_servable-1a2b3c4d5e.json
  kvverify report                                     # reports/index.md and reports/index.html

exit status: 0 as expected, 1 a failure (a check, property, lemma, or an escaped flaw),
2 bad input (the message names the field and the allowed values).
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``kvverify`` parser: every command registers its own subparser."""
    from kvverify import profiles  # noqa: F401 - profiles exist before --profile is checked

    flaw_choices = flaw_names()
    p = argparse.ArgumentParser(
        prog="kvverify", formatter_class=Formatter, epilog=_EPILOG,
        description="Property-based and formal verification of vLLM v1's KV-cache capacity and "
                    "admission logic.\nWith no command: check a catalog model, prove the lemmas, run the "
                    "bug zoo and fuzz for 20 s.")
    p.add_argument("--version", action="version", version=f"kvverify {_version()}")
    p.add_argument("--fuzz-seconds", type=float, default=DEFAULT_FUZZ_SECONDS, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    add_check_parser(sub, flaw_choices)
    add_fuzz_parser(sub, flaw_choices)
    add_prove_parser(sub, flaw_choices)
    add_zoo_parser(sub, flaw_choices)
    add_replay_parser(sub, flaw_choices)
    add_report_parser(sub, flaw_choices)
    try:
        from kvverify.cli.harness import add_harness_parser
    except ImportError:  # pragma: no cover - the harness is part of the package
        pass
    else:
        add_harness_parser(sub)
    add_models_parser(sub, flaw_choices)
    from kvverify.cli.findings import add_findings_parser
    add_findings_parser(sub)
    from kvverify.cli.releases import add_releases_parser
    add_releases_parser(sub)
    from kvverify.cli.diff import add_diff_parser
    add_diff_parser(sub)
    from kvverify.cli.mutate import add_mutate_parser
    add_mutate_parser(sub)
    return p


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("kvverify")
    except Exception:  # noqa: BLE001
        return "0+unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvverify`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help / --version (0) or a usage error (2)
        return int(e.code) if isinstance(e.code, int) else (0 if e.code is None else EXIT_USAGE)
    func = getattr(args, "func", None)
    try:
        if func is None:
            return cmd_default(args)
        return int(func(args))
    except KVVerifyError as e:
        name = f"kvverify {args.command}" if getattr(args, "command", None) else "kvverify"
        print(f"{name}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


__all__ = ["build_parser", "discover_properties", "human_bytes", "load_layout", "main", "parse_bytes",
           "run_check", "run_fuzz"]
