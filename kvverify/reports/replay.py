"""``kvverify replay``: rebuild a report's example and run the property body once on it.

A property report replays through a fresh ``@given`` wrapper around the same body with the
report's example as its only (explicit) example, the recorded flaws and fixes switched on,
and ``data`` draws served back in order by :class:`~kvverify.reports.capture.ReplayData`.
A state-machine report replays its ``@reproduce_failure`` blob; a lemma report re-proves
the lemma. Reproduced (still failing) is exit 1; passes now is exit 0.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from kvverify import behaviours
from kvverify.reports.build import plain, trace_of, violations_from_exception
from kvverify.reports.capture import (
    ReplayMismatch,
    exception_family,
    instrument,
    is_property,
)
from kvverify.reports.common import ReportError, switched
from kvverify.reports.schema import moved_module
from kvverify.reports.serialize import decode
from kvverify.reports.stateful import steps_from_notes
from kvverify.reports.store import load_report


@dataclasses.dataclass
class ReplayOutcome:
    """``reproduced``: the property still fails on the example (exit 1)."""

    reproduced: bool
    status: str  # "reproduced" | "reproduced (different failure)" | "passes" | "rejected"
    detail: str
    violation: dict[str, Any] | None = None
    trace: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return 1 if self.reproduced else 0


def resolve_property(ref: Mapping[str, Any], loaded_from: str | None = None) -> Any:
    """The ``@given`` function a report names (see :func:`resolve`)."""
    return resolve(ref, is_property, "property", loaded_from)


def resolve(ref: Mapping[str, Any], accept: Any, what: str, loaded_from: str | None = None) -> Any:
    """The object a report names, accepted by ``accept``.

    A :mod:`kvverify` object is imported by module and (dotted) name; a test file's is
    loaded from its file (the recorded relative path, else the absolute one), falling back
    to its module name.
    """
    module_name, name = ref.get("module"), str(ref.get("name") or "")
    files = [f for f in (ref.get("file"),) if f]
    if ref.get("file_from_report") and loaded_from:
        files.append(str(Path(loaded_from).parent / str(ref["file_from_report"])))
    errors: list[str] = []

    def lookup(module: Any) -> Any:
        obj = module
        for part in name.split("."):
            obj = getattr(obj, part, None)
        return obj if obj is not None and accept(obj) else None

    def from_module() -> Any:
        if not (module_name and name):
            return None
        for candidate in dict.fromkeys((str(module_name), moved_module(str(module_name)))):
            try:
                return lookup(importlib.import_module(candidate))
            except ModuleNotFoundError as e:
                errors.append(f"{candidate}: {e}")
            except Exception as e:  # noqa: BLE001 - report the import failure
                errors.append(f"{candidate}: {type(e).__name__}: {e}")
                return None
        return None

    def from_file() -> Any:
        for file in files:
            if name and Path(file).is_file():
                obj = lookup(load_module_from_file(Path(file)))
                if obj is None:
                    errors.append(f"{file}: no {what} named {name!r}")
                return obj
        return None

    order = (from_module, from_file) if str(module_name or "").startswith("kvverify") else (from_file, from_module)
    for how in order:
        obj = how()
        if obj is not None:
            return obj
    where = "; ".join(errors) or f"not importable from {module_name!r}, no file among {files}"
    raise ReportError(f"cannot find the {what} {name!r} ({where})")


def load_module_from_file(path: Path) -> Any:
    """Import a suite file (e.g. ``properties/test_startup.py``) under a private name."""
    name = "kvverify_suite_" + re.sub(r"\W", "_", str(path.resolve().with_suffix("")))[-80:]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ReportError(f"{path}: cannot import")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        del sys.modules[name]
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise ReportError(f"{path}: import failed: {type(e).__name__}: {e}") from None
    return module


def replay_report(report: Mapping[str, Any], *, target: str | None = None,
                  flaw_names: Sequence[str] | None = None, fix_names: Sequence[str] | None = None) -> ReplayOutcome:
    """Run the property body once on the report's example (or re-prove its lemma).

    ``flaw_names`` / ``fix_names`` replace the recorded switches when given. A replay on the
    reference follows the old release rules the report records (``"behaviours"``: the
    target's, :mod:`kvverify.behaviours`), so a release's failure replays as that release
    scheduled; on any other target they do not apply.
    """
    use_flaws = list(report.get("flaws") or []) if flaw_names is None else list(flaw_names)
    use_fixes = list(report.get("fixes") or []) if fix_names is None else list(fix_names)
    if report.get("kind") == "lemma":
        return _replay_lemma(report, use_flaws, use_fixes)
    if report.get("kind") == "stateful":
        return _replay_stateful(report, use_flaws, use_fixes)
    if not report.get("replayable", True):
        raise ReportError(f"this report cannot be replayed exactly: {report.get('not_replayable_because')}"
                          + (f"; rerun with: {report['replay']['pytest']}"
                             if (report.get("replay") or {}).get("pytest") else ""))
    import inspect

    from hypothesis import HealthCheck, Phase, Verbosity, example, given, settings
    from hypothesis import strategies as st
    from hypothesis.errors import UnsatisfiedAssumption

    from kvverify.targets import replays_under_release_rules, target_by_report_name

    fn = resolve_property(report.get("property_ref") or {}, report.get("loaded_from"))
    # the arguments Hypothesis supplies: the body's parameters but the target (a fixture)
    given_kwargs = [p for p in inspect.signature(fn.hypothesis.inner_test).parameters if p != "target"]
    target_name = str(target or report.get("target") or "reference")
    tgt = target_by_report_name(target_name, property_module=fn.__module__)
    expected = (report.get("violation") or {}).get("name")
    rules = list(report.get("behaviours") or []) if replays_under_release_rules(target_name) else []
    for n in rules:
        if n not in behaviours.CATALOG:
            raise ReportError(f"unknown release rule {n!r} in 'behaviours'; known: {', '.join(behaviours.CATALOG)}")
    with switched(use_flaws, use_fixes), behaviours.only(*rules):
        try:
            example_kwargs = {k: decode(v) for k, v in (report.get("example") or {}).items()}
        except ReportError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
            raise ReportError(f"corrupt report: its example cannot be decoded ({type(e).__name__}: {e})") from None
        missing = set(given_kwargs) - set(example_kwargs)
        if missing:
            raise ReportError(f"the report lacks arguments {sorted(missing)} the property now takes")
        ran: dict[str, Any] = {"calls": 0, "rejected": False}
        inner = fn.hypothesis.inner_test

        def once(*args: Any, **kwargs: Any) -> Any:
            ran["calls"] += 1
            try:
                return inner(*args, **kwargs)
            except UnsatisfiedAssumption:  # assume() rejected the example
                ran["rejected"] = True
                raise

        # updated=(): a fresh body (signature and source through __wrapped__) that does not
        # share the property's own @example list, so only the report's example runs; it is
        # the only case run (Phase.explicit), so each argument's strategy is a placeholder
        runner = example(**example_kwargs)(functools.wraps(inner, updated=())(once))
        test = given(**{k: st.just(v) for k, v in example_kwargs.items()})(runner)
        test = settings(database=None, deadline=None, phases=[Phase.explicit], print_blob=False,
                        suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)(test)
        with instrument([test]) as sink:
            try:
                test(target=tgt)
            except ReplayMismatch as e:
                raise ReportError(f"cannot replay exactly: {e}") from None
            except BaseException as e:  # noqa: BLE001 - the property failed: reproduced
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                inner_exc = e
                nested = [x for x in exception_family(e) if isinstance(x, ReplayMismatch)]
                if nested:
                    raise ReportError(f"cannot replay exactly: {nested[0]}") from None
                got = violations_from_exception(inner_exc)[0]
                cap = sink.for_exception(inner_exc)
                trace = trace_of(cap.workloads) if cap else None
                same = got.get("name") == expected
                return ReplayOutcome(True, "reproduced" if same else "reproduced (different failure)",
                                     f"[{got.get('name')}] {got.get('reason')}", got, trace)
    if ran["rejected"]:
        return ReplayOutcome(False, "rejected", "the example no longer satisfies the property's "
                             "assumptions (assume() rejected it): nothing to check")
    return ReplayOutcome(False, "passes", "the property holds on this example now")


def _replay_lemma(report: Mapping[str, Any], use_flaws: list[str], use_fixes: list[str]) -> ReplayOutcome:
    from kvverify.lemmas import get
    from kvverify.lemmas.core import prove

    ref = report.get("property_ref") or {}
    lemma = get(str(ref.get("lemma")))
    if len(use_flaws) > 1:
        raise ReportError("a lemma replays with at most one flaw")
    fix = bool(use_fixes) and lemma.finding is not None and lemma.finding.fix in use_fixes
    result = prove(lemma, flaw=use_flaws[0] if use_flaws else None, fix=fix)
    if result.result == "counterexample":
        values = (result.counterexample or {}).get("values", {})
        return ReplayOutcome(True, "reproduced", f"counterexample {values}; reference replay: {result.replay}",
                             {"name": f"lemma.{lemma.name}", "reason": result.statement,
                              "evidence": plain((result.counterexample or {}).get("evidence", {}))})
    if result.result == "unknown":
        raise ReportError(f"lemma {lemma.name}: unknown ({result.reason})")
    return ReplayOutcome(False, "passes", f"lemma {lemma.name} is proved now")


def replay_path(path: str | os.PathLike[str], **kw: Any) -> ReplayOutcome:
    return replay_report(load_report(path), **kw)


def _replay_stateful(report: Mapping[str, Any], use_flaws: list[str], use_fixes: list[str]) -> ReplayOutcome:
    from hypothesis import Verbosity, settings
    from hypothesis.errors import DidNotReproduce
    from hypothesis.stateful import run_state_machine_as_test

    ref = report.get("property_ref") or {}
    blob = (report.get("example") or {}).get("reproduce_failure")
    if not blob:
        raise ReportError(f"this report cannot be replayed exactly: {report.get('not_replayable_because')}")
    from hypothesis.stateful import RuleBasedStateMachine

    from kvverify.hypothesis_hooks import reproducing_machine

    machine = resolve(ref, lambda obj: isinstance(obj, type) and issubclass(obj, RuleBasedStateMachine),
                      "state machine", report.get("loaded_from"))
    replayer = reproducing_machine(machine, blob[0], blob[1].encode("ascii"))
    expected = (report.get("violation") or {}).get("name")
    with switched(use_flaws, use_fixes):
        try:
            run_state_machine_as_test(replayer, settings=settings(database=None, deadline=None, print_blob=False,
                                                                  verbosity=Verbosity.quiet))
        except DidNotReproduce:
            return ReplayOutcome(False, "passes", "the falsifying program no longer fails")
        except BaseException as e:  # noqa: BLE001 - the machine failed: reproduced
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            from hypothesis.errors import InvalidArgument
            if isinstance(e, InvalidArgument):
                raise ReportError(f"cannot replay the blob: {e}") from None
            got = violations_from_exception(e)[0]
            same = got.get("name") == expected
            return ReplayOutcome(True, "reproduced" if same else "reproduced (different failure)",
                                 f"[{got.get('name')}] {got.get('reason')}", got,
                                 {"program": steps_from_notes(getattr(e, "__notes__", []) or [])})
    return ReplayOutcome(False, "passes", "the falsifying program no longer fails")
