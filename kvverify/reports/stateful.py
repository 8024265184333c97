"""State machines (``RuleBasedStateMachine``): the falsifying program as the trace, its
configuration read back from the program's arguments, and the ``@reproduce_failure`` blob
Hypothesis prints (``print_blob=True``) as the exact replay."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from kvverify.reports.build import (
    describe_example,
    finish_report,
    property_ref,
    resembles,
    suite_nodeid,
    versions,
    violations_from_exception,
)
from kvverify.reports.capture import leaf_exceptions
from kvverify.reports.common import SCHEMA, ReportError, reports_dir, sanitize
from kvverify.reports.store import write_report

_BLOB = re.compile(r"@reproduce_failure\('(?P<version>[^']+)', (?P<blob>b'[^']*')\)")
_STEP = re.compile(r"^(?:\w+ = )?state\.\w+\(|^state = \w+\(\)$|^\w+(?:, \w+)* = state\.")


def blob_from_notes(notes: Sequence[str]) -> tuple[str, str] | None:
    """The ``@reproduce_failure(version, blob)`` Hypothesis printed (``print_blob=True``)."""
    for note in notes:
        m = _BLOB.search(str(note))
        if m:
            return m.group("version"), ast.literal_eval(m.group("blob")).decode("ascii")
    return None


def steps_from_notes(notes: Sequence[str]) -> list[str]:
    """The falsifying program of a state machine, one step per entry (arguments joined)."""
    text = "\n".join(str(n) for n in notes)
    lines = text.splitlines()
    steps: list[str] = []
    current: list[str] = []
    depth = 0
    for line in lines:
        if depth == 0 and current:
            steps.append(" ".join(x.strip() for x in current))
            current = []
        if depth == 0 and not _STEP.match(line.strip()):
            continue
        current.append(line)
        depth += line.count("(") + line.count("[") + line.count("{") - line.count(")") \
            - line.count("]") - line.count("}")
        depth = max(depth, 0)
    if current:
        steps.append(" ".join(x.strip() for x in current))
    return steps


_SAFE_MODULES = ("kvverify.reference.config", "kvverify.reference.specs", "kvverify.strategies", "kvverify.reference.driver",
                 "kvverify.reference.grouping", "kvverify.reference.planner")


def _safe_constructors() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _SAFE_MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if isinstance(value, type) and dataclasses.is_dataclass(value):
                out.setdefault(attr, value)
    return out


def safe_eval(expr: str) -> Any:
    """Evaluate a repr of kvverify dataclasses and literals (no names, no other calls)."""
    allowed = _safe_constructors()

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Tuple):
            return tuple(ev(e) for e in node.elts)
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Dict):
            return {ev(k): ev(v) for k, v in zip(node.keys, node.values)}  # type: ignore[arg-type]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in allowed \
                and not node.args:
            cls = allowed[node.func.id]
            init = {f.name for f in dataclasses.fields(cls) if f.init}
            kwargs = {k.arg: ev(k.value) for k in node.keywords if k.arg in init}
            return cls(**kwargs)
        raise ReportError(f"unsupported expression: {ast.dump(node)[:80]}")

    return ev(ast.parse(expr.strip(), mode="eval").body)


def _step_arguments(step: str) -> dict[str, Any]:
    """Keyword arguments of one ``state.rule(...)`` step that evaluate safely."""
    try:
        call = ast.parse(step.split("=", 1)[1] if re.match(r"^\w+(?:, \w+)* = ", step) else step,
                         mode="eval").body
    except SyntaxError:
        return {}
    out: dict[str, Any] = {}
    if isinstance(call, ast.Call):
        for kw in call.keywords:
            try:
                out[str(kw.arg)] = safe_eval(ast.unparse(kw.value))
            except (ReportError, TypeError, ValueError, SyntaxError):
                continue
    return out


def build_stateful_report(machine: type, exc: BaseException, *, found_by: str,
                          flaw_names: Sequence[str] = (), fix_names: Sequence[str] = (),
                          target_name: str = "reference", nodeid: str | None = None,
                          known_finding: str | None = None, directory: Path | None = None) -> dict[str, Any]:
    """A state machine's failure: the falsifying program, its configuration, the blob."""
    notes = [sanitize(str(n)) for n in getattr(exc, "__notes__", []) or []]
    steps = steps_from_notes(notes)
    blob = blob_from_notes(notes)
    config_args: dict[str, Any] = {}
    for step in steps:
        for k, v in _step_arguments(step).items():
            if dataclasses.is_dataclass(v):
                config_args.setdefault(k, v)
    violations = violations_from_exception(exc)
    try:
        source = inspect.getsourcefile(machine)
    except (TypeError, OSError):
        source = None
    ref = property_ref(machine, file=source)
    ref.update(name=machine.__qualname__, machine=True)
    report: dict[str, Any] = {
        "schema": SCHEMA, "kind": "stateful", "property": machine.__name__, "property_ref": ref,
        "target": target_name, "flaws": sorted(flaw_names), "fixes": sorted(fix_names),
        "violation": violations[0], "other_violations": violations[1:],
        "exception": {"type": type(exc).__name__, "message": sanitize(str(exc))[:4000]},
        "resembles": resembles(flaw_names), "known_finding": known_finding,
        "example": {"steps": steps, "reproduce_failure": list(blob) if blob else None},
        "configuration": describe_example(config_args) if config_args else {},
        "trace": {"program": steps} if steps else None,
        "z3_model": None,
        "replayable": blob is not None,
        "not_replayable_because": None if blob else
        "Hypothesis printed no @reproduce_failure blob (run with print_blob=True: the ci and nightly "
        "profiles, or kvverify fuzz)",
    }
    report["run"] = {"found_by": found_by, "nodeid": nodeid, "hypothesis_notes": notes,
                     "versions": versions()}
    report["timeline"] = None
    if blob is not None and getattr(machine, "record_steps", None) is not None:
        try:
            report["timeline"] = timeline_of_machine(machine, blob, report["violation"], flaw_names, fix_names)
        except Exception as e:  # noqa: BLE001 - a report without its picture beats no report
            report["run"]["timeline_error"] = f"{type(e).__name__}: {sanitize(str(e))[:300]}"
    if nodeid is None:
        nodeid = suite_nodeid(f"Test{machine.__name__}") or suite_nodeid(machine.__name__)
    flags = "".join(f" --flaw {n}" for n in flaw_names)
    return finish_report(report, directory, pytest_cmd=f"python -m pytest '{nodeid}'{flags}" if nodeid else None)


