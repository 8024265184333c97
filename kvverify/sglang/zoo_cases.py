"""Every SGLang bug-zoo flaw's regression case: a minimal boundary input, fixed, and its check.

As :mod:`kvverify.zoo_cases` for vLLM: one function per flaw, named by
:attr:`kvverify.flaws.Flaw.regression`. Each builds the minimal case the catching property
shrinks to (``kvverify zoo``), worked by hand in its comment, and runs that property's check
on the SGLang reference: no violation on the faithful reference, at least one with the flaw
on (``tests/test_zoo_regressions.py`` runs each both ways).

Notation: ``P`` the page size, ``C`` the pool (``max_total_num_tokens``), ``k`` the tokens
one decode step writes per request; a decoding request ``(in, out)`` holds
``seq = in + out - 1`` tokens before the probed step (its last output token is not in the
cache yet).
"""

from __future__ import annotations

from kvverify.invariants.base import Violation
from kvverify.sglang.config import SglangConfig
from kvverify.sglang.invariants import (
    check_pool_is_allocator_pool,
    check_retraction_frees_enough,
    check_retraction_terminates,
    check_validated_is_schedulable,
)
from kvverify.targets.sglang_contract import DecodingReqSpec
from kvverify.targets.sglang_reference import SglangReferenceTarget

#: an unbounded request (what a client sends without ``max_new_tokens``)
UNBOUNDED = 1 << 30


def _retraction(config: SglangConfig, *batch: tuple[int, int]) -> list[Violation]:
    """``test_sglang_retraction_frees_enough``'s check on a batch of ``(in, out)`` requests
    (``max_new_tokens = out + 1``: each still decoding)."""
    probe = SglangReferenceTarget().probe_retraction(
        config, [DecodingReqSpec(i, o, o + 1) for i, o in batch])
    return check_retraction_frees_enough(probe)


def _decode_pool(page_size: int, pool: int, tokens_per_step: int = 1) -> SglangConfig:
    return SglangConfig(page_size=page_size, context_len=pool + 64, max_total_num_tokens=pool,
                        chunked_prefill_size=None, max_prefill_tokens=pool, tokens_per_step=tokens_per_step)


def sglang_max_new_tokens_unclamped() -> list[Violation]:
    # P = 2, C = 8, context 9: max_req_len = min(9 - 1, 8 - 1) = 7, inputs < 7 - 5 = 2 pass, so
    # a 1-token input with no max_new_tokens is accepted. Clamped: min(7 - 1 - 1, 8 - ceil_paged(1)
    # - 2 - 1) = min(5, 3) = 3, charged 1 + 3 + 2 = 6 < 8: admitted. Unclamped (by length only):
    # 5, charged 1 + 5 + 2 = 8, not < 8: it waits forever. (P = 1 leaves room: 1 + 5 + 1 < 8.)
    config = SglangConfig(page_size=2, context_len=9, max_total_num_tokens=8, chunked_prefill_size=None,
                          max_prefill_tokens=8)
    return check_validated_is_schedulable(SglangReferenceTarget().probe_admission(config, 1, UNBOUNDED), 1)


def sglang_decode_mem_counts_tokens() -> list[Violation]:
    # P = 2, C = 6 (3 pages), three requests (2, 1): each holds one full page and starts a new
    # one next step, 3 pages with none free. Counted in pages, check_decode_mem asks 6 > 0 and
    # the retract loop (which asks the same since #9989) retracts two: 4 free, 2 needed.
    # Counted in tokens it asks 1 per request: after one retraction 2 free >= 2 "needed", two
    # requests kept, and prepare_for_decode needs 2 pages with 1 free: decode OOM. (Two such
    # requests on 2 pages still fit after one retraction.)
    return _retraction(_decode_pool(2, 6), (2, 1), (2, 1), (2, 1))


def sglang_retract_counts_tokens() -> list[Violation]:
    # The same batch: check_decode_mem (pages) asks 6 > 0 free, so retract; the retract loop
    # waiting for one token per kept request stops after one retraction (2 free >= 2), and
    # the two kept requests' decode needs 2 pages with 1 free.
    return _retraction(_decode_pool(2, 6), (2, 1), (2, 1), (2, 1))


def sglang_retract_ignores_multiplier() -> list[Violation]:
    # P = 1, C = 4, k = 2 (speculative: 2 tokens per step): requests (1, 1), (1, 1), (2, 1) hold
    # 1 + 1 + 2 = 4 tokens, none free, and need 2 each. The retract order pops the longest
    # input first: 2 free. Waiting for k = 2 per kept request (4 > 2) it retracts one more
    # (3 free >= 2); waiting for 1 token each (2 <= 2) it keeps two, whose 4 slots are not free.
    return _retraction(_decode_pool(1, 4, tokens_per_step=2), (1, 1), (1, 1), (2, 1))


def _last_request_left() -> list[Violation]:
    # P = 1, C = 1: one request (1, 1) holds the only slot and needs one more; nothing is left
    # to retract, so it must be aborted with a reason, not an assertion or a raise.
    probe = SglangReferenceTarget().probe_retraction(_decode_pool(1, 1), [DecodingReqSpec(1, 1, 2)])
    return check_retraction_terminates(probe)


def sglang_retract_asserts_last_request() -> list[Violation]:
    # #14948: AssertionError("No space left for only one request") instead of the abort
    return _last_request_left()


def sglang_retract_raises_last_request() -> list[Violation]:
    # #19881: ValueError("Out of memory ...") out of the scheduler instead of the abort
    return _last_request_left()


def sglang_profiled_tokens_negative() -> list[Violation]:
    # a byte budget of -7 (the profile's non-KV memory exceeds the fraction) at 1 byte a token:
    # clamped at 0, a pool of 0 tokens, refused at startup ("Not enough memory"); unclamped and
    # unchecked, -7 // 1 = -7 tokens and the engine starts on a pool of no tokens.
    config = SglangConfig(page_size=1, available_bytes=-7, cell_size=1)
    return check_pool_is_allocator_pool(SglangReferenceTarget().derive_pool(config), config)
