"""The engine's own checks of its configuration, where upstream runs them (0.33.0).

kvverify's :class:`~kvverify.reference.config.VllmConfig` refuses every bad field on
construction: that is kvverify's front validation, for its users. Upstream checks fewer fields,
spread over ``CacheConfig``, ``SchedulerConfig`` and ``ModelConfig``; the reference's planner runs
this mirror of them first (:func:`validate_engine_config`), so a config built past kvverify's
validation (:func:`~kvverify.reference.validation.unchecked`, the bad-input property) meets the
engine's checks, warts included (finding F16).
"""

from __future__ import annotations

from kvverify import fixes
from kvverify.reference.config import VllmConfig


def validate_engine_config(config: VllmConfig) -> None:
    """The checks upstream's config objects run on the bad-input property's fields (0.33.0).

    * ``CacheConfig``: ``block_size`` and ``prefix_match_unit`` ``gt=0`` (#43794, the fix of
      #43496 / #43521); ``num_gpu_blocks_override`` **none** (finding F16, #43842: a
      non-positive override reaches the startup check, which blames ``gpu_memory_utilization``;
      fix option ``num_gpu_blocks_override_validated`` adds upstream PR #44233's ``gt=0``);
    * ``SchedulerConfig``: ``max_num_batched_tokens`` and ``max_num_seqs`` ``ge=1``;
    * then :func:`validate_stand_ins` (``ModelConfig``'s ``max_model_len``, the worker's memory).

    Each is ``VllmConfig``'s own range check (:meth:`~kvverify.reference.config.VllmConfig.check_int`,
    one table), through :func:`~kvverify.reference.validation.require_int`, so zoo flaw
    ``no_positive_validation`` switches the positivity of all of them off."""
    config.check_int("block_size")
    config.check_int("prefix_match_unit")
    config.check_int("num_gpu_blocks_override",
                     bounded_below=fixes.is_on("num_gpu_blocks_override_validated"))
    config.check_int("max_num_batched_tokens")
    config.check_int("max_num_seqs")
    validate_stand_ins(config)


def validate_stand_ins(config: VllmConfig) -> None:
    """The checks of the engine parts the vllm target stands in for (it loads no model and runs
    no worker), run by the reference and by the adapter alike
    (:func:`kvverify.targets.vllm.config.upstream_config`):

    * ``ModelConfig``: ``max_model_len`` a positive integer, or ``-1`` (auto) with a derived
      length to fit under (``max_position_embeddings``);
    * the worker's KV cache memory: ``kv_cache_memory_bytes`` positive. This is kvverify's check,
      not upstream's: 0.33.0's ``CacheConfig`` has none and its worker reads the field as ``if
      kv_cache_memory_bytes := ...``, so 0 silently means "profile" (noted in the F16 write-up;
      no target drives the worker, so no property judges it).
    """
    config.check_int("kv_cache_memory_bytes")
    config.check_model_len()
