# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F12: a one-token prompt whose token a KV connector
holds is loaded, rewound to num_tokens - 1 = 0 computed tokens so the token can
be sampled, then read as a new request by the waiting scan: looked up and
loaded again, step after step, forever.

Belongs in tests/v1/kv_connector/unit/test_scheduler_async_load.py. Runs
offline on CPU (VLLM_TARGET_DEVICE=cpu): a stand-in replaces ModelConfig; the
connector is a scheduler-side stub that loads in one step.
"""

from types import SimpleNamespace
from unittest.mock import PropertyMock, patch

import torch

from vllm.config import CacheConfig, KVTransferConfig, SchedulerConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    SupportsHMA,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

BLOCK_SIZE = 16
#: request id -> the prompt tokens the external cache holds (loaded asynchronously, one step)
EXTERNAL_HITS: dict[str, int] = {}


class OneStepLoadConnector(KVConnectorBase_V1, SupportsHMA):
    """A scheduler-side connector: the tokens EXTERNAL_HITS names load asynchronously and land
    in the output of the step that starts them (the test reports them)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.loads: list[str] = []

    def get_num_new_matched_tokens(self, request, num_computed_tokens, *args, **kwargs):
        hit = max(0, EXTERNAL_HITS.get(request.request_id, 0) - num_computed_tokens)
        return hit, hit > 0

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        if num_external_tokens:
            self.loads.append(request.request_id)

    def build_connector_meta(self, scheduler_output):
        return KVConnectorMetadata()

    def request_finished_all_groups(self, request, block_ids):
        return False, None

    def start_load_kv(self, forward_context, **kwargs):
        raise NotImplementedError

    def wait_for_layer_load(self, layer_name):
        raise NotImplementedError

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        raise NotImplementedError

    def wait_for_save(self):
        raise NotImplementedError


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


def make_scheduler(num_blocks: int, max_model_len: int, num_speculative_tokens: int = 0,
                   num_lookahead_tokens: int = 0) -> Scheduler:
    vllm_config = VllmConfig(
        cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=True),
        scheduler_config=SchedulerConfig(max_model_len=max_model_len, is_encoder_decoder=False,
                                         max_num_batched_tokens=2048, max_num_seqs=16),
    )
    vllm_config.model_config = model_config_stand_in(max_model_len)
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    vllm_config.kv_transfer_config = KVTransferConfig(
        kv_connector="OneStepLoadConnector", kv_connector_module_path=__name__, kv_role="kv_both")
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["layer.0"], FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=8,
                                                            dtype=torch.bfloat16))
        ],
    )
    with patch.object(VllmConfig, "num_speculative_tokens", new_callable=PropertyMock,
                      return_value=num_speculative_tokens), \
            patch.object(VllmConfig, "num_lookahead_tokens", new_callable=PropertyMock,
                         return_value=num_lookahead_tokens):
        return Scheduler(vllm_config, kv_cache_config, StructuredOutputManager(vllm_config),
                         block_size=BLOCK_SIZE, hash_block_size=BLOCK_SIZE, log_stats=False)


def make_request(request_id: str, prompt_token_ids: list[int], max_tokens: int = 1) -> Request:
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    return Request(request_id=request_id, prompt_token_ids=prompt_token_ids,
                   sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True), pooling_params=None,
                   block_hasher=get_request_block_hasher(BLOCK_SIZE, hash_fn))


def step(scheduler: Scheduler) -> dict[str, int]:
    """One engine step; loads started this step land in its output (the worker's report)."""
    output = scheduler.schedule()
    connector = scheduler.get_kv_connector()
    landed, connector.loads = set(connector.loads), []
    req_ids = list(output.num_scheduled_tokens)
    sampled = [[0] if scheduler.requests[r].num_computed_tokens >= scheduler.requests[r].num_tokens else []
               for r in req_ids]
    scheduler.update_from_output(output, ModelRunnerOutput(
        req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled,
        kv_connector_output=KVConnectorOutput(finished_recving=landed or None)))
    return dict(output.num_scheduled_tokens)


def test_one_token_prompt_fully_held_by_the_connector_completes():
    scheduler = make_scheduler(num_blocks=9, max_model_len=64)
    EXTERNAL_HITS.clear()
    EXTERNAL_HITS["one"] = 1
    scheduler.add_request(make_request("one", [7], max_tokens=3))
    for _ in range(12):
        if not scheduler.has_unfinished_requests():
            break
        step(scheduler)
    # 0.33.0: load, rewind to 0, load again ... the request never runs.
    assert not scheduler.has_unfinished_requests()
    assert scheduler.get_kv_connector().loads == []


def test_longer_full_hit_loads_once():
    scheduler = make_scheduler(num_blocks=9, max_model_len=64)
    EXTERNAL_HITS.clear()
    EXTERNAL_HITS["a"] = 32
    scheduler.add_request(make_request("a", list(range(32)), max_tokens=2))
    steps = []
    while scheduler.has_unfinished_requests() and len(steps) < 10:
        steps.append(step(scheduler))
    assert steps[0] == {} and steps[1] == {"a": 1}  # loaded, then its last token recomputed
    assert not scheduler.has_unfinished_requests()
