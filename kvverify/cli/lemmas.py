"""What ``kvverify prove [--json] [--flaw NAME] [--fix] [NAMES...]`` runs and prints.

``run_lemmas`` proves every lemma (or the named ones) on the reference, with a flaw on
if asked. ``exit_code`` is non-zero on any result that does not match its expectation:
an unexpected counterexample, an ``unknown``, or a known finding that no longer
reproduces (strict, like ``xfail(strict=True)``). Known findings reproduced are reported
but do not fail.
"""

from __future__ import annotations

import json
import time
from typing import Iterable, Sequence

from kvverify import flaws
from kvverify.lemmas import LEMMAS, get
from kvverify.lemmas.core import Result, prove


def run_lemmas(flaw: str | None = None, names: Sequence[str] | None = None,
               fixes: bool = False) -> list[Result]:
    """Prove the lemmas; ``flaw`` switches a bug-zoo flaw on; ``fixes`` evaluates each
    finding's lemma under its proposed fix (lemmas without a finding run as usual)."""
    if flaw is not None:
        flaws.check_name(flaw)
    lemmas = LEMMAS if not names else tuple(get(n) for n in names)
    return [prove(lemma, flaw=flaw, fix=fixes and lemma.finding is not None) for lemma in lemmas]


def exit_code(results: Iterable[Result]) -> int:
    return 0 if all(r.ok for r in results) else 1


def results_json(results: Sequence[Result]) -> str:
    """A JSON list: name, domain, result (proved/counterexample/unknown), seconds, expected,
    finding, ok, status, counterexample (case, values, evidence), replay, reason..."""
    return json.dumps([r.to_json() for r in results], indent=2)


def _result_cell(r: Result) -> str:
    colour = {"proved": "green", "counterexample": "red", "unknown": "magenta"}[r.result]
    if r.known_finding:
        colour = "yellow"
    text = f"[{colour}]{r.result}[/{colour}]"
    if r.known_finding:
        text += f"\n[yellow]known finding {r.finding}[/yellow]"
    elif r.fix:
        text += f"\n[dim]under fix {r.fix}[/dim]"
    if not r.ok:
        text += f"\n[bold red]{r.status}[/bold red]"
    return text


def _detail(r: Result) -> str:
    if r.result == "unknown":
        return r.reason or ""
    if r.counterexample is None:
        return ""
    cex = r.counterexample
    values = ", ".join(f"{k}={v}" for k, v in cex.get("values", {}).items())
    return f"counterexample ({cex['case']}): {values}\nreplay: {r.replay}"


def results_table(results: Sequence[Result], title: str | None = None):
    """A ``rich`` table: lemma, domain, result, time (details of non-proved results inline)."""
    from rich.table import Table

    flaw = next((r.flaw for r in results if r.flaw), None)
    total = sum(r.seconds for r in results)
    bad = sum(1 for r in results if not r.ok)
    caption = f"{len(results)} lemmas, {total:.2f} s total" + (f", {bad} FAILED" if bad else ", all as expected")
    table = Table(title=title or ("kvverify lemmas" + (f" (flaw {flaw})" if flaw else "")),
                  caption=caption, show_lines=True, expand=True)
    table.add_column("lemma", style="bold", overflow="fold", ratio=2)
    table.add_column("domain", ratio=5)
    table.add_column("result", ratio=2)
    table.add_column("time", justify="right", no_wrap=True)
    for r in results:
        domain = r.domain
        if r.result != "proved":
            domain += f"\n[dim]{_detail(r)}[/dim]"
        table.add_row(r.name, domain, _result_cell(r), f"{r.seconds:.2f} s")
    return table


def print_results(results: Sequence[Result], as_json: bool = False, console=None) -> int:
    """Print the table (or JSON) and return the exit code."""
    if as_json:
        print(results_json(results))
    else:
        from rich.console import Console
        (console or Console()).print(results_table(results))
    return exit_code(results)


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (``python -m kvverify.cli.lemmas``) until the CLI wires it."""
    import argparse

    ap = argparse.ArgumentParser(prog="kvverify prove")
    ap.add_argument("names", nargs="*", help="lemmas to prove (default: all)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--flaw", default=None)
    ap.add_argument("--fix", action="store_true", help="evaluate findings under their proposed fixes")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = run_lemmas(args.flaw, args.names or None, fixes=args.fix)
    code = print_results(results, as_json=args.json)
    if not args.json:
        print(f"wall time {time.perf_counter() - t0:.2f} s")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
