"""The shared capacity arithmetic: every formula written once, executed and proved.

Each function here takes ints (the reference executes it) or z3 terms (the lemmas in
:mod:`kvverify.lemmas` are built by calling it). Nothing here may use Python's ``if``,
``//``, ``min`` or ``max`` on its arguments: use :mod:`kvverify.reference.ops`.

Notation (``reference-facts.md``): ``B`` block size, ``L`` max_model_len, ``N``
num_blocks including the null block, ``F`` max in-flight tokens, ``W`` sliding
window, ``C`` attention chunk size, ``S`` speculative blocks.
"""

from __future__ import annotations

from typing import Sequence

from kvverify import fixes, flaws
from kvverify.reference.ops import Num, and_, cdiv, divides, floordiv, ite, max_, min_, sum_

# --- per-spec block counts (upstream: kv_cache_interface.py) ----------------------


def full_attention_blocks(num_tokens: Num, block_size: Num) -> Num:
    """Blocks a full-attention / MLA request of ``num_tokens`` holds: ``cdiv(L, B)``."""
    return cdiv(num_tokens, block_size)


def max_in_flight_tokens(max_concurrent_batches: Num, max_num_batched_tokens: Num,
                         num_lookahead_tokens: Num = 0) -> Num:
    """``VllmConfig.max_in_flight_tokens``: ``batches * M``, the ``F`` of the caps.

    Under the proposed fix ``caps_count_lookahead`` (finding F4) the lookahead slots every
    step reserves are counted too.
    """
    tokens = max_concurrent_batches * max_num_batched_tokens
    if fixes.is_on("caps_count_lookahead"):
        tokens = tokens + num_lookahead_tokens
    return tokens


def sliding_window_admission_blocks(sliding_window: Num, extra_retained_tokens: Num,
                                    max_in_flight_tokens: Num, max_model_len: Num,
                                    block_size: Num) -> Num:
    """``SlidingWindowSpec.max_admission_blocks_per_request``.

    ``cdiv(min(W - 1 + E + F, L), B) + 1``: the last ``W - 1`` computed tokens plus
    the in-flight tokens, and one more block because the window may start mid-block.
    One source of truth for the startup bound and the admission cap (PR #40946).
    """
    num_tokens = min_(sliding_window - 1 + extra_retained_tokens + max_in_flight_tokens,
                      max_model_len)
    if fixes.is_on("swa_cap_exact"):
        # finding F5: the exact worst case of a step (lemma swa_cap_reached_at_worst_step)
        span = sliding_window - 1 + extra_retained_tokens + max_in_flight_tokens
        return min_(cdiv(span + block_size - 1, block_size), cdiv(max_model_len, block_size))
    return cdiv(num_tokens, block_size) + 1


def chunked_local_admission_blocks(attention_chunk_size: Num, max_in_flight_tokens: Num,
                                   max_model_len: Num, block_size: Num) -> Num:
    """``ChunkedLocalAttentionSpec.max_admission_blocks_per_request``: ``cdiv(min(C + F, L), B)``.

    Upstream has no ``+1`` here. When ``C`` is not a multiple of ``B`` a chunk starts
    mid-block and a step can hold one block more (finding F2, lemma
    ``chunked_local_held_within_cap``); the proposed fix ``chunked_local_cap_plus_one``
    adds that block exactly when ``B`` does not divide ``C``.
    """
    cap = cdiv(min_(attention_chunk_size + max_in_flight_tokens, max_model_len), block_size)
    if fixes.is_on("chunked_local_cap_plus_one"):
        cap = cap + ite(divides(block_size, attention_chunk_size), 0, 1)
    return cap


def mamba_max_blocks(align_mode: object, num_speculative_blocks: Num,
                     num_prefill_checkpoint_blocks: Num) -> Num:
    """``MambaSpec`` startup bound in pages: ``2 + S + P`` in ``align`` mode, else ``1 + S``."""
    return ite(align_mode,
               2 + num_speculative_blocks + num_prefill_checkpoint_blocks,
               1 + num_speculative_blocks)


def mamba_startup_blocks(align_mode: object, num_speculative_blocks: Num,
                         num_prefill_checkpoint_blocks: Num, state_tokens: Num, block_size: Num) -> Num:
    """``MambaSpec.max_memory_usage_bytes`` in pages: :func:`mamba_max_blocks` (upstream).

    Fix ``mamba_align_bound_exact`` (finding F9): in ``align`` mode a request whose state is
    computed for at most ``state_tokens <= B`` tokens holds one state block, so ``1 + S``.
    """
    bound = mamba_max_blocks(align_mode, num_speculative_blocks, num_prefill_checkpoint_blocks)
    if fixes.is_on("mamba_align_bound_exact"):
        return ite(and_(align_mode, state_tokens <= block_size), 1 + num_speculative_blocks, bound)
    return bound


