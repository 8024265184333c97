# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F13: in Mamba "align" mode get_num_blocks_to_allocate
does not count the state block allocate_external_computed_blocks takes for a new
request's KV-connector tokens, so allocate_slots admits a step its pool cannot
serve and raises "Cannot get N free blocks from the pool" (the engine core dies).

Belongs in tests/v1/core/test_single_type_kv_cache_manager.py (or
tests/v1/core/test_prefix_caching.py). Runs offline on CPU (VLLM_TARGET_DEVICE=cpu).
"""

import torch

from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MambaSpec
from vllm.v1.request import Request, RequestStatus


def make_manager(num_blocks: int, block_size: int, num_speculative_blocks: int = 0) -> KVCacheManager:
    spec = MambaSpec(block_size=block_size, shapes=((1, 4), (1,)), dtypes=(torch.bfloat16, torch.float32),
                     mamba_cache_mode="align", num_speculative_blocks=num_speculative_blocks)
    config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                           kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    return KVCacheManager(config, max_model_len=64, scheduler_block_size=block_size, hash_block_size=block_size,
                          enable_caching=True)


def make_request(request_id: str, prompt_token_ids: list[int], block_size: int) -> Request:
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    return Request(request_id=request_id, prompt_token_ids=prompt_token_ids,
                   sampling_params=SamplingParams(max_tokens=1, ignore_eos=True), pooling_params=None,
                   block_hasher=get_request_block_hasher(block_size, hash_fn))


def predicted_and_pulled(manager: KVCacheManager, request: Request, num_new_tokens: int,
                         num_external_computed_tokens: int) -> tuple[int, int]:
    """The blocks allocate_slots' per-step check charges, and the blocks it really takes."""
    total = num_external_computed_tokens
    predicted = manager.coordinator.get_num_blocks_to_allocate(
        request_id=request.request_id, num_tokens=total + num_new_tokens,
        new_computed_blocks=manager.empty_kv_cache_blocks.blocks, num_encoder_tokens=0,
        total_computed_tokens=total, num_local_computed_tokens=0,
        num_tokens_main_model=total + num_new_tokens,
        prefill_end=max(request.num_prompt_tokens, request.num_tokens - 1))
    free = manager.block_pool.get_num_free_blocks()
    assert manager.allocate_slots(request, num_new_tokens,
                                  num_external_computed_tokens=num_external_computed_tokens) is not None
    return predicted, free - manager.block_pool.get_num_free_blocks()


def test_loaded_state_block_is_predicted():
    for block_size, num_speculative_blocks, prompt_len, external in ((1, 0, 2, 1), (1, 2, 3, 2), (16, 1, 40, 32)):
        manager = make_manager(num_blocks=64, block_size=block_size, num_speculative_blocks=num_speculative_blocks)
        request = make_request("r", list(range(prompt_len)), block_size)
        predicted, pulled = predicted_and_pulled(manager, request, prompt_len - external, external)
        # 0.33.0 predicts one block less than it pulls (the loaded state block).
        assert predicted == pulled, (block_size, num_speculative_blocks, predicted, pulled)


def test_admitted_step_never_raises_on_a_tight_pool():
    # 2 usable blocks; a 1-token request holds one, a 2-token request with one loaded token
    # needs two (its loaded state block and the next state block): it must not be admitted.
    manager = make_manager(num_blocks=3, block_size=1)
    first = make_request("first", [10000], 1)
    assert manager.allocate_slots(first, 1) is not None
    first.status = RequestStatus.RUNNING
    second = make_request("second", [20000, 20001], 1)
    # 0.33.0: admitted (1 block predicted), then ValueError: Cannot get 1 free blocks.
    assert manager.allocate_slots(second, 1, num_external_computed_tokens=1) is None
