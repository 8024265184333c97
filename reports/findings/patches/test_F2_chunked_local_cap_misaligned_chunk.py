# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F2: the chunked-local admission cap is one block short
when the block size does not divide the attention chunk size.

Belongs in tests/v1/core/test_single_type_kv_cache_manager.py. Runs offline on
CPU (VLLM_TARGET_DEVICE=cpu).
"""

import torch

from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.single_type_kv_cache_manager import ChunkedLocalAttentionManager
from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec


def get_chunked_local_attention_manager(spec, block_pool, cap):
    return ChunkedLocalAttentionManager(
        spec,
        block_pool=block_pool,
        enable_caching=False,
        kv_cache_group_id=0,
        scheduler_block_size=spec.block_size,
        max_admission_blocks_per_request=cap,
    )


def test_chunked_local_admission_cap_covers_misaligned_chunk():
    block_size, attention_chunk_size = 4, 1
    max_in_flight_tokens, max_model_len = 3, 5
    spec = ChunkedLocalAttentionSpec(
        block_size=block_size,
        num_kv_heads=1,
        head_size=1,
        dtype=torch.float32,
        attention_chunk_size=attention_chunk_size,
    )
    cap = spec.max_admission_blocks_per_request(
        max_in_flight_tokens=max_in_flight_tokens, max_model_len=max_model_len
    )

    block_pool = BlockPool(num_gpu_blocks=10, enable_caching=False, hash_block_size=4)
    manager = get_chunked_local_attention_manager(spec, block_pool, cap)
    request_id = "req"
    # Chunked prefill of a 5-token prompt in chunks of 2 and 3 tokens: after
    # the second step the tokens in flight are 2..4, which straddle the blocks
    # [0-3] and [4-7] because chunks of 1 token start mid-block.
    num_computed_tokens = 0
    max_held = 0
    for num_new_tokens in (2, 3):
        manager.remove_skipped_blocks(request_id, num_computed_tokens)
        num_tokens = num_computed_tokens + num_new_tokens
        manager.allocate_new_blocks(request_id, num_tokens, num_tokens)
        held = sum(
            block is not block_pool.null_block
            for block in manager.req_to_blocks[request_id]
        )
        max_held = max(max_held, held)
        num_computed_tokens = num_tokens

    assert max_held == 2
    assert cap >= max_held  # 0.33.0: cap == 1


def test_chunked_local_admission_cap_aligned_chunk_unchanged():
    # Block size divides the chunk size (e.g. Llama 4): no extra block.
    spec = ChunkedLocalAttentionSpec(
        block_size=16,
        num_kv_heads=8,
        head_size=128,
        dtype=torch.bfloat16,
        attention_chunk_size=8192,
    )
    assert spec.max_admission_blocks_per_request(8192, 131072) == 1024


def test_chunked_local_admission_cap_hybrid_block_size():
    # A Mamba hybrid can push the block size to a non-divisor of the chunk.
    spec = ChunkedLocalAttentionSpec(
        block_size=544,
        num_kv_heads=8,
        head_size=128,
        dtype=torch.bfloat16,
        attention_chunk_size=8192,
    )
    assert spec.max_admission_blocks_per_request(8192, 147455) == 32  # 0.33.0: 31
