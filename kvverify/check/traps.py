"""This year's startup traps, as predictions: what vLLM 0.33.0 does with this deployment.

* **Mamba state slots vs ``max_num_seqs``** (#38270, #49064, #55148): with full CUDA graphs
  (the CUDA default, ``FULL_AND_PIECEWISE``; not with ``--enforce-eager``) a model with Mamba
  layers refuses to start when ``max_num_seqs > num_blocks``
  (``CompilationConfig.resolve_cudagraph_mode_and_sizes``, after the KV cache is sized). Unless
  given, ``max_num_seqs`` is ``vllm serve``'s default for the GPU (``EngineArgs.get_batch_defaults``:
  1024 from 70 GiB, 256 below) — the default is what trips long-context hybrids.
* **Token budget with chunked prefill off** (#55130): with chunked prefill off every prompt up
  to ``max_model_len`` must fit ``max_num_batched_tokens`` in one step. ``--no-enable-chunked-prefill``
  is checked by ``SchedulerConfig.verify_max_model_len`` (refused at startup; without an explicit
  budget vLLM raises it to ``max_model_len``). An encoder-decoder model turns chunked prefill off
  before that check. The engine core turns it off *later* (non-causal attention layers, a model
  without KV cache groups) and 0.33.0 does not check again: such an engine starts, and a prompt
  longer than the budget waits forever (#55130 re-runs the check there).
* **Multimodal largest item vs the encoder cache** (#26223 -> #33110): the encoder cache and its
  compute budget are ``max(budget, largest item)`` (``compute_mm_encoder_budget``), so the
  profiled largest item always fits; a request whose item is larger than that is refused with
  HTTP 400 since #33110 (it used to hang). A multimodal prefix-LM (Gemma 3) runs with chunked MM
  input disabled on CUDA: then the largest item must fit ``max_num_batched_tokens``, else vLLM
  refuses to start (without an explicit budget it raises it to the item).

``properties/test_traps.py`` checks each rule on generated deployments against the real vLLM
(the functions named above), and the "started engine cannot deadlock" side on the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvverify.reference.specs import CrossAttentionSpec, EncoderOnlyAttentionSpec, MambaSpec

GIB = 1 << 30
STAGES = ("before_kv_cache", "after_kv_cache", "runtime")


@dataclass(frozen=True)
class Trap:
    """One trap's prediction. ``applies``: the deployment can meet it; ``passes``: it does not
    bite; ``stage``: where vLLM meets it (``runtime``: the engine starts, requests hang)."""

    name: str
    applies: bool
    passes: bool
    stage: str
    summary: str
    message: str | None = None
    note: str | None = None
    numbers: dict[str, Any] = field(default_factory=dict)

    @property
    def refuses_before_planning(self) -> bool:
        return self.stage == "before_kv_cache" and not self.passes

    @property
    def hangs(self) -> bool:
        return self.stage == "runtime" and not self.passes

    def as_check(self) -> dict[str, Any]:
        return {"check": self.name, "passes": self.passes, "message": self.message, "summary": self.summary}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "applies": self.applies, "passes": self.passes, "stage": self.stage,
                "summary": self.summary, "message": self.message, "numbers": dict(self.numbers)}


def serve_default_max_num_seqs(gpu_memory_bytes: int | None) -> tuple[int, str]:
    """``vllm serve``'s ``max_num_seqs`` default (``get_batch_defaults``, OpenAI server context)."""
    if gpu_memory_bytes is not None and gpu_memory_bytes >= 70 * GIB:
        return 1024, f"vllm serve's default on a GPU of {gpu_memory_bytes / GIB:.0f} GiB, not an A100"
    if gpu_memory_bytes is not None:
        return 256, f"vllm serve's default on a GPU of {gpu_memory_bytes / GIB:.0f} GiB"
    return 256, "vllm serve's default below 70 GiB; 1024 on H100/H200-class GPUs"


def mamba_state_slots(num_blocks: int, max_num_seqs: int, *, has_mamba: bool, full_cudagraphs: bool) -> bool:
    """The 0.33.0 rule: refuses iff full CUDA graphs, Mamba layers and ``max_num_seqs > num_blocks``."""
    return full_cudagraphs and has_mamba and max_num_seqs > num_blocks