def cross_attention_blocks(max_encoder_tokens: Num, block_size: Num) -> Num:
    """``CrossAttentionSpec``: ``cdiv(max_num_encoder_input_tokens, B)``."""
    return cdiv(max_encoder_tokens, block_size)


def capped_blocks(required_blocks: Num, cap: Num, apply_cap: object) -> Num:
    """The full-sequence gate's cap: ``min(R, cap)`` only when asked (never per step)."""
    return ite(apply_cap, min_(required_blocks, cap), required_blocks)


def pages_for_bytes(num_bytes: Num, page_size_bytes: Num) -> Num:
    """``cdiv(max_memory_usage_bytes, page_size_bytes)``: bytes back to blocks."""
    return cdiv(num_bytes, page_size_bytes)


# --- skipped tokens: blocks a manager may recycle (single_type_kv_cache_manager.py) --


def sliding_window_skipped_tokens(num_computed_tokens: Num, sliding_window: Num,
                                  extra_retained_tokens: Num = 0) -> Num:
    """``SlidingWindowManager.get_num_skipped_tokens``: ``max(0, n - W + 1 - E)``."""
    return max_(0, num_computed_tokens - sliding_window + 1 - extra_retained_tokens)


def chunked_local_skipped_tokens(num_computed_tokens: Num, attention_chunk_size: Num) -> Num:
    """``ChunkedLocalAttentionManager.get_num_skipped_tokens``: ``floor(n / C) * C``."""
    return floordiv(num_computed_tokens, attention_chunk_size) * attention_chunk_size


def mamba_skipped_tokens(num_computed_tokens: Num) -> Num:
    """``MambaManager.get_num_skipped_tokens``: only the last state is kept, ``n - 1``."""
    return num_computed_tokens - 1


def skipped_blocks(num_skipped_tokens: Num, block_size: Num) -> Num:
    """Whole blocks entirely below the first needed token: ``floor(skipped / B)``."""
    return floordiv(num_skipped_tokens, block_size)


# --- startup planning (kv_cache_planning.py) ---------------------------------------


def num_blocks_from_memory(available_memory: Num, bytes_per_block: Num) -> Num:
    """``get_kv_cache_config_from_groups``: ``available_memory // bytes_per_block``."""
    return floordiv(available_memory, bytes_per_block)


def override_memory(num_gpu_blocks_override: Num, bytes_per_block: Num) -> Num:
    """With an override the check plans against ``override * bytes_per_block`` (PR #41069)."""
    return num_gpu_blocks_override * bytes_per_block


def check_memory(available_memory: Num, bytes_per_block: Num) -> Num:
    """Reserve the null block: ``available - bytes_per_block`` (PR #47272)."""
    return available_memory - bytes_per_block


def needed_memory(bytes_per_block: Num, total_blocks_per_request: Num) -> Num:
    """``_max_memory_usage_bytes_from_groups``: ``bytes_per_block * sum_g blocks_g(L)``."""
    return bytes_per_block * total_blocks_per_request


def startup_check_passes(check_memory_bytes: Num, needed_memory_bytes: Num) -> object:
    """``_check_enough_kv_cache_memory`` does not raise."""
    return and_(check_memory_bytes > 0, needed_memory_bytes <= check_memory_bytes)


def min_written_tokens(max_model_len: Num, num_lookahead_tokens: Num) -> Num:
    """Tokens whose KV a generate request of length ``L`` ever writes: ``min(L, L - 1 + lookahead)``.

    The last sampled token is never fed back (finding F3); at least one token is written.
    """
    return max_(1, min_(max_model_len, max_model_len - 1 + num_lookahead_tokens))


def planned_request_tokens(max_model_len: Num, num_lookahead_tokens: Num = 0) -> Num:
    """Tokens the startup check and auto-fit size one request by: ``L`` (upstream).

    Under the proposed fix ``check_plans_computed_tokens`` (finding F3): the tokens whose KV
    is ever written, :func:`min_written_tokens`.
    """
    if fixes.is_on("check_plans_computed_tokens"):
        return min_written_tokens(max_model_len, num_lookahead_tokens)
    return max_model_len


def spec_step_tokens(num_speculative_tokens: Num, num_lookahead_tokens: Num) -> Num:
    """The slots one speculative step writes past a request's tokens: the sampled token, the
    drafts and the lookahead, ``1 + S + lookahead`` (0 without a drafter). What the async-load
    gate reserves per in-flight prefill (``Scheduler._request_remaining_blocks``, #57104)."""
    return ite(num_speculative_tokens > 0, 1 + num_speculative_tokens + num_lookahead_tokens, 0)


