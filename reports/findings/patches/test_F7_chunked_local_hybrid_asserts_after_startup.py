# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F7: a prefix-cached chunked-local group whose block
size differs from the cache-hit alignment is accepted at startup, then asserts
on the first request.

Belongs in tests/v1/core/test_prefix_caching.py. Runs offline on CPU
(VLLM_TARGET_DEVICE=cpu).
"""

import pytest
import torch

from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)


def make_kv_cache_config(full_block_size: int, chunked_block_size: int) -> KVCacheConfig:
    # Page unification doubled the full-attention block (its page was half
    # the chunked-local page): groups (32, 16), scheduler block size 32.
    return KVCacheConfig(
        num_blocks=100,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer.0"],
                FullAttentionSpec(
                    block_size=full_block_size, num_kv_heads=1, head_size=8,
                    dtype=torch.bfloat16,
                ),
            ),
            KVCacheGroupSpec(
                ["layer.1"],
                ChunkedLocalAttentionSpec(
                    block_size=chunked_block_size, num_kv_heads=2, head_size=8,
                    dtype=torch.bfloat16, attention_chunk_size=64,
                ),
            ),
        ],
    )


def make_coordinator(kv_cache_config: KVCacheConfig, scheduler_block_size: int, hash_block_size: int):
    return get_kv_cache_coordinator(
        kv_cache_config=kv_cache_config,
        max_model_len=256,
        max_in_flight_tokens=64,
        use_eagle=False,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=scheduler_block_size,
        hash_block_size=hash_block_size,
    )


def test_chunked_local_block_size_mismatch_refused_at_startup():
    kv_cache_config = make_kv_cache_config(full_block_size=32, chunked_block_size=16)
    # 0.33.0 builds the coordinator, then find_longest_cache_hit asserts on
    # the first request that looks up the prefix cache.
    with pytest.raises(AssertionError, match="chunked local attention.*layer.1"):
        make_coordinator(kv_cache_config, scheduler_block_size=32, hash_block_size=16)


def test_chunked_local_matching_block_size_accepted():
    kv_cache_config = make_kv_cache_config(full_block_size=16, chunked_block_size=32)
    # The chunked-local group already has the scheduler block size.
    make_coordinator(kv_cache_config, scheduler_block_size=32, hash_block_size=16)
