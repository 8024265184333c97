"""One mutation run: the baseline on the unmutated engine, then every selected mutant.

:func:`run` builds each mutant's overlay in a temporary cache of its own (removed at the end),
runs every suite against it (:mod:`kvverify.mutate.run`) and compares each suite's outcomes
with the baseline's (:mod:`kvverify.mutate.outcomes`). A mutant's runs stop at their first
failure (``-x``, the ``engine-mutation`` Hypothesis profile: no shrinking), and the differential
is not run once a guarantee property's assertion killed the mutant (its kind is decided). The CPU-time limit of a suite run is
``cpu_factor`` times the baseline's CPU seconds (at least ``min_cpu``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kvverify.errors import KVVerifyError
from kvverify.mutate.generate import Mutant
from kvverify.mutate.outcomes import ASSERTION, CRASH, SURVIVED, XPASSED, Outcome, Verdict, compare
from kvverify.mutate.run import Suite, run_suite
from kvverify.targets import overlay


_NONE = Verdict(SURVIVED)


@dataclass(frozen=True)
class Baseline:
    """A suite on the unmutated engine: its outcomes and CPU seconds."""

    suite: Suite
    outcomes: dict[str, Outcome]
    cpu_seconds: float
    nodeids: dict[str, str] = field(default_factory=dict)  # test id -> pytest node id

    @property
    def usable(self) -> int:
        """Tests that passed or were known failures: the ones a mutant is judged by."""
        return sum(o.status in ("passed", "xfailed") for o in self.outcomes.values())

    @property
    def left_out(self) -> list[str]:
        """Tests that failed or errored unmutated (left out of the comparison)."""
        return sorted(t for t, o in self.outcomes.items() if o.status in (ASSERTION, CRASH, XPASSED))

    @property
    def deselect(self) -> list[str]:
        """The left-out tests' node ids: deselected from a mutant's runs, where a left-out test
        failing first would stop the run (``-x``) before every test after it."""
        return [self.nodeids[t] for t in self.left_out if t in self.nodeids]


@dataclass(frozen=True)
class MutantResult:
    """A mutant and each suite's verdict on it (suite name -> Verdict)."""

    mutant: Mutant
    verdicts: dict[str, Verdict]


@dataclass(frozen=True)
class Limits:
    """Per suite run: CPU seconds = max(min_cpu, cpu_factor x baseline), wall = wall_factor x that."""

    cpu_factor: float = 5.0
    min_cpu: int = 60
    wall_factor: float = 3.0

    def cpu(self, baseline: Baseline) -> int:
        return max(self.min_cpu, int(self.cpu_factor * baseline.cpu_seconds) + 1)


def baselines(python: str, suites: list[Suite], root: Path, limits: Limits) -> list[Baseline]:
    """Each suite on the unmutated engine; a suite with no usable test is a clear error."""
    out = []
    for s in suites:
        r = run_suite(python, s, root=root, overlay=None, cpu_limit=3600, wall_limit=7200)
        b = Baseline(s, r.outcomes, r.cpu_seconds, r.nodeids)
        if b.usable == 0:
            raise KVVerifyError(f"suite {s.name!r} has no test that passes on the unmutated vLLM "
                                f"(exit {r.returncode}); its output ends:\n{r.tail[-1500:]}")
        out.append(b)
    return out


def run(python: str, mutants: list[Mutant], bases: list[Baseline], *, root: Path, source: Path,
        limits: Limits = Limits(), workers: int = 1,
        progress: Callable[[MutantResult], None] | None = None) -> list[MutantResult]:
    """Every mutant against every suite (``workers`` mutants at a time), in the mutants' order."""
    cache = Path(tempfile.mkdtemp(prefix="kvverify-mutants-"))
    try:
        def one(m: Mutant) -> MutantResult:
            ov = overlay.build_mutant(m.path, m.source, source=source, cache=cache)
            verdicts: dict[str, Verdict] = {}
            try:
                for b in bases:
                    if b.suite.name == "differential" and verdicts.get("guarantee", _NONE).kind == ASSERTION:
                        continue  # its kill kind is decided: a guarantee property's verdict
                    cpu = limits.cpu(b)
                    r = run_suite(python, b.suite, root=root, overlay=ov.path, cpu_limit=cpu,
                                  wall_limit=cpu * limits.wall_factor, first_failure=True,
                                  deselect=b.deselect)
                    verdicts[b.suite.name] = compare(b.outcomes, r.outcomes, timed_out=r.timed_out,
                                                      stopped_early=True)
            finally:
                shutil.rmtree(ov.path, ignore_errors=True)
            result = MutantResult(m, verdicts)
            if progress is not None:
                progress(result)
            return result

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            return list(pool.map(one, mutants))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


__all__ = ["Baseline", "Limits", "MutantResult", "baselines", "run"]
