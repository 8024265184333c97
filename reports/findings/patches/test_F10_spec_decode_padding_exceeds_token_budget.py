# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F10: the waiting scan pads a new one-token decode to
1 + num_speculative_tokens slots even when no step's token budget holds them,
and breaks on it every step: the request never runs.

Belongs in tests/v1/core/test_scheduler.py. Runs offline on CPU
(VLLM_TARGET_DEVICE=cpu): num_speculative_tokens, which a speculative config
(here an n-gram drafter: no lookahead slots) sets, is patched in; a stand-in
replaces ModelConfig.
"""

from types import SimpleNamespace
from unittest.mock import PropertyMock, patch

import torch

from vllm.config import CacheConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

BLOCK_SIZE = 16


def model_config_stand_in(max_model_len: int) -> SimpleNamespace:
    """The ModelConfig attributes the Scheduler and its managers read (no model download)."""
    return SimpleNamespace(
        max_model_len=max_model_len, original_max_model_len=max_model_len, runner_type="generate",
        supports_kv_cache_grouping=False, uses_mrope=False, is_encoder_decoder=False, is_diffusion=False,
        supports_multimodal_inputs=False, multimodal_config=None, return_sampling_mask=False,
        skip_tokenizer_init=True, is_multimodal_model=False, use_mla=False, is_hybrid=False,
        is_attention_free=False, is_moe=False, enable_return_routed_experts=False, pooler_config=None,
        quantization=None, attention_chunk_size=None, enable_prompt_embeds=False, logits_processors=None,
        supports_replayssm=False, uses_xdrope=False,
    )


def make_scheduler(max_num_batched_tokens: int, num_speculative_tokens: int) -> Scheduler:
    max_model_len = 64
    vllm_config = VllmConfig(
        cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=True),
        scheduler_config=SchedulerConfig(
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_batched_tokens,
        ),
    )
    vllm_config.model_config = model_config_stand_in(max_model_len)
    vllm_config.cache_config.num_gpu_blocks = 9
    kv_cache_config = KVCacheConfig(
        num_blocks=9,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["layer.0"], FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=8,
                                                            dtype=torch.bfloat16))
        ],
    )
    with patch.object(VllmConfig, "num_speculative_tokens", new_callable=PropertyMock,
                      return_value=num_speculative_tokens):
        return Scheduler(vllm_config, kv_cache_config, StructuredOutputManager(vllm_config),
                         block_size=BLOCK_SIZE, hash_block_size=BLOCK_SIZE, log_stats=False)


def make_request(request_id: str, prompt_token_ids: list[int]) -> Request:
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    return Request(request_id=request_id, prompt_token_ids=prompt_token_ids,
                   sampling_params=SamplingParams(max_tokens=1, ignore_eos=True), pooling_params=None,
                   block_hasher=get_request_block_hasher(BLOCK_SIZE, hash_fn))


def step(scheduler: Scheduler) -> dict[str, int]:
    output = scheduler.schedule()
    req_ids = list(output.num_scheduled_tokens)
    sampled = [[0] if scheduler.requests[r].num_computed_tokens >= scheduler.requests[r].num_tokens else []
               for r in req_ids]
    scheduler.update_from_output(output, ModelRunnerOutput(
        req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled))
    return dict(output.num_scheduled_tokens)


def test_cached_prompt_runs_when_the_padded_decode_exceeds_the_budget():
    # 2 draft tokens, a budget of 2 tokens: the padded decode (3) never fits a step.
    scheduler = make_scheduler(max_num_batched_tokens=2, num_speculative_tokens=2)
    prompt = list(range(17))
    scheduler.add_request(make_request("first", prompt))
    while scheduler.has_unfinished_requests():
        step(scheduler)
    # The same prompt again: its first block is cached, one token is left to compute.
    scheduler.add_request(make_request("again", prompt))
    scheduled = [step(scheduler) for _ in range(5)]
    # 0.33.0 pads the one token to 3 slots, which exceed the budget, and breaks every step.
    assert any(s.get("again") for s in scheduled), scheduled
    assert not scheduler.has_unfinished_requests()


def test_padding_unchanged_when_it_fits_the_budget():
    scheduler = make_scheduler(max_num_batched_tokens=64, num_speculative_tokens=2)
    prompt = list(range(17))
    scheduler.add_request(make_request("first", prompt))
    while scheduler.has_unfinished_requests():
        step(scheduler)
    scheduler.add_request(make_request("again", prompt))
    assert step(scheduler) == {"again": 3}  # 1 + 2 padded slots, as before
