"""Knobs passed through to upstream vLLM by capability, not by version (issue 17).

Small helpers the vllm adapter calls where it builds upstream objects. Each knob is
passed only when the installed release has it (``hasattr`` / dataclass fields), so an
older release simply runs without it:

* ``CacheConfig.prefix_cache_retention_interval`` (0.33.0: default ``0``, sparse
  sliding-window / Mamba prefix-cache retention; ``None`` = dense). The engine copies
  it into every ``KVCacheConfig`` (``get_kv_cache_config_from_groups``); a
  ``KVCacheConfig`` rebuilt from a plan must carry it too, or upstream's coordinator
  silently runs dense.
* ``SchedulerConfig.max_num_encoder_input_tokens`` (the cross-attention budget).
"""

from __future__ import annotations

from typing import Any

#: upstream's default when the reference config predates the knob
UPSTREAM_DEFAULT_RETENTION = 0


def _fields(cls: Any) -> set[str]:
    names = set(getattr(cls, "__dataclass_fields__", {}) or {})
    names |= set(getattr(cls, "model_fields", {}) or {})  # pydantic dataclasses
    return names


def retention_interval(config: Any) -> int | None:
    """The reference config's ``prefix_cache_retention_interval`` (upstream's default if absent)."""
    return getattr(config, "prefix_cache_retention_interval", UPSTREAM_DEFAULT_RETENTION)


def cache_config_kwargs(cache_config_cls: Any, config: Any) -> dict[str, Any]:
    """Extra ``CacheConfig(...)`` keyword arguments the installed release understands."""
    kw: dict[str, Any] = {}
    if "prefix_cache_retention_interval" in _fields(cache_config_cls):
        kw["prefix_cache_retention_interval"] = retention_interval(config)
    return kw


def apply_kv_cache_config_knobs(kv_cache_config: Any, config: Any) -> Any:
    """Set on an upstream ``KVCacheConfig`` what the engine would have set on it."""
    if hasattr(kv_cache_config, "prefix_cache_retention_interval"):
        kv_cache_config.prefix_cache_retention_interval = retention_interval(config)
    return kv_cache_config


def resolve_cache_hit_alignment_tokens(target: Any, kv_cache_config: Any, vllm_config: Any,
                                       scheduler_block_size: int, hash_block_size: int) -> int:
    """The release's ``kv_cache_utils.resolve_cache_hit_alignment_tokens`` on the scheduler's
    view of a kvverify ``KVCacheConfig``; a release without it skips with the reason."""
    from kvverify.targets.vllm.config import runtime_len, upstream_config
    from kvverify.targets.vllm.env import LOCK, preserved_environ
    from kvverify.targets.vllm.refusals import lacks
    from kvverify.targets.vllm.specs import Translator

    up = target.up
    with LOCK, preserved_environ():
        from vllm.v1.core import kv_cache_utils
    fn = getattr(kv_cache_utils, "resolve_cache_hit_alignment_tokens", None)
    if fn is None:
        lacks(target.version, "has no resolve_cache_hit_alignment_tokens")
    cfg = apply_kv_cache_config_knobs(
        up.generate_scheduler_kv_cache_config([Translator(up).kv_cache_config(kv_cache_config)]), vllm_config)
    with LOCK, preserved_environ():
        vc = upstream_config(vllm_config, max_model_len=runtime_len(vllm_config))
        return int(fn(cfg, vc, scheduler_block_size, hash_block_size))
