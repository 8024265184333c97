"""The engine core's startup around the KV cache plan, and the token-budget check it must keep.

Upstream: ``SchedulerConfig.verify_max_model_len`` (``vllm/config/scheduler.py``), and
``EngineCore.__init__`` / ``EngineCore._initialize_kv_caches`` (``vllm/v1/engine/core.py``).
vLLM 0.33.0 does this, in this order:

1. ``SchedulerConfig.__post_init__``: an encoder-decoder model turns chunked prefill off, then
   ``verify_max_model_len(max_model_len)`` refuses ``max_num_batched_tokens < max_model_len``
   with chunked prefill off (a prompt is scheduled whole or never), and
   ``max_num_batched_tokens < max_num_seqs``;
2. ``_initialize_kv_caches``: if any KV cache spec is ``non_causal`` (a prefix LM), chunked
   prefill and prefix caching are turned off ("Disabling chunked prefill: model has non-causal
   attention layers");
3. the KV cache is planned and checked (``get_kv_cache_configs``; auto-fit may lower the length);
4. ``__init__``: a model without KV cache groups turns chunked prefill off ("Disabling chunked
   prefill for model without KVCache").

Steps 2 and 4 come *after* the budget was verified with chunked prefill on, and 0.33.0 never
verifies it again: such an engine starts, and a prompt longer than ``max_num_batched_tokens``
(but within ``max_model_len``) waits forever (finding F14, upstream PR #55130). Fix option
``budget_rechecked_after_late_chunked_prefill_off`` re-runs the check after each late hook, with
the length known there, so startup refuses with the check's own message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from kvverify import fixes
from kvverify.reference.config import VllmConfig
from kvverify.reference.planner import StartupPlan, plan_kv_cache
from kvverify.reference.specs import AttentionSpec, CrossAttentionSpec, KVCacheSpec

FIX = "budget_rechecked_after_late_chunked_prefill_off"


def verify_max_model_len(config: VllmConfig, max_model_len: int) -> str | None:
    """``SchedulerConfig.verify_max_model_len``'s token-budget rules: the message it raises, or ``None``."""
    budget = config.max_num_batched_tokens
    if budget < max_model_len and not config.enable_chunked_prefill:
        return (f"max_num_batched_tokens ({budget}) is smaller than max_model_len ({max_model_len}). This "
                "effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject "
                "longer sequences. Please increase max_num_batched_tokens or decrease max_model_len.")
    if budget < config.max_num_seqs:
        return (f"max_num_batched_tokens ({budget}) must be greater than or equal to max_num_seqs "
                f"({config.max_num_seqs}).")
    return None


def _specs(kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]]) -> list[KVCacheSpec]:
    return [s for worker in kv_cache_specs for s in worker.values()]


def has_non_causal_attention(kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]]) -> bool:
    """``any(getattr(spec, "non_causal", False) ...)`` over every worker's specs."""
    return any(isinstance(s, AttentionSpec) and s.non_causal for s in _specs(kv_cache_specs))


def _late_recheck(config: VllmConfig, max_model_len: int) -> str | None:
    """Under the fix: the budget check again, after a late hook turned chunked prefill off."""
    return verify_max_model_len(config, max_model_len) if fixes.is_on(FIX) else None


def initialize_engine_core(vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]],
                           available_memory: Sequence[int] | None = None) -> StartupPlan:
    """The engine's startup up to the Scheduler: the plan, with ``starts=False`` and the message on
    any refusal, and ``plan.vllm_config`` as the Scheduler reads it (chunked prefill and prefix
    caching after the late hooks)."""
    config = vllm_config
    if config.enable_chunked_prefill and any(isinstance(s, CrossAttentionSpec) for s in _specs(kv_cache_specs)):
        config = replace(config, enable_chunked_prefill=False)  # SchedulerConfig.__post_init__
    error = verify_max_model_len(config, config.planning_max_model_len)
    if has_non_causal_attention(kv_cache_specs):  # EngineCore._initialize_kv_caches
        if config.enable_chunked_prefill:
            config = replace(config, enable_chunked_prefill=False)
            error = error or _late_recheck(config, config.planning_max_model_len)
        config = replace(config, enable_prefix_caching=False)
    plan = plan_kv_cache(config, kv_cache_specs, available_memory)
    if plan.vllm_config.enable_chunked_prefill and not plan.kv_cache_config.kv_cache_groups:  # EngineCore.__init__
        plan = replace(plan, vllm_config=replace(plan.vllm_config, enable_chunked_prefill=False))
        error = error or _late_recheck(plan.vllm_config, plan.vllm_config.max_model_len)
    if error is not None and plan.starts:
        plan = replace(plan, starts=False, error=error)
    return plan
