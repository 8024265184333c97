"""The shared capacity arithmetic: every formula written once, executed and proved.

Each function here takes ints (the reference executes it) or z3 terms (the lemmas in
:mod:`kvverify.lemmas` are built by calling it). Nothing here may use Python's ``if``,
``//``, ``min`` or ``max`` on its arguments: use :mod:`kvverify.ops`.

Notation (``reference-facts.md``): ``B`` block size, ``L`` max_model_len, ``N``
num_blocks including the null block, ``F`` max in-flight tokens, ``W`` sliding
window, ``C`` attention chunk size, ``S`` speculative blocks.
"""

from __future__ import annotations

from kvverify.ops import Num, and_, cdiv, floordiv, ite, max_, min_

# --- per-spec block counts (upstream: kv_cache_interface.py) ----------------------


def full_attention_blocks(num_tokens: Num, block_size: Num) -> Num:
    """Blocks a full-attention / MLA request of ``num_tokens`` holds: ``cdiv(L, B)``."""
    return cdiv(num_tokens, block_size)


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
    return cdiv(num_tokens, block_size) + 1


def chunked_local_admission_blocks(attention_chunk_size: Num, max_in_flight_tokens: Num,
                                   max_model_len: Num, block_size: Num) -> Num:
    """``ChunkedLocalAttentionSpec.max_admission_blocks_per_request``: ``cdiv(min(C + F, L), B)``."""
    return cdiv(min_(attention_chunk_size + max_in_flight_tokens, max_model_len), block_size)


def mamba_max_blocks(align_mode: object, num_speculative_blocks: Num,
                     num_prefill_checkpoint_blocks: Num) -> Num:
    """``MambaSpec`` startup bound in pages: ``2 + S + P`` in ``align`` mode, else ``1 + S``."""
    return ite(align_mode,
               2 + num_speculative_blocks + num_prefill_checkpoint_blocks,
               1 + num_speculative_blocks)


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


def usable_blocks(num_blocks: Num) -> Num:
    """Blocks a BlockPool can hand out: all but the null block."""
    return num_blocks - 1


def servable_alone(num_blocks: Num, total_blocks_per_request: Num) -> object:
    """One max_model_len request fits the runtime pool on its own."""
    return total_blocks_per_request <= usable_blocks(num_blocks)


def reported_concurrency_at_least_one(num_blocks: Num, total_blocks_per_request: Num) -> object:
    """``get_max_concurrency_for_kv_cache_config`` >= 1.0, i.e. ``N / blocks >= 1``.

    Upstream divides by ``N`` (not ``N - 1``): an open inconsistency with the check.
    """
    return num_blocks >= total_blocks_per_request


def watermark_blocks(watermark: float, num_blocks: int) -> int:
    """``int(watermark * num_gpu_blocks)`` (concrete only: the watermark is a float)."""
    return int(watermark * num_blocks)


def allocation_fits(num_blocks_to_allocate: Num, watermark: Num, num_free: Num) -> object:
    """``allocate_slots`` admits when ``need + watermark <= free``."""
    return num_blocks_to_allocate + watermark <= num_free


# --- block sizes (resolve_kv_cache_block_sizes); sizes are always concrete ----------


def hybrid_attention_block_size(mamba_page_bytes: Num, attn_page_bytes_per_token: Num,
                                kernel_alignment: Num, current_block_size: Num) -> Num:
    """Attention block size for a hybrid attention+Mamba model.

    ``k * cdiv(mamba_page, k * p1)``, at least the current block size, so the
    attention page is no smaller than the Mamba page it will be padded to.
    """
    attn_block = kernel_alignment * cdiv(mamba_page_bytes, kernel_alignment * attn_page_bytes_per_token)
    return max_(current_block_size, attn_block)
