"""kvverify's flat :class:`~kvverify.reference.config.VllmConfig` -> a fresh upstream ``VllmConfig``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, NoReturn

from kvverify.reference.config import VllmConfig
from kvverify.reference.engine_validation import validate_stand_ins
from kvverify.targets.vllm import compat
from kvverify.targets.vllm.env import preserved_environ, upstream
from kvverify.targets.vllm.knobs import cache_config_kwargs
from kvverify.targets.vllm.refusals import unsupported

#: keyword -> the value that means "as before the knob existed" (dropped on releases without it)
CACHE_NEUTRAL = {"mamba_cache_mode": "none", "prefix_match_unit": None}
SCHEDULER_NEUTRAL = {"watermark": 0.0, "is_encoder_decoder": False, "disable_hybrid_kv_cache_manager": False,
                     "policy": "fcfs"}


def _model_config_stand_in(max_model_len: int, original_max_model_len: int) -> SimpleNamespace:
    """The attributes of ``ModelConfig`` the planner, managers and Scheduler of every supported
    release read (``tests/test_vllm_compat.py`` lists them)."""
    return SimpleNamespace(
        max_model_len=max_model_len, original_max_model_len=original_max_model_len,
        supports_kv_cache_grouping=False, uses_mrope=False, is_encoder_decoder=False,
        runner_type="generate", is_diffusion=False, supports_multimodal_inputs=False,
        multimodal_config=None, return_sampling_mask=False, skip_tokenizer_init=True,
        is_multimodal_model=False, use_mla=False, is_hybrid=False, is_attention_free=False,
        # read by releases before 0.33 (Scheduler / structured output / routed experts)
        is_moe=False, enable_return_routed_experts=False, pooler_config=None, quantization=None,
        attention_chunk_size=None, enable_prompt_embeds=False, logits_processors=None,
        supports_replayssm=False,
        uses_xdrope=False)  # 0.29.0's Scheduler reads it


def runtime_len(config: VllmConfig) -> int:
    return config.planning_max_model_len if config.auto_max_model_len else config.max_model_len


def refuse_missing_knob(e: compat.KnobMissing, version: str) -> NoReturn:
    unsupported(f"vLLM {version}: {e}")


def _set_lookahead(caps: compat.Compat, vc: Any, num_lookahead_tokens: int,
                   num_prefill_lookahead_tokens: int = 0, num_speculative_tokens: int = 0) -> None:
    """Give ``vc`` the ``num_lookahead_tokens`` a speculative config would (planning, the
    KV cache manager's ``max_in_flight_tokens`` and the Scheduler read the property), and the
    ``num_prefill_lookahead_tokens`` (0.31 and later: grouping's ``extra_retained_tokens``, the
    Scheduler's prefill reservation, the coordinator's re-prefillable tail) the same way.

    Releases with the ``VllmConfig.num_lookahead_tokens`` property (``Compat.lookahead_property``:
    0.28 and later) get it through a subclass whose property returns the value, and
    ``num_speculative_tokens`` (``Compat.speculative_tokens_property``: the Scheduler's spec-token
    padding and the async-load gate's speculative step) the same way; no speculative config is
    built (no drafter: its draft slots are not modelled). Releases without the property derive
    lookahead inside the Scheduler only (:class:`~kvverify.targets.vllm.scheduler.UpstreamScheduler`
    sets it there)."""
    if not caps.lookahead_property:
        return
    cls = type(vc)
    sub = _LOOKAHEAD_CLASSES.get(cls)
    if sub is None:
        props = {"num_lookahead_tokens": property(lambda self: self.kvverify_num_lookahead_tokens,
                                                  doc="kvverify: the config's num_lookahead_tokens")}
        if caps.prefill_lookahead:
            props["num_prefill_lookahead_tokens"] = property(
                lambda self: self.kvverify_num_prefill_lookahead_tokens,
                doc="kvverify: the config's num_prefill_lookahead_tokens")
        if caps.speculative_tokens_property:
            # the draft tokens a speculative config would give (the Scheduler pads new decodes and
            # reserves a speculative step for async loads); the speculative config itself stays None
            props["num_speculative_tokens"] = property(
                lambda self: self.kvverify_num_speculative_tokens,
                doc="kvverify: the config's num_speculative_tokens")
        sub = _LOOKAHEAD_CLASSES[cls] = type(cls.__name__, (cls,), {"__module__": cls.__module__, **props})
    object.__setattr__(vc, "kvverify_num_lookahead_tokens", num_lookahead_tokens)
    object.__setattr__(vc, "kvverify_num_prefill_lookahead_tokens", num_prefill_lookahead_tokens)
    object.__setattr__(vc, "kvverify_num_speculative_tokens", num_speculative_tokens)
    vc.__class__ = sub


_LOOKAHEAD_CLASSES: dict[type, type] = {}


def upstream_config(config: VllmConfig, *, max_model_len: int | None = None) -> Any:
    """A fresh upstream ``VllmConfig`` for kvverify's flat config (upstream mutates it).

    ``max_model_len=-1`` becomes what ``ModelConfig`` makes of it: ``max_model_len`` =
    the derived maximum (``max_position_embeddings``), ``original_max_model_len = -1``.
    A knob the release lacks rejects the example unless it holds its neutral value.
    """
    up = upstream()
    caps = up.compat
    # the checks of what the adapter stands in for (ModelConfig's max_model_len, the worker's
    # memory): a config built past kvverify's validation meets them here, as on the reference
    validate_stand_ins(config)
    if config.kv_connector and not caps.kv_connector:
        unsupported(f"vLLM {caps.version} {caps.lacking()['kv_connector']}")
    if config.max_concurrent_batches > 2:
        unsupported("max_concurrent_batches > 2 (two batches in flight are modelled: pipeline parallelism "
                    "of size 2 behind the batch queue)")
    if config.num_prefill_lookahead_tokens and not caps.prefill_lookahead:
        unsupported(f"vLLM {caps.version} has no num_prefill_lookahead_tokens")
    auto = config.auto_max_model_len and max_model_len is None
    length = config.planning_max_model_len if max_model_len is None else max_model_len
    try:
        cache_kw = compat.fit_kwargs(caps, "CacheConfig", dict(
            block_size=config.block_size, num_gpu_blocks_override=config.num_gpu_blocks_override,
            enable_prefix_caching=config.enable_prefix_caching, mamba_cache_mode=config.mamba_cache_mode,
            prefix_match_unit=config.prefix_match_unit, **cache_config_kwargs(caps, config)),
            CACHE_NEUTRAL)
        sched_kw = compat.fit_kwargs(caps, "SchedulerConfig", dict(
            max_model_len=length, is_encoder_decoder=False,
            max_num_batched_tokens=config.max_num_batched_tokens,
            # upstream refuses max_num_seqs > max_num_batched_tokens (kvverify's flat config
            # does not): clamp, as a user must
            max_num_seqs=min(config.max_num_seqs, config.max_num_batched_tokens),
            disable_hybrid_kv_cache_manager=config.disable_hybrid_kv_cache_manager,
            watermark=config.watermark, policy=config.scheduling_policy), SCHEDULER_NEUTRAL)
    except compat.KnobMissing as e:
        refuse_missing_knob(e, caps.version)
    with preserved_environ():
        cache = up.CacheConfig(**cache_kw)
        sched = up.SchedulerConfig(**sched_kw)
        vc = up.VllmConfig(cache_config=cache, scheduler_config=sched)
    # With model_config=None VllmConfig skips the model-dependent post-init; the stand-in
    # is assigned afterwards (no validation on assignment).
    vc.model_config = _model_config_stand_in(length, -1 if auto else length)
    vc.scheduler_config.max_num_encoder_input_tokens = config.encoder_tokens
    # assigned after construction, as EngineCore's late hooks do (SchedulerConfig's own budget
    # check is asked separately: kvverify.targets.vllm.engine_core)
    vc.scheduler_config.enable_chunked_prefill = config.enable_chunked_prefill
    if config.num_lookahead_tokens or config.num_prefill_lookahead_tokens or config.num_speculative_tokens:
        if config.num_speculative_tokens and not caps.speculative_tokens_property:
            unsupported(f"vLLM {caps.version} has no VllmConfig.num_speculative_tokens")
        _set_lookahead(caps, vc, config.num_lookahead_tokens, config.num_prefill_lookahead_tokens,
                       config.num_speculative_tokens)
    if config.max_concurrent_batches == 2:
        # the engine keeps pipeline_parallel_size batches in flight (VllmConfig.max_concurrent_batches)
        vc.parallel_config.pipeline_parallel_size = 2
    if config.kv_connector:
        from kvverify.targets.vllm.transfer import transfer_config
        vc.kv_transfer_config = transfer_config(None, None)  # the Scheduler gets the script's own
    if caps.spec_registry:
        up.register_all_kvcache_specs(vc)
    return vc


__all__ = ["runtime_len", "upstream_config"]