def usable_blocks(num_blocks: Num) -> Num:
    """Blocks a BlockPool can hand out: all but the null block."""
    return num_blocks - 1


def servable_alone(num_blocks: Num, total_blocks_per_request: Num) -> object:
    """One max_model_len request fits the runtime pool on its own."""
    return total_blocks_per_request <= usable_blocks(num_blocks)


def reported_concurrency_at_least_one(num_blocks: Num, total_blocks_per_request: Num) -> object:
    """``get_max_concurrency_for_kv_cache_config`` >= 1.0, i.e. ``N / blocks >= 1``.

    Upstream divides by ``N`` (not ``N - 1``): an open inconsistency with the check
    (finding F1; fix ``concurrency_counts_usable_blocks``, see :func:`concurrency_blocks`).
    """
    return concurrency_blocks(num_blocks) >= total_blocks_per_request


def watermark_blocks(watermark: float, num_blocks: int) -> int:
    """``int(watermark * num_gpu_blocks)`` (concrete only: the watermark is a float)."""
    return int(watermark * num_blocks)


def allocation_fits(num_blocks_to_allocate: Num, watermark: Num, num_free: Num) -> object:
    """``allocate_slots`` admits when ``need + watermark <= free``."""
    return num_blocks_to_allocate + watermark <= num_free


# --- block sizes (resolve_kv_cache_block_sizes); sizes are always concrete ----------


def hybrid_attention_block_size(mamba_page_bytes: Num, attn_page_bytes_per_token: Num,
                                kernel_alignment: Num, current_block_size: Num,
                                backend_alignment: Num = 1) -> Num:
    """Attention block size for a hybrid attention+Mamba model (``_align_hybrid_block_size``).

    ``k * cdiv(mamba_page, k * p1)``, rounded up to a multiple of the backend's kernel block
    size, and at least the current block size, so the attention page is no smaller than the
    Mamba page it will be padded to.
    """
    attn_block = kernel_alignment * cdiv(mamba_page_bytes, kernel_alignment * attn_page_bytes_per_token)
    attn_block = backend_alignment * cdiv(attn_block, backend_alignment)
    return max_(current_block_size, attn_block)


# --- flaw- and fix-aware compositions ----------------------------------------------
# Where a bug-zoo flaw (or a proposed fix) changes a formula, the change lives here, in
# one function that consults ``flaws.is_on`` / ``fixes.is_on``: the reference executes
# it on ints and the lemmas (kvverify.lemmas) prove it on z3 terms, so a flaw switched on
# changes execution and proof alike. Flaw/fix switches are Python-level (decided when
# the formula is built), never symbolic.


def startup_available_memory(available_memory: Num, bytes_per_block: Num,
                             num_gpu_blocks_override: Num | None = None) -> Num:
    """Memory the startup check sizes capacity from (``get_kv_cache_configs`` step 1).

    With ``num_gpu_blocks_override`` it is ``override * bytes_per_block`` (PR #41069);
    flaw ``override_ignored_in_check`` keeps the raw available memory (#27181).
    """
    if num_gpu_blocks_override is None or flaws.is_on("override_ignored_in_check"):
        return available_memory
    return override_memory(num_gpu_blocks_override, bytes_per_block)


def startup_check_memory(available_memory: Num, bytes_per_block: Num,
                         num_gpu_blocks_override: Num | None = None) -> Num:
    """Memory the check compares against: one block less for the null block (PR #47272).

    Flaw ``null_block_not_reserved`` compares against the whole pool (#35541).
    """
    memory = startup_available_memory(available_memory, bytes_per_block, num_gpu_blocks_override)
    if flaws.is_on("null_block_not_reserved"):
        return memory
    return check_memory(memory, bytes_per_block)


def auto_fit_search_memory(available_memory: Num, bytes_per_block: Num,
                           num_gpu_blocks_override: Num | None = None) -> Num:
    """Memory ``max_model_len=auto`` searches against: the check memory.

    Flaw ``autofit_ignores_null_block`` searches the full pool (#48724).
    """
    if flaws.is_on("autofit_ignores_null_block"):
        return startup_available_memory(available_memory, bytes_per_block, num_gpu_blocks_override)
    return startup_check_memory(available_memory, bytes_per_block, num_gpu_blocks_override)


def runtime_num_blocks(available_memory: Num, bytes_per_block: Num,
                       num_gpu_blocks_override: Num | None = None) -> Num:
    """``num_blocks`` of the runtime pool: the override if set, else ``memory // bpb``."""
    if num_gpu_blocks_override is not None:
        return num_gpu_blocks_override
    return num_blocks_from_memory(available_memory, bytes_per_block)


