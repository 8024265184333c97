"""The real SGLang objects behind each contract method (one engine's pieces per probe).

Nothing is mocked: allocators, ``MHATokenToKVPool`` (a 1-layer, 1-head cache: sizes do not
matter, only slot indices), ``ReqToTokenPool``, ``RadixCache``, ``Req``, ``PrefillAdder``,
``ScheduleBatch`` are SGLang's. Two methods run on a minimal ``self``
(:class:`~kvverify.targets.sglang.compat.Bare`, which names any attribute the release reads
that the adapter does not supply): ``TpModelWorker.get_worker_info`` (where ``max_req_len``
and the ``- 5`` live) and ``Scheduler.init_req_max_new_tokens``. The model forward is the
only thing replaced: each request's next token is a constant.
"""

from __future__ import annotations

import inspect
import warnings
from array import array
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from kvverify.sglang.config import SglangConfig
from kvverify.targets.base import TargetUnsupported
from kvverify.targets.sglang import env
from kvverify.targets.sglang import compat
from kvverify.targets.sglang.compat import Bare, call_kw, returned_names
from kvverify.targets.sglang_contract import AdmissionProbe, DecodingReqSpec, PoolProbe, RetractProbe

VOCAB = 1000
TOKEN = 5  # what the "model" samples


def _torch() -> Any:
    import torch
    return torch


def _server_args(config: SglangConfig) -> Any:
    return env.publish(config.page_size, config.context_len, config.chunked_prefill_size,
                       config.max_prefill_tokens, config.max_running_requests)


def allocator(size: int, page_size: int) -> Any:
    torch = _torch()
    mp = env.load("sglang.srt.mem_cache.memory_pool")
    alloc_mod = env.load("sglang.srt.mem_cache.allocator")
    kv = call_kw(mp.MHATokenToKVPool, size=size, page_size=page_size, dtype=torch.float32, head_num=1,
                 head_dim=1, layer_num=1, device="cpu", enable_memory_saver=False)
    if page_size == 1:
        return call_kw(alloc_mod.TokenToKVPoolAllocator, size=size, dtype=torch.float32, device="cpu",
                       kvcache=kv, need_sort=False)
    return call_kw(alloc_mod.PagedTokenToKVPoolAllocator, size=size, page_size=page_size, dtype=torch.float32,
                   device="cpu", kvcache=kv, need_sort=False)


class Engine:
    """One engine's memory pieces over a pool of ``size`` tokens."""

    def __init__(self, config: SglangConfig, size: int) -> None:
        self.config = config
        self.server_args = _server_args(config)
        self.model_config = env.model_config(self.server_args)
        self.size = size
        self.allocator = allocator(size, config.page_size)
        mp = env.load("sglang.srt.mem_cache.memory_pool")
        self.req_to_token_pool = call_kw(mp.ReqToTokenPool, size=64, max_context_len=config.context_len + 8,
                                         device="cpu", enable_memory_saver=False)
        rc = env.load("sglang.srt.mem_cache.radix_cache")
        params = inspect.signature(rc.RadixCache.__init__).parameters
        if "params" in params:
            cip = env.load("sglang.srt.mem_cache.cache_init_params")
            self.tree_cache = rc.RadixCache(call_kw(cip.CacheInitParams, disable=False,
                                                    req_to_token_pool=self.req_to_token_pool,
                                                    token_to_kv_pool_allocator=self.allocator,
                                                    page_size=config.page_size))
        else:
            self.tree_cache = call_kw(rc.RadixCache, req_to_token_pool=self.req_to_token_pool,
                                      token_to_kv_pool_allocator=self.allocator, page_size=config.page_size,
                                      disable=False)
        sb = env.load("sglang.srt.managers.schedule_batch")
        self.sb = sb
        spec = env.load("sglang.srt.speculative.spec_info")
        self.spec_none = spec.SpeculativeAlgorithm.NONE

    def req(self, rid: str, input_ids: list[int], max_new_tokens: int) -> Any:
        sp_mod = env.load("sglang.srt.sampling.sampling_params")
        sp = call_kw(sp_mod.SamplingParams, max_new_tokens=max_new_tokens, ignore_eos=True)
        call_kw(sp.normalize, None) if "tokenizer" in inspect.signature(sp.normalize).parameters else None
        call_kw(sp.verify, VOCAB) if len(inspect.signature(sp.verify).parameters) else sp.verify()
        ids: Any = array("q", input_ids) if compat.input_ids_container() is array else list(input_ids)
        return call_kw(self.sb.Req, rid, "", ids, sp, vocab_size=VOCAB)

    def batch(self, reqs: list[Any]) -> Any:
        return call_kw(self.sb.ScheduleBatch.init_new, reqs=reqs, req_to_token_pool=self.req_to_token_pool,
                       token_to_kv_pool_allocator=self.allocator, tree_cache=self.tree_cache,
                       model_config=self.model_config, enable_overlap=False, spec_algorithm=self.spec_none)

    def adder(self, running: Any, ratio: float, rem_input: int, rem_chunk: int | None) -> Any:
        sp = env.load("sglang.srt.managers.schedule_policy")
        return sp.PrefillAdder(self.config.page_size, self.tree_cache, self.allocator, running, ratio,
                               rem_input, rem_chunk)

    def add_one_req(self, adder: Any, req: Any) -> str:
        """``admitted`` if the request joined ``can_run_list`` (the returned verdict is, since
        0.5.x, about the next candidate), else the verdict's name."""
        req.init_next_round_input(self.tree_cache)
        res = call_kw(adder.add_one_req, req, has_chunked_req=False, truncation_align_size=None)
        if any(r is req for r in adder.can_run_list):
            return "admitted"
        return str(getattr(res, "name", res)).lower()


