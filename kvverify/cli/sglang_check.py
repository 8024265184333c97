"""``kvverify check --engine sglang``: the operator's check for SGLang.

Will the server start (pool sizing: ``max_total_num_tokens`` from the KV byte budget and the
model's per-token cell size, page-floored, or a token count), what does it accept (the
validation bound ``max_req_input_len``), and does the longest request it accepts then really
finish on the SGLang reference's event loop — or wait forever (finding SG1)? Flags map onto
SGLang's: ``--block-size`` is ``--page-size``, ``--max-model-len`` is ``--context-length``,
``--kv-cache-memory-bytes`` is the KV budget, ``--num-gpu-blocks-override`` a pool of that
many pages (``--max-total-tokens`` in pages), ``--max-num-batched-tokens`` the chunked prefill size.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kvverify.errors import ConfigError
from kvverify.reference.dtypes import get_dtype_size


def cell_size(layout: Any) -> int:
    """Bytes per token of the KV pool (SGLang's ``get_cell_size_per_token`` for MHA/GQA and MLA)."""
    kinds = set(layout.layer_kinds)
    if not kinds <= {"full", "mla"}:
        raise ConfigError("model", layout.name, "the SGLang check covers full-attention and MLA models; this one "
                          f"has {sorted(kinds - {'full', 'mla'})} layers (SGLang's SWA / Mamba pools are "
                          "not modelled)")
    size = get_dtype_size(layout.dtype)
    if "mla" in kinds:
        return len(layout.layer_kinds) * ((layout.kv_lora_rank or 0) + (layout.qk_rope_head_dim or 0)) * size
    return len(layout.layer_kinds) * 2 * (layout.num_kv_heads or 1) * (layout.head_dim or 1) * size


def run_sglang_check(layout: Any, args: argparse.Namespace) -> dict[str, Any]:
    from kvverify import engines
    from kvverify.sglang.config import SglangConfig
    from kvverify.sglang.driver import SglangRequestSpec
    from kvverify.sglang.pool import SglangStartupError
    from kvverify.targets.sglang_reference import SglangReferenceTarget

    page = args.block_size or 1
    ctx = args.max_model_len if isinstance(args.max_model_len, int) else (layout.max_position_embeddings or 4096)
    cell = cell_size(layout)
    pool_kw: dict[str, Any] = {}
    if args.num_gpu_blocks_override is not None:
        pool_kw["max_total_num_tokens"] = args.num_gpu_blocks_override * page
    elif args.kv_cache_memory_bytes is not None:
        pool_kw.update(available_bytes=args.kv_cache_memory_bytes, cell_size=cell)
    else:
        raise ConfigError("kv_cache_memory_bytes", None, "the SGLang check needs --kv-cache-memory-bytes "
                          "or --num-gpu-blocks-override (pages)")
    out: dict[str, Any] = {"engine": "sglang", "model": layout.name, "page_size": page, "context_len": ctx,
                           "cell_size": cell}
    with engines.enabled(flaws=args.flaw or (), fixes=args.fix or ()):  # each in its engine's catalogue
        cfg = SglangConfig(page_size=page, context_len=ctx, chunked_prefill_size=args.max_num_batched_tokens,
                           max_prefill_tokens=max(args.max_num_batched_tokens or 16384, 16384), **pool_kw)
        target = SglangReferenceTarget()
        pool = target.derive_pool(cfg)
        out.update(starts=pool.error is None, max_total_num_tokens=pool.max_total_num_tokens, error=pool.error)
        if pool.error is not None or pool.max_total_num_tokens is None:
            out.update(servable=False, verdict="refused at startup")
            return out
        run_cfg = SglangConfig(page_size=page, context_len=ctx, max_total_num_tokens=pool.max_total_num_tokens,
                               chunked_prefill_size=cfg.chunked_prefill_size,
                               max_prefill_tokens=cfg.max_prefill_tokens)
        try:
            probe = target.probe_admission(run_cfg, 1, 1)
        except SglangStartupError as e:
            out.update(servable=False, verdict=f"refused at startup: {e}")
            return out
        bound = probe.max_req_input_len
        longest = bound - 1
        out["max_req_input_len"] = bound
        out["longest_accepted_input"] = longest
        if longest < 1:
            out.update(servable=False, verdict="no input is accepted (the pool is too small)")
            return out
        from kvverify.sglang.driver import run_workload
        from kvverify.sglang.scheduler import Scheduler
        result = run_workload(Scheduler(run_cfg), [SglangRequestSpec(longest, 1 << 30)], record=True)
        if args.plot:
            from kvverify.sglang.timeline import write_svg
            write_svg(result, f"SGLang check: {layout.name}, page {page}, pool {pool.max_total_num_tokens} tokens, "
                              f"input {longest}", args.plot)
        out["run"] = {"verdict": result.verdict, "steps": result.steps, "detail": result.detail or result.error,
                      "outcomes": result.outcomes}
        out["servable"] = result.ok
        out["verdict"] = ("OK: the longest accepted request completes" if result.ok else
                          f"HANG: an input of {longest} tokens passes validation but {result.verdict}"
                          f" ({result.detail or result.error})")
    return out


def cmd_sglang_check(args: argparse.Namespace) -> int:
    from kvverify.cli.common import load_layout
    result = run_sglang_check(load_layout(args.model, args.config_json), args)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        for k in ("model", "page_size", "context_len", "cell_size", "max_total_num_tokens", "max_req_input_len",
                  "longest_accepted_input"):
            if k in result:
                print(f"{k:24} {result[k]}")
        if result.get("error"):
            print(f"{'startup':24} {result['error']}")
        print(result["verdict"])
    return 0 if result.get("starts") and result.get("servable") else 1
