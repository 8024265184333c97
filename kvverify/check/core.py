"""``run_check``: plan a model like vLLM's startup, run its startup checks, then judge
servability by *running* one full-length request on the runtime pool.

The result is one JSON-able dict; the table (:mod:`kvverify.check.table`), the picture
(:mod:`kvverify.check.plot`), the verdict and the exit code (:mod:`kvverify.check.verdict`)
all read it. Every step goes through a :class:`~kvverify.targets.base.Target` (``target``,
the reference by default): its planner, its reported concurrency and its scheduler.

Startup checks, in the order vLLM meets them (each ``{check, passes, message, summary}``):

* ``max_model_len``: the length verified as ``_get_and_verify_max_len`` does
  (:mod:`kvverify.catalog.lengths`; ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` honoured);
* the traps of :mod:`kvverify.check.traps` that refuse at startup (token budget with chunked
  prefill off, the multimodal encoder budget);
* ``kv_cache_memory``: the planner's memory check (``_check_enough_kv_cache_memory``);
* the Mamba state slots vs ``max_num_seqs`` (full CUDA graphs, after the KV cache is sized).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from kvverify.catalog import lengths
from kvverify.check import traps, verdict
from kvverify.check.runs import STEPWISE_MAX_TOKENS, servability
from kvverify.errors import ConfigError, KVVerifyError

if TYPE_CHECKING:
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import KVCacheSpec
    from kvverify.targets.base import Target

DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
DEFAULT_MAX_NUM_SEQS = 128
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92


def _block_source(kv_cache_memory_bytes: int | None, num_gpu_blocks_override: int | None,
                  gpu_memory_bytes: int | None, gpu_memory_utilization: float | None,
                  non_kv_cache_memory_bytes: int | None) -> str:
    """Which source sizes the pool; refuses combinations vLLM would silently resolve."""
    profiled = [n for n, v in (("--gpu-memory-bytes", gpu_memory_bytes),
                               ("--gpu-memory-utilization", gpu_memory_utilization),
                               ("--non-kv-cache-memory-bytes", non_kv_cache_memory_bytes)) if v is not None]
    if kv_cache_memory_bytes is not None and profiled:
        raise ConfigError("kv_cache_memory_bytes", kv_cache_memory_bytes,
                          f"give either --kv-cache-memory-bytes or the profiled-memory flags ({', '.join(profiled)}), "
                          "not both: vLLM ignores gpu_memory_utilization when kv_cache_memory_bytes is set")
    if profiled and gpu_memory_bytes is None:
        raise ConfigError("gpu_memory_bytes", None, f"{', '.join(profiled)} size the profiled KV cache: give the "
                          "GPU's memory too (--gpu-memory-bytes, e.g. 80GiB)")
    if gpu_memory_bytes is not None and non_kv_cache_memory_bytes is None:
        raise ConfigError("non_kv_cache_memory_bytes", None, "with --gpu-memory-bytes, give what vLLM's profiling "
                          "takes before the KV cache (weights + activations: --non-kv-cache-memory-bytes, e.g. "
                          "16GiB; 0 if you mean none)")
    if kv_cache_memory_bytes is None and num_gpu_blocks_override is None and gpu_memory_bytes is None:
        raise ConfigError("kv_cache_memory_bytes", None, "give a block source: --kv-cache-memory-bytes "
                          "(e.g. 20GiB), --num-gpu-blocks-override N, or --gpu-memory-bytes with "
                          "--non-kv-cache-memory-bytes (and --gpu-memory-utilization)")
    return ("num_gpu_blocks_override" if num_gpu_blocks_override is not None else
            "kv_cache_memory_bytes" if kv_cache_memory_bytes is not None else "profiled memory")


def run_check(layout: Any, *, max_model_len: int | str | None = None, block_size: int = 16,
              kv_cache_memory_bytes: int | None = None, num_gpu_blocks_override: int | None = None,
              max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
              gpu_memory_bytes: int | None = None, gpu_memory_utilization: float | None = None,
              non_kv_cache_memory_bytes: int | None = None, enable_prefix_caching: bool = True,
              enable_chunked_prefill: bool = True, mamba_cache_mode: str | None = None,
              kv_cache_dtype: str = "auto", enforce_eager: bool = False, flaw_names: Sequence[str] = (), target: str = "reference",
              record_trace: bool = False, fix_names: Sequence[str] = (),
              environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Check ``layout`` under vLLM's flags; see the module docstring. Bad input raises
    :class:`ConfigError` before any work (the CLI's exit 2)."""
    from kvverify import catalog, fixes
    from kvverify.cli.common import flaws_on
    from kvverify.reference.config import VllmConfig
    from kvverify.targets import get_target

    source = _block_source(kv_cache_memory_bytes, num_gpu_blocks_override, gpu_memory_bytes,
                           gpu_memory_utilization, non_kv_cache_memory_bytes)
    if flaw_names and target != "reference":
        raise ConfigError("flaw", list(flaw_names), f"bug-zoo flaws switch the reference only, not "
                          f"target {target!r}")
    lc = layout.lengths()
    derived = lengths.derive(lc)
    allow_long = lengths.allow_long_max_model_len(environ)
    requested = max_model_len
    if max_model_len == "auto":
        verified = lengths.verify(lc, -1, allow_long=allow_long)
        if verified.max_model_len == -1:
            raise ConfigError("max_model_len", "auto", f"the config of {layout.name!r} states no maximum length "
                              "(none of max_position_embeddings, n_positions, ...): vLLM keeps max_model_len -1 "
                              "and has no length to auto-fit up to; pass --max-model-len N")
        length_kw: dict[str, Any] = {"max_model_len": -1, "max_position_embeddings": verified.max_model_len}
    else:
        verified = lengths.verify(lc, None if max_model_len is None else int(max_model_len), allow_long=allow_long)
        if max_model_len is None:
            requested = verified.max_model_len
        length_kw = {"max_model_len": verified.max_model_len}
    if verified.max_model_len < 2:
        raise ConfigError("max_model_len", verified.max_model_len, "must be >= 2: a request needs one prompt "
                          "token and one output token")
    stepwise = bool(flaw_names) or target != "reference"
    if stepwise and length_kw.get("max_position_embeddings", length_kw["max_model_len"]) > STEPWISE_MAX_TOKENS:
        why = "a bug-zoo flaw" if flaw_names else f"target {target!r}"
        raise ConfigError("max_model_len", length_kw.get("max_position_embeddings", length_kw["max_model_len"]),
                          f"must be at most {STEPWISE_MAX_TOKENS:,} with {why}: its runs go step by step")
    seqs = DEFAULT_MAX_NUM_SEQS if max_num_seqs is None else max_num_seqs
    budget = _budget(layout, max_num_batched_tokens, enable_chunked_prefill, seqs,
                     length_kw.get("max_position_embeddings", length_kw["max_model_len"]))
    if mamba_cache_mode is None:
        # MambaModelConfig.verify_and_update_config: prefix caching <=> align mode
        mamba_cache_mode = "align" if (layout.has_mamba and enable_prefix_caching) else "none"
    notes: list[str] = []
    if verified.warning:
        notes.append(verified.warning)
    if lengths.unscaled_note(derived) and (verified.refusal or verified.warning or requested is None):
        notes.append(str(lengths.unscaled_note(derived)))
    fix_names = list(fix_names)
    if fix_names and target == "vllm":  # the findings' patches, before vLLM is imported
        from kvverify.targets import overlay
        overlay.activate(fix_names)
    tgt = get_target(target)
    with flaws_on(flaw_names), fixes.enabled(*fix_names):
        config = VllmConfig(block_size=block_size, max_num_batched_tokens=budget, max_num_seqs=seqs,
                            num_gpu_blocks_override=num_gpu_blocks_override,
                            kv_cache_memory_bytes=kv_cache_memory_bytes, gpu_memory_bytes=gpu_memory_bytes,
                            gpu_memory_utilization=(DEFAULT_GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None
                                                    else gpu_memory_utilization),
                            non_kv_cache_memory_bytes=non_kv_cache_memory_bytes or 0,
                            enable_prefix_caching=enable_prefix_caching, mamba_cache_mode=mamba_cache_mode,
                            **length_kw)
        built = catalog.build_model(layout, config, kv_cache_dtype=kv_cache_dtype)
        plan = tgt.plan(built.vllm_config, [built.layer_specs])
        if built.vllm_config.block_size != block_size:
            notes.append(f"block_size raised from {block_size} to {built.vllm_config.block_size}: the "
                         "attention page must hold the Mamba state (upstream _align_hybrid_block_size)")
        trap_results = traps.predict(layout, plan, enable_chunked_prefill=enable_chunked_prefill,
                                     budget_given=max_num_batched_tokens is not None,
                                     seqs_given=max_num_seqs is not None, gpu_memory_bytes=gpu_memory_bytes,
                                     enforce_eager=enforce_eager)
        checks = _startup_checks(verified, plan, trap_results)
        runs = None
        blocked = verified.refusal is not None or any(t.refuses_before_planning or t.hangs for t in trap_results)
        if not blocked and plan.num_blocks >= 1:
            runs = servability(tgt, plan, events=not stepwise, record_trace=record_trace)
            notes.extend(runs.notes)
        elif plan.num_blocks < 1:
            notes.append(f"no run: the pool has no block at all (the memory left for the KV cache is "
                         f"{plan.available_memory[0]:,} bytes)")
        concurrency = tgt.max_concurrency(plan) if plan.num_blocks >= 1 else 0.0
    notes.extend(t.note for t in trap_results if t.note)
    suggested = None
    starts = all(c["passes"] for c in checks)
    servable = runs.servable if runs is not None else (False if any(t.hangs for t in trap_results) else None)
    other_refusal = any(not c["passes"] and c["check"] not in ("kv_cache_memory", "max_model_len") for c in checks)
    if not (starts and servable) and not other_refusal and plan.num_blocks >= 1:
        upper = derived.default if verified.refusal is not None else min(derived.default, verified.max_model_len)
        with fixes.enabled(*fix_names):  # what the target's auto-fit picks (never with a flaw on)
            suggested = _suggest_length(tgt, built.vllm_config, built.layer_specs, upper)
    result = _result(layout, tgt, plan, flaw_names, fix_names, checks, runs, requested, derived, source,
                     concurrency, suggested, notes, kv_cache_dtype, trap_results, enable_chunked_prefill)
    result["headline"] = verdict.headline(result)
    result["verdict"] = verdict.verdict(result)
    result["exit_code"] = verdict.exit_code(result)
    if record_trace:  # per split: the step-by-step trace (kvverify.reference.steptrace) and the startup bound
        result["trace"] = [{"split": run["split"], "bound": plan.blocks_needed_per_request, **run.pop("trace")}
                           for run in result["servable_runs"] if "trace" in run]
    return result