def launch_check(config: SglangConfig) -> str | None:
    """``server_args.check_server_args()``, as ``Engine`` runs it at launch: ``None`` if the
    server starts, else its refusal (an assertion with a message, in SGLang)."""
    sa = _server_args(config)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sa.check_server_args()
    except (AssertionError, ValueError) as e:
        return f"startup refused: {type(e).__name__}: {e}"[:300]
    return None


def derive_pool(config: SglangConfig) -> PoolProbe:
    """``DefaultPoolConfigurator.calculate_pool_sizes`` (or ``_from_max_tokens``) with the
    budget and cell size given (the profiling step needs a device), ``--max-total-tokens`` as
    ``_apply_token_constraints`` applies it, then the real allocator over the result."""
    pc = env.load("sglang.srt.model_executor.pool_configurator")
    _server_args(config)
    cfgr = object.__new__(pc.DefaultPoolConfigurator)
    cfgr._cell_size = config.cell_size or 1
    cfgr._fixed_overhead_bytes = 0
    cfgr._zero_kv_max_tokens = config.context_len
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if config.max_total_num_tokens is not None:
                mpc = cfgr.calculate_pool_sizes_from_max_tokens(config.max_total_num_tokens, config.page_size)
            else:
                mpc = cfgr.calculate_pool_sizes(config.available_bytes, config.page_size)
            tokens = int(mpc.max_total_num_tokens)
            if config.max_total_tokens is not None and config.max_total_tokens < tokens:
                mpc = cfgr.calculate_pool_sizes_from_max_tokens(config.max_total_tokens, config.page_size)
                tokens = int(mpc.max_total_num_tokens)
    except (RuntimeError, ValueError) as e:
        return PoolProbe(None, None, None, error=f"{type(e).__name__}: {e}"[:200])
    alloc = allocator(tokens, config.page_size)
    return PoolProbe(tokens, int(alloc.size), int(alloc.available_size()))


