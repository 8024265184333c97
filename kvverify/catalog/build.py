"""Layout -> per-layer specs (upstream's per-layer ``get_kv_cache_spec``), with the hybrid
attention+Mamba block-size alignment (``Platform._align_hybrid_block_size``)."""

from __future__ import annotations

from dataclasses import MISSING, fields, replace
from typing import Any, NamedTuple

from kvverify.catalog.layout import DEFAULT_KERNEL_BLOCK_SIZE, MLA_KERNEL_BLOCK_ALIGNMENT, ModelLayout
from kvverify.errors import MAX_TOKENS, ConfigError, require_int
from kvverify.reference import arith
from kvverify.reference.config import VllmConfig
from kvverify.reference.dtypes import get_dtype_size
from kvverify.reference import kinds
from kvverify.reference.specs import AttentionSpec, KVCacheSpec, MambaSpec, MLAAttentionSpec

def _attention_layer(spec_cls: type[KVCacheSpec], layout: ModelLayout, common: dict[str, Any]) -> KVCacheSpec:
    """A per-head attention layer: the model's attention fields plus the spec's own required
    fields (``sliding_window``, ``attention_chunk_size``), read from the layout's fields of
    the same name; fields with a default keep it (a full layer carries no window)."""
    basics = {f.name for f in fields(AttentionSpec)}
    own = {f.name: getattr(layout, f.name) for f in fields(spec_cls)
           if f.init and f.name not in basics and f.default is MISSING and f.default_factory is MISSING}
    return spec_cls(**common, **own)


class BuiltModel(NamedTuple):
    """The effective config (block size aligned for hybrids) and the per-layer specs."""

    vllm_config: VllmConfig
    layer_specs: dict[str, KVCacheSpec]


def hybrid_block_size(layout: ModelLayout, vllm_config: VllmConfig, *, kv_cache_dtype: str = "auto",
                      mamba_cache_dtype: str = "auto", mamba_ssm_cache_dtype: str = "auto",
                      num_speculative_tokens: int = 0,
                      kernel_block_size: int = DEFAULT_KERNEL_BLOCK_SIZE) -> int:
    """Attention block size after upstream's ``_align_hybrid_block_size``.

    ``k = max(kernel_block_size, block_size)`` (at least 128 for MLA),
    ``attn = k * cdiv(mamba_page, k * p1)`` rounded up to a multiple of
    ``kernel_block_size``, and the block size becomes ``max(block_size, attn)``.
    Non-hybrid layouts keep ``vllm_config.block_size``.
    """
    require_int("kernel_block_size", kernel_block_size, minimum=1, maximum=MAX_TOKENS)
    current = vllm_config.block_size
    if not layout.is_hybrid:
        return current
    mamba_page = layout.mamba_page_bytes(num_speculative_tokens, mamba_cache_dtype, mamba_ssm_cache_dtype)
    if mamba_page == 0:
        return current
    p1 = layout.attention_page_bytes_per_token(kv_cache_dtype)
    k = max(kernel_block_size, current)
    if layout.uses_mla:
        k = max(k, MLA_KERNEL_BLOCK_ALIGNMENT)
    return arith.hybrid_attention_block_size(mamba_page, p1, k, current, kernel_block_size)


