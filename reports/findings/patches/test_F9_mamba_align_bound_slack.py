# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F9: in mamba_cache_mode="align" the per-request bound
is 2 + num_speculative_blocks + num_prefill_checkpoint_blocks pages, yet a
request whose state is computed for at most one block of tokens holds one
state block (plus the speculative ones).

Belongs in tests/v1/core/test_single_type_kv_cache_manager.py. Runs offline on
CPU (VLLM_TARGET_DEVICE=cpu).
"""

from types import SimpleNamespace

import pytest
import torch

from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.single_type_kv_cache_manager import MambaManager
from vllm.v1.kv_cache_interface import MambaSpec


def new_mamba_spec(block_size: int, num_speculative_blocks: int) -> MambaSpec:
    return MambaSpec(
        block_size=block_size,
        shapes=((4, 8),),
        dtypes=(torch.float16,),
        mamba_cache_mode="align",
        num_speculative_blocks=num_speculative_blocks,
    )


def config(max_model_len: int):
    # max_memory_usage_bytes reads only these fields
    return SimpleNamespace(
        cache_config=SimpleNamespace(mamba_cache_mode="align"),
        model_config=SimpleNamespace(max_model_len=max_model_len, runner_type="generate"),
    )


def max_blocks_held(spec: MambaSpec, max_model_len: int, max_num_batched_tokens: int) -> int:
    """Most state blocks one generate request of max_model_len tokens holds,
    over every first-chunk size (its last sampled token is never computed)."""
    most = 0
    for first_chunk in range(1, max_num_batched_tokens + 1):
        block_pool = BlockPool(num_gpu_blocks=64, enable_caching=False, hash_block_size=spec.block_size)
        manager = MambaManager(
            spec,
            block_pool=block_pool,
            enable_caching=False,
            kv_cache_group_id=0,
            scheduler_block_size=spec.block_size,
        )
        num_computed_tokens, num_new_tokens = 0, first_chunk
        while num_computed_tokens < max_model_len - 1:
            num_new_tokens = min(num_new_tokens, max_model_len - 1 - num_computed_tokens)
            manager.remove_skipped_blocks("req", num_computed_tokens)
            num_tokens = num_computed_tokens + num_new_tokens
            manager.allocate_new_blocks("req", num_tokens, num_tokens)
            held = sum(not b.is_null for b in manager.req_to_blocks["req"])
            most = max(most, held)
            num_computed_tokens, num_new_tokens = num_tokens, max_num_batched_tokens
    return most


@pytest.mark.parametrize("num_speculative_blocks", [0, 2])
@pytest.mark.parametrize("max_model_len", [2, 16, 17, 18, 40])
def test_mamba_align_bound_is_reached(max_model_len: int, num_speculative_blocks: int):
    spec = new_mamba_spec(block_size=16, num_speculative_blocks=num_speculative_blocks)
    bound = spec.max_memory_usage_bytes(config(max_model_len)) // spec.page_size_bytes
    held = max_blocks_held(spec, max_model_len, max_num_batched_tokens=8)
    # 0.33.0 reserves 2 + S for every length; a request whose L - 1 computed
    # tokens fit in one block (L <= 17) holds 1 + S.
    assert held == (1 if max_model_len <= 17 else 2) + num_speculative_blocks
    assert bound == held
