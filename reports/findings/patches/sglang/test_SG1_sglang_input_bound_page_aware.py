"""Regression test for SG1 (sgl-project/sglang #29249): a request validate_input_length accepts
must be admitted by PrefillAdder on an empty KV pool, or it waits in the queue forever.

In the style of SGLang's test/registered/scheduler/ tests; real allocator, radix cache and
PrefillAdder on CPU, no model weights; imports nothing from kvverify. Fails on SGLang 0.5.23
for page_size >= 8 (e.g. a 64-token pool, page 16: inputs of 48..58 tokens pass validation and
are never admitted), passes with SG1-sglang-input-bound-page-aware.patch.
"""

import json
import tempfile
from array import array
from types import SimpleNamespace

import pytest
import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import PrefillAdder
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.managers.utils import validate_input_length
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.mem_cache.radix_cache import RadixCache
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

CONTEXT_LEN = 4096


def _server(page_size):
    d = tempfile.mkdtemp()
    with open(f"{d}/config.json", "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                   "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 1 << 20,
                   "torch_dtype": "float32", "rms_norm_eps": 1e-5}, f)
    args = ServerArgs(model_path=d, device="cpu", skip_tokenizer_init=True, page_size=page_size,
                      context_length=CONTEXT_LEN, chunked_prefill_size=-1)
    set_global_server_args_for_scheduler(args)
    return args


def _empty_engine(page_size, pool_tokens):
    kv = MHATokenToKVPool(pool_tokens, page_size=page_size, dtype=torch.float32, head_num=1, head_dim=1,
                          layer_num=1, device="cpu", enable_memory_saver=False)
    allocator = PagedTokenToKVPoolAllocator(pool_tokens, page_size, torch.float32, "cpu", kv, need_sort=False)
    req_to_token = ReqToTokenPool(size=8, max_context_len=CONTEXT_LEN + 8, device="cpu", enable_memory_saver=False)
    tree = RadixCache(CacheInitParams(disable=False, req_to_token_pool=req_to_token,
                                      token_to_kv_pool_allocator=allocator, page_size=page_size))
    return allocator, req_to_token, tree


def _limits(allocator, req_to_token, pool_tokens):
    runner = SimpleNamespace(effective_logical_max_total_num_tokens=pool_tokens,
                             logical_max_total_num_tokens=pool_tokens, token_to_kv_pool_allocator=allocator,
                             max_running_requests=8, req_to_token_pool=req_to_token,
                             token_to_kv_pool=SimpleNamespace(size=pool_tokens), forward_stream=None)
    worker = SimpleNamespace(model_runner=runner, model_config=SimpleNamespace(context_len=CONTEXT_LEN),
                             dllm_algorithm=None, random_seed=0, device="cpu")
    info = TpModelWorker.get_worker_info(worker)
    return info[4], info[5]  # max_req_len, max_req_input_len


@pytest.mark.parametrize("page_size,pool_pages", [(8, 4), (16, 4), (64, 3), (4, 16), (1, 64)])
def test_validated_request_is_admitted_on_empty_pool(page_size, pool_pages):
    args = _server(page_size)
    model_config = ModelConfig.from_server_args(args)
    pool_tokens = page_size * pool_pages
    stuck = []
    for input_len in range(1, pool_tokens + 1):
        allocator, req_to_token, tree = _empty_engine(page_size, pool_tokens)
        max_req_len, max_req_input_len = _limits(allocator, req_to_token, pool_tokens)
        sampling = SamplingParams(max_new_tokens=128, ignore_eos=True)
        sampling.normalize(None)
        sampling.verify(1000)
        req = Req("r", "", array("q", range(1, input_len + 1)), sampling, vocab_size=1000)
        if validate_input_length(req, max_req_input_len, False) is not None:
            continue  # refused up front with an error: fine
        scheduler = SimpleNamespace(max_new_tokens_limit=None, max_req_len=max_req_len,
                                    max_total_num_tokens=pool_tokens, kv_shard_widening=1, page_size=page_size,
                                    token_to_kv_pool_allocator=allocator, sliding_window_size=None,
                                    chunked_prefill_size=None)
        Scheduler.init_req_max_new_tokens(scheduler, req)
        if req.finished():
            continue  # aborted with a reason: fine
        running = ScheduleBatch.init_new([], req_to_token, allocator, tree, model_config, False,
                                         SpeculativeAlgorithm.NONE)
        adder = PrefillAdder(page_size, tree, allocator, running, 0.7, 1 << 20, None)
        req.init_next_round_input(tree)
        adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        if req not in adder.can_run_list:
            stuck.append(input_len)
    assert not stuck, (f"page_size={page_size}, pool={pool_tokens} tokens: inputs of {stuck[0]}..{stuck[-1]} "
                       "tokens pass validate_input_length but PrefillAdder never admits them on an empty pool")
