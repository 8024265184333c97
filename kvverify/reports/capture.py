"""Capturing a failing property: what it was called with, what it drew, what it ran.

:func:`instrument` swaps the ``.hypothesis.inner_test`` of ``@given`` properties (the hook
Hypothesis documents for plugins) for a recording wrapper. The wrapper hands the body a
:class:`RecordingData` (remembers every ``data.draw``) and a :class:`RecordingTarget`
(remembers the workloads run), and when the body raises it keeps the keyword arguments,
the draws, the active flaws and fixes and the exception as a :class:`Capture` in every
active :class:`Sink`. Hypothesis replays the shrunk example last, so the last capture of
an exception is the minimal failing example.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import threading
from collections import deque
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from hypothesis import is_hypothesis_test

from kvverify.hypothesis_hooks import is_genuine_failure
from kvverify.reports.common import ReportError, active_flaws, active_fixes


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
        #: ``(target, plan, workload, kwargs)`` of the last runs, recorded before each runs
        #: (so a run that raised is there too): a report re-runs the last with a recorder
        self.runs: list[tuple[Any, Any, list[Any], dict[str, Any]]] = []

    def run_workload(self, plan: Any, workload: Any, **kw: Any) -> Any:
        self.runs.append((self._target, plan, list(workload), dict(kw)))
        del self.runs[:-4]
        result = self._target.run_workload(plan, workload, **kw)
        self.workloads.append((list(workload), result))
        del self.workloads[:-4]
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def __repr__(self) -> str:
        return repr(self._target)


@dataclasses.dataclass(eq=False)
class Capture:
    """A property body's failing call, as the recording wrapper saw it."""

    function: Callable[..., Any]
    kwargs: dict[str, Any]
    exc: BaseException
    flaws: tuple[str, ...]
    fixes: tuple[str, ...]
    target_name: str
    workloads: list[tuple[list[Any], Any]]
    runs: list[tuple[Any, Any, list[Any], dict[str, Any]]] = dataclasses.field(default_factory=list)
    #: the target's old release rules (kvverify/behaviours.py): its reports replay on the reference under them
    behaviours: tuple[str, ...] = ()


@dataclasses.dataclass(eq=False)  # identity: sinks are removed from _SINKS by identity
class Sink:
    """Collects what the instrumented properties did while it is active."""

    examples: int = 0
    failures: deque = dataclasses.field(default_factory=lambda: deque(maxlen=64))

    def last(self) -> Capture | None:
        return self.failures[-1] if self.failures else None

    def for_exception(self, exc: BaseException | None) -> Capture | None:
        """The capture of ``exc`` (or of an exception it groups or chains), else the last."""
        if exc is not None:
            wanted = {id(e) for e in exception_family(exc)}
            for cap in reversed(self.failures):
                if id(cap.exc) in wanted:
                    return cap
        return self.last()

    def matching(self, exc: BaseException | None) -> list[Capture]:
        """Captures of ``exc`` itself or of an exception it groups, chains or wraps (no fallback)."""
        if exc is None:
            return []
        family = exception_family(exc)
        out: list[Capture] = []
        for cap in reversed(self.failures):
            if any(cap.exc is e for e in family) and all(cap.exc is not o.exc for o in out):
                out.append(cap)
        return out[::-1]

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


def exception_family(exc: BaseException) -> list[BaseException]:
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


_LOCK = threading.RLock()
_SINKS: list[Sink] = []
_INSTALLED: dict[int, list[Any]] = {}  # id(fn) -> [fn, original inner_test, refcount]


def is_property(fn: Any) -> bool:
    return callable(fn) and is_hypothesis_test(fn) and hasattr(fn, "hypothesis")


def _is_data_object(value: Any) -> bool:
    """``st.data()``'s draw object (duck-typed on its public ``draw``; its class is private)."""
    return (callable(getattr(value, "draw", None)) and not isinstance(value, type)
            and not isinstance(value, (RecordingData, ReplayData)))


def _recording_inner(fn: Any, inner: Callable[..., Any]) -> Callable[..., Any]:
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
            if _is_data_object(v):
                call_kwargs[k] = RecordingData(v)
        try:
            return inner(*args, **call_kwargs)
        except BaseException as e:
            if not is_genuine_failure(e) or not _SINKS:
                raise
            from kvverify.targets import release_rules_of
            target_obj = kwargs.get("target")
            cap = Capture(function=fn, kwargs={k: v for k, v in call_kwargs.items() if k != "target"},
                          exc=e, flaws=tuple(sorted(active_flaws())), fixes=tuple(sorted(active_fixes())),
                          target_name=target_obj.name if target_obj is not None else "reference",
                          workloads=list(rec_target.workloads) if rec_target is not None else [],
                          runs=list(rec_target.runs) if rec_target is not None else [],
                          behaviours=tuple(sorted(release_rules_of(target_obj))))
            for sink in _SINKS:
                sink.failures.append(cap)
            raise

    recording._kvverify_recording = True  # type: ignore[attr-defined]
    return recording


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
