"""``kvverify prove | zoo | replay | report | models``, and the default run (no command)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from kvverify.cli.check import print_check, run_check
from kvverify.cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    Formatter,
    esc,
    human_bytes,
    make_console,
)
from kvverify.cli.fuzz import print_fuzz, run_fuzz
from kvverify.errors import KVVerifyError


def cmd_prove(args: argparse.Namespace) -> int:
    from kvverify import reports
    from kvverify.cli.lemmas import exit_code, print_results, run_lemmas

    t0 = time.perf_counter()
    results = run_lemmas(args.flaw, args.names or None, fixes=args.fix)
    code = print_results(results, as_json=args.json)
    err = make_console(stderr=True)
    if not args.no_reports:
        for r in results:
            if r.result == "counterexample" and (not r.ok or args.report_findings):
                path = reports.report_lemma(r, directory=args.reports_dir)
                err.print(f"report: {reports.display_path(path)}")
    if not args.json:
        err.print(f"[dim]{len(results)} lemmas in {time.perf_counter() - t0:.2f} s[/dim]")
    return exit_code(results) if code is None else code


def _zoo_module() -> Any:
    try:
        from kvverify import zoo
    except ImportError as e:
        raise KVVerifyError(f"the bug zoo is not available in this build ({e})") from None
    return zoo


def cmd_zoo(args: argparse.Namespace) -> int:
    from kvverify import engines

    engine = getattr(args, "engine", "all")
    catalog = {n: f for e in engines.ENGINES.values() if engine in ("all", e.name)
               for n, f in e.flaw_catalog.items()}
    if args.list:
        if args.json:
            print(json.dumps([{**dataclasses.asdict(f), "engine": engines.engine_of_flaw(f.name).name}
                              for f in catalog.values()], indent=2))
            return EXIT_OK
        from rich.table import Table
        t = Table(title="kvverify bug zoo: the catalogued flaws", title_justify="left")
        for col in ("flaw", "engine", "upstream", "symptom", "caught by"):
            t.add_column(col, overflow="fold")
        for f in catalog.values():
            t.add_row(f.name, engines.engine_of_flaw(f.name).title, f.upstream, f.symptom, f.property_name)
        make_console().print(t)
        return EXIT_OK
    if (args.record or args.markdown) and (args.names or engine != "all"):
        raise KVVerifyError("--record and --markdown run every engine's every flaw: name none, no --engine")
    zoo = _zoo_module()
    if args.record or args.markdown:  # README's tables: one per engine, from one record
        results = zoo.run_zoo()
        from kvverify import zoo_record  # after the run: a module loaded before it would move its counts
        data = zoo_record.record(results)
        if args.markdown:
            print("\n\n".join(zoo_record.render(data, e) for e in engines.ENGINES))
        if args.record:
            path, readme = zoo_record.write(data, zoo_record.repo_root())
            make_console(stderr=True).print(f"wrote {path} and README.md's bug-zoo tables ({readme})")
        return EXIT_OK if all(r.caught for r in results) else EXIT_FAIL
    results = zoo.run_zoo(args.names or list(catalog))
    if args.json:
        print(json.dumps([_zoo_json(r) for r in results], indent=2))
    else:
        make_console().print(zoo.zoo_table(results))
        escaped = [r.flaw for r in results if not r.caught]
        make_console().print(f"{len(results) - len(escaped)}/{len(results)} flaws caught"
                             + (f"; [bold red]ESCAPED: {', '.join(escaped)}[/bold red]" if escaped else "."))
    return EXIT_OK if all(r.caught for r in results) else EXIT_FAIL


def _zoo_json(r: Any) -> dict[str, Any]:
    if hasattr(r, "to_json"):
        return r.to_json()
    return dataclasses.asdict(r)


def cmd_replay(args: argparse.Namespace) -> int:
    from kvverify import reports

    report = reports.load_report(args.report)
    flaw_names = [] if args.without_flaws else (args.flaw or None)
    outcome = reports.replay_report(report, target=args.target, flaw_names=flaw_names, fix_names=args.fix)
    used = report.get("flaws") if flaw_names is None else flaw_names
    used_fixes = report.get("fixes") if args.fix is None else args.fix
    if args.json:
        print(json.dumps({"report": str(args.report), "property": report.get("property"),
                          "flaws": used, "fixes": used_fixes, "reproduced": outcome.reproduced,
                          "status": outcome.status, "detail": outcome.detail, "violation": outcome.violation},
                         indent=2))
    else:
        console = make_console()
        v = report.get("violation") or {}
        console.print(f"replaying [bold]{esc(report.get('property'))}[/bold] ({report.get('kind')}) — recorded "
                      f"[bold]{esc(v.get('name'))}[/bold]: {esc(v.get('reason'))}")
        console.print(f"flaws on: {', '.join(used or []) or 'none'}; fixes on: "
                      f"{', '.join(used_fixes or []) or 'none'}")
        if outcome.reproduced:
            console.print(f"[bold red]{outcome.status}[/bold red]: {esc(outcome.detail)}")
            trace = outcome.trace or {}
            if trace.get("outcome"):
                oc = trace["outcome"]
                console.print(f"[dim]last workload: stall={oc.get('stall_reason')} steps={oc.get('steps')} "
                              f"running={oc.get('running')} waiting={oc.get('waiting')} "
                              f"free_blocks={oc.get('free_blocks')}[/dim]")
        else:
            console.print(f"[bold green]not reproduced — {outcome.status}[/bold green]: {esc(outcome.detail)}")
    return outcome.exit_code


def cmd_report(args: argparse.Namespace) -> int:
    from kvverify import reports

    where = Path(args.dir) if args.dir else reports.reports_dir()
    if not where.is_dir():
        where.mkdir(parents=True, exist_ok=True)
    md, html_path, n = reports.render_index(where)
    items = reports.list_reports(where)
    if args.json:
        print(json.dumps({"index_md": str(md), "index_html": str(html_path),
                          "overview_svg": str(where / reports.OVERVIEW_SVG), "count": n,
                          "reports": [{"file": str(p), "property": r.get("property"), "flaws": r.get("flaws"),
                                       "violation": (r.get("violation") or {}).get("name"),
                                       "replay": f"kvverify replay {reports.display_path(p)}"} for p, r in items]},
                         indent=2))
        return EXIT_OK
    console = make_console()
    if items:
        from rich.table import Table
        t = Table(title=f"{n} counterexample report(s) in {reports.display_path(where)}", title_justify="left")
        for col in ("invariant", "property", "flaws", "replay"):
            t.add_column(col, overflow="fold")
        for p, r in items:
            t.add_row((r.get("violation") or {}).get("name", ""), r.get("property", ""),
                      ", ".join(r.get("flaws") or []) or "—", f"kvverify replay {reports.display_path(p)}")
        console.print(t)
    else:
        console.print(f"no reports in {reports.display_path(where)}")
    console.print(f"index: {reports.display_path(md)} and {reports.display_path(html_path)} "
                  f"(overview picture: {reports.display_path(where / reports.OVERVIEW_SVG)})")
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from kvverify import catalog

    layouts = [catalog.load_model(n) for n in catalog.list_models()]
    if args.json:
        print(json.dumps([{"name": m.name, "layers": m.kind_counts(), "dtype": m.dtype,
                           "max_position_embeddings": m.max_position_embeddings, "hf_id": m.hf_id}
                          for m in layouts], indent=2))
        return EXIT_OK
    from rich.table import Table
    t = Table(title="kvverify model catalog (kvverify check --model NAME)", title_justify="left")
    for col in ("model", "layers", "dtype", "max_position_embeddings"):
        t.add_column(col)
    for m in layouts:
        t.add_row(m.name, ", ".join(f"{n} {k}" for k, n in m.kind_counts().items()), m.dtype,
                  f"{m.max_position_embeddings:,}" if m.max_position_embeddings else "—")
    make_console().print(t)
    return EXIT_OK


DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_MEMORY = 20 * 2**30
DEFAULT_FUZZ_SECONDS = 20.0


def cmd_default(args: argparse.Namespace) -> int:
    """No arguments: check a catalog model, prove the lemmas, run the bug zoo, fuzz briefly.

    The zoo runs before the fuzz: it is derandomized, and Hypothesis mines constants from
    the modules loaded so far, which the fuzz's suite discovery would add to.
    """
    from rich.table import Table

    from kvverify import catalog
    from kvverify.cli.lemmas import results_table, run_lemmas

    console = make_console()
    steps: list[tuple[str, bool, str, float]] = []
    console.rule(f"[bold]1/4 check[/bold]: {DEFAULT_MODEL}, its full length, {human_bytes(DEFAULT_MEMORY)} "
                 "of KV cache")
    t0 = time.perf_counter()
    r = run_check(catalog.load_model(DEFAULT_MODEL), kv_cache_memory_bytes=DEFAULT_MEMORY)
    print_check(r, console)
    steps.append(("check", r["exit_code"] == 0, r["verdict"].split(" (")[0],
                  time.perf_counter() - t0))

    console.rule("[bold]2/4 prove[/bold]: the Z3 boundary lemmas")
    t0 = time.perf_counter()
    lemmas = run_lemmas()
    console.print(results_table(lemmas))
    bad = [x.name for x in lemmas if not x.ok]
    known = sum(1 for x in lemmas if x.known_finding)
    steps.append(("prove", not bad, f"{len(lemmas) - len(bad)}/{len(lemmas)} as expected ({known} known "
                  f"finding(s))" + (f"; unexpected: {', '.join(bad)}" if bad else ""), time.perf_counter() - t0))

    console.rule("[bold]3/4 bug zoo[/bold]: every catalogued vLLM defect, re-introduced")
    t0 = time.perf_counter()
    try:
        zoo = _zoo_module()
        results = zoo.run_zoo()
        console.print(zoo.zoo_table(results))
        escaped = [z.flaw for z in results if not z.caught]
        steps.append(("zoo", not escaped, f"{len(results) - len(escaped)}/{len(results)} flaws caught"
                      + (f"; ESCAPED: {', '.join(escaped)}" if escaped else ""), time.perf_counter() - t0))
    except KVVerifyError as e:
        steps.append(("zoo", False, str(e), time.perf_counter() - t0))

    console.rule(f"[bold]4/4 fuzz[/bold]: every property, {DEFAULT_FUZZ_SECONDS:.0f} s")
    summary = run_fuzz(args.fuzz_seconds, profile="dev", seed=0, console=console)
    print_fuzz(summary, console)
    steps.append(("fuzz", summary.failures == 0, f"{summary.examples:,} examples, {summary.failures} failing, "
                  f"{len(summary.reports)} report(s)", summary.seconds))

    t = Table(title="kvverify — verdict", title_justify="left")
    for col in ("step", "result", "", "time"):
        t.add_column(col)
    for name, ok, text, secs in steps:
        t.add_row(name, "[green]ok[/green]" if ok else "[bold red]FAILED[/bold red]", esc(text), f"{secs:.1f} s")
    console.print(t)
    ok = all(s[1] for s in steps)
    console.print("[bold green]All as expected.[/bold green]" if ok else
                  "[bold red]Something is not as expected: see above.[/bold red]")
    return EXIT_OK if ok else EXIT_FAIL


def add_prove_parser(sub: Any, flaw_choices: list[str]) -> argparse.ArgumentParser:
    """Register ``prove`` on the ``kvverify`` subparsers."""
    pr = sub.add_parser("prove", formatter_class=Formatter, help="prove the Z3 boundary lemmas",
                        description="Proves every lemma (or the named ones) from the same arithmetic the "
                        "reference executes. Exit 1 on an unexpected counterexample or an unknown; a "
                        "counterexample is written up as a report.")
    pr.add_argument("names", nargs="*", metavar="LEMMA", help="lemmas to prove (default: all)")
    pr.add_argument("--flaw", choices=flaw_choices, metavar="NAME", help="prove with a bug-zoo flaw on")
    pr.add_argument("--fix", action="store_true", help="evaluate each finding's lemma under its proposed fix")
    pr.add_argument("--json", action="store_true", help="print a JSON list")
    pr.add_argument("--no-reports", action="store_true", help="write no counterexample reports")
    pr.add_argument("--report-findings", action="store_true", help="also report known findings")
    pr.add_argument("--reports-dir", metavar="DIR", help="where reports go")
    pr.set_defaults(func=cmd_prove)
    return pr


def add_zoo_parser(sub: Any, flaw_choices: list[str]) -> argparse.ArgumentParser:
    """Register ``zoo`` on the ``kvverify`` subparsers."""
    z = sub.add_parser("zoo", formatter_class=Formatter, help="re-introduce every catalogued engine defect and "
                       "show the suite catches it",
                       description="For each bug-zoo flaw: switch it on, run the property that must catch "
                       "it from a cold start, report examples, seconds and the shrunk counterexample. "
                       "Exit 1 if any flaw escapes.")
    z.add_argument("names", nargs="*", metavar="FLAW", help="flaws to run (default: all)")
    z.add_argument("--list", action="store_true", help="list the flaws without running them")
    z.add_argument("--json", action="store_true", help="print a JSON list")
    z.add_argument("--markdown", action="store_true", help="print README's bug-zoo tables (Markdown) of this run")
    z.add_argument("--record", action="store_true",
                   help="record this run in docs/zoo.json and regenerate README's bug-zoo tables from it")
    from kvverify.engines import ENGINES
    z.add_argument("--engine", choices=("all", *ENGINES), default="all",
                   help="only this engine's zoo (kvverify/engines.py: vLLM's kvverify/flaws.py, SGLang's "
                        "kvverify/sglang/flaws.py)")
    z.set_defaults(func=cmd_zoo)
    return z


def add_replay_parser(sub: Any, flaw_choices: list[str]) -> argparse.ArgumentParser:
    """Register ``replay`` on the ``kvverify`` subparsers."""
    r = sub.add_parser("replay", formatter_class=Formatter, help="re-run a counterexample report exactly",
                       description="Rebuilds the example from a report's JSON and runs the property body "
                       "once on it, with the recorded flaws and fixes on (a lemma report re-proves the "
                       "lemma).\nExit 1: reproduced (still failing); 0: passes now; 2: unreadable report.")
    r.add_argument("report", metavar="REPORT", help="a reports/<property>-<hash>.json file")
    r.add_argument("--without-flaws", action="store_true",
                   help="replay on the plain reference (does the faithful reference fail too?)")
    r.add_argument("--flaw", action="append", choices=flaw_choices, metavar="NAME",
                   help="replay with these flaws instead of the recorded ones")
    r.add_argument("--fix", action="append", metavar="NAME",
                   help="replay with these proposed fixes on instead of the recorded ones (does the fix hold?)")
    r.add_argument("--target", default=None, help="system under test (default: the recorded one)")
    r.add_argument("--json", action="store_true", help="print the outcome as JSON")
    r.set_defaults(func=cmd_replay)
    return r


def add_report_parser(sub: Any, flaw_choices: list[str]) -> argparse.ArgumentParser:
    """Register ``report`` on the ``kvverify`` subparsers."""
    rp = sub.add_parser("report", formatter_class=Formatter, help="index all reports (Markdown + HTML)",
                        description="Writes reports/index.md and a single self-contained reports/index.html "
                        "(inline CSS, no external assets) of every counterexample report.")
    rp.add_argument("--dir", metavar="DIR", help="the reports directory ($KVVERIFY_REPORTS_DIR or reports/)")
    rp.add_argument("--json", action="store_true", help="print the list as JSON")
    rp.set_defaults(func=cmd_report)
    return rp


def add_models_parser(sub: Any, flaw_choices: list[str]) -> argparse.ArgumentParser:
    """Register ``models`` on the ``kvverify`` subparsers."""
    m = sub.add_parser("models", formatter_class=Formatter, help="list the model catalog")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_models)
    return m
