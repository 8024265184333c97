"""Counterexample reports: capture a failing property, write it up, index it, replay it.

When a property fails — under pytest (:mod:`kvverify.pytest_reports`), ``kvverify fuzz``
or as a lemma counterexample (``kvverify prove``) — a report is written to
``$KVVERIFY_REPORTS_DIR`` (default ``reports/``) as two files::

    reports/<property>-<short hash>.json   the failure, fully serialized (replayable)
    reports/<property>-<short hash>.md     the same for a person to read

A report holds the invariant and its one-line reason, the evidence numbers, the shrunk
example with every ``VllmConfig`` field and every layer spec as tables (VOPR-style), the
operation trace of the last workload the property ran, the Z3 model of a lemma, the
bug-zoo flaw it resembles, and a replay command::

    kvverify replay reports/<property>-<short hash>.json

which rebuilds the example from the JSON and runs the property body once on it, with
the recorded flaws and fixes switched on (exit 1: reproduced, 0: passes now).

**How failures are captured.** :func:`instrument` swaps the ``.hypothesis.inner_test``
of ``@given`` properties (Hypothesis's documented hook for plugins) for a recording
wrapper. The wrapper hands the body a :class:`RecordingData` (which remembers every
``data.draw``) and a :class:`RecordingTarget` (which remembers the workloads run), and
when the body raises it keeps the keyword arguments, the draws, the active flaws and
fixes and the exception. Hypothesis replays the shrunk example last, so the last capture
is the minimal failing example.

**Same failure, same file.** The file name is the property name plus a hash of the
canonical JSON of what identifies the failure (property, target, flaws, fixes, example,
invariant and reason); the volatile part (who found it, Hypothesis's notes) is kept
under ``run`` and left out of the hash. Files are written atomically (a temporary file
in the same directory, then ``os.replace``), so concurrent writers (``pytest -n 2``)
never leave a torn file: two writers of one report write identical bytes, and
different reports have different names.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import enum
import hashlib
import html
import importlib
import importlib.util
import inspect
import json
import math
import os
import re
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from kvverify import fixes, flaws
from kvverify.errors import KVVerifyError

SCHEMA = "kvverify.report/1"
REPORTS_ENV = "KVVERIFY_REPORTS_DIR"
DEFAULT_DIR = "reports"
INDEX_MD = "index.md"
INDEX_HTML = "index.html"
MAX_TRACE_ROWS = 200  # rows kept in the JSON (first 50 + last 150)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class ReportError(KVVerifyError):
    """A report that cannot be read, decoded or replayed (the message says why)."""


def reports_dir(default: str | os.PathLike[str] | None = None) -> Path:
    """``$KVVERIFY_REPORTS_DIR``, else ``default``, else ``reports/`` (relative to the cwd)."""
    env = os.environ.get(REPORTS_ENV)
    if env:
        return Path(env)
    return Path(default) if default is not None else Path(DEFAULT_DIR)


def active_fixes() -> frozenset[str]:
    active = getattr(fixes, "active", None)
    return frozenset(active()) if callable(active) else frozenset(fixes._ACTIVE.get())


@contextlib.contextmanager
def switched(flaw_names: Iterable[str] = (), fix_names: Iterable[str] = ()) -> Iterator[None]:
    """Exactly these flaws and fixes on (a clean context: nothing inherited)."""
    f_token = flaws._ACTIVE.set(frozenset(flaws.check_name(n) for n in flaw_names))
    fix_names = tuple(fix_names)
    for n in fix_names:
        if n not in fixes.CATALOG:
            raise ReportError(f"unknown fix {n!r}; known: {', '.join(fixes.CATALOG)}")
    x_token = fixes._ACTIVE.set(frozenset(fix_names))
    try:
        yield
    finally:
        fixes._ACTIVE.reset(x_token)
        flaws._ACTIVE.reset(f_token)


# --- serialization -----------------------------------------------------------------------
#
# Tagged JSON: tuples, dataclasses, enums, sets and non-string-keyed dicts keep their type,
# so an example decodes to objects equal (and hashable) as the ones the property saw.
# Only classes from ``kvverify`` modules (or modules already imported, e.g. a loaded
# suite file) are ever reconstructed, through their validating constructors.


class NotSerializable(ReportError):
    pass


def encode(value: Any) -> Any:
    """``value`` as tagged JSON (raises :class:`NotSerializable` for opaque objects)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"__float__": repr(value)}
    if isinstance(value, RecordingData):
        return {"__data__": [{"label": d["label"], "value": encode(d["value"])} for d in value.draws]}
    if isinstance(value, ReplayData):
        return {"__data__": [{"label": d["label"], "value": encode(d["value"])} for d in value.draws]}
    if isinstance(value, enum.Enum):
        return {"__enum__": _class_path(type(value)), "value": encode(value.value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return {"__dataclass__": _class_path(type(value)), "fields": fields}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [encode(v) for v in value]
        items.sort(key=lambda x: json.dumps(x, sort_keys=True))
        return {"__frozenset__" if isinstance(value, frozenset) else "__set__": items}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    raise NotSerializable(f"cannot serialize {type(value).__name__} {_short_repr(value)}")


def decode(data: Any) -> Any:
    """Inverse of :func:`encode`. Dataclasses are rebuilt through their constructors."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if "__tuple__" in data:
        return tuple(decode(v) for v in data["__tuple__"])
    if "__float__" in data:
        return float(data["__float__"])
    if "__frozenset__" in data:
        return frozenset(decode(v) for v in data["__frozenset__"])
    if "__set__" in data:
        return {decode(v) for v in data["__set__"]}
    if "__dict__" in data:
        return {decode(k): decode(v) for k, v in data["__dict__"]}
    if "__data__" in data:
        return ReplayData([{"label": d.get("label"), "value": decode(d.get("value"))}
                           for d in data["__data__"]])
    if "__enum__" in data:
        return _resolve_class(data["__enum__"])(decode(data["value"]))
    if "__dataclass__" in data:
        cls = _resolve_class(data["__dataclass__"])
        if not dataclasses.is_dataclass(cls):
            raise ReportError(f"{data['__dataclass__']} is not a dataclass")
        kwargs = {k: decode(v) for k, v in data.get("fields", {}).items()}
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise ReportError(f"cannot rebuild {data['__dataclass__']}: {e} "
                              "(has the class changed since the report was written?)") from None
    if "__repr__" in data:
        raise ReportError(f"the report holds an opaque value that cannot be rebuilt: {data['__repr__']}")
    return {k: decode(v) for k, v in data.items()}


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve_class(path: str) -> Any:
    module_name, _, qualname = str(path).partition(":")
    if not (module_name == "kvverify" or module_name.startswith("kvverify.") or module_name in sys.modules):
        raise ReportError(f"refusing to load class {path!r}: only kvverify classes are rebuilt")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ReportError(f"cannot find class {path!r}: {e}") from None
    return obj


def plain(value: Any) -> Any:
    """A JSON-safe, human-facing rendering (tuples as lists, objects as their repr)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        return plain(value.value)
    return _sanitize(repr(value))


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _sanitize(text: str) -> str:
    return _ADDRESS.sub("", text)


def _short_repr(value: Any, limit: int = 120) -> str:
    text = _sanitize(repr(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- capture -----------------------------------------------------------------------------


class RecordingData:
    """Stands in for Hypothesis's ``data`` object and remembers every draw."""

    def __init__(self, data: Any) -> None:
        self._data = data
        self.draws: list[dict[str, Any]] = []

    def draw(self, strategy: Any, label: Any = None) -> Any:
        value = self._data.draw(strategy, label=label)
        self.draws.append({"label": None if label is None else str(label), "value": value})
        return value

    def __repr__(self) -> str:
        return "data(...)"


class ReplayMismatch(ReportError):
    """The property asked for a draw the report does not hold (it has changed)."""


class ReplayData:
    """Serves a report's recorded draws, in order, to a property body being replayed."""

    def __init__(self, draws: Sequence[Mapping[str, Any]]) -> None:
        self.draws = [dict(d) for d in draws]
        self._next = 0

    def draw(self, strategy: Any, label: Any = None) -> Any:
        if self._next >= len(self.draws):
            raise ReplayMismatch(f"the property drew more values than the report holds "
                                 f"({len(self.draws)}); has it changed since the report was written?")
        entry = self.draws[self._next]
        want = None if label is None else str(label)
        if entry.get("label") != want:
            raise ReplayMismatch(f"draw {self._next + 1}: the property asks for {want!r}, the report "
                                 f"holds {entry.get('label')!r}")
        self._next += 1
        return entry["value"]

    def __repr__(self) -> str:
        return "data(...)"


class RecordingTarget:
    """Forwards to a target and remembers each ``run_workload`` (its workload and result)."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.workloads: list[tuple[list[Any], Any]] = []

    def run_workload(self, plan: Any, workload: Any, **kw: Any) -> Any:
        result = self._target.run_workload(plan, workload, **kw)
        self.workloads.append((list(workload), result))
        del self.workloads[:-4]
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def __repr__(self) -> str:
        return repr(self._target)


@dataclasses.dataclass
class Capture:
    """A property body's failing call, as the recording wrapper saw it."""

    function: Callable[..., Any]
    kwargs: dict[str, Any]
    exc: BaseException
    flaws: tuple[str, ...]
    fixes: tuple[str, ...]
    target_name: str
    workloads: list[tuple[list[Any], Any]]


@dataclasses.dataclass
class Sink:
    """Collects what the instrumented properties did while it is active."""

    examples: int = 0
    failures: deque = dataclasses.field(default_factory=lambda: deque(maxlen=64))

    def last(self) -> Capture | None:
        return self.failures[-1] if self.failures else None

    def for_exception(self, exc: BaseException | None) -> Capture | None:
        """The capture of ``exc`` (or of an exception it groups or chains), else the last."""
        if exc is not None:
            wanted = {id(e) for e in _exception_family(exc)}
            for cap in reversed(self.failures):
                if id(cap.exc) in wanted:
                    return cap
        return self.last()

    def captures_for(self, exc: BaseException | None) -> list[Capture]:
        """One capture per distinct failure in ``exc`` (Hypothesis may group several)."""
        if exc is None:
            return [c for c in [self.last()] if c is not None]
        out: list[Capture] = []
        for leaf in leaf_exceptions(exc):
            cap = next((c for c in reversed(self.failures) if c.exc is leaf), None)
            if cap is not None and all(cap is not o for o in out):
                out.append(cap)
        if not out and self.last() is not None:
            out.append(self.last())  # type: ignore[arg-type]
        return out


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The failures an exception stands for: the members of an ExceptionGroup, or itself."""
    subs = getattr(exc, "exceptions", None)
    if not subs:
        return [exc]
    out: list[BaseException] = []
    for sub in subs:
        out.extend(leaf_exceptions(sub))
    return out


_LOCK = threading.RLock()
_SINKS: list[Sink] = []
_INSTALLED: dict[int, list[Any]] = {}  # id(fn) -> [fn, original inner_test, refcount]


def is_property(fn: Any) -> bool:
    return callable(fn) and getattr(fn, "is_hypothesis_test", False) and hasattr(fn, "hypothesis")


def _recording_inner(fn: Any, inner: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    from hypothesis.strategies._internal.core import DataObject

    @functools.wraps(inner)
    def recording(*args: Any, **kwargs: Any) -> Any:
        for sink in _SINKS:
            sink.examples += 1
        call_kwargs = dict(kwargs)
        rec_target = None
        if "target" in call_kwargs and call_kwargs["target"] is not None:
            rec_target = RecordingTarget(call_kwargs["target"])
            call_kwargs["target"] = rec_target
        for k, v in list(call_kwargs.items()):
            if isinstance(v, DataObject):
                call_kwargs[k] = RecordingData(v)
        try:
            return inner(*args, **call_kwargs)
        except BaseException as e:
            if _is_rejection(e) or not _SINKS:
                raise
            target_obj = kwargs.get("target")
            cap = Capture(function=fn, kwargs={k: v for k, v in call_kwargs.items() if k != "target"},
                          exc=e, flaws=tuple(sorted(flaws.active())), fixes=tuple(sorted(active_fixes())),
                          target_name=str(getattr(target_obj, "name", "reference")),
                          workloads=list(rec_target.workloads) if rec_target is not None else [])
            for sink in _SINKS:
                sink.failures.append(cap)
            raise

    recording._kvverify_recording = True  # type: ignore[attr-defined]
    return recording


def _is_rejection(e: BaseException) -> bool:
    """Hypothesis's control-flow exceptions (assume, stop) are not failures."""
    try:
        from hypothesis.errors import UnsatisfiedAssumption
    except ImportError:  # pragma: no cover
        return False
    return isinstance(e, UnsatisfiedAssumption) or type(e).__name__ in ("StopTest", "Frozen")


@contextlib.contextmanager
def instrument(functions: Iterable[Any]) -> Iterator[Sink]:
    """Record the failing calls of the given ``@given`` properties while the block runs.

    Nestable: every active sink sees every capture; wrappers are installed once and the
    original ``inner_test`` is restored when the last user leaves.
    """
    sink = Sink()
    mine: list[int] = []
    with _LOCK:
        _SINKS.append(sink)
        for fn in functions:
            if not is_property(fn) or id(fn) in mine:
                continue
            entry = _INSTALLED.get(id(fn))
            if entry is None:
                original = fn.hypothesis.inner_test
                _INSTALLED[id(fn)] = [fn, original, 1]
                fn.hypothesis.inner_test = _recording_inner(fn, original)
            else:
                entry[2] += 1
            mine.append(id(fn))
    try:
        yield sink
    finally:
        with _LOCK:
            _SINKS.remove(sink)
            for key in mine:
                entry = _INSTALLED[key]
                entry[2] -= 1
                if entry[2] == 0:
                    entry[0].hypothesis.inner_test = entry[1]
                    del _INSTALLED[key]


def property_functions() -> list[Any]:
    """Every ``@given`` property body in :mod:`kvverify.props`."""
    import pkgutil

    import kvverify.props as props

    out: list[Any] = []
    for info in pkgutil.iter_modules(props.__path__):
        try:
            module = importlib.import_module(f"kvverify.props.{info.name}")
        except Exception:  # noqa: BLE001 - a broken module is reported by its own tests
            continue
        for value in vars(module).values():
            if is_property(value) and value not in out:
                out.append(value)
    return out


def _exception_family(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    stack = [exc]
    while stack and len(out) < 64:
        e = stack.pop()
        if e is None or any(e is o for o in out):
            continue
        out.append(e)
        stack.extend(getattr(e, "exceptions", ()) or ())
        stack.append(e.__cause__)  # type: ignore[arg-type]
        stack.append(e.__context__)  # type: ignore[arg-type]
    return out


# --- violations --------------------------------------------------------------------------

_VIOLATION_LINE = re.compile(r"^\[(?P<name>[A-Za-z0-9_.:-]+)\] (?P<rest>.+)$")


def violations_from_exception(exc: BaseException) -> list[dict[str, Any]]:
    """The :class:`~kvverify.invariants.base.Violation` s an exception carries.

    Uses ``exc.violations`` when the raiser attached them; otherwise parses the
    ``[name] reason (k=v, ...)`` lines ``assert_no_violations`` writes; otherwise the
    exception type and its first line.
    """
    attached = getattr(exc, "violations", None)
    if attached:
        return [_violation_dict(v) for v in attached]
    found = []
    for line in str(exc).splitlines():
        m = _VIOLATION_LINE.match(line.strip())
        if m:
            reason, evidence = _split_evidence(m.group("rest"))
            found.append({"name": m.group("name"), "reason": reason, "evidence": evidence})
    if found:
        return found
    groups = getattr(exc, "exceptions", None)
    if groups:
        out: list[dict[str, Any]] = []
        for sub in groups:
            out.extend(violations_from_exception(sub))
        return out
    first = (str(exc).strip().splitlines() or [""])[0]
    return [{"name": type(exc).__name__, "reason": _sanitize(first)[:500] or type(exc).__name__,
             "evidence": {}}]


def _violation_dict(v: Any) -> dict[str, Any]:
    if hasattr(v, "to_json"):
        return v.to_json()
    return {"name": str(getattr(v, "name", "violation")), "reason": str(getattr(v, "reason", v)),
            "evidence": plain(dict(getattr(v, "evidence", {}) or {}))}


def _split_evidence(rest: str) -> tuple[str, dict[str, Any]]:
    """Split ``reason (k=v, k=v)`` into the reason and the evidence dict."""
    if not rest.endswith(")"):
        return rest, {}
    depth = 0
    for i in range(len(rest) - 1, -1, -1):
        ch = rest[i]
        if ch in ")]}":
            depth += 1
        elif ch in "([{":
            depth -= 1
            if depth == 0:
                inner = rest[i + 1:-1]
                if not re.match(r"^\w+=", inner):
                    return rest, {}
                return rest[:i].rstrip(), _parse_pairs(inner)
    return rest, {}


def _parse_pairs(text: str) -> dict[str, Any]:
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0 and re.match(r"^ ?\w+=", text[i + 1:]):
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    out: dict[str, Any] = {}
    for part in parts:
        key, _, value = part.strip().partition("=")
        try:
            out[key] = plain(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            out[key] = value
    return out


# --- building a report -------------------------------------------------------------------


def property_ref(fn: Any, *, name: str | None = None, file: str | None = None) -> dict[str, Any]:
    """Where replay finds the property: module + attribute, and the file as a fallback."""
    module = getattr(fn, "__module__", None)
    attr = name or getattr(fn, "__name__", None)
    if file is None:
        try:
            source = getattr(getattr(fn, "hypothesis", None), "inner_test", fn)
            file = inspect.getsourcefile(inspect.unwrap(source))
        except (TypeError, OSError, ValueError):
            file = None
    if file:
        try:
            file = os.path.relpath(file)
        except ValueError:
            pass
        if file.startswith(".."):
            file = os.path.abspath(file)
    return {"module": module, "name": attr, "file": file}


def resembles(flaw_names: Iterable[str]) -> list[dict[str, str]]:
    out = []
    for name in flaw_names:
        f = flaws.CATALOG.get(name)
        if f is not None:
            out.append({"flaw": f.name, "upstream": f.upstream, "symptom": f.symptom,
                        "defect": f.defect, "caught_by": f.caught_by})
    return out


def build_report(capture: Capture, *, found_by: str, name: str | None = None, file: str | None = None,
                 nodeid: str | None = None, known_finding: str | None = None,
                 directory: Path | None = None) -> dict[str, Any]:
    """A property failure as a report (a JSON-ready dict)."""
    exc = capture.exc
    violations = violations_from_exception(exc)
    replayable, why_not = True, None
    example: dict[str, Any] = {}
    for key, value in capture.kwargs.items():
        try:
            example[key] = encode(value)
        except NotSerializable as e:
            replayable, why_not = False, f"argument {key!r}: {e}"
            example[key] = {"__repr__": _short_repr(value, 400)}
    ref = property_ref(capture.function, name=name, file=file)
    prop = ref["name"] or "property"
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": "property",
        "property": prop,
        "property_ref": ref,
        "target": capture.target_name,
        "flaws": list(capture.flaws),
        "fixes": list(capture.fixes),
        "violation": violations[0],
        "other_violations": violations[1:],
        "exception": {"type": type(exc).__name__, "message": _sanitize(str(exc))[:4000]},
        "resembles": resembles(capture.flaws),
        "known_finding": known_finding,
        "example": example,
        "configuration": describe_example(capture.kwargs),
        "trace": _trace(capture.workloads),
        "z3_model": None,
        "replayable": replayable,
        "not_replayable_because": why_not,
    }
    notes = [_sanitize(str(n)) for n in getattr(exc, "__notes__", []) or []]
    report["run"] = {"found_by": found_by, "nodeid": nodeid, "hypothesis_notes": notes,
                     "versions": _versions()}
    return _finish(report, directory, pytest_cmd=_pytest_command(nodeid, ref, capture.flaws))


def build_lemma_report(result: Any, *, found_by: str = "prove",
                       directory: Path | None = None) -> dict[str, Any]:
    """A lemma counterexample (a :class:`kvverify.lemmas.core.Result`) as a report."""
    cex = dict(result.counterexample or {})
    evidence = plain(cex.get("evidence", {}) or {})
    flaw_names = [result.flaw] if result.flaw else []
    fix_names = [result.fix] if result.fix else []
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": "lemma",
        "property": f"lemma_{result.name}",
        "property_ref": {"lemma": result.name, "fix": bool(result.fix)},
        "target": "reference",
        "flaws": flaw_names,
        "fixes": fix_names,
        "violation": {"name": f"lemma.{result.name}",
                      "reason": f"counterexample to: {result.statement}", "evidence": evidence},
        "other_violations": [],
        "exception": None,
        "resembles": resembles(flaw_names),
        "known_finding": (f"{result.finding}: {result.finding_title}" if result.finding else None),
        "example": {},
        "configuration": {"lemma": {"name": result.name, "topic": result.topic, "domain": result.domain,
                                    "case": cex.get("case"), "params": plain(cex.get("params", {}))}},
        "trace": None,
        "z3_model": {"case": cex.get("case"), "values": plain(cex.get("values", {})),
                     "params": plain(cex.get("params", {})), "replay_on_reference": result.replay,
                     "replay_confirmed": result.replay_confirmed},
        "replayable": True,
        "not_replayable_because": None,
    }
    report["run"] = {"found_by": found_by, "nodeid": None, "seconds": round(result.seconds, 3),
                     "hypothesis_notes": [], "versions": _versions()}
    cmd = f"kvverify prove {result.name}" + (f" --flaw {result.flaw}" if result.flaw else "") + \
        (" --fix" if result.fix else "")
    return _finish(report, directory, pytest_cmd=None, equivalent=cmd)


def _finish(report: dict[str, Any], directory: Path | None, *, pytest_cmd: str | None,
            equivalent: str | None = None) -> dict[str, Any]:
    key = report_key(report)
    report["id"] = f"{_safe_name(report['property'])}-{key}"
    where = (directory or reports_dir()) / f"{report['id']}.json"
    report["replay"] = {"command": f"kvverify replay {_display_path(where)}",
                        "pytest": pytest_cmd, "equivalent": equivalent}
    return report


def report_key(report: Mapping[str, Any]) -> str:
    """Short content hash over what identifies the failure (never the volatile ``run``)."""
    ident = {k: report.get(k) for k in ("kind", "property", "property_ref", "target", "flaws", "fixes",
                                        "example", "z3_model")}
    v = report.get("violation") or {}
    ident["violation"] = {"name": v.get("name"), "reason": v.get("reason")}
    return hashlib.sha256(canonical_json(ident).encode()).hexdigest()[:10]


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80] or "property"


def _display_path(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def _pytest_command(nodeid: str | None, ref: Mapping[str, Any], flaw_names: Sequence[str]) -> str | None:
    target = nodeid
    if target is None and ref.get("name"):
        target = suite_nodeid(str(ref["name"]), ref.get("file"))
    if target is None:
        return None
    flags = "".join(f" --flaw {n}" for n in flaw_names)
    return f"python -m pytest '{target}'{flags} -p no:randomly"


def suite_nodeid(name: str, file: str | None = None, suite: str | os.PathLike[str] = "properties") -> str | None:
    """``properties/test_x.py::name`` for a property a suite file collects, if one does."""
    if file and Path(file).name.startswith("test_") and Path(file).is_file():
        return f"{_display_path(Path(file))}::{name}"
    root = Path(suite)
    if not root.is_dir():
        return None
    pattern = re.compile(rf"^(?:{re.escape(name)}\b|\s+{re.escape(name)},?\s*(?:#.*)?$)", re.M)
    for path in sorted(root.glob("test_*.py")):
        try:
            if pattern.search(path.read_text(encoding="utf-8")):
                return f"{_display_path(path)}::{name}"
        except OSError:
            continue
    return None


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    try:
        import hypothesis
        out["hypothesis"] = hypothesis.__version__
    except ImportError:  # pragma: no cover
        pass
    try:
        from importlib.metadata import version
        out["kvverify"] = version("kvverify")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        pass
    return out


def describe_example(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The human view of an example: every VllmConfig field, every layer spec, other args."""
    from kvverify.config import VllmConfig
    from kvverify.specs import KVCacheSpec

    configs: list[Any] = []
    workers: list[list[dict[str, Any]]] = []
    groups: list[dict[str, Any]] = []
    seen: set[int] = set()

    def layer_rows(specs: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"layer": str(n), **_spec_row(s)} for n, s in specs.items()]

    def walk(value: Any, depth: int = 0) -> None:
        if depth > 6 or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, VllmConfig):
            configs.append(value)
            return
        if isinstance(value, dict) and value and all(isinstance(s, KVCacheSpec) for s in value.values()):
            workers.append(layer_rows(value))
            return
        if type(value).__name__ == "KVCacheGroupSpec":
            groups.append({"layers": list(value.layer_names), **_spec_row(value.kv_cache_spec)})
            return
        if isinstance(value, (ReplayData, RecordingData)):
            for d in value.draws:
                walk(d["value"], depth + 1)
            return
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                walk(getattr(value, f.name), depth + 1)
        elif isinstance(value, (list, tuple)):
            for v in value[:64]:
                walk(v, depth + 1)
        elif isinstance(value, dict):
            for v in list(value.values())[:64]:
                walk(v, depth + 1)

    for v in kwargs.values():
        walk(v)
    out: dict[str, Any] = {}
    if configs:
        cfg = configs[0]
        defaults = VllmConfig.__dataclass_fields__
        out["vllm_config"] = [
            {"field": f.name, "value": plain(getattr(cfg, f.name)),
             "default": plain(defaults[f.name].default) if defaults[f.name].default is not dataclasses.MISSING
             else None,
             "changed": getattr(cfg, f.name) != defaults[f.name].default}
            for f in dataclasses.fields(cfg)]
    if workers:
        out["workers"] = workers
    if groups:
        out["groups"] = groups
    scalars = {}
    for k, v in kwargs.items():
        if isinstance(v, (ReplayData, RecordingData)):
            scalars[k] = [{"label": d["label"], "value": _summarize(d["value"])} for d in v.draws]
        elif not dataclasses.is_dataclass(v):
            scalars[k] = _summarize(v)
        else:
            extra = {f.name: _summarize(getattr(v, f.name)) for f in dataclasses.fields(v)
                     if not isinstance(getattr(v, f.name), (VllmConfig,)) and f.name not in
                     ("kv_cache_specs", "kv_cache_config")}
            if extra:
                scalars[k] = extra
    if scalars:
        out["arguments"] = scalars
    return out


def _spec_row(spec: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"type": type(spec).__name__}
    if dataclasses.is_dataclass(spec):
        for f in dataclasses.fields(spec):
            value = getattr(spec, f.name)
            if f.name == "kv_cache_specs":  # UniformTypeKVCacheSpecs: name the members
                row[f.name] = ", ".join(f"{n}: {type(s).__name__}" for n, s in value)
            else:
                row[f.name] = plain(value)
    for prop in ("page_size_bytes",):
        try:
            row[prop] = getattr(spec, prop)
        except Exception:  # noqa: BLE001 - an invalid spec (e.g. under a flaw) has no page
            pass
    return row


def _summarize(value: Any) -> Any:
    """Short human form: workloads as (id, prompt length, outputs, arrival)."""
    from kvverify.driver import WorkloadSpec

    if isinstance(value, WorkloadSpec):
        return {"request_id": value.request_id, "prompt_tokens": len(value.prompt_token_ids),
                "max_tokens": value.max_tokens, "arrival_step": value.arrival_step,
                "shared_prefix_head": list(value.prompt_token_ids[:4])}
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, WorkloadSpec) for v in value):
        return [_summarize(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return _short_repr(value, 300)


def _trace(workloads: Sequence[tuple[list[Any], Any]]) -> dict[str, Any] | None:
    """The last workload the property ran: requests, outcome and the per-step trace."""
    if not workloads:
        return None
    workload, result = workloads[-1]
    rows = [list(r) for r in getattr(result, "trace", ())]
    elided = 0
    if len(rows) > MAX_TRACE_ROWS:
        elided = len(rows) - MAX_TRACE_ROWS
        rows = rows[:50] + [None] + rows[-(MAX_TRACE_ROWS - 50):]
    outcome = {k: plain(getattr(result, k, None)) for k in
               ("stalled", "stall_reason", "stalled_request_ids", "error", "steps", "preemptions",
                "num_output_tokens", "running", "waiting", "free_blocks", "finished")}
    return {"requests": [_summarize(w) for w in workload], "outcome": outcome,
            "columns": ["step", "running", "waiting", "free_blocks", "scheduled_tokens"],
            "rows": rows, "elided_rows": elided, "runs_recorded": len(workloads)}


# --- writing -----------------------------------------------------------------------------


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same directory + ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_report(report: dict[str, Any], directory: str | os.PathLike[str] | None = None) -> Path:
    """Write ``<id>.json`` and ``<id>.md``; returns the JSON path. Idempotent per failure."""
    where = Path(directory) if directory is not None else reports_dir()
    json_path = where / f"{report['id']}.json"
    atomic_write_text(json_path, json.dumps(report, indent=2, sort_keys=False) + "\n")
    atomic_write_text(where / f"{report['id']}.md", render_markdown(report))
    return json_path


def report_failure(capture: Capture, *, found_by: str, directory: str | os.PathLike[str] | None = None,
                   **kw: Any) -> Path:
    """Build and write the report of a captured failure."""
    where = Path(directory) if directory is not None else reports_dir()
    return write_report(build_report(capture, found_by=found_by, directory=where, **kw), where)


def report_lemma(result: Any, *, directory: str | os.PathLike[str] | None = None) -> Path:
    where = Path(directory) if directory is not None else reports_dir()
    return write_report(build_lemma_report(result, directory=where), where)


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{p}: cannot read report: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{p}: malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ReportError(f"{p}: not a kvverify report (schema {SCHEMA!r} expected)")
    return data


def list_reports(directory: str | os.PathLike[str] | None = None) -> list[tuple[Path, dict[str, Any]]]:
    where = Path(directory) if directory is not None else reports_dir()
    out = []
    for p in sorted(where.glob("*.json")):
        try:
            out.append((p, load_report(p)))
        except ReportError:
            continue
    return out


# --- rendering ---------------------------------------------------------------------------


def _md_cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        value = json.dumps(value, separators=(", ", ": "))
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def _spec_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    return cols


def render_markdown(report: Mapping[str, Any]) -> str:
    v = report.get("violation") or {}
    out = [f"# `{v.get('name')}` — {report.get('property')}", "",
           f"> {v.get('reason')}", ""]
    facts = [("property", _ref_text(report.get("property_ref") or {})),
             ("target", report.get("target")),
             ("flaws on", ", ".join(report.get("flaws") or []) or "none (the faithful reference)"),
             ("fixes on", ", ".join(report.get("fixes") or []) or "none")]
    for r in report.get("resembles") or []:
        facts.append(("resembles upstream", f"{r['upstream']} — flaw `{r['flaw']}`: {r['symptom']}"))
    if report.get("known_finding"):
        facts.append(("known finding", report["known_finding"]))
    facts.append(("found by", (report.get("run") or {}).get("found_by")))
    out += _md_table(["", ""], facts) + [""]
    replay = report.get("replay") or {}
    out += ["## Replay", "", "```sh", replay.get("command", "")]
    if replay.get("equivalent"):
        out.append(replay["equivalent"])
    if replay.get("pytest"):
        out.append(replay["pytest"])
    out += ["```", ""]
    if not report.get("replayable", True):
        out += [f"*Not exactly replayable: {report.get('not_replayable_because')}*", ""]
    evidence = v.get("evidence") or {}
    if evidence:
        out += ["## Evidence", ""] + _md_table(["quantity", "value"], evidence.items()) + [""]
    for other in report.get("other_violations") or []:
        out += [f"Also: `{other.get('name')}` — {other.get('reason')}", ""]
    z3m = report.get("z3_model")
    if z3m:
        out += ["## Z3 model", "", f"case: `{z3m.get('case')}`", ""]
        out += _md_table(["variable", "value"], (z3m.get("values") or {}).items()) + [""]
        if z3m.get("params"):
            out += _md_table(["parameter", "value"], z3m["params"].items()) + [""]
        out += [f"Replay on the reference: {z3m.get('replay_on_reference')} "
                f"(confirmed: {z3m.get('replay_confirmed')})", ""]
    conf = report.get("configuration") or {}
    if conf.get("lemma"):
        out += ["## Lemma", ""] + _md_table(["", ""], conf["lemma"].items()) + [""]
    if conf.get("vllm_config"):
        out += ["## Configuration (`VllmConfig`, every field; **bold** = not the default)", ""]
        out += _md_table(["field", "value", "default"],
                         ((f"**{r['field']}**" if r["changed"] else r["field"], r["value"], r["default"])
                          for r in conf["vllm_config"])) + [""]
    for i, rows in enumerate(conf.get("workers") or []):
        cols = _spec_columns(rows)
        title = "## Layer specs" + (f" (worker {i})" if len(conf.get("workers") or []) > 1 else "")
        out += [title, ""] + _md_table(cols, ([r.get(c, "") for c in cols] for r in rows)) + [""]
    if conf.get("groups"):
        cols = _spec_columns(conf["groups"])
        out += ["## KV cache groups", ""] + _md_table(cols, ([r.get(c, "") for c in cols]
                                                             for r in conf["groups"])) + [""]
    if conf.get("arguments"):
        out += ["## Other arguments", "", "```json",
                json.dumps(conf["arguments"], indent=2)[:6000], "```", ""]
    trace = report.get("trace")
    if trace:
        out += ["## Operation trace (the last workload the property ran)", ""]
        out += _md_table(["request", "prompt tokens", "max tokens", "arrival step"],
                         ((r.get("request_id"), r.get("prompt_tokens"), r.get("max_tokens"),
                           r.get("arrival_step")) for r in trace["requests"] if isinstance(r, dict)))
        oc = trace.get("outcome") or {}
        out += ["", "Outcome: " + ", ".join(f"{k}={oc[k]}" for k in oc if oc[k] not in (None, [], ())), ""]
        rows = [r if r is not None else ["…"] * len(trace["columns"]) for r in trace["rows"]]
        out += _md_table(trace["columns"], rows)
        if trace.get("elided_rows"):
            out += ["", f"({trace['elided_rows']} rows elided)"]
        out.append("")
    notes = (report.get("run") or {}).get("hypothesis_notes") or []
    if notes:
        out += ["## Hypothesis output", "", "```", "\n".join(notes)[:8000], "```", ""]
    return "\n".join(out)


def _ref_text(ref: Mapping[str, Any]) -> str:
    if ref.get("lemma"):
        return f"lemma `{ref['lemma']}`"
    where = ref.get("module") or ref.get("file") or "?"
    return f"`{where}:{ref.get('name')}`"


_CSS = """
body{font:15px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:18px 28px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#c3c9d6}main{max-width:1100px;margin:0 auto;padding:18px 28px}
table{border-collapse:collapse;margin:8px 0 14px;font-size:13px;background:#fff}
th,td{border:1px solid #dde1e8;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
details{background:#fff;border:1px solid #dde1e8;border-radius:8px;margin:12px 0;padding:0 16px}
summary{cursor:pointer;padding:12px 0;font-weight:600;list-style:none}
summary::-webkit-details-marker{display:none}summary:before{content:"▸ ";color:#8a93a6}
details[open] summary:before{content:"▾ "}
.tag{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;margin-left:6px}
.flaw{background:#fde8e8;color:#a4161a}.finding{background:#fff4d6;color:#8a5a00}
.ref{background:#e6f4ea;color:#1e6b34}.reason{color:#3c4454;font-weight:400}
code,pre{font:12.5px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:#1d2330;color:#e8ebf2;padding:10px 12px;border-radius:6px;overflow-x:auto}
.changed{font-weight:700}.muted{color:#8a93a6}h3{margin:16px 0 4px;font-size:15px}
.summary td{font-size:14px}
"""


def _h(value: Any) -> str:
    if isinstance(value, (dict, list)):
        value = json.dumps(value, separators=(", ", ": "))
    return html.escape("" if value is None else str(value))


def _html_table(header: Sequence[str], rows: Iterable[Sequence[Any]], classes: str = "") -> str:
    head = "".join(f"<th>{_h(c)}</th>" for c in header)
    body = []
    for row in rows:
        cells = []
        for c in row:
            cls = ' class="num"' if isinstance(c, (int, float)) and not isinstance(c, bool) else ""
            cells.append(f"<td{cls}>{_h(c)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    cls = f' class="{classes}"' if classes else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _html_report(path: Path, r: Mapping[str, Any]) -> str:
    v = r.get("violation") or {}
    tags = "".join(f'<span class="tag flaw">flaw {_h(f)}</span>' for f in r.get("flaws") or [])
    if r.get("known_finding"):
        tags += '<span class="tag finding">known finding</span>'
    if not r.get("flaws"):
        tags += '<span class="tag ref">reference</span>'
    parts = [f'<details id="{_h(r.get("id"))}"><summary><code>{_h(v.get("name"))}</code> — '
             f'{_h(r.get("property"))}{tags}<br><span class="reason">{_h(v.get("reason"))}</span></summary>']
    facts = [("report", path.name), ("property", _ref_text(r.get("property_ref") or {})),
             ("target", r.get("target")), ("found by", (r.get("run") or {}).get("found_by"))]
    for res in r.get("resembles") or []:
        facts.append(("resembles upstream", f"{res['upstream']} — {res['symptom']} ({res['defect']})"))
    if r.get("known_finding"):
        facts.append(("known finding", r["known_finding"]))
    parts.append(_html_table(["", ""], facts))
    replay = r.get("replay") or {}
    cmds = [replay.get("command")] + [replay.get(k) for k in ("equivalent", "pytest") if replay.get(k)]
    parts.append("<h3>Replay</h3><pre>" + _h("\n".join(c for c in cmds if c)) + "</pre>")
    if v.get("evidence"):
        parts.append("<h3>Evidence</h3>" + _html_table(["quantity", "value"], v["evidence"].items()))
    z3m = r.get("z3_model")
    if z3m:
        parts.append(f"<h3>Z3 model (case {_h(z3m.get('case'))})</h3>"
                     + _html_table(["variable", "value"], (z3m.get("values") or {}).items())
                     + f"<p>Replay on the reference: {_h(z3m.get('replay_on_reference'))}</p>")
    conf = r.get("configuration") or {}
    if conf.get("vllm_config"):
        rows = conf["vllm_config"]
        head = "".join(f"<th>{h}</th>" for h in ("field", "value", "default"))
        body = "".join(f'<tr class="{"changed" if x["changed"] else "muted"}"><td>{_h(x["field"])}</td>'
                       f'<td>{_h(x["value"])}</td><td>{_h(x["default"])}</td></tr>' for x in rows)
        parts.append("<h3>Configuration (VllmConfig; bold = not the default)</h3>"
                     f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    for i, rows in enumerate(conf.get("workers") or []):
        cols = _spec_columns(rows)
        parts.append(f"<h3>Layer specs{f' (worker {i})' if len(conf['workers']) > 1 else ''}</h3>"
                     + _html_table(cols, ([x.get(c, "") for c in cols] for x in rows)))
    if conf.get("groups"):
        cols = _spec_columns(conf["groups"])
        parts.append("<h3>KV cache groups</h3>"
                     + _html_table(cols, ([x.get(c, "") for c in cols] for x in conf["groups"])))
    if conf.get("arguments"):
        parts.append("<h3>Other arguments</h3><pre>" + _h(json.dumps(conf["arguments"], indent=2)[:6000])
                     + "</pre>")
    trace = r.get("trace")
    if trace:
        oc = trace.get("outcome") or {}
        parts.append("<h3>Operation trace</h3>" + _html_table(
            ["request", "prompt tokens", "max tokens", "arrival"],
            ((q.get("request_id"), q.get("prompt_tokens"), q.get("max_tokens"), q.get("arrival_step"))
             for q in trace["requests"] if isinstance(q, dict)))
            + "<p>" + _h(", ".join(f"{k}={oc[k]}" for k in oc if oc[k] not in (None, [], ()))) + "</p>"
            + _html_table(trace["columns"], (row if row is not None else ["…"] * len(trace["columns"])
                                             for row in trace["rows"][:120])))
    parts.append("</details>")
    return "".join(parts)


def render_index(directory: str | os.PathLike[str] | None = None) -> tuple[Path, Path, int]:
    """Write ``index.md`` and a self-contained ``index.html`` of every report in ``directory``."""
    where = Path(directory) if directory is not None else reports_dir()
    reports = list_reports(where)
    findings = sorted((where / "findings").glob("*.md")) if (where / "findings").is_dir() else []
    md = ["# kvverify counterexample reports", "",
          f"{len(reports)} report(s) in `{_display_path(where)}`. Each replays with "
          "`kvverify replay <report>.json` (exit 1: still failing, 0: passes now).", ""]
    if reports:
        md += _md_table(["invariant", "property", "flaws", "resembles", "reason", "report"],
                        ((f"`{r['violation']['name']}`", r.get("property"), ", ".join(r.get("flaws") or []) or "—",
                          ", ".join(x["upstream"] for x in r.get("resembles") or []) or "—",
                          r["violation"].get("reason"), f"[{p.stem}]({p.stem}.md)") for p, r in reports))
        md.append("")
    if findings:
        md += ["## Written-up findings", ""] + [f"- [{f.stem}](findings/{f.name})" for f in findings] + [""]
    md_path = where / INDEX_MD
    atomic_write_text(md_path, "\n".join(md))

    rows = []
    for p, r in reports:
        v = r.get("violation") or {}
        rows.append(f'<tr><td><a href="#{_h(r.get("id"))}"><code>{_h(v.get("name"))}</code></a></td>'
                    f'<td>{_h(r.get("property"))}</td><td>{_h(", ".join(r.get("flaws") or []) or "—")}</td>'
                    f'<td>{_h(", ".join(x["upstream"] for x in r.get("resembles") or []) or "—")}</td>'
                    f'<td>{_h(v.get("reason"))}</td></tr>')
    summary = ("<table class=\"summary\"><thead><tr><th>invariant</th><th>property</th><th>flaws</th>"
               "<th>resembles</th><th>reason</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
               if rows else "<p>No counterexample reports: every property held. 🎉</p>")
    finding_html = ""
    if findings:
        finding_html = "<h2>Written-up findings</h2><ul>" + "".join(
            f'<li><a href="findings/{_h(f.name)}">{_h(f.stem)}</a></li>' for f in findings) + "</ul>"
    page = ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>kvverify reports ({len(reports)})</title><style>{_CSS}</style></head><body>"
            f"<header><h1>kvverify counterexample reports</h1><p>{len(reports)} report(s). "
            "Replay any of them with <code>kvverify replay reports/&lt;report&gt;.json</code> "
            "(exit 1: still failing, 0: passes now).</p></header><main>"
            f"{summary}{finding_html}<h2>Reports</h2>"
            + "".join(_html_report(p, r) for p, r in reports) + "</main></body></html>\n")
    html_path = where / INDEX_HTML
    atomic_write_text(html_path, page)
    return md_path, html_path, len(reports)


# --- stateful machines -------------------------------------------------------------------

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


_SAFE_MODULES = ("kvverify.config", "kvverify.specs", "kvverify.strategies", "kvverify.driver",
                 "kvverify.grouping", "kvverify.planner")


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
    notes = [_sanitize(str(n)) for n in getattr(exc, "__notes__", []) or []]
    steps = steps_from_notes(notes)
    blob = blob_from_notes(notes)
    config_args: dict[str, Any] = {}
    for step in steps:
        for k, v in _step_arguments(step).items():
            if dataclasses.is_dataclass(v):
                config_args.setdefault(k, v)
    violations = violations_from_exception(exc)
    ref = {"module": machine.__module__, "name": machine.__qualname__, "machine": True,
           "file": property_ref(machine)["file"] if hasattr(machine, "__module__") else None}
    try:
        ref["file"] = os.path.relpath(inspect.getsourcefile(machine) or "")
    except (TypeError, OSError, ValueError):
        ref["file"] = None
    report: dict[str, Any] = {
        "schema": SCHEMA, "kind": "stateful", "property": machine.__name__, "property_ref": ref,
        "target": target_name, "flaws": sorted(flaw_names), "fixes": sorted(fix_names),
        "violation": violations[0], "other_violations": violations[1:],
        "exception": {"type": type(exc).__name__, "message": _sanitize(str(exc))[:4000]},
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
                     "versions": _versions()}
    if nodeid is None:
        nodeid = suite_nodeid(f"Test{machine.__name__}") or suite_nodeid(machine.__name__)
    flags = "".join(f" --flaw {n}" for n in flaw_names)
    return _finish(report, directory, pytest_cmd=f"python -m pytest '{nodeid}'{flags}" if nodeid else None)


def report_stateful(machine: type, exc: BaseException, *, directory: str | os.PathLike[str] | None = None,
                    **kw: Any) -> list[Path]:
    """Write one report per distinct failure of a state machine run."""
    where = Path(directory) if directory is not None else reports_dir()
    return [write_report(build_stateful_report(machine, leaf, directory=where, **kw), where)
            for leaf in leaf_exceptions(exc)]


def _replay_stateful(report: Mapping[str, Any], use_flaws: list[str], use_fixes: list[str]) -> ReplayOutcome:
    from hypothesis import settings
    from hypothesis.errors import DidNotReproduce
    from hypothesis.stateful import run_state_machine_as_test

    ref = report.get("property_ref") or {}
    blob = (report.get("example") or {}).get("reproduce_failure")
    if not blob:
        raise ReportError(f"this report cannot be replayed exactly: {report.get('not_replayable_because')}")
    try:
        machine: Any = importlib.import_module(ref["module"])
        for part in str(ref["name"]).split("."):
            machine = getattr(machine, part)
    except (ImportError, AttributeError, KeyError) as e:
        raise ReportError(f"cannot find the state machine {ref.get('name')!r}: {e}") from None
    replayer = type(machine.__name__, (machine,), {"__module__": machine.__module__})
    replayer._hypothesis_internal_use_reproduce_failure = (blob[0], blob[1].encode("ascii"))
    expected = (report.get("violation") or {}).get("name")
    with switched(use_flaws, use_fixes):
        try:
            run_state_machine_as_test(replayer, settings=settings(database=None, deadline=None, print_blob=False))
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


# --- replay ------------------------------------------------------------------------------


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


def resolve_property(ref: Mapping[str, Any]) -> Any:
    """The ``@given`` function a report names: by module and name, else from its file."""
    module_name, name, file = ref.get("module"), ref.get("name"), ref.get("file")
    errors = []
    if module_name and name:
        try:
            obj = getattr(importlib.import_module(module_name), name)
            if is_property(obj):
                return obj
        except (ImportError, AttributeError) as e:
            errors.append(f"{module_name}: {e}")
        except Exception as e:  # noqa: BLE001 - report the import failure
            errors.append(f"{module_name}: {type(e).__name__}: {e}")
    if file and name and Path(file).is_file():
        module = load_module_from_file(Path(file))
        obj = getattr(module, name, None)
        if is_property(obj):
            return obj
        errors.append(f"{file}: no @given property named {name!r}")
    raise ReportError(f"cannot find the property {name!r} ({'; '.join(errors) or 'no module or file recorded'})")


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

    ``flaw_names`` / ``fix_names`` replace the recorded switches when given.
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
    from hypothesis import HealthCheck, Phase, example, given, settings

    from kvverify.targets import get_target

    fn = resolve_property(report.get("property_ref") or {})
    given_kwargs = getattr(fn.hypothesis, "_given_kwargs", None)
    if given_kwargs is None:
        raise ReportError("this Hypothesis version does not expose the property's strategies")
    tgt = get_target(target or report.get("target") or "reference")
    expected = (report.get("violation") or {}).get("name")
    with switched(use_flaws, use_fixes):
        example_kwargs = {k: decode(v) for k, v in (report.get("example") or {}).items()}
        missing = set(given_kwargs) - set(example_kwargs)
        if missing:
            raise ReportError(f"the report lacks arguments {sorted(missing)} the property now takes")
        ran: dict[str, Any] = {"calls": 0, "rejected": False}
        inner = fn.hypothesis.inner_test

        def once(*args: Any, **kwargs: Any) -> Any:
            ran["calls"] += 1
            try:
                return inner(*args, **kwargs)
            except BaseException as e:
                if _is_rejection(e):
                    ran["rejected"] = True
                raise

        import functools
        runner = functools.wraps(inner)(once)
        test = given(**given_kwargs)(runner)
        test = example(**example_kwargs)(test)
        test = settings(database=None, deadline=None, phases=[Phase.explicit], print_blob=False,
                        suppress_health_check=list(HealthCheck))(test)
        with instrument([test]) as sink:
            try:
                test(target=tgt)
            except ReplayMismatch as e:
                raise ReportError(f"cannot replay exactly: {e}") from None
            except BaseException as e:  # noqa: BLE001 - the property failed: reproduced
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                inner_exc = e
                nested = [x for x in _exception_family(e) if isinstance(x, ReplayMismatch)]
                if nested:
                    raise ReportError(f"cannot replay exactly: {nested[0]}") from None
                got = violations_from_exception(inner_exc)[0]
                cap = sink.for_exception(inner_exc)
                trace = _trace(cap.workloads) if cap else None
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
    lemma = get(ref.get("lemma"))
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


__all__ = [
    "Capture", "RecordingData", "RecordingTarget", "ReplayData", "ReplayOutcome", "ReportError", "Sink",
    "atomic_write_text", "build_lemma_report", "build_report", "decode", "describe_example", "encode",
    "instrument", "list_reports", "load_report", "property_functions", "render_index", "render_markdown",
    "replay_path", "replay_report", "report_failure", "report_key", "report_lemma", "reports_dir",
    "resolve_property", "violations_from_exception", "write_report",
]
