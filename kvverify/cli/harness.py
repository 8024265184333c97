"""``kvverify harness``: allocate a model's planned KV cache with torch and check it.

    kvverify harness --model llama-3.1-8b --device meta --kv-cache-memory-bytes 80000000000
    kvverify harness --layers 4 --kv-heads 2 --head-dim 64 --device cpu --num-blocks 32 --json
    kvverify harness --model gemma-3-27b --device cuda --gpu-memory-utilization 0.9

The model comes from the catalog (``--model NAME``), a Hugging Face ``config.json``
(``--hf-config PATH``), or a synthetic all-full-attention model (``--layers N --kv-heads H
--head-dim D``). Block count source: ``--num-blocks`` (``num_gpu_blocks_override``), else
``--kv-cache-memory-bytes``, else a per-device default: 16 blocks on cpu, 64 GiB on meta,
and on cuda the budget ``mem_get_info`` leaves at ``--gpu-memory-utilization``.

Exit status: 0 all checks pass, 1 a check found a violation, 2 the run could not start
(torch missing, unknown model, invalid configuration).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvverify.reference.config import VllmConfig
from kvverify.errors import KVVerifyError
from kvverify.reference.specs import FullAttentionSpec, KVCacheSpec

META_DEFAULT_BYTES = 64 * 2**30
CPU_DEFAULT_BLOCKS = 16
CUDA_MARGIN_BYTES = 512 * 2**20  # left free under the utilisation budget for torch's own use


def add_harness_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``harness`` on an ``argparse`` subparsers object (sets ``func``)."""
    p = subparsers.add_parser(
        "harness", help="allocate a plan with torch (cpu/meta/cuda) and check it against the plan",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("model (one of)")
    src.add_argument("--model", metavar="NAME", help="a catalog model (see `kvverify models`)")
    src.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json (file or directory)")
    src.add_argument("--layers", type=int, metavar="N", help="synthetic model: N full-attention layers")
    src.add_argument("--kv-heads", type=int, default=8, metavar="H", help="synthetic model: KV heads (8)")
    src.add_argument("--head-dim", type=int, default=128, metavar="D", help="synthetic model: head dim (128)")
    src.add_argument("--dtype", default="bfloat16", help="synthetic model: KV dtype (bfloat16)")
    p.add_argument("--device", default="meta", help="cpu (small plans), meta (real sizes, no data) or cuda[:i]")
    p.add_argument("--kv-cache-memory-bytes", type=int, metavar="BYTES")
    p.add_argument("--num-blocks", type=int, metavar="N", help="num_gpu_blocks_override")
    p.add_argument("--max-model-len", type=int, default=4096, metavar="L")
    p.add_argument("--block-size", type=int, default=16, metavar="B")
    p.add_argument("--max-num-batched-tokens", type=int, default=2048, metavar="T")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="U",
                   help="cuda: the budget mem_get_info is checked against (0.9)")
    p.add_argument("--seed", type=int, default=0, help="seed of the poison test's random bytes (0)")
    p.add_argument("--no-data-checks", action="store_true", help="skip the data-dependent checks")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run_harness_command)
    return p


def _catalog() -> Any:
    try:
        from kvverify import catalog
    except ImportError:
        return None
    return catalog


def _synthetic_specs(args: argparse.Namespace) -> dict[str, KVCacheSpec]:
    return {f"model.layers.{i}.self_attn": FullAttentionSpec(block_size=args.block_size,
                                                             num_kv_heads=args.kv_heads,
                                                             head_size=args.head_dim, dtype=args.dtype)
            for i in range(args.layers)}


def _cuda_budget(device: str, utilization: float) -> int:
    from kvverify.harness._torch import resolve_device, require_torch
    torch = require_torch()
    free_b, total = torch.cuda.mem_get_info(resolve_device(device))
    return int(total * utilization) - (total - free_b) - CUDA_MARGIN_BYTES


