"""Every Z3 lemma on the faithful reference: proved, or its known finding reproduced.

A finding is a strict known failure: the lemma must still return a replay-confirmed
counterexample (if upstream's behaviour changes and the lemma proves, this fails), and
under the finding's proposed fix the lemma must be proved.
"""

from __future__ import annotations

import pytest

from kvverify import fixes
from kvverify.lemmas import LEMMAS, prove
from kvverify.sglang import fixes as sglang_fixes

FINDING_LEMMAS = [lemma for lemma in LEMMAS if lemma.finding is not None]


@pytest.mark.parametrize("lemma", LEMMAS, ids=lambda lemma: lemma.name)
def test_lemma_on_reference(lemma):
    result = prove(lemma)
    assert result.result != "unknown", result.reason
    if lemma.finding is None:
        assert result.result == "proved", (
            f"{lemma.name}: counterexample {result.counterexample}; replay: {result.replay}")
    else:
        assert result.result == "counterexample", (
            f"known finding {lemma.finding.id} no longer reproduces: {lemma.name} is proved "
            "(strict known failure: has upstream changed? update the finding)")
        assert result.replay_confirmed, result.replay
    assert result.ok


@pytest.mark.parametrize("lemma", FINDING_LEMMAS, ids=lambda lemma: lemma.name)
def test_finding_proved_under_its_fix(lemma):
    assert lemma.finding.fix in fixes.CATALOG or lemma.finding.fix in sglang_fixes.CATALOG
    result = prove(lemma, fix=True)
    assert result.result == "proved", (result.counterexample, result.replay, result.reason)
    assert result.ok and result.fix == lemma.finding.fix


def test_every_lemma_proved_under_all_fixes_together():
    """The proposed fixes do not break any other lemma (nor each other)."""
    with fixes.enabled(*fixes.CATALOG), sglang_fixes.enabled(*sglang_fixes.CATALOG):
        bad = {lemma.name: (r.result, r.counterexample, r.reason)
               for lemma in LEMMAS if (r := prove(lemma)).result != "proved"}
    assert not bad
