# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F8: an encoder-decoder model with prefix caching
explicitly on is accepted at startup, then CrossAttentionManager raises
NotImplementedError on the first request's prefix cache lookup.

Belongs in tests/v1/core/test_prefix_caching.py. Runs offline on CPU
(VLLM_TARGET_DEVICE=cpu).
"""

import pytest
import torch

from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
from vllm.v1.kv_cache_interface import (
    CrossAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)


def make_kv_cache_config() -> KVCacheConfig:
    common = dict(block_size=16, num_kv_heads=1, head_size=8, dtype=torch.bfloat16)
    return KVCacheConfig(
        num_blocks=16,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["decoder.self_attn"], FullAttentionSpec(**common)),
            KVCacheGroupSpec(["decoder.encoder_attn"], CrossAttentionSpec(**common)),
        ],
    )


def make_coordinator(enable_caching: bool):
    return get_kv_cache_coordinator(
        kv_cache_config=make_kv_cache_config(),
        max_model_len=64,
        max_in_flight_tokens=64,
        use_eagle=False,
        enable_caching=enable_caching,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=16,
        hash_block_size=16,
    )


def test_encoder_decoder_prefix_caching_refused_at_startup():
    # 0.33.0 builds the coordinator; the first request's
    # find_longest_cache_hit then raises NotImplementedError.
    with pytest.raises(AssertionError, match="encoder-decoder.*encoder_attn"):
        make_coordinator(enable_caching=True)


def test_encoder_decoder_without_prefix_caching_accepted():
    make_coordinator(enable_caching=False)
