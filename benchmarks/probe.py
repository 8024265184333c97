"""Instrument one ``@given`` property for a run: count calls, first *genuine* failure, statistics.

:class:`Probe` swaps the property's ``hypothesis.inner_test`` (the hook Hypothesis reads at
call time, meant for plugins) for a counting wrapper, and collects Hypothesis's own
per-test-case statistics (what ``--hypothesis-show-statistics`` prints). A failure is
*genuine* when the body raises an ordinary exception: ``assume`` rejections
(``UnsatisfiedAssumption``) and Hypothesis's control flow (``StopTest``) are counted apart.
"""

from __future__ import annotations

import functools

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis.errors import UnsatisfiedAssumption

from kvverify.hypothesis_hooks import is_genuine_failure
from kvverify.hypothesis_statistics import RunStatistics, collecting


def preload_modules() -> int:
    """Import every ``kvverify`` and ``benchmarks`` module up front; returns how many are loaded.

    Hypothesis mines constants from the source of the *local* modules loaded so far and
    mixes them into generation, so example counts depend on what was imported before (and
    on lazy imports during a run). Loading everything first makes the counts of one section
    the same whichever sections ran before it, and the same in every run of a tree.
    """
    import importlib
    import pkgutil
    import sys

    import benchmarks
    import kvverify

    for package in (kvverify, benchmarks):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith((".run", ".profile")) and package is benchmarks:
                continue
            try:
                importlib.import_module(info.name)
            except Exception:  # noqa: BLE001 - an optional module (torch, vllm) may not import
                pass
    return len(sys.modules)


@dataclass
class Probe:
    """Counts for one run; use as ``with Probe(prop) as p: prop(...)`` (stateful: ``Probe(None)``)."""

    prop: Callable | None
    calls: int = 0
    rejected: int = 0  # assume() in the body
    first_failure_at: int | None = None
    first_failure_seconds: float | None = None
    first_failure_cpu: float | None = None  # process CPU seconds: robust to a busy machine
    first_failure: str | None = None
    started: float = 0.0
    started_cpu: float = 0.0
    elapsed: float = 0.0
    elapsed_cpu: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    invalid_reasons: Counter = field(default_factory=Counter)
    filter_retries: int = 0
    stopped_because: str | None = None
    _saved: Any = None
    _ctx: Any = None

    # -- the wrapper around the property body --

    def _wrap(self, inner: Callable) -> Callable:
        def counting(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            try:
                return inner(*args, **kwargs)
            except UnsatisfiedAssumption:
                self.rejected += 1
                raise
            except BaseException as e:
                if self.first_failure_at is None and is_genuine_failure(e):
                    self.first_failure_at = self.calls
                    self.first_failure_seconds = time.perf_counter() - self.started
                    self.first_failure_cpu = time.process_time() - self.started_cpu
                    self.first_failure = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
                raise
        # wraps: Hypothesis reads the body's signature, and derives a derandomized run's seed
        # from its source, through __wrapped__ -- the probe must not change what is drawn
        return functools.wraps(inner)(counting)

    def _on_statistics(self, stats: RunStatistics) -> None:
        self.stopped_because = stats.stopped_because or self.stopped_because
        for case in stats.test_cases:
            self.statuses[case.status] += 1
            for ev in case.events:
                if "to satisfy filter" in ev:
                    self.filter_retries += 1
                if ev.startswith("invalid because"):
                    why = ev.split(":", 1)[-1].strip()
                    self.invalid_reasons["filter" if "unable to satisfy" in why else why[:60]] += 1

    def __enter__(self) -> "Probe":
        if self.prop is not None:
            self._saved = self.prop.hypothesis.inner_test
            self.prop.hypothesis.inner_test = self._wrap(self._saved)
        self._ctx = collecting(self._on_statistics)
        self._ctx.__enter__()
        self.started, self.started_cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.elapsed = time.perf_counter() - self.started
        self.elapsed_cpu = time.process_time() - self.started_cpu
        self._ctx.__exit__(*exc)
        if self.prop is not None:
            self.prop.hypothesis.inner_test = self._saved

    # -- derived numbers --

    @property
    def valid(self) -> int:
        return self.statuses.get("valid", 0) + self.statuses.get("interesting", 0)

    @property
    def invalid(self) -> int:
        return self.statuses.get("invalid", 0) + self.statuses.get("overrun", 0)

    @property
    def overrun(self) -> int:
        return self.statuses.get("overrun", 0)

    @property
    def generated(self) -> int:
        return sum(self.statuses.values())

    def summary(self) -> dict:
        return {"calls": self.calls, "valid": self.valid, "invalid": self.invalid, "overrun": self.overrun,
                "rejected_by_assume": self.rejected, "filter_retries": self.filter_retries,
                "invalid_reasons": dict(self.invalid_reasons.most_common(4)),
                "stopped_because": self.stopped_because, "seconds": round(self.elapsed, 4),
                "cpu_seconds": round(self.elapsed_cpu, 4)}
