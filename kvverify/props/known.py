"""Attribute a violation to a known finding, so one upstream wart does not mask new bugs.

Findings F2 and F4 (chunked-local / SWA caps, ``reports/findings/``) make several general
properties fail on the faithful reference for some inputs. Each has its own strict known
failure; here a general property re-runs a failing case under the finding's proposed fix,
and if the fix alone explains the failure it records ``event("explained by known finding
F2")`` instead of failing. Anything the fixes do not explain still fails. On a target
without the fix options (``Feature.FIX_OPTIONS``: vLLM) the same case is re-run on the
reference instead, and attributed only if the faithful reference fails it too.

The same holds on the reference with bug-zoo flaws switched on (``kvverify zoo``, ``pytest
--flaw``): a failure the faithful reference (every flaw off) does not share is the flaws'
doing, never a known finding's, even where a fix would refuse the deployment at startup (a
refused deployment owes nothing). Without that check a fix that refuses tight pools (F2's,
F4's) would explain away exactly the tight-pool failures a flaw shows.

On a release whose scheduling rules differ from the pin's without a defect (the padding of a
new one-token decode before 0.31: :mod:`kvverify.behaviours`), every re-run on the reference
follows that release's rules (the target's ``reference_behaviours``).
"""

from __future__ import annotations

from typing import Callable, Sequence

from hypothesis import currently_in_test_context, event

from kvverify import behaviours, fixes, flaws
from kvverify.invariants.base import Violation, assert_no_violations
from kvverify.props import attribution
from kvverify.targets import release_rules_of
from kvverify.targets.base import Feature, Target, has

#: proposed fix -> the finding it resolves, for the fixes marked ``explains_general_failures``
#: in :data:`kvverify.fixes.CATALOG` (each finding has a strict known-failure test), by finding
KNOWN_FINDINGS: dict[str, str] = {
    f.name: f.finding_id
    for f in sorted(fixes.CATALOG.values(), key=lambda f: f.finding_id) if f.explains_general_failures
}


def assert_or_known(target: Target, compute: Callable[[], Sequence[Violation]],
                    on_reference: Callable[[], Sequence[Violation]] | None = None) -> None:
    """Fail on ``compute()``'s violations unless the known findings' fixes explain them.

    On a target without the fix options (vLLM), ``on_reference`` re-runs the same case on the reference:
    a failure counts as the known finding only if the faithful reference fails too and
    its fix alone makes it pass (each finding is confirmed on vLLM by
    ``properties/test_differential.py::test_finding_reproduces_on_vllm``).
    """
    violations = list(compute())
    if not violations:
        return
    if on_reference is not None and release_rules_of(target):
        on_reference = _shaped(on_reference, release_rules_of(target))
    if currently_in_test_context():  # counted on the run page (kvverify/nightly/coverage.py)
        event("violation " + violations[0].name)
    rerun = compute if has(target, Feature.FIX_OPTIONS) else on_reference
    if rerun is None or (rerun is not compute and not list(rerun())):
        # the faithful reference passes: with --attribute-flaws / --absorb-flaws, name the zoo
        # flaw that explains the target's failure (kvverify/props/attribution.py)
        if rerun is not None and rerun is not compute and attribution.absorb_or_name(violations, rerun):
            return
        assert_no_violations(violations)
        return
    if rerun is compute and flaws.active():
        with flaws.only():
            if not list(compute()):  # the faithful reference passes: the flaws' doing
                assert_no_violations(violations)
                return
    for names in [(n,) for n in KNOWN_FINDINGS] + [tuple(KNOWN_FINDINGS)]:
        with fixes.enabled(*names):
            if not list(rerun()):
                if currently_in_test_context():  # also called outside Hypothesis (replays, tests)
                    event("explained by known finding " + "+".join(KNOWN_FINDINGS[n] for n in names))
                return
    assert_no_violations(violations)


def _shaped(run: Callable[[], Sequence[Violation]], rules: frozenset[str]) -> Callable[[], Sequence[Violation]]:
    """``run`` on the reference shaped like the target's release (its old rules on)."""
    def shaped() -> Sequence[Violation]:
        with behaviours.only(*rules):
            return list(run())
    return shaped


def check_or_known(target: Target, fn: Callable[[Target], Sequence[Violation]]) -> None:
    """:func:`assert_or_known` for a check written against any target: ``fn(target)``."""
    from kvverify.targets import get_target
    assert_or_known(target, lambda: fn(target), lambda: fn(get_target("reference")))
