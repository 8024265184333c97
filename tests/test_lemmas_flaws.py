"""The lemmas catch the bug zoo: with a flaw on, its lemma returns a counterexample whose
concrete replay on the (flawed) reference really violates the invariant."""

from __future__ import annotations

import pytest

from kvverify import flaws
from kvverify.lemmas import LEMMAS, catching, prove

#: every flaw that changes a formula the lemmas prove must be caught by at least one lemma
FORMULA_FLAWS = (
    "null_block_not_reserved",
    "override_ignored_in_check",
    "autofit_ignores_null_block",
    "autofit_first_group_only",
    "swa_admission_uncapped",
    "swa_cap_on_allocation",
    "mamba_hash_fallback_by_block_size",
)

PAIRS = [(flaw, lemma) for flaw in FORMULA_FLAWS for lemma in catching(flaw)]


@pytest.mark.parametrize("flaw", FORMULA_FLAWS)
def test_each_formula_flaw_has_a_lemma(flaw):
    assert flaw in flaws.CATALOG
    assert catching(flaw), f"no lemma declares it catches {flaw}"


@pytest.mark.parametrize("flaw,lemma", PAIRS, ids=[f"{f}-{lemma.name}" for f, lemma in PAIRS])
def test_flaw_gives_replayed_counterexample(flaw, lemma):
    result = prove(lemma, flaw=flaw)
    assert result.result == "counterexample", (result.result, result.reason)
    assert result.replay_confirmed is True, result.replay
    assert result.counterexample and "values" in result.counterexample
    assert not result.ok  # an unexpected counterexample: `kvverify prove --flaw` exits non-zero
    assert result.flaw == flaw


@pytest.mark.parametrize("flaw", sorted(set(flaws.CATALOG) - set(FORMULA_FLAWS)))
def test_other_flaws_do_not_break_the_proofs(flaw):
    """Flaws outside the proved formulas (runtime-only defects) leave every lemma as expected:
    no spurious counterexample, no unknown."""
    bad = {lemma.name: (r.result, r.reason) for lemma in LEMMAS
           if not (r := prove(lemma, flaw=flaw)).ok}
    assert not bad


def test_flaw_does_not_leak_out_of_prove():
    prove(catching("null_block_not_reserved")[0], flaw="null_block_not_reserved")
    assert not flaws.is_on("null_block_not_reserved")
