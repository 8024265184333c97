# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F5: the sliding-window cap's +1 block is reserved even
when no chunk schedule can ever hold it.

Belongs in tests/v1/core/test_single_type_kv_cache_manager.py. Runs offline on
CPU (VLLM_TARGET_DEVICE=cpu).
"""

import itertools

import torch

from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
from vllm.v1.kv_cache_interface import SlidingWindowSpec


def new_sliding_window_spec(block_size: int, sliding_window: int) -> SlidingWindowSpec:
    return SlidingWindowSpec(
        block_size=block_size,
        num_kv_heads=1,
        head_size=1,
        dtype=torch.float32,
        sliding_window=sliding_window,
    )


def max_blocks_held(spec, max_num_batched_tokens: int, max_model_len: int) -> int:
    """Most blocks one request holds over every chunked-prefill schedule whose
    chunks are at most max_num_batched_tokens (first chunk: any size)."""
    most = 0
    for first_chunk in range(1, max_num_batched_tokens + 1):
        block_pool = BlockPool(num_gpu_blocks=64, enable_caching=False, hash_block_size=spec.block_size)
        manager = SlidingWindowManager(
            spec,
            block_pool=block_pool,
            enable_caching=False,
            kv_cache_group_id=0,
            scheduler_block_size=spec.block_size,
        )
        num_computed_tokens = 0
        for num_new_tokens in itertools.chain([first_chunk], itertools.repeat(max_num_batched_tokens)):
            if num_computed_tokens >= max_model_len:
                break
            num_new_tokens = min(num_new_tokens, max_model_len - num_computed_tokens)
            manager.remove_skipped_blocks("req", num_computed_tokens)
            num_tokens = num_computed_tokens + num_new_tokens
            manager.allocate_new_blocks("req", num_tokens, num_tokens)
            held = sum(b is not block_pool.null_block for b in manager.req_to_blocks["req"])
            most = max(most, held)
            num_computed_tokens = num_tokens
    return most


def test_sliding_window_cap_is_reached():
    # W=8, B=4, 8 tokens in flight, max_model_len 14 <= W - 1 + 8: the whole
    # request fits in one window plus one batch and never straddles a 5th block.
    spec = new_sliding_window_spec(block_size=4, sliding_window=8)
    cap = spec.max_admission_blocks_per_request(max_in_flight_tokens=8, max_model_len=14)
    assert max_blocks_held(spec, max_num_batched_tokens=8, max_model_len=14) == 4
    assert cap == 4  # 0.33.0: 5


def test_sliding_window_cap_keeps_block_for_misaligned_window():
    # W - 1 + F = 8 tokens may start mid-block and span 3 blocks of 4.
    spec = new_sliding_window_spec(block_size=4, sliding_window=5)
    cap = spec.max_admission_blocks_per_request(max_in_flight_tokens=4, max_model_len=64)
    assert cap == 3
    assert max_blocks_held(spec, max_num_batched_tokens=4, max_model_len=64) == 3