def timeline_of_machine(machine: type, blob: tuple[str, str], violation: Mapping[str, Any],
                        flaw_names: Sequence[str] = (), fix_names: Sequence[str] = ()) -> dict[str, Any] | None:
    """The failing program replayed from its blob with ``record_steps`` on, rule by rule.

    For machines that record (``record_steps``, a :class:`kvverify.reference.steptrace.RuleRecorder` in
    ``self.steps``, e.g. :class:`kvverify.props.pool_machine.PoolMachine`), under the report's
    flaws and fixes. ``None`` when the program built no pool; raises when it does not fail again.
    """
    from hypothesis import Verbosity, settings
    from hypothesis.errors import DidNotReproduce
    from hypothesis.stateful import run_state_machine_as_test

    from kvverify.hypothesis_hooks import reproducing_machine
    from kvverify.reports.common import switched
    from kvverify.reports.timeline import rule_timeline_json

    ran: list[Any] = []
    own_teardown = getattr(machine, "teardown")

    def teardown(self: Any) -> None:
        ran.append(self)
        own_teardown(self)

    recording = type(machine.__name__, (machine,), {"record_steps": True, "teardown": teardown,
                                                     "__module__": machine.__module__,
                                                     "__qualname__": machine.__qualname__})
    replayer = reproducing_machine(recording, blob[0], blob[1].encode("ascii"))
    error: BaseException | None = None
    with switched(flaw_names, fix_names):
        try:
            run_state_machine_as_test(replayer, settings=settings(database=None, deadline=None, print_blob=False,
                                                                  verbosity=Verbosity.quiet))
        except Exception as e:  # noqa: BLE001 - the failure is what is drawn
            error = e
    if error is None or isinstance(error, DidNotReproduce):
        raise ReportError("the falsifying program did not fail again when replayed to record its timeline")
    steps = getattr(ran[-1], "steps", None) if ran else None
    if steps is None:
        return None
    name = str(violation.get("name") or type(error).__name__)
    trace = steps.result(True, name)
    on = ", ".join([f"flaw {f}" for f in flaw_names] + [f"fix {f}" for f in fix_names])
    subtitle = str(violation.get("reason") or "") + (f"  [{on}]" if on else "")
    n = len(trace.rows)
    label = f"the falsifying program: setup and {n - 1} rule" + ("" if n == 2 else "s") + ", step by step"
    return rule_timeline_json(trace, title=f"{name} — {machine.__name__}", subtitle=subtitle, label=label)


def report_stateful(machine: type, exc: BaseException, *, directory: str | os.PathLike[str] | None = None,
                    **kw: Any) -> list[Path]:
    """Write one report per distinct failure of a state machine run."""
    where = Path(directory) if directory is not None else reports_dir()
    return [write_report(build_stateful_report(machine, leaf, directory=where, **kw), where)
            for leaf in leaf_exceptions(exc)]