def chunked_prefill_budget(max_model_len: int, max_num_batched_tokens: int, *, chunked_prefill: bool,
                           max_num_seqs: int = 1) -> bool:
    """``SchedulerConfig.verify_max_model_len``'s budget rules: refuses iff chunked prefill is off
    and ``max_num_batched_tokens < max_model_len``, or ``max_num_batched_tokens < max_num_seqs``."""
    return (not chunked_prefill and max_num_batched_tokens < max_model_len) or max_num_batched_tokens < max_num_seqs


def mm_encoder_budget(max_num_batched_tokens: int, largest_item: int, *, encoder_cache_size: int | None = None,
                      disable_chunked_mm_input: bool) -> tuple[int, int] | None:
    """``compute_mm_encoder_budget``: ``(compute budget, cache size)``, or ``None`` where it raises
    (chunked MM input disabled and the largest item above the token budget)."""
    if disable_chunked_mm_input and largest_item > max_num_batched_tokens:
        return None
    cache = max_num_batched_tokens if encoder_cache_size is None else encoder_cache_size
    return max(max_num_batched_tokens, largest_item), max(cache, largest_item)


def predict(layout: Any, plan: Any, *, enable_chunked_prefill: bool = True, budget_given: bool = True,
            seqs_given: bool = True, gpu_memory_bytes: int | None = None, enforce_eager: bool = False) -> list[Trap]:
    """Every trap's prediction for this deployment (``*_given``: the user set the flag)."""
    return [_mamba(layout, plan, seqs_given, gpu_memory_bytes, enforce_eager),
            _budget(layout, plan, enable_chunked_prefill, budget_given, seqs_given),
            _encoder(layout, plan, budget_given)]


def _mamba(layout: Any, plan: Any, seqs_given: bool, gpu_memory_bytes: int | None, enforce_eager: bool) -> Trap:
    has_mamba = any(isinstance(_behaviour(g.kv_cache_spec), MambaSpec) for g in plan.groups)
    seqs, why = plan.vllm_config.max_num_seqs, "given"
    if not seqs_given:
        seqs, why = serve_default_max_num_seqs(gpu_memory_bytes)
    n = plan.num_blocks
    numbers = {"num_blocks": n, "max_num_seqs": seqs, "max_num_seqs_from": why, "full_cudagraphs": not enforce_eager}
    if not has_mamba:
        return Trap("mamba_state_slots", False, True, "after_kv_cache", "no Mamba layers", numbers=numbers)
    if enforce_eager:
        return Trap("mamba_state_slots", True, True, "after_kv_cache",
                    "no full CUDA graphs (--enforce-eager): vLLM does not compare max_num_seqs with the blocks",
                    numbers=numbers)
    refuses = mamba_state_slots(n, seqs, has_mamba=True, full_cudagraphs=True)
    msg = (f"max_num_seqs ({seqs}) exceeds available Mamba cache blocks ({n}). Each decode sequence requires one "
           f"Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most {n} or "
           "increase gpu_memory_utilization.") if refuses else None
    summary = (f"max_num_seqs {seqs:,} ({why}) exceeds the {n:,} Mamba cache blocks; give --max-num-seqs "
               f"{max(n, 0):,} or less" if refuses else f"max_num_seqs {seqs:,} ({why}) <= {n:,} blocks")
    return Trap("mamba_state_slots", True, not refuses, "after_kv_cache", summary, msg, numbers=numbers)


def _late_chunked_prefill_off(layout: Any, plan: Any) -> str | None:
    """Why the engine core turns chunked prefill off after the budget was checked, if it does."""
    if not plan.groups:
        return "the model has no KV cache groups (EngineCore disables chunked prefill)"
    if getattr(layout, "non_causal_attention", False):
        return "the model has non-causal attention layers (EngineCore disables chunked prefill)"
    return None


