"""The one place kvverify reaches past Hypothesis's documented API: per-run statistics.

``pytest --hypothesis-show-statistics`` prints, per test, how many test cases were valid,
invalid or overran, the events of each and why generation stopped. The benchmarks
(:mod:`benchmarks.probe`) need those numbers as data, and no documented API hands them to a
program: Hypothesis's own pytest plugin receives them through ``hypothesis.statistics.collector``,
a dynamic variable the engine calls with one statistics dict per run. This module alone
touches it, and turns the dict into :class:`RunStatistics`, so a Hypothesis release that
moves or reshapes it breaks here and nowhere else. ``tests/test_hypothesis_api.py`` allow-lists
this module as the only exception to the public API and pins what is read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

#: the phases whose test cases are counted (the explicit examples and shrinking are not)
PHASES = ("reuse-phase", "generate-phase")


@dataclass(frozen=True)
class CaseStatistics:
    """One test case: its status (``valid``, ``invalid``, ``overrun``, ``interesting``) and events."""

    status: str
    events: tuple[str, ...]


@dataclass(frozen=True)
class RunStatistics:
    """One run of a ``@given`` test: why it stopped and its test cases, in order."""

    stopped_because: str | None
    test_cases: tuple[CaseStatistics, ...]


def parse(stats: Mapping[str, Any]) -> RunStatistics:
    """:class:`RunStatistics` from the engine's statistics dict."""
    cases = tuple(CaseStatistics(str(case["status"]), tuple(str(e) for e in case.get("events", ())))
                  for phase in PHASES for case in (stats.get(phase) or {}).get("test-cases", []))
    stopped = stats.get("stopped-because")
    return RunStatistics(None if stopped is None else str(stopped), cases)


@contextlib.contextmanager
def collecting(callback: Callable[[RunStatistics], None]) -> Iterator[None]:
    """Call ``callback`` with the :class:`RunStatistics` of every run while the block runs."""
    from hypothesis.statistics import collector

    def note(stats: Mapping[str, Any]) -> None:
        callback(parse(stats))

    with collector.with_value(note):  # type: ignore[arg-type]  # typed for its default, None
        yield