def _budget(layout: Any, given: int | None, chunked_prefill: bool, max_num_seqs: int, length: int) -> int:
    """``max_num_batched_tokens`` as ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``
    sets it when not given: the default, raised to ``max_model_len`` with chunked prefill off and
    to the largest multimodal item for a prefix-LM, capped at ``max_num_seqs * max_model_len``."""
    if given is not None:
        return given
    budget = DEFAULT_MAX_NUM_BATCHED_TOKENS
    if not chunked_prefill:
        budget = max(length, budget)
    mm = getattr(layout, "multimodal", None)
    if mm is not None and mm.mm_prefix_lm:
        budget = max(budget, mm.largest_item[1])
    return min(max_num_seqs * length, budget)


def _startup_checks(verified: lengths.VerifiedLength, plan: Any, trap_results: Sequence[traps.Trap]) -> list[dict[str, Any]]:
    checks = [{"check": "max_model_len", "passes": verified.refusal is None, "message": verified.refusal,
               "summary": verified.refusal}]
    checks += [t.as_check() for t in trap_results if t.stage == "before_kv_cache"]
    summary = None
    if not plan.starts:
        summary = (f"the pool has no usable block" if plan.num_blocks < 2 else
                   f"a request of {verdict.plural(plan.vllm_config.max_model_len, 'token')} needs "
                   f"{plan.blocks_needed_per_request:,} blocks, {max(plan.usable_blocks, 0):,} are usable")
    checks.append({"check": "kv_cache_memory", "passes": bool(plan.starts), "message": plan.error, "summary": summary})
    checks += [t.as_check() for t in trap_results if t.stage == "after_kv_cache"]
    return checks


