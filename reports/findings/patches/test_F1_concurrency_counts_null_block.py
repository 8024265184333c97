# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F1: the reported max concurrency counts the null block.

Belongs in tests/v1/core/test_kv_cache_utils.py. Runs offline on CPU
(VLLM_TARGET_DEVICE=cpu): the capacity code only reads max_model_len and
runner_type from the model config, so a stand-in replaces ModelConfig.
"""

from types import SimpleNamespace

import torch

from vllm.config import CacheConfig, SchedulerConfig, VllmConfig
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)


def make_vllm_config(max_model_len: int, block_size: int) -> VllmConfig:
    vllm_config = VllmConfig(
        cache_config=CacheConfig(block_size=block_size),
        scheduler_config=SchedulerConfig(
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            max_num_batched_tokens=max(max_model_len, 8),
            max_num_seqs=8,
        ),
    )
    vllm_config.model_config = SimpleNamespace(
        max_model_len=max_model_len,
        original_max_model_len=max_model_len,
        runner_type="generate",
    )
    return vllm_config


def new_kv_cache_spec(block_size: int = 16) -> FullAttentionSpec:
    return FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float32
    )


def test_max_concurrency_excludes_null_block():
    block_size, max_model_len = 16, 32  # a full-length request needs 2 blocks
    vllm_config = make_vllm_config(max_model_len, block_size)

    def concurrency(num_blocks: int) -> float:
        kv_cache_config = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["layer"], new_kv_cache_spec())],
        )
        return get_max_concurrency_for_kv_cache_config(vllm_config, kv_cache_config)

    # BlockPool holds back block 0 as the null block: a 2-block pool can hand
    # out one block, so not even one 2-block request fits.
    pool = BlockPool(num_gpu_blocks=2, enable_caching=False, hash_block_size=16)
    assert pool.get_num_free_blocks() == 1
    assert concurrency(2) == 0.5  # 0.33.0 reports 1.00x
    # 5 blocks: 4 usable, exactly two full-length requests at once.
    assert concurrency(5) == 2.0  # 0.33.0 reports 2.50x
    assert concurrency(4) == 1.5  # 0.33.0 reports 2.00x: only one fits
