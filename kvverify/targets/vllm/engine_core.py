"""The engine core's startup hooks, run on the installed vLLM (:mod:`kvverify.reference.engine_core` mirrors them).

:func:`initialize_engine_core` answers what the reference's function of that name answers, from
upstream's own code:

1. ``SchedulerConfig(...)`` with the deployment's ``enable_chunked_prefill`` (its ``__post_init__``
   turns it off for an encoder-decoder model, then runs ``verify_max_model_len``): a ``ValueError``
   is a refusal;
2. the real ``EngineCore._initialize_kv_caches`` on an ``EngineCore.__new__`` instance whose
   executor reports the deployment's specs (translated, ``non_causal`` included), stopped at the
   next executor call (``get_supported_kv_cache_layouts`` on 0.33.0, ``determine_available_memory``
   on 0.25.0), right after the non-causal hook: what it leaves in
   ``enable_chunked_prefill`` / ``enable_prefix_caching``, or its ``ValueError`` (the F14 patch);
3. the release's plan (:meth:`VllmTarget.plan`) for the config as the hooks left it; the
   ``Scheduler`` the target then builds reads that ``enable_chunked_prefill``.

The no-KV-cache-groups hook sits in ``EngineCore.__init__``, which needs a model executor: a
deployment without KV cache specs is :class:`~kvverify.targets.base.TargetUnsupported` here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from kvverify.reference.config import VllmConfig
from kvverify.reference.planner import StartupPlan
from kvverify.reference.specs import CrossAttentionSpec, KVCacheSpec
from kvverify.targets.vllm.config import upstream_config
from kvverify.targets.vllm.env import LOCK, preserved_environ
from kvverify.targets.vllm.refusals import unsupported
from kvverify.targets.vllm.specs import Translator


class _PastTheHook(Exception):
    """Raised by the stand-in executor where startup would need a real model."""


def _scheduler_config(target: Any, config: VllmConfig, encoder_decoder: bool) -> tuple[bool, str | None]:
    """``SchedulerConfig.__post_init__``: the chunked prefill it leaves, or its refusal."""
    try:
        sc = target.up.SchedulerConfig(max_model_len=config.planning_max_model_len, is_encoder_decoder=encoder_decoder,
                                       max_num_batched_tokens=config.max_num_batched_tokens,
                                       max_num_seqs=config.max_num_seqs,
                                       enable_chunked_prefill=config.enable_chunked_prefill)
    except ValueError as e:  # pydantic's ValidationError is one
        return config.enable_chunked_prefill, f"{type(e).__name__}: {e}"[:400]
    return bool(sc.enable_chunked_prefill), None


def _initialize_kv_caches(target: Any, config: VllmConfig,
                          kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]]) -> tuple[bool, bool, str | None]:
    """The real ``EngineCore._initialize_kv_caches`` up to its non-causal hook:
    ``(enable_chunked_prefill, enable_prefix_caching, refusal)``."""
    import vllm.v1.engine.core as core

    vc = upstream_config(config)
    tr = Translator(target.up)
    worker_specs = [{name: tr.spec(s) for name, s in w.items()} for w in kv_cache_specs]

    class StandInExecutor:
        """Reports the specs; any other executor call (layouts, memory profiling: what follows the
        hook in every release that has it) ends the run there."""

        def get_kv_cache_specs(self) -> list[dict[str, Any]]:
            return worker_specs

        def __getattr__(self, name: str) -> Any:
            raise _PastTheHook(name)

    engine_core = core.EngineCore.__new__(core.EngineCore)
    engine_core.model_executor = StandInExecutor()
    error: str | None = None
    try:
        engine_core._initialize_kv_caches(vc)
    except _PastTheHook:
        pass
    except ValueError as e:
        error = str(e)
    return bool(vc.scheduler_config.enable_chunked_prefill), bool(vc.cache_config.enable_prefix_caching), error


def initialize_engine_core(target: Any, vllm_config: VllmConfig,
                           kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]],
                           available_memory: Sequence[int] | None = None) -> StartupPlan:
    """The release's startup up to the Scheduler (see the module docstring)."""
    if not any(w for w in kv_cache_specs):
        unsupported("a model without KV cache specs: its late hook is in EngineCore.__init__, which needs an executor")
    encoder_decoder = any(isinstance(s, CrossAttentionSpec) for w in kv_cache_specs for s in w.values())
    with LOCK, preserved_environ():
        chunked, error = _scheduler_config(target, vllm_config, encoder_decoder)
        config = replace(vllm_config, enable_chunked_prefill=chunked)
        chunked, prefix, late_error = _initialize_kv_caches(target, config, kv_cache_specs)
    config = replace(config, enable_chunked_prefill=chunked, enable_prefix_caching=prefix)
    plan: StartupPlan = target.plan(config, kv_cache_specs, available_memory)
    error = error or late_error
    if error is not None and plan.starts:
        plan = replace(plan, starts=False, error=error)
    return plan