def total_blocks_per_request(group_blocks: Sequence[Num], in_memory_helper: bool = False) -> Num:
    """``sum_g blocks_g(L)`` over all groups (PR #36030).

    ``in_memory_helper``: the count ``_max_memory_usage_bytes_from_groups`` makes, which
    auto-fit's search and the startup check both call. There flaw ``autofit_first_group_only``
    counts only the first group, as upstream did before #36030 (``any_spec =
    kv_cache_groups[0].kv_cache_spec``): auto-fit and the check agree on a too-long length,
    the runtime pool (which holds every group) does not serve it.
    """
    if in_memory_helper and flaws.is_on("autofit_first_group_only"):
        group_blocks = list(group_blocks)[:1]
    return sum_(list(group_blocks))


def admission_required_blocks(num_tokens: Num, block_size: Num, cap: Num | None,
                              apply_admission_cap: bool) -> Num:
    """``R`` of ``get_num_blocks_to_allocate``: ``cdiv(n, B)``, capped on the gate only.

    ``cap`` is the spec's ``max_admission_blocks_per_request`` (None: not a recycling
    spec). Flaw ``swa_cap_on_allocation`` caps the per-step prediction too (#39866);
    flaw ``swa_admission_uncapped`` never caps, not even on the gate (#39734).
    """
    required = full_attention_blocks(num_tokens, block_size)
    if cap is None:
        return required
    if flaws.is_on("swa_cap_on_allocation"):
        return capped_blocks(required, cap, True)
    if flaws.is_on("swa_admission_uncapped"):
        return required
    return capped_blocks(required, cap, apply_admission_cap)


def new_blocks_for_running(required_blocks: Num, num_table_slots: Num) -> Num:
    """Blocks a running request takes: ``max(R - len(block table), 0)`` (nulls count)."""
    return max_(required_blocks - num_table_slots, 0)


def blocks_held_after_step(num_tokens: Num, num_skipped_tokens: Num, block_size: Num) -> Num:
    """Real blocks a recycling manager holds after a step.

    ``remove_skipped_blocks`` has nulled the ``floor(skipped / B)`` leading slots and the
    table has grown to ``cdiv(num_tokens, B)`` slots (``allocate_new_blocks``).
    """
    return (full_attention_blocks(num_tokens, block_size)
            - skipped_blocks(max_(num_skipped_tokens, 0), block_size))


def mamba_blocks_held(align_mode: bool, num_tokens: Num, num_computed_tokens: Num,
                      block_size: Num, num_speculative_blocks: Num) -> Num:
    """Real blocks a Mamba request holds after a step (``MambaManager``).

    ``none``: the base table with ``S`` blocks of extra tokens, states before the last
    one recycled. ``align``: the row is position-indexed over the retained range, but
    only its first slot (the previous state, freed two steps later; none on the first
    step) and its last slot (the running state) are real, plus the ``S`` speculative
    blocks. (Checked against ``MambaManager`` by ``properties/test_lemma_models.py``.)
    """
    skipped = mamba_skipped_tokens(num_computed_tokens)
    if not align_mode:
        return blocks_held_after_step(num_tokens + block_size * num_speculative_blocks,
                                      skipped, block_size)
    retained = blocks_held_after_step(num_tokens, skipped, block_size)
    return min_(retained, ite(num_computed_tokens > 0, 2, 1)) + num_speculative_blocks


def concurrency_blocks(num_blocks: Num) -> Num:
    """Numerator of ``get_max_concurrency_for_kv_cache_config``: ``N`` upstream.

    Fix ``concurrency_counts_usable_blocks`` (finding F1) uses the usable ``N - 1``.
    """
    if fixes.is_on("concurrency_counts_usable_blocks"):
        return usable_blocks(num_blocks)
    return num_blocks


def reported_concurrency_at_least(num_blocks: Num, total_blocks_per_request: Num, k: Num) -> object:
    """Reported concurrency ``concurrency_blocks(N) / T >= k`` (``T > 0``)."""
    return concurrency_blocks(num_blocks) >= k * total_blocks_per_request


def servable_concurrently(num_blocks: Num, total_blocks_per_request: Num, k: Num) -> object:
    """``k`` max_model_len requests fit the runtime pool together."""
    return k * total_blocks_per_request <= usable_blocks(num_blocks)


def kv_cache_tensor_bytes(bytes_per_block: Num, num_blocks: Num) -> Num:
    """Size of each backing tensor of the plan: ``bytes_per_block * num_blocks``."""
    return bytes_per_block * num_blocks


def prefix_match_unit_valid(prefix_match_unit: Num, block_sizes: Sequence[Num]) -> object:
    """A hash unit is valid when it divides every prefix-cacheable group block size."""
    return and_(*[divides(prefix_match_unit, b) for b in block_sizes])