def _budget(layout: Any, plan: Any, chunked_prefill: bool, budget_given: bool, seqs_given: bool = False) -> Trap:
    cfg = plan.vllm_config
    length, budget = cfg.max_model_len, cfg.max_num_batched_tokens
    if seqs_given and budget < cfg.max_num_seqs:
        msg = (f"max_num_batched_tokens ({budget}) must be greater than or equal to max_num_seqs "
               f"({cfg.max_num_seqs}).")
        return Trap("token_budget", True, False, "before_kv_cache",
                    f"max_num_batched_tokens {budget:,} < max_num_seqs {cfg.max_num_seqs:,}", msg,
                    numbers={"max_num_batched_tokens": budget, "max_num_seqs": cfg.max_num_seqs})
    encoder_decoder = any(isinstance(_behaviour(g.kv_cache_spec), CrossAttentionSpec) for g in plan.groups)
    late = _late_chunked_prefill_off(layout, plan)
    early_off = not chunked_prefill or encoder_decoder
    numbers = {"max_model_len": length, "max_num_batched_tokens": budget, "chunked_prefill": chunked_prefill,
               "budget_given": budget_given}
    if early_off:
        if not budget_given and not chunked_prefill:
            return Trap("token_budget", True, True, "before_kv_cache",
                        f"chunked prefill off: vLLM raises max_num_batched_tokens to max_model_len ({length:,})",
                        numbers=numbers)
        refuses = chunked_prefill_budget(length, budget, chunked_prefill=False)
        budget_msg = (f"max_num_batched_tokens ({budget}) is smaller than max_model_len ({length}). This effectively "
                      "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer "
                      "sequences. Please increase max_num_batched_tokens or decrease max_model_len.") if refuses else None
        summary = (f"chunked prefill is off and max_num_batched_tokens {budget:,} < max_model_len {length:,}"
                   if refuses else f"chunked prefill off: max_num_batched_tokens {budget:,} >= max_model_len {length:,}")
        return Trap("token_budget", True, not refuses, "before_kv_cache", summary, budget_msg, numbers=numbers)
    if late is not None:
        hangs = budget < length
        summary = (f"{late} after checking the budget: a prompt of more than {budget:,} tokens (max_num_batched_"
                   f"tokens) never gets scheduled; max_model_len is {length:,}" if hangs else
                   f"{late}; every prompt fits max_num_batched_tokens {budget:,}")
        note = ("vLLM 0.33.0 does not re-check the budget after this late hook (#55130 does): such an engine starts, "
                "and longer prompts wait forever") if hangs else None
        return Trap("token_budget", True, not hangs, "runtime", summary, note=note, numbers=numbers)
    return Trap("token_budget", False, True, "before_kv_cache", "chunked prefill on: any prompt is split into steps",
                numbers=numbers)


def _encoder(layout: Any, plan: Any, budget_given: bool) -> Trap:
    mm = getattr(layout, "multimodal", None)
    budget = plan.vllm_config.max_num_batched_tokens
    if mm is None:
        return Trap("encoder_cache", False, True, "before_kv_cache", "not a multimodal model (or its items are "
                    "not sized by kvverify)")
    modality, item = mm.largest_item
    disabled = bool(mm.mm_prefix_lm)
    numbers = {"largest_item": item, "modality": modality, "max_num_batched_tokens": budget,
               "disable_chunked_mm_input": disabled}
    if disabled and not budget_given:
        raised = max(budget, item)
        numbers["max_num_batched_tokens"] = raised
        return Trap("encoder_cache", True, True, "before_kv_cache",
                    f"largest {modality} item {item:,} tokens; chunked MM input off (bidirectional attention): vLLM "
                    f"raises max_num_batched_tokens to {raised:,}", numbers=numbers)
    budgets = mm_encoder_budget(budget, item, disable_chunked_mm_input=disabled)
    if budgets is None:
        msg = (f"Chunked MM input disabled but max_tokens_per_mm_item ({item}) is larger than max_num_batched_tokens "
               f"({budget}). Please increase max_num_batched_tokens.")
        return Trap("encoder_cache", True, False, "before_kv_cache",
                    f"the largest {modality} item ({item:,} tokens) does not fit max_num_batched_tokens {budget:,} "
                    "with chunked MM input off (bidirectional attention on CUDA)", msg, numbers=numbers)
    compute, cache = budgets
    numbers.update(encoder_compute_budget=compute, encoder_cache_size=cache)
    return Trap("encoder_cache", True, True, "before_kv_cache",
                f"largest {modality} item {item:,} tokens <= encoder cache {cache:,} (a larger item is refused with "
                "HTTP 400, #33110)", numbers=numbers)


def _behaviour(spec: Any) -> Any:
    from kvverify.reference.managers.base import behaviour_spec
    return behaviour_spec(spec)


__all__ = ["EncoderOnlyAttentionSpec", "Trap", "chunked_prefill_budget", "mamba_state_slots", "mm_encoder_budget",
           "predict", "serve_default_max_num_seqs"]
