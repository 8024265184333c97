"""vLLM's own startup-trap rules, asked of the installed release (:mod:`kvverify.check.traps` predicts them).

* :func:`mamba_state_slots`: ``CompilationConfig(cudagraph_mode=...).resolve_cudagraph_mode_and_sizes``
  with the plan's KV cache config, translated to upstream's (``Translator``), and ``max_num_reqs``;
* :func:`token_budget`: ``SchedulerConfig(...)`` and its ``verify_max_model_len``;
* :func:`encoder_budget`: ``compute_mm_encoder_budget`` over a scheduler config.

Each returns ``{"refuses": bool, ...}`` with upstream's numbers or message. Capability probes
(for :mod:`.compat` at merge): ``vllm.config.compilation`` (``CompilationConfig``, ``CUDAGraphMode``,
``resolve_cudagraph_mode_and_sizes``), ``vllm.v1.attention.backend.AttentionCGSupport``,
``vllm.v1.core.encoder_cache_manager.compute_mm_encoder_budget``; a release without them raises
:class:`ReleaseLacks`.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

from kvverify.targets.vllm.env import LOCK, preserved_environ, upstream
from kvverify.targets.vllm.refusals import ReleaseLacks
from kvverify.targets.vllm.specs import Translator


def _import(module: str, *names: str) -> types.SimpleNamespace:
    upstream()
    try:
        m = importlib.import_module(module)
        return types.SimpleNamespace(**{n: getattr(m, n) for n in names})
    except (ImportError, AttributeError) as e:
        raise ReleaseLacks(str(getattr(upstream().vllm, "__version__", "?")),
                           f"lacks {module} ({', '.join(names)}): {type(e).__name__}: {e}") from None


def mamba_state_slots(kv_cache_config: Any, max_num_seqs: int, *, full_cudagraphs: bool = True) -> dict[str, Any]:
    """Does vLLM's CUDA-graph resolution refuse ``max_num_seqs`` over this KV cache config?"""
    up = upstream()
    comp = _import("vllm.config.compilation", "CompilationConfig", "CUDAGraphMode", "CompilationMode")
    cg = _import("vllm.v1.attention.backend", "AttentionCGSupport")
    with LOCK, preserved_environ():
        config = Translator(up).kv_cache_config(kv_cache_config)
        mode = comp.CUDAGraphMode.FULL_AND_PIECEWISE if full_cudagraphs else comp.CUDAGraphMode.PIECEWISE
        cc = comp.CompilationConfig(cudagraph_mode=mode, mode=comp.CompilationMode.VLLM_COMPILE)
        try:
            cc.resolve_cudagraph_mode_and_sizes(cg.AttentionCGSupport.ALWAYS, "kvverify", kv_cache_config=config,
                                                max_num_reqs=max_num_seqs)
        except ValueError as e:
            return {"refuses": True, "message": str(e)}
    return {"refuses": False, "has_mamba_layers": bool(config.has_mamba_layers), "num_blocks": config.num_blocks}


def token_budget(max_model_len: int, max_num_batched_tokens: int, max_num_seqs: int, *,
                 chunked_prefill: bool) -> dict[str, Any]:
    """Does ``SchedulerConfig.verify_max_model_len`` refuse this budget?"""
    up = upstream()
    with LOCK, preserved_environ():
        try:
            sc = up.SchedulerConfig(max_model_len=max_model_len, is_encoder_decoder=False,
                                    max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                    enable_chunked_prefill=chunked_prefill)
            sc.verify_max_model_len(max_model_len)
        except Exception as e:  # noqa: BLE001 - pydantic's ValidationError or ValueError: a refusal
            return {"refuses": True, "message": f"{type(e).__name__}: {e}"[:400]}
    return {"refuses": False}


def encoder_budget(max_num_batched_tokens: int, largest_item: int, *, disable_chunked_mm_input: bool,
                   encoder_cache_size: int | None = None) -> dict[str, Any]:
    """``compute_mm_encoder_budget``'s ``(compute budget, cache size)``, or its refusal."""
    fn = _import("vllm.v1.core.encoder_cache_manager", "compute_mm_encoder_budget").compute_mm_encoder_budget
    sc = types.SimpleNamespace(max_num_batched_tokens=max_num_batched_tokens,
                               max_num_encoder_input_tokens=max_num_batched_tokens,
                               encoder_cache_size=max_num_batched_tokens if encoder_cache_size is None
                               else encoder_cache_size, disable_chunked_mm_input=disable_chunked_mm_input)
    with LOCK, preserved_environ():
        try:
            compute, cache = fn(sc, {"image": largest_item})
        except ValueError as e:
            return {"refuses": True, "message": str(e)}
    return {"refuses": False, "encoder_compute_budget": int(compute), "encoder_cache_size": int(cache)}