def build_model(layout: ModelLayout, vllm_config: VllmConfig, *, kv_cache_dtype: str = "auto",
                mamba_cache_dtype: str = "auto", mamba_ssm_cache_dtype: str = "auto",
                num_speculative_tokens: int | None = None, num_prefill_checkpoint_blocks: int = 0,
                kernel_block_size: int = DEFAULT_KERNEL_BLOCK_SIZE) -> BuiltModel:
    """Per-layer specs of ``layout`` under ``vllm_config``, and the effective config.

    * ``kv_cache_dtype``: attention KV element dtype (``auto`` = model dtype; ``fp8``...).
    * ``mamba_cache_dtype`` / ``mamba_ssm_cache_dtype``: Mamba conv / SSM state dtypes.
    * ``num_speculative_tokens``: ``MambaSpec.num_speculative_blocks`` (and the extra conv
      rows of Mamba-2 / GDN states); defaults to ``vllm_config.num_lookahead_tokens``.
    * ``num_prefill_checkpoint_blocks``: ``P`` of Mamba ``align`` mode (0 or 1).
    * ``kernel_block_size``: the attention backend's smallest kernel block (16).

    Mamba block size: ``planning_max_model_len`` in cache mode ``none``, the (aligned)
    attention block size in ``align``. For hybrids the returned config carries the
    aligned ``block_size``; the Mamba page is padded to the attention page.
    """
    if not isinstance(layout, ModelLayout):
        raise ConfigError("layout", type(layout).__name__, "must be a ModelLayout")
    if not isinstance(vllm_config, VllmConfig):
        raise ConfigError("vllm_config", type(vllm_config).__name__, "must be a VllmConfig")
    spec_tokens = vllm_config.num_lookahead_tokens if num_speculative_tokens is None else num_speculative_tokens
    require_int("num_speculative_tokens", spec_tokens, minimum=0, maximum=1024)
    require_int("num_prefill_checkpoint_blocks", num_prefill_checkpoint_blocks, minimum=0, maximum=1)
    for fname, value in (("kv_cache_dtype", kv_cache_dtype), ("mamba_cache_dtype", mamba_cache_dtype),
                         ("mamba_ssm_cache_dtype", mamba_ssm_cache_dtype)):
        if value != "auto":
            get_dtype_size(value, fname)
    dtypes = dict(kv_cache_dtype=kv_cache_dtype, mamba_cache_dtype=mamba_cache_dtype,
                  mamba_ssm_cache_dtype=mamba_ssm_cache_dtype)
    block_size = hybrid_block_size(layout, vllm_config, num_speculative_tokens=spec_tokens,
                                   kernel_block_size=kernel_block_size, **dtypes)
    config = vllm_config if block_size == vllm_config.block_size else replace(vllm_config,
                                                                                block_size=block_size)
    kv_dtype = layout.kv_cache_dtype(kv_cache_dtype)
    specs: dict[str, KVCacheSpec] = {}
    attn_page = None
    mamba_spec = None
    if layout.has_attention:
        attn_page = layout.attention_page_bytes_per_token(kv_cache_dtype) * block_size
    if layout.has_mamba:
        assert layout.mamba is not None
        shapes = layout.mamba.state_shapes(spec_tokens)
        conv_dtype, ssm_dtype = layout.mamba_state_dtypes(mamba_cache_dtype, mamba_ssm_cache_dtype)
        mamba_block = block_size if config.mamba_cache_mode == "align" else config.planning_max_model_len
        real = layout.mamba_page_bytes(spec_tokens, mamba_cache_dtype, mamba_ssm_cache_dtype)
        padded = attn_page if (layout.is_hybrid and attn_page is not None and attn_page != real) else None
        if padded is not None and padded < real:  # pragma: no cover - alignment guarantees >=
            raise ConfigError("block_size", block_size, "attention page smaller than the Mamba page")
        mamba_spec = MambaSpec(block_size=mamba_block, shapes=shapes, dtypes=(conv_dtype, ssm_dtype),
                               page_size_padded=padded, mamba_cache_mode=config.mamba_cache_mode,
                               num_speculative_blocks=spec_tokens,
                               num_prefill_checkpoint_blocks=num_prefill_checkpoint_blocks)
    common: dict[str, Any] = {}
    if layout.num_kv_heads is not None:
        common = dict(block_size=block_size, num_kv_heads=layout.num_kv_heads,
                      head_size=layout.head_dim, dtype=kv_dtype)
    for i, kind in enumerate(layout.layer_kinds):
        name = layout.layer_name(i)
        if kind == "mla":
            assert layout.kv_lora_rank is not None and layout.qk_rope_head_dim is not None
            specs[name] = MLAAttentionSpec(block_size=block_size, num_kv_heads=1,
                                           head_size=layout.kv_lora_rank + layout.qk_rope_head_dim,
                                           dtype=kv_dtype)
        elif kind == "mamba":
            assert mamba_spec is not None
            specs[name] = mamba_spec
        else:
            specs[name] = _attention_layer(kinds.resolve(kind).spec_cls, layout, common)
    return BuiltModel(config, specs)


def build_layer_specs(layout: ModelLayout, vllm_config: VllmConfig, **options: Any) -> dict[str, KVCacheSpec]:
    """Layer name -> spec (upstream's per-layer ``get_kv_cache_spec``); see :func:`build_model`.

    For hybrid attention+Mamba layouts the specs use the aligned block size; plan them
    with ``build_model(...).vllm_config`` (or :func:`effective_config`).
    """
    return build_model(layout, vllm_config, **options).layer_specs


def effective_config(layout: ModelLayout, vllm_config: VllmConfig, **options: Any) -> VllmConfig:
    """``vllm_config`` with the block size upstream would use for ``layout``."""
    return build_model(layout, vllm_config, **options).vllm_config


