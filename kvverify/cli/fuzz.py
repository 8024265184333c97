"""``kvverify fuzz``: the property suites for a time budget.

Every fuzzable property (the ``@given`` bodies of :mod:`kvverify.props` over ``target``, and
the ``RuleBasedStateMachine`` s) runs round-robin in batches sized to the time left, under
a Hypothesis profile, until the budget is spent. A failing property is written up as a
report (:mod:`kvverify.reports`) and retired; a property marked ``xfail`` in the suite
files that fails as expected is a known finding; a property the target cannot run
(``pytest.skip`` / ``unittest.SkipTest``, with its reason) is *skipped* — never a failure.
The profiles with a database (``nightly``, ``replay``) save to / replay from the target's
scope of it (:mod:`kvverify.exampledb`); ``--owned-keys`` records the keys a shard owns
for the nightly merge (:mod:`kvverify.nightly.merge`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import re
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Sequence

from kvverify.cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    Formatter,
    arg_type,
    esc,
    flaws_on,
    int_arg,
    make_console,
)
from kvverify.errors import ConfigError, KVVerifyError


@dataclasses.dataclass
class FuzzProperty:
    """One fuzzable property: a ``@given`` body over ``target``, or a state machine."""

    name: str
    obj: Any
    kind: str  # "given" | "stateful"
    module: str
    file: str | None = None
    xfail: Any = None
    examples: int = 0
    batches: int = 0
    seconds: float = 0.0
    status: str = "ok"  # ok | FAILED | known finding | error | skipped
    detail: str = ""
    reports: list[str] = dataclasses.field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.status != "ok"


def discover_properties(suite: str | Path | None = "properties") -> list[FuzzProperty]:
    """The property bodies of :mod:`kvverify.props`, plus the suite files' (for their xfail marks).

    Fuzzable: module-level ``@given`` functions whose only non-generated argument is
    ``target``, and ``RuleBasedStateMachine`` subclasses defined in :mod:`kvverify.props`.
    """
    import importlib
    import inspect
    import pkgutil

    from hypothesis.stateful import RuleBasedStateMachine

    import kvverify.props as props
    from kvverify import reports
    from kvverify.hypothesis_hooks import strategies_of

    found: list[FuzzProperty] = []
    by_id: dict[int, FuzzProperty] = {}

    def consider(name: str, value: Any, module: Any, file: str | None) -> None:
        if reports.is_property(value):
            given_kwargs = strategies_of(value)
            if given_kwargs is None:
                return
            params = set(inspect.signature(value.hypothesis.inner_test).parameters)
            if params - set(given_kwargs) != {"target"}:
                return
            if any(m.name == "parametrize" for m in getattr(value, "pytestmark", [])):
                return
            prop = by_id.get(id(value))
            if prop is None:
                prop = FuzzProperty(name, value, "given", value.__module__, file)
                by_id[id(value)] = prop
                found.append(prop)
            elif file and not prop.file:
                prop.file = file
        elif inspect.isclass(value) and issubclass(value, RuleBasedStateMachine) \
                and value is not RuleBasedStateMachine and value.__module__ == module.__name__:
            if id(value) not in by_id:
                prop = FuzzProperty(value.__name__, value, "stateful", value.__module__, file)
                by_id[id(value)] = prop
                found.append(prop)

    for info in pkgutil.iter_modules(props.__path__):
        module = importlib.import_module(f"kvverify.props.{info.name}")
        for name, value in sorted(vars(module).items()):
            consider(name, value, module, None)
    if suite is not None and Path(suite).is_dir():
        for path in sorted(Path(suite).glob("test_*.py")):
            try:
                module = reports.load_module_from_file(path)
            except KVVerifyError:
                continue  # e.g. an optional dependency missing: pytest reports it
            for name, value in sorted(vars(module).items()):
                if name.startswith("test") or isinstance(value, type):
                    consider(name, value, module, str(path))
    from kvverify.props.findings import KNOWN_FAILURES, xfail_mark
    for prop in found:
        marks = [m for m in getattr(prop.obj, "pytestmark", []) if m.name == "xfail"]
        if not marks and prop.name in KNOWN_FAILURES:  # suite files not on hand: the registry
            marks = [xfail_mark(prop.name).mark]
        prop.xfail = marks[0] if marks else None
    return found


def _engine(prop: FuzzProperty) -> str:
    """The engine whose contract a property is stated over (:func:`kvverify.engines.engine_of_property`)."""
    from kvverify.engines import engine_of_property
    return engine_of_property(prop.module).name


def _engine_targets(props: list[FuzzProperty], target: str) -> tuple[list[FuzzProperty], dict[str, Any]]:
    """Keep the properties ``--target`` has a system for, and that system per engine
    (:func:`kvverify.targets.targets_for`): ``reference`` runs every engine's reference;
    ``vllm`` vLLM's; ``sglang`` SGLang's (with the reference-vs-SGLang differential, which
    needs the installed SGLang)."""
    from kvverify.targets import TARGETS, get_engine_target, targets_for
    names = targets_for(target)
    targets: dict[str, Any] = {engine: get_engine_target(name) for engine, name in names.items()}
    real_sglang = "sglang" in names and not TARGETS[names["sglang"]].reference
    kept = [p for p in props if _engine(p) in targets
            and (real_sglang or not p.module.startswith("kvverify.sglang.differential"))]
    return kept, targets


def _select(props: list[FuzzProperty], patterns: Sequence[str] | None, shard: str | None) -> list[FuzzProperty]:
    if patterns:
        props = [p for p in props if any(pat in p.name or pat in p.module for pat in patterns)]
    if shard:
        i, n = (int(x) for x in _shard(shard).split("/"))
        props = [p for k, p in enumerate(sorted(props, key=lambda p: p.name)) if k % n == i - 1]
    return props


def _shard(text: str) -> str:
    m = re.fullmatch(r"(\d+)/(\d+)", str(text).strip())
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ConfigError("shard", text, "must be I/N with 1 <= I <= N, e.g. 2/3")
    return f"{int(m.group(1))}/{int(m.group(2))}"


def _observer(coverage_json: str | Path | None, target: str, label: str) -> Any:
    """The observation accumulator for ``--coverage-json`` (``None`` without it)."""
    if coverage_json is None:
        return None
    from kvverify.nightly import coverage
    if not coverage.observability_on():
        raise ConfigError("coverage-json", str(coverage_json), "needs HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1 in "
                          "the environment (Hypothesis reads it when it is imported)")
    out = Path(coverage_json)
    if out.is_symlink() or (out.exists() and not out.is_file()):
        raise ConfigError("coverage-json", str(out), "must be a regular file path (not a link or a directory)")
    acc = coverage.Accumulator(label=label, target=target)
    for path in coverage.observation_files():  # an earlier run's observations are not this run's
        os.truncate(path, 0)
    return acc


def _observation_files() -> list[Path]:
    from kvverify.nightly import coverage
    return coverage.observation_files()


def _one_pass(base: Any) -> bool:
    """A profile that draws nothing new (derandomized, or no ``generate`` phase) runs each
    property once."""
    from hypothesis import Phase
    return bool(base.derandomize) or Phase.generate not in base.phases


def skip_reason(exc: BaseException) -> str | None:
    """The reason, if ``exc`` is a skip (``pytest.skip``, ``unittest.SkipTest``, or one of them
    grouped), else ``None``."""
    import unittest

    import pytest

    from kvverify.reports import leaf_exceptions

    skip_types = (unittest.SkipTest, pytest.skip.Exception)
    leaves = leaf_exceptions(exc)
    if not leaves or not all(isinstance(e, skip_types) for e in leaves):
        return None
    return "; ".join(dict.fromkeys(str(getattr(e, "msg", None) or e) or type(e).__name__ for e in leaves))


def _skipped(prop: FuzzProperty, exc: BaseException) -> bool:
    """Mark ``prop`` skipped (with the reason) if ``exc`` is a skip: no failure, no report."""
    reason = skip_reason(exc)
    if reason is None:
        return False
    prop.status, prop.detail = "skipped", reason
    return True


def _expected_failure(prop: FuzzProperty, exc: BaseException) -> bool:
    if prop.xfail is None:
        return False
    raises = prop.xfail.kwargs.get("raises")
    return raises is None or isinstance(exc, raises)


@dataclasses.dataclass
class FuzzSummary:
    properties: list[FuzzProperty]
    seconds: float
    profile: str
    seed: int | None
    flaws: list[str]
    reports: list[str]

    @property
    def failures(self) -> int:
        return sum(1 for p in self.properties if p.status in ("FAILED", "error"))

    @property
    def skipped(self) -> int:
        return sum(1 for p in self.properties if p.status == "skipped")

    @property
    def examples(self) -> int:
        return sum(p.examples for p in self.properties)

    def to_json(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 2), "profile": self.profile, "seed": self.seed,
                "flaws": self.flaws, "examples": self.examples, "failures": self.failures,
                "skipped": self.skipped, "reports": self.reports,
                "properties": [{"name": p.name, "kind": p.kind, "module": p.module, "examples": p.examples,
                                "batches": p.batches, "seconds": round(p.seconds, 2), "status": p.status,
                                "detail": p.detail, "reports": p.reports} for p in self.properties]}


def run_fuzz(seconds: float = 60.0, *, profile: str = "dev", flaw_names: Sequence[str] = (),
             seed: int | None = None, patterns: Sequence[str] | None = None, shard: str | None = None,
             batch: int = 50, suite: str | Path | None = "properties", report_xfail: bool = False,
             reports_dir: str | Path | None = None, target: str = "reference", console: Any = None,
             live: bool = True, fix_names: Sequence[str] = (), owned_keys: str | Path | None = None,
             owner: str | None = None, coverage_json: str | Path | None = None) -> FuzzSummary:
    """Run the property suites round-robin, in batches, until ``seconds`` are spent.

    Each batch runs one property under the profile's settings with ``max_examples``
    sized to the time left (a derandomized profile such as ``ci`` runs each property once,
    in full; so does ``replay``, which only reuses the database). A failing property is
    written up as a report and retired; an ``xfail`` property failing as expected is a
    known finding (reported with ``report_xfail``); a skipping one is ``skipped``.
    ``owned_keys``: write the database keys this run touched there (a nightly shard's
    manifest), under ``owner`` (default ``"<target> <shard>"``). ``coverage_json``: fold
    Hypothesis' observations (``HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY`` must be set) into
    per-property counts after every batch, emptying the observation files, and write them
    there (:mod:`kvverify.nightly.coverage`).
    """
    from kvverify import exampledb, profiles

    with profiles.scoped(exampledb.scope_for(target, list(flaw_names), list(fix_names))):
        return _run_fuzz(seconds, profile, flaw_names, seed, patterns, shard, batch, suite, report_xfail,
                         reports_dir, target, console, live, fix_names, owned_keys, owner, coverage_json)


def _run_fuzz(seconds: float, profile: str, flaw_names: Sequence[str], seed: int | None,
              patterns: Sequence[str] | None, shard: str | None, batch: int, suite: str | Path | None,
              report_xfail: bool, reports_dir: str | Path | None, target: str, console: Any, live: bool,
              fix_names: Sequence[str], owned_keys: str | Path | None, owner: str | None,
              coverage_json: str | Path | None) -> FuzzSummary:
    from hypothesis import settings as Settings

    from kvverify import engines, exampledb, profiles
    from kvverify.props.findings import is_fixed
    from kvverify.targets import get_target

    flaw_names = list(flaw_names)
    fix_names = list(fix_names)
    profiles.check_database(profile)
    base = Settings.get_profile(profile)
    if seed is not None and profile in profiles.NIGHTLY_DB_PROFILES:
        raise ConfigError("seed", seed, f"the {profile} profile works through the example database, which "
                          "Hypothesis neither saves to nor replays from for a seeded test: drop --seed")
    scoped = base.database if isinstance(base.database, exampledb.ScopedDatabase) else None
    if owned_keys is not None and scoped is None:
        raise ConfigError("owned-keys", str(owned_keys), f"needs a profile that writes a database (nightly), "
                          f"not {profile}")
    if owned_keys is not None and (Path(owned_keys).is_symlink() or Path(owned_keys).is_dir()):
        raise ConfigError("owned-keys", str(owned_keys), "must be a regular file path (not a link or a directory)")
    observed = _observer(coverage_json, target, owner or f"{target} {shard or 'all'}")
    if fix_names and target == "vllm":  # the findings' patches, before anything imports vLLM
        from kvverify.targets import overlay
        overlay.activate(fix_names)
    props = _select(discover_properties(suite), patterns, shard)
    with engines.enabled(fixes=fix_names):  # each fix in its engine's catalogue
        for p in props:  # a known failure whose fixes are on must pass
            if p.xfail is not None and is_fixed(p.name, target):
                p.xfail = None
    props, tgt = _engine_targets(props, target)  # each engine's properties get its own target
    console = console or make_console()
    written: list[str] = []
    start = time.monotonic()
    deadline = start + seconds
    rounds = 0
    progress = None
    if live:
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        progress = Progress(SpinnerColumn(), TextColumn("[bold]fuzz[/bold] {task.description}"), BarColumn(),
                            TextColumn("{task.fields[examples]:,} examples · {task.fields[failures]} failing"),
                            TimeElapsedColumn(), console=console, transient=True)
        task = progress.add_task("", total=seconds, examples=0, failures=0)
        progress.start()
    try:
        with flaws_on(flaw_names, engine=None), engines.enabled(fixes=fix_names):
            while time.monotonic() < deadline:
                pending = [p for p in props if not p.done]
                if not pending:
                    break
                for prop in pending:
                    now = time.monotonic()
                    if now >= deadline:
                        break
                    if _one_pass(base) and prop.batches:
                        continue
                    if progress is not None:
                        progress.update(task, description=prop.name, completed=min(seconds, now - start))
                    _fuzz_batch(prop, base, deadline - now, len(pending), batch, seed, rounds, tgt,
                                report_xfail, reports_dir, written, console)
                    if observed is not None:
                        observed.add_files(_observation_files(), name=prop.name, truncate=True)
                    if progress is not None:
                        progress.update(task, examples=sum(p.examples for p in props),
                                        failures=sum(1 for p in props if p.status in ("FAILED", "error")),
                                        completed=min(seconds, time.monotonic() - start))
                rounds += 1
                if _one_pass(base) and all(p.batches or p.done for p in props):
                    break
    finally:
        if progress is not None:
            progress.stop()
        if owned_keys is not None and scoped is not None:
            exampledb.write_owned_keys(owned_keys, scoped, owner=owner or f"{target} {shard or 'all'}")
        if observed is not None and coverage_json is not None:
            from kvverify.reports.common import atomic_write_text
            atomic_write_text(Path(coverage_json), json.dumps(observed.to_json(), indent=1, sort_keys=True) + "\n")
    return FuzzSummary(props, time.monotonic() - start, profile, seed, flaw_names, written)


def _fuzz_batch(prop: FuzzProperty, base: Any, remaining: float, pending: int, batch: int, seed: int | None,
                rnd: int, tgt: Any, report_xfail: bool, reports_dir: Any, written: list[str],
                console: Any) -> None:
    from hypothesis import HealthCheck, Phase
    from hypothesis import settings as Settings
    from hypothesis.errors import Unsatisfiable

    from kvverify import reports
    from kvverify.hypothesis_hooks import rebuild

    per_example = prop.seconds / prop.examples if prop.examples else 0.02
    slice_s = max(0.5, min(remaining, remaining / max(1, pending), 10.0))
    if _one_pass(base):
        n = base.max_examples
    else:
        n = max(1, min(batch, int(slice_s / max(per_example, 1e-4))))
    # no explain phase: its coverage tracing costs seconds per failure, the report has the rest;
    # the property's own @example cases run in the first batch only
    s = Settings(base, max_examples=n, deadline=None, print_blob=True,
                 suppress_health_check=list(HealthCheck),
                 phases=[ph for ph in base.phases if ph is not Phase.explain
                         and (ph is not Phase.explicit or prop.batches == 0)])
    batch_seed = None if seed is None else (seed * 1_000_003 + rnd * 7919 + zlib.crc32(prop.name.encode())) % 2**32
    t0 = time.perf_counter()
    prop.batches += 1
    if prop.kind == "stateful":
        _fuzz_machine(prop, s, batch_seed, report_xfail, reports_dir, written, console)
        prop.seconds += time.perf_counter() - t0
        return
    test = rebuild(prop.obj, settings=s, seed=batch_seed)
    with reports.instrument([test]) as sink:
        try:
            test(target=tgt[_engine(prop)] if isinstance(tgt, dict) else tgt)
        except Unsatisfiable:
            pass  # no valid example in this small batch: try again next round
        except BaseException as exc:  # noqa: BLE001 - a failing property is the point
            if isinstance(exc, KeyboardInterrupt):
                raise
            if _skipped(prop, exc):
                return
            captures = sink.captures_for(exc)
            if not captures:
                prop.status, prop.detail = "error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                console.print(f"[red]fuzz: {prop.name}: {esc(prop.detail)}[/red]")
            for cap in captures:
                expected = _expected_failure(prop, cap.exc)
                prop.status = "known finding" if expected else "FAILED"
                v = reports.violations_from_exception(cap.exc)[0]
                prop.detail = f"[{v['name']}] {v['reason']}"
                if expected and not report_xfail:
                    continue
                try:
                    path = reports.report_failure(
                        cap, found_by="fuzz", directory=reports_dir, name=prop.name, file=prop.file,
                        known_finding=prop.xfail.kwargs.get("reason") if expected else None)
                except Exception as e:  # noqa: BLE001 - a report must never stop the run
                    console.print(f"[red]fuzz: {prop.name}: could not write the report: {esc(e)}[/red]")
                    continue
                shown = reports.display_path(path)
                prop.reports.append(shown)
                written.append(shown)
                console.print(f"[red]fuzz: {prop.name} failed[/red]: {esc(prop.detail)}\n  report: {shown}")
        finally:
            prop.examples += sink.examples
            prop.seconds += time.perf_counter() - t0


def _fuzz_machine(prop: FuzzProperty, s: Any, batch_seed: int | None, report_xfail: bool, reports_dir: Any,
                  written: list[str], console: Any) -> None:
    from hypothesis.errors import Unsatisfiable
    from hypothesis.stateful import run_state_machine_as_test

    from kvverify import flaws, reports
    from kvverify.hypothesis_hooks import seeded_machine
    from kvverify.reports import active_fixes

    machine = prop.obj
    counter = {"runs": 0}

    @functools.wraps(machine.__init__)  # the machine's own signature: Hypothesis' database key
    def counting_init(self: Any, *a: Any, **k: Any) -> None:  # digests it, pytest's must match
        counter["runs"] += 1
        machine.__init__(self, *a, **k)

    runner = type(machine.__name__, (machine,), {"__init__": counting_init, "__module__": machine.__module__,
                                                  "__qualname__": machine.__qualname__})
    if batch_seed is not None:
        runner = seeded_machine(runner, batch_seed)
    try:
        run_state_machine_as_test(runner, settings=s)
    except Unsatisfiable:
        pass
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        if _skipped(prop, exc):
            return
        expected = _expected_failure(prop, exc)
        prop.status = "known finding" if expected else "FAILED"
        v = reports.violations_from_exception(exc)[0]
        prop.detail = f"[{v['name']}] {v['reason']}"
        if not expected or report_xfail:
            try:
                paths = reports.report_stateful(machine, exc, directory=reports_dir, found_by="fuzz",
                                                flaw_names=sorted(flaws.active()),
                                                fix_names=sorted(active_fixes()))
            except Exception as e:  # noqa: BLE001 - a report must never stop the run
                paths = []
                console.print(f"[red]fuzz: {prop.name}: could not write the report: {esc(e)}[/red]")
            for path in paths:
                shown = reports.display_path(path)
                prop.reports.append(shown)
                written.append(shown)
                console.print(f"[red]fuzz: {prop.name} failed[/red]: {esc(prop.detail)}\n  report: {shown}")
    finally:
        prop.examples += counter["runs"]


def print_fuzz(summary: FuzzSummary, console: Any) -> None:
    from rich.table import Table

    title = f"kvverify fuzz — profile {summary.profile}, {summary.seconds:.0f} s"
    if summary.seed is not None:
        title += f", seed {summary.seed}"
    if summary.flaws:
        title += f" [red](flaw {', '.join(summary.flaws)} on)[/red]"
    t = Table(title=title, title_justify="left")
    for col, kw in (("property", {"overflow": "fold", "ratio": 3}), ("examples", {"justify": "right"}),
                    ("time", {"justify": "right", "no_wrap": True}), ("result", {"ratio": 2}),
                    ("report", {"overflow": "fold", "ratio": 2})):
        t.add_column(col, **kw)
    colours = {"ok": "green", "FAILED": "bold red", "error": "bold red", "known finding": "yellow",
               "skipped": "cyan"}
    for p in summary.properties:
        result = f"[{colours[p.status]}]{p.status}[/{colours[p.status]}]"
        if p.status == "known finding" and p.xfail is not None:
            result += f"\n[dim]{esc(str(p.xfail.kwargs.get('reason', '')).split(':')[0])}[/dim]"
        elif p.detail and p.status != "ok":
            result += f"\n[dim]{esc(p.detail[:160])}[/dim]"
        t.add_row(p.name + (" (stateful)" if p.kind == "stateful" else ""), f"{p.examples:,}",
                  f"{p.seconds:.1f} s", result, "\n".join(p.reports))
    console.print(t)
    known = sum(1 for p in summary.properties if p.status == "known finding")
    console.print(f"{summary.examples:,} examples over {len(summary.properties)} properties; "
                  f"{summary.failures} failing, {known} known finding(s), {summary.skipped} skipped, "
                  f"{len(summary.reports)} report(s) written.")


def cmd_fuzz(args: argparse.Namespace) -> int:
    if args.list:
        for p in _select(discover_properties(args.suite), args.property, args.shard):
            mark = "  [xfail: known finding]" if p.xfail is not None else ""
            print(f"{p.name}  ({p.kind}, {p.module}){mark}")
        return EXIT_OK
    if not (args.seconds > 0 and args.seconds < float("inf")):  # NaN and -1 too
        raise ConfigError("seconds", args.seconds, "must be a positive number of seconds")
    console = make_console(stderr=args.json)
    # --json: stdout is the JSON alone (Hypothesis prints its reproduction hints there)
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:
        summary = _run_from_args(args, console)
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print_fuzz(summary, console)
    return EXIT_FAIL if summary.failures else EXIT_OK


def _run_from_args(args: argparse.Namespace, console: Any) -> FuzzSummary:
    return run_fuzz(args.seconds, profile=args.profile, flaw_names=args.flaw or (), fix_names=args.fix or (),
                    seed=args.seed,
                    patterns=args.property, shard=args.shard, batch=args.batch, suite=args.suite,
                    report_xfail=args.report_xfail, reports_dir=args.reports_dir, target=args.target,
                    console=console, live=not args.json and not args.no_progress,
                    owned_keys=args.owned_keys, owner=args.owner, coverage_json=args.coverage_json)


def add_fuzz_parser(sub: Any, flaw_choices: list[str]) -> argparse.ArgumentParser:
    """Register ``fuzz`` on the ``kvverify`` subparsers."""
    f = sub.add_parser("fuzz", formatter_class=Formatter, help="run the property suites for a time budget",
                       description="Runs every property of the suites round-robin, in batches, until the "
                       "budget is spent, with a live progress display. A failing property writes a "
                       "counterexample report (reports/) and is retired; xfail-marked properties failing as "
                       "expected are known findings; a property the target cannot run is skipped, with its "
                       "reason.\nExit 0: nothing failed (skips included); 1: a property failed (a report "
                       "was written).")
    f.add_argument("--seconds", type=float, default=60.0, metavar="N", help="time budget (60)")
    f.add_argument("--profile", choices=("dev", "ci", "nightly", "replay"), default="dev",
                   help="Hypothesis profile: dev (random), ci (derandomized, one full pass), nightly "
                        "(random, keeps the example database $KVVERIFY_DB), replay (one pass over what "
                        "$KVVERIFY_DB holds, read-only; docs/nightly.md)")
    f.add_argument("--flaw", action="append", choices=flaw_choices, metavar="NAME",
                   help="switch a bug-zoo flaw on (repeatable)")
    f.add_argument("--seed", type=int, default=None, help="seed the batches (reproducible runs)")
    f.add_argument("-k", "--property", action="append", metavar="TEXT",
                   help="only properties whose name or module contains TEXT (repeatable)")
    f.add_argument("--shard", metavar="I/N", type=arg_type(_shard, "shard"),
                   help="only the I-th of N shards of the properties (CI matrix)")
    f.add_argument("--batch", type=int_arg("batch"), default=50, help="largest batch of examples (50)")
    f.add_argument("--suite", default="properties", metavar="DIR",
                   help="suite files whose xfail marks name known findings (properties)")
    f.add_argument("--target", default="reference", help="system under test (reference)")
    f.add_argument("--fix", action="append", metavar="NAME",
                   help="a finding's proposed fix (repeatable; `kvverify findings`): the reference runs with "
                        "the fix option, --target vllm with the finding's patch applied; its known failure "
                        "must then pass")
    f.add_argument("--owned-keys", metavar="FILE",
                   help="write the database keys this run owns there (a nightly shard's manifest for "
                        "`python -m kvverify.nightly merge`)")
    f.add_argument("--coverage-json", metavar="FILE",
                   help="fold Hypothesis' observations (HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1) into per-property "
                        "counts there, emptying the observation files as it goes (`python -m kvverify.nightly "
                        "coverage --combine FILE` renders the table)")
    f.add_argument("--owner", metavar="NAME", help="the owner named in --owned-keys (default: TARGET SHARD)")
    f.add_argument("--report-xfail", action="store_true", help="also report known findings")
    f.add_argument("--reports-dir", metavar="DIR", help="where reports go ($KVVERIFY_REPORTS_DIR or reports/)")
    f.add_argument("--list", action="store_true", help="list the properties and exit")
    f.add_argument("--no-progress", action="store_true", help="no live display")
    f.add_argument("--json", action="store_true", help="print the summary as JSON")
    f.set_defaults(func=cmd_fuzz)
    return f