def worker_info(config: SglangConfig, size: int, alloc: Any, req_to_token_pool: Any) -> tuple[int, int]:
    """``(max_req_len, max_req_input_len)`` from the real ``TpModelWorker.get_worker_info``.

    Its ``self.model_runner`` carries the pool under each name a release reads it by
    (``effective_max_total_num_tokens`` before the DCP-aware rename, the ``logical`` ones
    after); one worker: ``attn_dcp_size = 1``."""
    tp = env.load("sglang.srt.managers.tp_worker")
    fn = tp.TpModelWorker.get_worker_info
    runner = Bare("TpModelWorker.model_runner", effective_logical_max_total_num_tokens=size,
                  logical_max_total_num_tokens=size, effective_max_total_num_tokens=size,
                  max_total_num_tokens=size, token_to_kv_pool_allocator=alloc, max_running_requests=64,
                  req_to_token_pool=req_to_token_pool, token_to_kv_pool=SimpleNamespace(size=size),
                  forward_stream=None)
    bare = Bare("TpModelWorker.get_worker_info", model_runner=runner,
                model_config=SimpleNamespace(context_len=config.context_len), dllm_algorithm=None,
                ps=SimpleNamespace(attn_dcp_size=1, attn_cp_size=1), random_seed=0, device="cpu",
                max_total_num_tokens=size, max_prefill_tokens=config.max_prefill_tokens,
                max_running_requests=64, max_queued_requests=None, max_req_len=None, max_req_input_len=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = fn(bare)
        except AttributeError as e:
            raise env.SglangDriftError(f"TpModelWorker.get_worker_info: {e}") from None
    names = returned_names(fn)
    # the scheduler unpacks (..., max_req_len, max_req_input_len, ...): the input bound is the
    # element after max_req_len, by name or inline (``max_req_len - 5`` before 0.5.2x)
    if "max_req_len" not in names or names.index("max_req_len") + 1 >= len(names) \
            or "max_req" not in names[names.index("max_req_len") + 1]:
        raise env.SglangDriftError(f"get_worker_info returns {names}: no max_req_len, max_req_input_len pair")
    i = names.index("max_req_len")
    return int(out[i]), int(out[i + 1])


def probe_admission(config: SglangConfig, input_len: int, max_new_tokens: int) -> AdmissionProbe:
    if config.max_total_num_tokens is None:
        raise TargetUnsupported("the admission probe takes a pool in tokens")
    size = config.max_total_num_tokens
    refused = launch_check(config)
    if refused is not None:
        return AdmissionProbe(0, 0, refused, None, None)
    eng = Engine(config, size)
    req_len, input_bound = worker_info(config, size, eng.allocator, eng.req_to_token_pool)
    utils = env.load("sglang.srt.managers.utils")
    req = eng.req("probe", list(range(1, input_len + 1)), max_new_tokens)
    error = call_kw(utils.validate_input_length, req, max_req_input_len=input_bound, allow_auto_truncate=False)
    if error is not None:
        return AdmissionProbe(size, input_bound, str(error), None, None)
    sched = env.load("sglang.srt.managers.scheduler")
    bare = Bare("Scheduler.init_req_max_new_tokens", max_new_tokens_limit=None, max_req_len=req_len,
                max_total_num_tokens=size, kv_shard_widening=1, page_size=config.page_size,
                token_to_kv_pool_allocator=eng.allocator, sliding_window_size=None,
                chunked_prefill_size=config.chunked_prefill_size)
    try:
        sched.Scheduler.init_req_max_new_tokens(bare, req)
    except AttributeError as e:
        raise env.SglangDriftError(f"Scheduler.init_req_max_new_tokens: {e}") from None
    if req.finished():
        return AdmissionProbe(size, input_bound, f"aborted at arrival: {req.finished_reason}", None, None)
    max_new = int(req.sampling_params.max_new_tokens)
    adder = eng.adder(eng.batch([]), config.init_new_token_ratio, config.max_prefill_tokens,
                      config.chunked_prefill_size)
    rem = float(adder.rem_total_tokens)
    result = eng.add_one_req(adder, req)
    return AdmissionProbe(size, input_bound, None, max_new, result, rem)


def _lift_budget(adder: Any) -> None:
    """Let ``PrefillAdder`` admit a request whose pages fit but whose charge (input + max_new
    + one page) does not: the optimistic admissions (``new_token_ratio`` < 1) that lead to a
    full pool mid-decode, reached here in one step. Only the offset moves; the pages are real."""
    budget = getattr(adder, "memory_budget", None)
    if budget is not None and hasattr(budget, "total_offset"):
        budget.total_offset -= 1 << 30
        budget.current_offset -= 1 << 30
    elif hasattr(adder, "rem_total_token_offset"):
        adder.rem_total_token_offset -= 1 << 30
        if hasattr(adder, "cur_rem_token_offset"):
            adder.cur_rem_token_offset -= 1 << 30
    else:
        raise env.SglangDriftError("PrefillAdder has neither memory_budget.total_offset nor rem_total_token_offset")


def _decode_round(batch: Any) -> None:
    torch = _torch()
    batch.prepare_for_decode()
    for r in batch.reqs:
        r.output_ids.append(TOKEN)
    batch.output_ids = torch.tensor([TOKEN] * len(batch.reqs), dtype=torch.int64)


def probe_retraction(config: SglangConfig, specs: Sequence[DecodingReqSpec]) -> RetractProbe:
    """Bring the batch to its decode state as a scheduler would (longest-decoded request
    arrives first; each later one joins after the earlier ones decoded the difference),
    then run one decode step's memory path."""
    if config.tokens_per_step != 1:
        raise TargetUnsupported("speculative decoding (tokens_per_step > 1) needs a draft model")
    if config.max_total_num_tokens is None:
        raise TargetUnsupported("the retraction probe takes a pool in tokens")
    if config.page_size > 1 and not compat.paged_allocator_runs_on_cpu():
        raise TargetUnsupported("this release's PagedTokenToKVPoolAllocator launches Triton kernels "
                                "unconditionally (no CPU path): page_size > 1 needs a GPU")
    from kvverify.targets.sglang_reference import decoding_batch_ids
    torch = _torch()
    p = config.page_size
    eng = Engine(config, config.max_total_num_tokens)
    order = sorted(range(len(specs)), key=lambda i: (-specs[i].output_len, i))
    running, reqs = None, {}
    for pos, i in enumerate(order):
        spec = specs[i]
        if spec.output_len < 1 or spec.output_len > spec.max_new_tokens:
            raise TargetUnsupported("a decoding request has 1 <= output_len <= max_new_tokens")
        req = eng.req(f"d{i}", decoding_batch_ids(spec, i), spec.output_len)
        reqs[i] = req
        adder = eng.adder(eng.batch([]), 1.0, 1 << 30, None)
        _lift_budget(adder)
        if eng.add_one_req(adder, req) != "admitted":
            raise TargetUnsupported("the batch does not fit the pool before the probed step")
        b = eng.batch(adder.can_run_list)
        try:
            b.prepare_for_extend()
        except RuntimeError as e:
            raise TargetUnsupported(f"the batch does not fit the pool before the probed step: {e}") from None
        req.output_ids.append(TOKEN)
        b.output_ids = torch.tensor([TOKEN], dtype=torch.int64)
        if running is None:
            running = b
        else:
            running.merge_batch(b)
        nxt = specs[order[pos + 1]].output_len if pos + 1 < len(order) else 1
        for _ in range(spec.output_len - nxt):
            if not running.check_decode_mem():
                raise TargetUnsupported("the batch does not fit the pool before the probed step")
            _decode_round(running)
    assert running is not None
    for i, r in reqs.items():
        r.sampling_params.max_new_tokens = specs[i].max_new_tokens
    out: dict[str, Any] = {"pool_tokens": int(eng.allocator.available_size()) * 0 + config.max_total_num_tokens // p * p}
    try:
        fits = bool(running.check_decode_mem())
        out["fits_before"] = fits
        if not fits:
            res = call_kw(running.retract_decode, server_args=eng.server_args)  # 0.5.12 takes server_args
            retracted = res[0]
            aborted = res[2] if len(res) > 2 else []
            out["retracted"] = tuple(r.rid for r in retracted)
            out["aborted"] = tuple((r.rid, str(getattr(r.to_finish, "message", r.to_finish) or "")) for r in aborted)
        if running.reqs:
            _decode_round(running)
            out["decode_allocated"] = True
    except env.SglangDriftError:
        raise  # the adapter could not call the release: unknown drift, not the engine's answer
    except Exception as e:  # noqa: BLE001 - an escaped exception is the answer
        out.setdefault("fits_before", False)
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    out["kept"] = tuple(r.rid for r in running.reqs)
    out["available_after"] = int(eng.allocator.available_size())
    held = 0
    if running.reqs and out.get("decode_allocated"):
        held = sum(-(-int(s) // p) * p for s in running.seq_lens_cpu.tolist())
    elif running.reqs:
        held = sum(-(-(len(r.origin_input_ids) + len(r.output_ids) - 1) // p) * p for r in running.reqs)
    out["held_after"] = held + int(eng.tree_cache.evictable_size()) + int(eng.tree_cache.protected_size())
    return RetractProbe(**out)
