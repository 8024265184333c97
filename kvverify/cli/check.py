"""``kvverify check``: the operator's linter.

Plans the KV cache like vLLM's startup, runs the startup check, then judges servability by
*running* one max_model_len request alone on the runtime pool (N - 1 usable blocks), a
prompt-heavy and a decode-heavy split, never by the check's own formula. Every step goes
through a :class:`~kvverify.targets.base.Target` (``--target``, the reference by default):
its planner, its reported concurrency and its scheduler.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from kvverify.cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    Formatter,
    bytes_arg,
    esc,
    flaws_on,
    fraction_arg,
    human_bytes,
    int_arg,
    length_arg,
    load_layout,
    make_console,
)
from kvverify.errors import ConfigError, KVVerifyError

if TYPE_CHECKING:
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.planner import StartupPlan
    from kvverify.reference.specs import KVCacheSpec
    from kvverify.targets.base import Target

#: above this many blocks, a servability run uses a pool of this many (a request alone never
#: touches more than its own blocks; building millions of free-list entries only costs time)
MAX_RUN_BLOCKS = 2_000_000
#: a decode-heavy split decodes every token up to this length (~20 us per simulated step:
#: 262,144 tokens take ~5 s), and only this many output tokens beyond it
FULL_DECODE_LIMIT = 262_144
DECODE_CAP = 4_096
SECONDS_PER_STEP = 20e-6


def run_check(layout: Any, *, max_model_len: int | str | None = None, block_size: int = 16,
              kv_cache_memory_bytes: int | None = None, num_gpu_blocks_override: int | None = None,
              max_num_batched_tokens: int = 2048, max_num_seqs: int = 128,
              gpu_memory_bytes: int | None = None, gpu_memory_utilization: float = 0.92,
              non_kv_cache_memory_bytes: int = 0, enable_prefix_caching: bool = True,
              mamba_cache_mode: str | None = None, kv_cache_dtype: str = "auto",
              flaw_names: Sequence[str] = (), target: str = "reference",
              record_trace: bool = False, fix_names: Sequence[str] = ()) -> dict[str, Any]:
    """Plan ``layout`` like vLLM's startup does, then run a max_model_len request on the pool.

    ``starts`` is the startup check's verdict; ``servable`` is judged by running one
    request of ``prompt + outputs = max_model_len`` alone on the runtime pool (N - 1
    usable blocks) with the target's scheduler — never by the check's own formula.
    ``target`` names the system under test (:func:`kvverify.targets.get_target`); a flaw
    applies to the reference only.
    """
    from kvverify import catalog
    from kvverify.reference.config import VllmConfig
    from kvverify.targets import get_target

    notes: list[str] = []
    requested = max_model_len
    max_pos = layout.max_position_embeddings
    if max_model_len is None:
        if max_pos is None:
            raise ConfigError("max_model_len", None, f"the model {layout.name!r} does not state "
                              "max_position_embeddings: pass --max-model-len N (or auto)")
        max_model_len, requested = max_pos, max_pos
    length_kw: dict[str, Any]
    if max_model_len == "auto":
        if max_pos is None:
            raise ConfigError("max_model_len", "auto", f"auto needs the model's max_position_embeddings, "
                              f"which {layout.name!r} does not state: pass --max-model-len N")
        length_kw = {"max_model_len": -1, "max_position_embeddings": max_pos}
    else:
        length_kw = {"max_model_len": int(max_model_len)}
        if max_pos is not None and int(max_model_len) > max_pos:
            notes.append(f"max_model_len {max_model_len} exceeds the model's max_position_embeddings "
                         f"({max_pos}); vLLM refuses that unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    if kv_cache_memory_bytes is None and num_gpu_blocks_override is None and gpu_memory_bytes is None:
        raise ConfigError("kv_cache_memory_bytes", None, "give a block source: --kv-cache-memory-bytes "
                          "(e.g. 20GiB), --num-gpu-blocks-override N, or --gpu-memory-bytes "
                          "(with --gpu-memory-utilization)")
    if mamba_cache_mode is None:
        # MambaModelConfig.verify_and_update_config: prefix caching <=> align mode
        mamba_cache_mode = "align" if (layout.has_mamba and enable_prefix_caching) else "none"
    source = ("num_gpu_blocks_override" if num_gpu_blocks_override is not None else
              "kv_cache_memory_bytes" if kv_cache_memory_bytes is not None else "profiled memory")
    if flaw_names and target != "reference":
        raise ConfigError("flaw", list(flaw_names), f"bug-zoo flaws switch the reference only, not "
                          f"target {target!r}")
    from kvverify import fixes
    fix_names = list(fix_names)
    if fix_names and target == "vllm":  # the findings' patches, before vLLM is imported
        from kvverify.targets import overlay
        overlay.activate(fix_names)
    tgt = get_target(target)
    with flaws_on(flaw_names), fixes.enabled(*fix_names):
        config = VllmConfig(block_size=block_size, max_num_batched_tokens=max_num_batched_tokens,
                            max_num_seqs=max_num_seqs, num_gpu_blocks_override=num_gpu_blocks_override,
                            kv_cache_memory_bytes=kv_cache_memory_bytes, gpu_memory_bytes=gpu_memory_bytes,
                            gpu_memory_utilization=gpu_memory_utilization,
                            non_kv_cache_memory_bytes=non_kv_cache_memory_bytes,
                            enable_prefix_caching=enable_prefix_caching, mamba_cache_mode=mamba_cache_mode,
                            **length_kw)
        built = catalog.build_model(layout, config, kv_cache_dtype=kv_cache_dtype)
        plan = tgt.plan(built.vllm_config, [built.layer_specs])
        if built.vllm_config.block_size != block_size:
            notes.append(f"block_size raised from {block_size} to {built.vllm_config.block_size}: the "
                         "attention page must hold the Mamba state (upstream _align_hybrid_block_size)")
        servable, runs, run_note = _servability(tgt, plan, record_trace=record_trace)
        if run_note:
            notes.append(run_note)
        concurrency = tgt.max_concurrency(plan)
    suggested = None
    if not (plan.starts and servable) and max_pos is not None:
        # what the target's auto-fit picks (never computed with a flaw on)
        with fixes.enabled(*fix_names):
            suggested = _suggest_length(tgt, built.vllm_config, built.layer_specs, max_pos,
                                        requested if isinstance(requested, int) else max_pos)
    groups = []
    for g, blocks in zip(plan.groups, plan.blocks_per_group):
        spec = g.kv_cache_spec
        kinds = sorted({s.kind for s in _member_specs(spec)})
        groups.append({"kind": "+".join(kinds), "layers": len(g.layer_names), "block_size": spec.block_size,
                       "blocks_per_request": blocks})
    result: dict[str, Any] = {
        "model": layout.name,
        "source": layout.source or None,
        "layers": layout.kind_counts(),
        "target": tgt.name,
        "flaws": list(flaw_names),
        "fixes": fix_names,
        "starts": plan.starts,
        "servable": servable,
        "num_blocks": plan.num_blocks,
        "usable_blocks": plan.usable_blocks,
        "blocks_needed_per_request": plan.blocks_needed_per_request,
        "blocks_per_group": list(plan.blocks_per_group),
        "groups": groups,
        "max_model_len": plan.vllm_config.max_model_len,
        "max_model_len_requested": requested,
        "auto_fit_max_model_len": plan.auto_fit_max_model_len,
        "max_position_embeddings": max_pos,
        "block_size": plan.vllm_config.block_size,
        "block_source": source,
        "available_kv_cache_memory_bytes": plan.available_memory[0],
        "bytes_per_block": plan.bytes_per_block,
        "max_concurrency": round(concurrency, 4) if math.isfinite(concurrency) else None,
        "concurrent_full_requests": (plan.usable_blocks // plan.blocks_needed_per_request
                                     if plan.blocks_needed_per_request else None),
        "error": plan.error,
        "servable_runs": runs,
        "suggested_max_model_len": suggested,
        "notes": notes,
    }
    result["verdict"] = _verdict(result)
    if record_trace:  # per split: the step-by-step trace (kvverify.reference.steptrace) and the startup bound
        result["trace"] = [{"split": run["split"], "bound": plan.blocks_needed_per_request, **run.pop("trace")}
                           for run in runs if "trace" in run]
    return result


def _member_specs(spec: Any) -> list[Any]:
    members = getattr(spec, "kv_cache_specs", None)
    if members:
        return [s for _, s in members]
    return [spec]


def _servability(tgt: Target, plan: StartupPlan,
                 record_trace: bool = False) -> tuple[bool, list[dict[str, Any]], str | None]:
    """Run a max_model_len request alone on the plan's pool: prompt-heavy, then decode-heavy
    (``record_trace``: each run's :class:`~kvverify.reference.steptrace.StepTrace` under ``"trace"``)."""
    from kvverify.reference.planner import get_kv_cache_config_from_groups
    from kvverify.reference.workloads import full_length_request
    from kvverify.reference.steptrace import StepRecorder

    length = plan.vllm_config.max_model_len
    if length < 2:
        return False, [], "max_model_len < 2: no request (prompt >= 1 token, >= 1 output) fits"
    notes = []
    run_plan = plan
    if plan.num_blocks > MAX_RUN_BLOCKS and plan.blocks_needed_per_request + 1 < MAX_RUN_BLOCKS:
        smaller = get_kv_cache_config_from_groups(plan.kv_cache_config.kv_cache_groups, MAX_RUN_BLOCKS)
        run_plan = dataclasses.replace(plan, kv_cache_configs=(smaller,) * len(plan.kv_cache_configs))
        notes.append(f"the runs used a pool of {MAX_RUN_BLOCKS:,} blocks instead of {plan.num_blocks:,} "
                     f"(a request alone holds at most {plan.blocks_needed_per_request:,})")
    decode = length - 1 if length <= FULL_DECODE_LIMIT else DECODE_CAP
    if decode != length - 1:
        notes.append(f"decode-heavy split capped at {DECODE_CAP:,} output tokens (a {length - 1:,}-token "
                     f"decode would take ~{(length - 1) * SECONDS_PER_STEP:.0f} s to simulate); the "
                     f"prompt-heavy split runs all {length:,} tokens through chunked prefill and the "
                     "admission gate")
    splits = [("prompt-heavy", 1)] + ([("decode-heavy", decode)] if decode != 1 else [])
    runs = []
    for label, outputs in splits:
        t0 = time.perf_counter()
        recorder = StepRecorder() if record_trace else None
        result = tgt.run_workload(run_plan, [full_length_request(length, outputs)], keep_trace=False,
                                  recorder=recorder)
        runs.append({"split": label, "prompt_tokens": length - outputs, "output_tokens": outputs,
                     "completed": result.completed, "steps": result.steps, "stall": result.stall_reason,
                     "error": result.error, "running": result.running, "waiting": result.waiting,
                     "seconds": round(time.perf_counter() - t0, 3)})
        if recorder is not None and recorder.result is not None:
            runs[-1]["trace"] = recorder.result.to_json()
        if not result.completed:
            break  # one failing split settles it
    return all(r["completed"] for r in runs), runs, "; ".join(notes) or None


def _suggest_length(tgt: Target, config: VllmConfig, specs: Mapping[str, KVCacheSpec], max_pos: int,
                    upper: int) -> int | None:
    """The auto-fit length (what ``--max-model-len auto`` would choose) at this budget."""
    cfg = dataclasses.replace(config, max_model_len=-1, max_position_embeddings=max(2, min(max_pos, upper)))
    try:
        plan = tgt.plan(cfg, [specs])
    except KVVerifyError:
        return None
    return plan.auto_fit_max_model_len if plan.starts else None


def _verdict(r: dict[str, Any]) -> str:
    L = r["max_model_len"]
    if r["starts"] and r["servable"]:
        conc = r["max_concurrency"]
        return (f"OK: starts, and a request of {L:,} tokens completes on the {r['usable_blocks']:,} usable "
                f"blocks ({r['blocks_needed_per_request']:,} needed; vLLM would log "
                f"{conc:.2f}x concurrency)." if conc is not None else f"OK: starts and serves {L:,} tokens.")
    stall = next((run for run in r["servable_runs"] if not run["completed"]), None)
    why = ""
    if stall is not None:
        why = (f" ({stall['split']}: {stall['stall'] or stall['error']}, running={stall['running']}, "
               f"waiting={stall['waiting']})")
    hint = f" Largest length that fits: --max-model-len {r['suggested_max_model_len']}." \
        if r.get("suggested_max_model_len") else ""
    if r["starts"]:
        return (f"HANG: the startup check passes, but a request of {L:,} tokens never completes{why} — "
                f"{r['blocks_needed_per_request']:,} blocks needed, {r['usable_blocks']:,} usable "
                f"(block 0 is the null block). Users would see 0 tok/s.{hint}")
    if r["servable"]:
        return (f"REFUSED, needlessly: vLLM would not start ({_first_sentence(r['error'])}), yet a request "
                f"of {L:,} tokens completes on this pool.{hint}")
    return (f"REFUSED: vLLM would not start: a request of {L:,} tokens needs "
            f"{r['blocks_needed_per_request']:,} blocks, {r['usable_blocks']:,} are usable.{hint}")


def _runs(items: Any) -> list[tuple[Any, int]]:
    """Run-length encoding: [(item, count), ...] of consecutive equal items."""
    out: list[tuple[Any, int]] = []
    for item in items:
        if out and out[-1][0] == item:
            out[-1] = (item, out[-1][1] + 1)
        else:
            out.append((item, 1))
    return out


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _first_sentence(text: str | None) -> str:
    if not text:
        return "startup check failed"
    return text.split(". ")[0].rstrip(".")


def print_check(r: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    title = f"kvverify check — {r['model']}"
    if r["flaws"]:
        title += f"  [red](flaw {', '.join(r['flaws'])} on)[/red]"
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("", style="bold")
    t.add_column("")
    layers = ", ".join(f"{n} {k}" for k, n in r["layers"].items())
    t.add_row("layers", layers)
    req = r["max_model_len_requested"]
    length = f"{r['max_model_len']:,}"
    if req == "auto":
        length += f"  (auto-fit, up to {r['max_position_embeddings']:,})"
    t.add_row("max_model_len", length)
    t.add_row("block_size", str(r["block_size"]))
    t.add_row("block source", f"{r['block_source']}: {human_bytes(r['available_kv_cache_memory_bytes'])}"
              if r["block_source"] != "num_gpu_blocks_override" else r["block_source"])
    t.add_row("bytes per block", f"{r['bytes_per_block']:,} ({human_bytes(r['bytes_per_block'])})")
    t.add_row("num_blocks", f"{r['num_blocks']:,}  (block 0 is the null block)")
    t.add_row("usable blocks", f"{r['usable_blocks']:,}")
    per_group = " + ".join(f"{n} x {blocks:,} {kind}" if n > 1 else f"{blocks:,} {kind}"
                           for (kind, blocks), n in _runs((g["kind"], g["blocks_per_request"]) for g in r["groups"]))
    t.add_row("blocks per request", f"{r['blocks_needed_per_request']:,}" +
              (f"  = {per_group}" if len(r["groups"]) > 1 else f"  ({r['groups'][0]['kind']})"
               if r["groups"] else ""))
    t.add_row("startup check", "[green]passes[/green]" if r["starts"] else
              f"[red]refuses[/red]: {esc(_first_sentence(r['error']))}")
    for run in r["servable_runs"]:
        status = "[green]completes[/green]" if run["completed"] else \
            f"[red]never completes[/red] ({run['stall'] or run['error']})"
        t.add_row(f"{run['split']} run", f"{status}: {run['prompt_tokens']:,} prompt + "
                  f"{run['output_tokens']:,} output tokens, {_plural(run['steps'], 'step')}")
    if r["max_concurrency"] is not None:
        t.add_row("max concurrency", f"{r['max_concurrency']:.2f}x as vLLM logs it (N / needed); "
                  f"{_plural(r['concurrent_full_requests'], 'full-length request')} "
                  f"fit{'s' if r['concurrent_full_requests'] == 1 else ''} at once")
    if r["auto_fit_max_model_len"] is not None:
        t.add_row("auto-fit", f"{r['auto_fit_max_model_len']:,}")
    if r.get("suggested_max_model_len"):
        t.add_row("largest length that fits", f"{r['suggested_max_model_len']:,}")
    console.print(t)
    for note in r["notes"]:
        console.print(f"[dim]note: {esc(note)}[/dim]")
    ok = r["starts"] and r["servable"]
    console.print(("[bold green]" if ok else "[bold red]") + esc(r["verdict"])
                  + ("[/bold green]" if ok else "[/bold red]"))


def write_check_plot(result: Mapping[str, Any], path: str | Path) -> Path:
    """The timeline SVG of a check's runs (``result["trace"]``), written atomically."""
    from kvverify.reports.common import atomic_write_text
    from kvverify.reports.timeline import TimelineRun, render_timeline
    from kvverify.reference.steptrace import StepTrace

    runs = [TimelineRun(f"{t['split']} run: {r['prompt_tokens']:,} prompt + {r['output_tokens']:,} output tokens",
                        StepTrace.from_json(t), t.get("bound"))
            for t, r in zip(result.get("trace") or [], result["servable_runs"])]
    if not runs:
        raise ConfigError("plot", str(path), "no run to draw: max_model_len < 2 leaves no request to run")
    flaws = f" (flaw {', '.join(result['flaws'])})" if result.get("flaws") else ""
    title = (f"kvverify check — {result['model']}{flaws}: max_model_len {result['max_model_len']:,}, "
             f"B = {result['block_size']}, {result['num_blocks']:,} blocks")
    verdict = str(result.get("verdict") or "")
    out = Path(path)
    atomic_write_text(out, render_timeline(runs, title=title, subtitle=verdict))
    return out


def cmd_check(args: argparse.Namespace) -> int:
    if getattr(args, "engine", "vllm") == "sglang":
        from kvverify.cli.sglang_check import cmd_sglang_check
        return cmd_sglang_check(args)
    layout = load_layout(args.model, args.config_json)
    result = run_check(
        layout, max_model_len=args.max_model_len, block_size=args.block_size,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes, num_gpu_blocks_override=args.num_gpu_blocks_override,
        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
        gpu_memory_bytes=args.gpu_memory_bytes, gpu_memory_utilization=args.gpu_memory_utilization,
        non_kv_cache_memory_bytes=args.non_kv_cache_memory_bytes or 0,
        enable_prefix_caching=args.enable_prefix_caching, mamba_cache_mode=args.mamba_cache_mode,
        kv_cache_dtype=args.kv_cache_dtype, flaw_names=args.flaw or (), target=args.target,
        fix_names=args.fix or (),
        record_trace=bool(args.plot or args.trace))
    if args.plot:
        write_check_plot(result, args.plot)
    if not args.trace:
        result.pop("trace", None)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_check(result, make_console())
    return EXIT_OK if result["starts"] and result["servable"] else EXIT_FAIL


def add_check_parser(sub: Any, flaw_choices: list[str]) -> argparse.ArgumentParser:
    """Register ``check`` on the ``kvverify`` subparsers."""
    c = sub.add_parser("check", formatter_class=Formatter, help="will this model + memory + max_model_len "
                       "start, and can a full-length request really finish?",
                       description="The operator's linter. Plans the KV cache like vLLM's startup, runs the "
                       "startup check, then runs one max_model_len request alone on the runtime pool "
                       "(N - 1 usable blocks) with the reference scheduler.\nExit 0: starts and servable; "
                       "1: refused, or starts but would hang; 2: bad input.",
                       epilog="examples:\n  kvverify check --model llama-3.1-8b --kv-cache-memory-bytes 20GiB\n"
                              "  kvverify check --config-json config.json --max-model-len auto "
                              "--kv-cache-memory-bytes 8GiB --json")
    c.add_argument("--engine", choices=("vllm", "sglang"), default="vllm",
                   help="sglang: SGLang's startup and admission (kvverify/cli/sglang_check.py)")
    src = c.add_argument_group("model (one of)").add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="NAME", help="a catalog model (see `kvverify models`)")
    src.add_argument("--config-json", metavar="PATH", help="a Hugging Face config.json (or its directory)")
    eng = c.add_argument_group("engine flags (as vLLM's)")
    eng.add_argument("--max-model-len", type=length_arg, metavar="L|auto",
                     help="an integer, or auto (fit the memory, up to the model's length); "
                          "default: the model's max_position_embeddings")
    eng.add_argument("--block-size", type=int_arg("block_size"), default=16, metavar="B", help="(16)")
    eng.add_argument("--kv-cache-memory-bytes", type=bytes_arg("kv_cache_memory_bytes"), metavar="BYTES",
                     help="KV cache budget: bytes or with a unit, e.g. 20GiB, 512MiB")
    eng.add_argument("--num-gpu-blocks-override", type=int_arg("num_gpu_blocks_override"), metavar="N",
                     help="the block count (wins over memory)")
    eng.add_argument("--max-num-batched-tokens", type=int_arg("max_num_batched_tokens"), default=2048,
                     metavar="T", help="token budget per step (2048)")
    eng.add_argument("--max-num-seqs", type=int_arg("max_num_seqs"), default=128, metavar="S", help="(128, as vLLM)")
    eng.add_argument("--gpu-memory-bytes", type=bytes_arg("gpu_memory_bytes"), metavar="BYTES",
                     help="profiled source: the GPU's memory, e.g. 80GiB")
    eng.add_argument("--gpu-memory-utilization", type=fraction_arg, default=0.92, metavar="U",
                     help="profiled source: fraction of the GPU vLLM may use (0.92, as vLLM 0.33.0)")
    eng.add_argument("--non-kv-cache-memory-bytes", type=bytes_arg("non_kv_cache_memory_bytes"),
                     metavar="BYTES", help="profiled source: weights + activations (0)")
    eng.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                     help="(on)")
    eng.add_argument("--mamba-cache-mode", choices=("none", "align"), default=None,
                     help="hybrid models: default align with prefix caching, else none")
    eng.add_argument("--kv-cache-dtype", default="auto", metavar="DTYPE", help="auto (model dtype), fp8, ...")
    c.add_argument("--flaw", action="append", choices=flaw_choices, metavar="NAME",
                   help="run on the reference with a bug-zoo flaw on: what the historical engine did "
                        "(see `kvverify zoo --list`)")
    from kvverify.targets import TARGETS
    c.add_argument("--target", choices=tuple(TARGETS), default="reference",
                   help="system under test: the reference (default) or the installed, pinned vLLM "
                        "(its planner, reported concurrency and scheduler)")
    c.add_argument("--fix", action="append", metavar="NAME",
                   help="a finding's proposed fix (repeatable; `kvverify findings`): the reference runs "
                        "with the fix option, --target vllm with the finding's patch applied")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.add_argument("--trace", action="store_true", help="with --json: add `trace`, each run's per-step trace "
                   "(blocks held per group, free blocks, running/waiting, preemptions, refusals)")
    c.add_argument("--plot", metavar="FILE.svg", help="draw each run step by step as a self-contained SVG "
                   "timeline (blocks held, free, usable N - 1, the startup bound, running/waiting)")
    c.set_defaults(func=cmd_check)
    return c
