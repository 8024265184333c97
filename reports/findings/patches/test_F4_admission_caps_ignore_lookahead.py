# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F4: the sliding-window / chunked-local admission caps
(and the startup bound) ignore the lookahead slots every step reserves.

Belongs in tests/v1/core/test_single_type_kv_cache_manager.py. Runs offline on
CPU (VLLM_TARGET_DEVICE=cpu): num_lookahead_tokens, which a speculative config
sets, is patched in; a stand-in replaces ModelConfig.
"""

from types import SimpleNamespace
from unittest.mock import PropertyMock, patch

import torch

from vllm.config import CacheConfig, SchedulerConfig, VllmConfig
from vllm.utils.math_utils import cdiv
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
from vllm.v1.kv_cache_interface import SlidingWindowSpec


def make_vllm_config(max_model_len: int, block_size: int, max_num_batched_tokens: int):
    vllm_config = VllmConfig(
        cache_config=CacheConfig(block_size=block_size),
        scheduler_config=SchedulerConfig(
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_batched_tokens,
        ),
    )
    vllm_config.model_config = SimpleNamespace(
        max_model_len=max_model_len,
        original_max_model_len=max_model_len,
        runner_type="generate",
    )
    return vllm_config


def test_sliding_window_cap_counts_lookahead_slots():
    block_size, sliding_window = 2, 2
    max_num_batched_tokens, num_lookahead_tokens, max_model_len = 2, 3, 7
    vllm_config = make_vllm_config(max_model_len, block_size, max_num_batched_tokens)
    spec = SlidingWindowSpec(
        block_size=block_size,
        num_kv_heads=1,
        head_size=1,
        dtype=torch.float32,
        sliding_window=sliding_window,
    )
    with patch.object(
        VllmConfig,
        "num_lookahead_tokens",
        new_callable=PropertyMock,
        return_value=num_lookahead_tokens,
    ):
        max_in_flight_tokens = vllm_config.max_in_flight_tokens
        # The startup bound per request, in blocks (the admission cap).
        cap = spec.max_memory_usage_bytes(vllm_config) // spec.page_size_bytes

    block_pool = BlockPool(num_gpu_blocks=16, enable_caching=False, hash_block_size=2)
    manager = SlidingWindowManager(
        spec,
        block_pool=block_pool,
        enable_caching=False,
        kv_cache_group_id=0,
        scheduler_block_size=block_size,
    )
    # Chunked prefill, as Scheduler.schedule -> allocate_slots does it: each
    # step asks for the scheduled tokens plus the lookahead slots.
    request_id, num_computed_tokens, max_held = "req", 0, 0
    while num_computed_tokens < max_model_len - 1:
        manager.remove_skipped_blocks(request_id, num_computed_tokens)
        num_new_tokens = min(max_num_batched_tokens, max_model_len - 1 - num_computed_tokens)
        num_tokens = num_computed_tokens + num_new_tokens + num_lookahead_tokens
        manager.allocate_new_blocks(request_id, num_tokens, num_tokens)
        held = sum(
            block is not block_pool.null_block
            for block in manager.req_to_blocks[request_id]
        )
        max_held = max(max_held, held)
        num_computed_tokens += num_new_tokens

    assert max_held == 4
    assert cap >= max_held  # 0.33.0: cap == 3, so the request preempts itself
    assert max_in_flight_tokens == max_num_batched_tokens + num_lookahead_tokens
    assert cap == cdiv(sliding_window - 1 + max_num_batched_tokens + num_lookahead_tokens, block_size) + 1


def test_max_in_flight_tokens_without_speculation_unchanged():
    vllm_config = make_vllm_config(max_model_len=1024, block_size=16, max_num_batched_tokens=256)
    assert vllm_config.num_lookahead_tokens == 0
    assert vllm_config.max_in_flight_tokens == 256
