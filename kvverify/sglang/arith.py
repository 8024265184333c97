"""SGLang's boundary formulas, written once over :mod:`kvverify.reference.ops` (int and z3).

The SGLang reference executes these on ints; :mod:`kvverify.lemmas.sglang` proves claims
about them on z3 terms. Where a formula meets vLLM's arithmetic it is the same function
(page rounding is ``cdiv``). Flaws of :mod:`kvverify.sglang.flaws` and fixes of
:mod:`kvverify.sglang.fixes` are consulted here, at call time, so a lemma built under a
flaw proves the flawed formula.

Names follow SGLang 0.5.23 (``python/sglang/srt``):

* ``ceil_paged_tokens`` — ``PrefillAdder.ceil_paged_tokens``; ``floor_paged_tokens`` —
  the ``// page_size * page_size`` of pool sizing and chunking;
* ``max_req_len`` / ``max_req_input_len`` — ``TpModelWorker.get_worker_info`` (the ``- 5``);
* ``clamped_max_new_tokens`` — ``Scheduler.init_req_max_new_tokens`` with the base
  allocator's ``max_new_tokens_for_memory``;
* ``prefill_charge`` / ``prefill_admits`` — ``PrefillAdder.add_one_req`` +
  ``PrefillBudget.check_prefill`` (strict ``<``);
* ``decode_tokens_required`` — ``ScheduleBatch.new_tokens_required_next_decode``;
* ``retract_budget_tokens`` — what the retract loop of ``retract_decode`` waits for;
* ``profiled_max_total_num_tokens`` — ``DefaultPoolConfigurator.calculate_pool_sizes``.
"""

from __future__ import annotations

from kvverify.reference.ops import Num, cdiv, floordiv, max_, min_
from kvverify.sglang import fixes, flaws

#: ``max_req_input_len = max_req_len - 5`` (``tp_worker.py``): room for a few special tokens
INPUT_BOUND_SLACK = 5


def ceil_paged_tokens(num_tokens: Num, page_size: Num) -> Num:
    """Tokens rounded up to whole pages (``-(-n // page_size) * page_size``)."""
    return cdiv(num_tokens, page_size) * page_size


def floor_paged_tokens(num_tokens: Num, page_size: Num) -> Num:
    """Tokens rounded down to whole pages (``n // page_size * page_size``)."""
    return floordiv(num_tokens, page_size) * page_size


def num_new_pages(seq_len: Num, extend_len: Num, page_size: Num) -> Num:
    """Pages a request holding ``seq_len`` tokens allocates to grow by ``extend_len``
    (``get_num_new_pages``: its last page may have room)."""
    return cdiv(seq_len + extend_len, page_size) - cdiv(seq_len, page_size)


def max_req_len(context_len: Num, kv_capacity: Num) -> Num:
    """``min(context_len - 1, kv_capacity - 1)`` (``get_worker_info``)."""
    return min_(context_len - 1, kv_capacity - 1)


def max_req_input_len(context_len: Num, kv_capacity: Num, page_size: Num) -> Num:
    """``max_req_len - 5``: inputs of this many tokens or more are refused.

    Fix ``sglang_input_bound_page_aware`` (finding SG1): also at most
    ``kv_capacity - page_size``, what ``PrefillAdder`` can admit on an empty pool."""
    bound = max_req_len(context_len, kv_capacity) - INPUT_BOUND_SLACK
    if fixes.is_on("sglang_input_bound_page_aware"):
        bound = min_(bound, kv_capacity - page_size)
    return bound


def input_accepted(input_len: Num, bound: Num) -> object:
    """``validate_input_length``: refused iff ``len(input_ids) >= max_req_input_len``."""
    return input_len < bound


def clamped_max_new_tokens(requested: Num, input_len: Num, req_len_bound: Num, token_capacity: Num,
                           page_size: Num) -> Num:
    """``init_req_max_new_tokens``: ``max(0, min(requested, max_req_len - input_len - 1,
    token_capacity - ceil_paged(input_len) - page_size - 1))``.

    Flaw ``sglang_max_new_tokens_unclamped`` (#28530, before #25126): no memory clamp."""
    by_len = min_(requested, req_len_bound - input_len - 1)
    if flaws.is_on("sglang_max_new_tokens_unclamped"):
        return max_(0, by_len)
    return max_(0, min_(by_len, token_capacity - ceil_paged_tokens(input_len, page_size) - page_size - 1))


def prefill_charge(extend_len: Num, max_new_tokens: Num, page_size: Num) -> Num:
    """What ``add_one_req`` charges a new request: ``extend_input_len + max_new + page_size``
    (the page is the allocator's alignment overhead)."""
    return extend_len + max_new_tokens + page_size


def prefill_admits(charge: Num, rem_total_tokens: Num) -> object:
    """``PrefillBudget.check_prefill``: ``total_tokens < remaining_total`` (strict)."""
    return charge < rem_total_tokens


def decode_tokens_required(seq_len: Num, tokens_per_step: Num, page_size: Num) -> Num:
    """Slots one request's next decode step allocates: the pages it starts, in tokens
    (``new_tokens_required_next_decode``; one page when ``seq_len % page_size == 0`` at one
    token per step). Flaw ``sglang_decode_mem_counts_tokens`` (#4602): ``tokens_per_step``."""
    if flaws.is_on("sglang_decode_mem_counts_tokens"):
        return tokens_per_step
    return num_new_pages(seq_len, tokens_per_step, page_size) * page_size


def retract_budget_tokens(seq_len: Num, tokens_per_step: Num, page_size: Num) -> Num:
    """What the retract loop waits for, per kept request, before it stops retracting.

    Equal to :func:`decode_tokens_required` since #9989. Flaws: ``sglang_retract_counts_tokens``
    (#9982 / #6731: one token per step, no pages), ``sglang_retract_ignores_multiplier``
    (#14939: pages for one token, ignoring the tokens-per-step multiplier)."""
    if flaws.is_on("sglang_retract_counts_tokens"):
        return tokens_per_step
    if flaws.is_on("sglang_retract_ignores_multiplier"):
        return num_new_pages(seq_len, 1, page_size) * page_size
    return decode_tokens_required(seq_len, tokens_per_step, page_size)


def profiled_max_total_num_tokens(available_bytes: Num, cell_size: Num, page_size: Num) -> Num:
    """``calculate_pool_sizes``: ``max(available, 0) // cell_size``, floored to whole pages.
    (Flaw ``sglang_profiled_tokens_negative``, #7691, is switched where the pool is resolved,
    :func:`kvverify.sglang.pool.resolve_max_total_num_tokens`.)"""
    return floor_paged_tokens(floordiv(max_(available_bytes, 0), cell_size), page_size)


def capped_max_total_num_tokens(profiled: Num, max_total_tokens: Num, page_size: Num) -> Num:
    """``--max-total-tokens`` caps the profiled count (``_apply_token_constraints``), page-floored."""
    return min_(profiled, floor_paged_tokens(max_total_tokens, page_size))
