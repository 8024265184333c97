"""``kvverify check``: the operator's linter (the command line over :mod:`kvverify.check`).

Output paths (``--plot``, ``--json FILE``) are validated before any work — the suffix decides
the format, never a symlink or a non-regular file (:mod:`kvverify.safefiles`) — and the verdict
is printed before any file is written; each file written is named on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kvverify.check import PLOT_FORMATS, print_check, run_check, write_check_plot
from kvverify.cli.common import Formatter, bytes_arg, fraction_arg, int_arg, length_arg, load_layout, make_console
from kvverify.errors import ConfigError

__all__ = ["add_check_parser", "cmd_check", "load_layout", "run_check"]

#: ``--json FILE``: the suffix decides (one format)
JSON_FORMATS = {".json": "JSON"}
#: a multiple of this (FlashAttention / Triton / FlashInfer kernels on CUDA: ``MultipleOf(16)``)
KERNEL_BLOCK_MULTIPLE = 16


def _outputs(args: argparse.Namespace) -> tuple[tuple[Path, str] | None, Path | None]:
    """Validate ``--plot`` and ``--json FILE`` before any work (exit 2 on a bad path)."""
    from kvverify.safefiles import UnsafeOutput, check_output

    plot = json_file = None
    try:
        if args.plot:
            path, fmt = check_output(args.plot, what="--plot", formats=PLOT_FORMATS)
            assert fmt is not None
            plot = (path, fmt)
        if args.json not in (None, "-"):
            json_file, _ = check_output(args.json, what="--json", formats=JSON_FORMATS)
            if plot is not None and plot[0].resolve() == json_file.resolve():
                raise UnsafeOutput(f"--json {args.json}: the same file as --plot")
    except UnsafeOutput:
        raise  # a KVVerifyError: exit 2, its message names the flag and the path
    return plot, json_file


def cmd_check(args: argparse.Namespace) -> int:
    if args.engine == "sglang":
        from kvverify.cli.sglang_check import cmd_sglang_check
        return cmd_sglang_check(args)
    from kvverify.safefiles import write_text

    if args.block_size % KERNEL_BLOCK_MULTIPLE:
        raise ConfigError("block_size", args.block_size, f"must be a multiple of {KERNEL_BLOCK_MULTIPLE}: vLLM's "
                          "CUDA attention kernels (FlashAttention, FlashInfer, Triton) take no other block size")
    if args.trace and args.json is None:
        raise ConfigError("trace", True, "--trace adds each run's steps to the --json output: give --json too")
    plot, json_file = _outputs(args)
    layout = load_layout(args.model, args.config_json)
    result = run_check(
        layout, max_model_len=args.max_model_len, block_size=args.block_size,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes, num_gpu_blocks_override=args.num_gpu_blocks_override,
        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
        gpu_memory_bytes=args.gpu_memory_bytes, gpu_memory_utilization=args.gpu_memory_utilization,
        non_kv_cache_memory_bytes=args.non_kv_cache_memory_bytes,
        enable_prefix_caching=args.enable_prefix_caching, enable_chunked_prefill=args.enable_chunked_prefill,
        mamba_cache_mode=args.mamba_cache_mode, kv_cache_dtype=args.kv_cache_dtype, enforce_eager=args.enforce_eager,
        flaw_names=args.flaw or (), target=args.target, fix_names=args.fix or (),
        record_trace=bool(plot or args.trace))
    traces = result.get("trace")
    if not args.trace:
        result.pop("trace", None)
    text = json.dumps(result, indent=2) + "\n" if args.json is not None else None
    if args.json == "-":
        sys.stdout.write(text or "")
    else:
        print_check(result, make_console())
    if json_file is not None and text is not None:
        write_text(json_file, text, what="--json")
        print(f"wrote the check's JSON to {json_file}", file=sys.stderr)
    if plot is not None:
        if traces is not None:
            result["trace"] = traces
        if result.get("trace"):
            write_check_plot(result, plot[0], plot[1])
            print(f"wrote the check's {plot[1]} to {plot[0]}", file=sys.stderr)
        else:
            print(f"no picture written to {plot[0]}: no run was simulated ({result['headline']})", file=sys.stderr)
    return int(result["exit_code"])


_EPILOG = """\
the startup traps it predicts (each a table line, a JSON entry under "traps", and the verdict):
  Mamba state slots vs max_num_seqs (#38270, #49064): with CUDA graphs, a model with Mamba
    layers refuses to start when max_num_seqs > num_blocks; unless given, max_num_seqs is
    vllm serve's default for the GPU (1024 from 70 GiB, else 256):
      kvverify check --model qwen3-next-80b-a3b --max-model-len 262144 --gpu-memory-bytes 80GiB \\
                     --non-kv-cache-memory-bytes 65GiB     # REFUSED: 1024 > 690 blocks
  token budget with chunked prefill off (#55130): every prompt up to max_model_len must fit
    max_num_batched_tokens in one step; vLLM refuses at startup, or (turned off late, by the
    engine core) starts and lets longer prompts wait forever:
      kvverify check --model llama-3.1-8b --max-model-len 8192 --kv-cache-memory-bytes 8GiB \\
                     --no-enable-chunked-prefill --max-num-batched-tokens 4096   # REFUSED
  multimodal largest item vs the encoder budget (#26223 -> #33110): a bidirectional (prefix-LM)
    model on CUDA needs its largest item within max_num_batched_tokens:
      kvverify check --model gemma-3-27b --max-model-len 8192 --kv-cache-memory-bytes 8GiB \\
                     --max-num-batched-tokens 128                # REFUSED: image item 256 tokens
  max_model_len above the model's derived length (rope_scaling, max_position_embeddings, ...)
    is refused as vLLM does, unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set:
      kvverify check --model mistral-7b-v0.1 --max-model-len 65536 --kv-cache-memory-bytes 20GiB

examples:
  kvverify check --model llama-3.1-8b --kv-cache-memory-bytes 20GiB
  kvverify check --config-json config.json --max-model-len auto --kv-cache-memory-bytes 8GiB --json
  kvverify check --model llama-3.1-8b --max-model-len 512 --num-gpu-blocks-override 32 \\
                 --flaw null_block_not_reserved --plot seed-hang.svg
"""


def add_check_parser(sub: Any, flaw_choices: list[str]) -> argparse.ArgumentParser:
    """Register ``check`` on the ``kvverify`` subparsers."""
    c = sub.add_parser("check", formatter_class=Formatter, help="will this model + memory + max_model_len "
                       "start, and can a full-length request really finish?",
                       description="The operator's linter. Derives max_model_len as vLLM does, plans the KV "
                       "cache like vLLM's startup, runs the startup checks and the traps below, then runs one "
                       "max_model_len request alone on the runtime pool (N - 1 usable blocks) with the "
                       "reference scheduler, at any length (the runs advance by events).\nExit 0: starts and "
                       "servable; 1: refused, starts but would hang, or undecided; 2: bad input.",
                       epilog=_EPILOG)
    c.add_argument("--engine", choices=("vllm", "sglang"), default="vllm",
                   help="sglang: SGLang's startup and admission (kvverify/cli/sglang_check.py)")
    src = c.add_argument_group("model (one of)").add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="NAME", help="a catalog model (see `kvverify models`)")
    src.add_argument("--config-json", metavar="PATH", help="a Hugging Face config.json (or its directory)")
    eng = c.add_argument_group("engine flags (as vLLM's)")
    eng.add_argument("--max-model-len", type=length_arg, metavar="L|auto",
                     help="an integer >= 2, or auto (fit the memory, up to the derived length); default: the "
                          "length vLLM derives from the config (max_position_embeddings, rope_scaling, ...)")
    eng.add_argument("--block-size", type=int_arg("block_size"), default=16, metavar="B",
                     help="a multiple of 16 (16)")
    eng.add_argument("--kv-cache-memory-bytes", type=bytes_arg("kv_cache_memory_bytes"), metavar="BYTES",
                     help="KV cache budget: bytes or with a unit, e.g. 20GiB, 512MiB")
    eng.add_argument("--num-gpu-blocks-override", type=int_arg("num_gpu_blocks_override"), metavar="N",
                     help="the block count (wins over memory)")
    eng.add_argument("--max-num-batched-tokens", type=int_arg("max_num_batched_tokens"), default=None,
                     metavar="T", help="token budget per step (vLLM's default: 2048; raised as vLLM raises it)")
    eng.add_argument("--max-num-seqs", type=int_arg("max_num_seqs"), default=None, metavar="S",
                     help="(runs: 128; the Mamba trap: vllm serve's default for the GPU)")
    eng.add_argument("--gpu-memory-bytes", type=bytes_arg("gpu_memory_bytes"), metavar="BYTES",
                     help="profiled source: the GPU's memory, e.g. 80GiB (with --non-kv-cache-memory-bytes)")
    eng.add_argument("--gpu-memory-utilization", type=fraction_arg, default=None, metavar="U",
                     help="profiled source: fraction of the GPU vLLM may use (0.92, as vLLM 0.33.0)")
    eng.add_argument("--non-kv-cache-memory-bytes", type=bytes_arg("non_kv_cache_memory_bytes", minimum=0),
                     metavar="BYTES", help="profiled source: weights + activations (required with "
                     "--gpu-memory-bytes; 0 allowed)")
    eng.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                     help="(on)")
    eng.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                     help="(on)")
    eng.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (the Mamba-slot check is off)")
    eng.add_argument("--mamba-cache-mode", choices=("none", "align"), default=None,
                     help="hybrid models: default align with prefix caching, else none")
    eng.add_argument("--kv-cache-dtype", default="auto", metavar="DTYPE", help="auto (model dtype), fp8, ...")
    c.add_argument("--flaw", action="append", choices=flaw_choices, metavar="NAME",
                   help="run on the reference with a bug-zoo flaw on: what the historical engine did "
                        "(see `kvverify zoo --list`); runs go step by step (max_model_len <= 4,194,304)")
    from kvverify.targets import TARGETS
    c.add_argument("--target", choices=tuple(n for n, e in TARGETS.items() if e.engine == "vllm"), default="reference",
                   help="system under test: the reference (default) or the installed, pinned vLLM "
                        "(its planner, reported concurrency and scheduler, step by step)")
    c.add_argument("--fix", action="append", metavar="NAME",
                   help="a finding's proposed fix (repeatable; `kvverify findings`): the reference runs "
                        "with the fix option, --target vllm with the finding's patch applied")
    c.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE.json",
                   help="print one JSON object (to FILE.json instead: the table is printed)")
    c.add_argument("--trace", action="store_true", help="with --json: add `trace`, each run's per-step trace "
                   "(blocks held per group, free blocks, running/waiting, preemptions, refusals)")
    c.add_argument("--plot", metavar="FILE.svg|FILE.json", help="draw each run step by step: FILE.svg a "
                   "self-contained SVG timeline, FILE.json its data (the suffix decides; nothing else)")
    c.set_defaults(func=cmd_check)
    return c