def _result(layout: Any, tgt: Target, plan: Any, flaw_names: Sequence[str], fix_names: list[str],
            checks: list[dict[str, Any]], runs: Any, requested: Any, derived: lengths.DerivedLength, source: str,
            concurrency: float, suggested: int | None, notes: list[str], kv_cache_dtype: str,
            trap_results: Sequence[traps.Trap], chunked_prefill: bool) -> dict[str, Any]:
    groups = []
    for g, blocks in zip(plan.groups, plan.blocks_per_group):
        spec = g.kv_cache_spec
        kinds = sorted({s.kind for s in _member_specs(spec)})
        groups.append({"kind": "+".join(kinds), "layers": len(g.layer_names), "block_size": spec.block_size,
                       "blocks_per_request": blocks})
    starts = all(c["passes"] for c in checks)
    failing = next((c for c in checks if not c["passes"]), None)
    return {
        "model": layout.name,
        "source": layout.source or None,
        "layers": layout.kind_counts(),
        "target": tgt.name,
        "flaws": list(flaw_names),
        "fixes": fix_names,
        "starts": starts,
        "servable": runs.servable if runs is not None else (False if any(t.hangs for t in trap_results) else None),
        "startup_checks": checks,
        "num_blocks": plan.num_blocks,
        "usable_blocks": max(plan.usable_blocks, 0),
        "blocks_needed_per_request": plan.blocks_needed_per_request,
        "blocks_per_group": list(plan.blocks_per_group),
        "groups": groups,
        "max_model_len": plan.vllm_config.max_model_len,
        "max_model_len_requested": requested,
        "derived_max_model_len": {"value": int(derived.value) if derived.value == int(derived.value) else derived.value,
                                  "key": derived.key, "rope_scaling_factor": derived.scaling_factor,
                                  "default": derived.default, "assumed": derived.assumed},
        "auto_fit_max_model_len": plan.auto_fit_max_model_len,
        "max_position_embeddings": layout.max_position_embeddings,
        "block_size": plan.vllm_config.block_size,
        "block_source": source,
        "available_kv_cache_memory_bytes": plan.available_memory[0],
        "bytes_per_block": plan.bytes_per_block,
        "kv_cache_dtype": kv_cache_dtype,
        "kv_cache_dtype_resolved": layout.kv_cache_dtype(kv_cache_dtype) if layout.has_attention else None,
        "max_num_batched_tokens": plan.vllm_config.max_num_batched_tokens,
        "max_num_seqs": plan.vllm_config.max_num_seqs,
        "enable_chunked_prefill": chunked_prefill,
        "max_concurrency": round(concurrency, 4) if math.isfinite(concurrency) else None,
        "concurrent_full_requests": (max(plan.usable_blocks, 0) // plan.blocks_needed_per_request
                                     if plan.blocks_needed_per_request else None),
        "error": failing["message"] if failing is not None else None,
        "servable_runs": list(runs.runs) if runs is not None else [],
        "traps": [t.to_json() for t in trap_results],
        "suggested_max_model_len": suggested if not starts or (runs is not None and runs.servable is not True) else None,
        "notes": notes,
    }


def _member_specs(spec: Any) -> list[Any]:
    members = getattr(spec, "kv_cache_specs", None)
    if members:
        return [s for _, s in members]
    return [spec]


def _suggest_length(tgt: Target, config: VllmConfig, specs: Mapping[str, KVCacheSpec], upper: int) -> int | None:
    """The auto-fit length (what ``--max-model-len auto`` would choose) at this budget."""
    cfg = dataclasses.replace(config, max_model_len=-1, max_position_embeddings=max(2, upper))
    try:
        plan = tgt.plan(cfg, [specs])
    except KVVerifyError:
        return None
    fit = plan.auto_fit_max_model_len if plan.starts else None
    return fit if fit is not None and fit >= 2 else None