def build_harness_inputs(args: argparse.Namespace) -> tuple[str, VllmConfig, dict[str, KVCacheSpec]]:
    """``(model label, vllm_config, layer specs)`` from the command line."""
    sources = [s for s in (args.model, args.hf_config, args.layers) if s is not None]
    if len(sources) != 1:
        raise KVVerifyError("give exactly one of --model NAME, --hf-config PATH or --layers N")
    override, memory = args.num_blocks, args.kv_cache_memory_bytes
    if override is None and memory is None:
        dev = args.device.split(":")[0]
        if dev == "cpu":
            override = CPU_DEFAULT_BLOCKS
        elif dev == "cuda":
            memory = _cuda_budget(args.device, args.gpu_memory_utilization)
            if memory <= 0:
                raise KVVerifyError(f"no KV cache budget left on {args.device} at "
                                    f"gpu_memory_utilization={args.gpu_memory_utilization}")
        else:
            memory = META_DEFAULT_BYTES
    vc = VllmConfig(block_size=args.block_size, max_model_len=args.max_model_len,
                    max_num_batched_tokens=args.max_num_batched_tokens, num_gpu_blocks_override=override,
                    kv_cache_memory_bytes=memory, gpu_memory_utilization=args.gpu_memory_utilization)
    if args.layers is not None:
        return f"synthetic-{args.layers}x{args.kv_heads}x{args.head_dim}", vc, _synthetic_specs(args)
    catalog = _catalog()
    if catalog is None:
        raise KVVerifyError("the model catalog (kvverify.catalog) is not available: "
                            "use --layers N --kv-heads H --head-dim D")
    layout = catalog.load_model(args.model) if args.model is not None else catalog.read_hf_config(args.hf_config)
    if hasattr(catalog, "build_model"):
        built = catalog.build_model(layout, vc)
        return layout.name, built.vllm_config, dict(built.layer_specs)
    return layout.name, vc, dict(catalog.build_layer_specs(layout, vc))


def run_harness_command(args: argparse.Namespace) -> int:
    """Plan, allocate on ``--device``, check; print text or ``--json``. Returns the exit status."""
    from kvverify.harness import TorchUnavailableError, run_harness
    from kvverify.reference.planner import plan_kv_cache
    try:
        label, vc, specs = build_harness_inputs(args)
        plan = plan_kv_cache(vc, [specs])
        reports = [run_harness(cfg, args.device, seed=args.seed, data_checks=not args.no_data_checks,
                               gpu_memory_utilization=args.gpu_memory_utilization)
                   for cfg in plan.kv_cache_configs]
    except TorchUnavailableError as e:
        print(f"kvverify harness: {e}", file=sys.stderr)
        return 2
    except (KVVerifyError, OSError) as e:
        print(f"kvverify harness: {e}", file=sys.stderr)
        return 2
    ok = all(r.ok for r in reports)
    plan_info = {"num_blocks": plan.num_blocks, "bytes_per_block": plan.bytes_per_block,
                 "groups": len(plan.groups), "block_size": vc.block_size,
                 "max_model_len": plan.vllm_config.max_model_len, "starts": plan.starts, "error": plan.error,
                 "kv_cache_memory_bytes": vc.kv_cache_memory_bytes,
                 "num_gpu_blocks_override": vc.num_gpu_blocks_override}
    if args.json:
        print(json.dumps({"model": label, "device": args.device, "ok": ok, "plan": plan_info,
                          "workers": [r.to_dict() for r in reports]}, indent=2, default=str))
    else:
        print(f"model {label} on {args.device}: {len(specs)} layers, {plan_info['groups']} group(s), "
              f"num_blocks={plan.num_blocks}, bytes_per_block={plan.bytes_per_block}, "
              f"block_size={vc.block_size}, plan {'starts' if plan.starts else 'does NOT start'}")
        if plan.error:
            print(f"  startup check: {plan.error}")
        for w, r in enumerate(reports):
            seen: set[str] = set()
            for name, views in r.views.items():
                key = repr(views)
                if key not in seen and len(seen) < 4:
                    seen.add(key)
                    print(f"  view {name}: " + ", ".join(f"{tuple(s)} {d}" for s, d in views))
            print(("" if len(reports) == 1 else f"worker {w}: ") + r.summary())
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry: ``python -m kvverify.cli.harness harness ...``."""
    parser = argparse.ArgumentParser(prog="kvverify")
    add_harness_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
