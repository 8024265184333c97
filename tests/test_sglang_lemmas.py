"""The SGLang lemmas' flaw direction: each SGLang flaw a lemma lists in ``catches`` turns it
into a confirmed counterexample (the vLLM flaws' are in ``tests/test_lemmas_flaws.py``)."""

from __future__ import annotations

import pytest

from kvverify.lemmas import prove
from kvverify.lemmas.sglang import LEMMAS
from kvverify.sglang import flaws as sglang_flaws

PAIRS = [(lemma, flaw) for lemma in LEMMAS for flaw in lemma.catches]


def test_sglang_lemma_flaws_are_sglang_flaws() -> None:
    assert PAIRS
    assert {f for _, f in PAIRS} <= set(sglang_flaws.CATALOG)


@pytest.mark.parametrize("lemma,flaw", PAIRS, ids=[f"{lemma.name}-{flaw}" for lemma, flaw in PAIRS])
def test_sglang_lemma_catches_flaw(lemma, flaw) -> None:
    assert prove(lemma).result == lemma.expected == "proved"
    result = prove(lemma, flaw=flaw)
    assert result.result == "counterexample", (result.reason, result.counterexample)
    assert result.replay_confirmed
