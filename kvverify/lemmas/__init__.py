"""Z3 boundary lemmas, built from the same arithmetic the reference executes.

Every lemma calls the shared :mod:`kvverify.reference.arith` functions on z3 terms (no formula is
typed twice), states its domain, and is three-valued: ``proved``, ``counterexample``
(replayed on the reference, which must confirm it) or ``unknown`` (a failure). Flaws and
proposed fixes reach the proofs through the flaw-/fix-aware arith functions.

Modules: :mod:`~kvverify.lemmas.core` (machinery), :mod:`~kvverify.lemmas.startup`
(null block, tensor plan, concurrency), :mod:`~kvverify.lemmas.autofit`,
:mod:`~kvverify.lemmas.recycling` (SWA, chunked local, Mamba),
:mod:`~kvverify.lemmas.hashing` (block sizes), :mod:`~kvverify.cli.lemmas`.
"""

from __future__ import annotations

from kvverify.lemmas import autofit, hashing, recycling, sglang, startup
from kvverify.lemmas.core import (
    BLOCK_SIZES,
    Case,
    Finding,
    Lemma,
    ReplayOutcome,
    Result,
    Var,
    check_case,
    prove,
)

LEMMAS: tuple[Lemma, ...] = (*startup.LEMMAS, *autofit.LEMMAS, *recycling.LEMMAS, *hashing.LEMMAS,
                             *sglang.LEMMAS)  # SGLang's (kvverify.lemmas.sglang)
BY_NAME: dict[str, Lemma] = {lemma.name: lemma for lemma in LEMMAS}
FINDINGS: dict[str, Finding] = {lemma.finding.id: lemma.finding for lemma in LEMMAS if lemma.finding}


def get(name: str) -> Lemma:
    """The lemma named ``name`` (a clear error naming the known ones otherwise)."""
    from kvverify.errors import ConfigError
    if name not in BY_NAME:
        raise ConfigError("lemma", name, f"unknown lemma; known: {', '.join(BY_NAME)}")
    return BY_NAME[name]


def catching(flaw: str) -> list[Lemma]:
    """The lemmas that must return a counterexample with ``flaw`` switched on."""
    return [lemma for lemma in LEMMAS if flaw in lemma.catches]


__all__ = ["BLOCK_SIZES", "BY_NAME", "FINDINGS", "LEMMAS", "Case", "Finding", "Lemma", "ReplayOutcome",
           "Result", "Var", "catching", "check_case", "get", "prove"]
