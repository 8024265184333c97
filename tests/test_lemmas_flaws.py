"""The lemmas catch the bug zoo: with a flaw on, its lemma returns a counterexample whose
concrete replay on the (flawed) reference really violates the invariant.

Which flaws: every flaw of every engine's catalogue (:func:`kvverify.engines.flaw_catalog`)
without a ``no_lemma`` reason must be listed in some lemma's ``catches``
(``tests/test_zoo.py`` checks each flaw has exactly one of the two); the others must leave
every proof as expected.
"""

from __future__ import annotations

import pytest

from kvverify import engines, flaws
from kvverify.lemmas import LEMMAS, catching, prove

#: every engine's flaws
CATALOG = engines.flaw_catalog()
#: the flaws that change a formula the lemmas prove, read off the catalogues
FORMULA_FLAWS = [f.name for f in CATALOG.values() if not f.no_lemma]
PAIRS = [(flaw, lemma) for flaw in FORMULA_FLAWS for lemma in catching(flaw)]


@pytest.mark.parametrize("flaw", FORMULA_FLAWS)
def test_each_formula_flaw_has_a_lemma(flaw):
    assert catching(flaw), f"no lemma declares it catches {flaw}, and the catalogue gives no `no_lemma` reason"


@pytest.mark.parametrize("flaw,lemma", PAIRS, ids=[f"{f}-{lemma.name}" for f, lemma in PAIRS])
def test_flaw_gives_replayed_counterexample(flaw, lemma):
    result = prove(lemma, flaw=flaw)
    assert result.result == "counterexample", (result.result, result.reason)
    assert result.replay_confirmed is True, result.replay
    assert result.counterexample and "values" in result.counterexample
    assert not result.ok  # an unexpected counterexample: `kvverify prove --flaw` exits non-zero
    assert result.flaw == flaw


@pytest.mark.parametrize("flaw", [f.name for f in CATALOG.values() if f.no_lemma])
def test_other_flaws_do_not_break_the_proofs(flaw):
    """Flaws outside the proved formulas (their ``no_lemma`` says why) leave every lemma as
    expected: no spurious counterexample, no unknown."""
    assert not catching(flaw)
    bad = {lemma.name: (r.result, r.reason) for lemma in LEMMAS
           if not (r := prove(lemma, flaw=flaw)).ok}
    assert not bad


def test_every_lemma_catches_only_catalogued_flaws():
    assert {f for lemma in LEMMAS for f in lemma.catches} <= set(FORMULA_FLAWS)


def test_flaw_does_not_leak_out_of_prove():
    prove(catching("null_block_not_reserved")[0], flaw="null_block_not_reserved")
    assert not flaws.is_on("null_block_not_reserved")
