"""Hugging Face ``config.json`` -> :class:`~kvverify.catalog.layout.ModelLayout`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

from kvverify.catalog.files import _err, _kind, _parse_json, _reraise
from kvverify.catalog.layout import (
    _NAME_RE,
    HEADED_ATTENTION_KINDS,
    MAX_DIM,
    MAX_LAYERS,
    CatalogError,
    MambaLayout,
    ModelLayout,
    MultimodalLayout,
)
from kvverify.catalog.lengths import length_config
from kvverify.errors import MAX_TOKENS, ConfigError, require_int

_HF_DTYPES = {
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
    # vLLM's dtype="auto" serves float32 checkpoints in bfloat16 (``_get_and_verify_dtype``).
    "float32": "bfloat16", "float": "bfloat16", "fp32": "bfloat16",
}
_MAMBA_ONLY_MODEL_TYPES = ("mamba", "falcon_mamba", "mamba2")


def _hf_int(cfg: Mapping[str, Any], key: str, source: str, *, minimum: int = 1,
            maximum: int = MAX_TOKENS, required: bool = False, why: str = "") -> int | None:
    value = cfg.get(key)
    if value is None:
        if required:
            raise _err(key, None, f"is required{(' by ' + why) if why else ''}", source)
        return None
    try:
        return require_int(key, value, minimum=minimum, maximum=maximum)
    except ConfigError as e:
        raise _reraise(e, source) from None


def _first(cfg: Mapping[str, Any], *keys: str) -> str | None:
    """The first key of ``keys`` present (not None) in ``cfg``."""
    for key in keys:
        if cfg.get(key) is not None:
            return key
    return None


def read_hf_config(config: str | Path | Mapping[str, Any], *, name: str | None = None) -> ModelLayout:
    """Build a :class:`ModelLayout` from a Hugging Face ``config.json``.

    ``config`` is a path to the file, a directory holding ``config.json``, or the parsed
    dict. Multimodal configs are read from their ``text_config``. Layer kinds come from,
    in order: ``layer_types``; Jamba's ``attn_layer_period``/``attn_layer_offset``;
    Qwen3-Next's ``full_attention_interval``; Llama 4's ``no_rope_layers`` (0 = full
    attention, else chunked local when ``attention_chunk_size`` is set) or
    ``no_rope_layer_interval``; ``sliding_window_pattern`` (every N-th layer full);
    Gemma-2 (alternating, sliding first); ``sliding_window`` alone (every layer sliding);
    Mamba-only model types; otherwise full attention (MLA when ``kv_lora_rank`` is set).
    A value it cannot interpret raises :class:`ConfigError` naming the field.
    """
    if isinstance(config, Mapping):
        data: Any = config
        source = "config.json"
    else:
        p = Path(config)
        if p.is_dir():
            p = p / "config.json"
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise CatalogError(str(p), f"cannot read config.json: {e}") from None
        source = str(p)
        data = _parse_json(text, source)
    if not isinstance(data, Mapping):
        raise _err("config.json", type(data).__name__, "must hold a JSON object", source)
    cfg: dict[str, Any] = dict(data)
    text_config = cfg.get("text_config")
    if text_config is not None:
        if not isinstance(text_config, Mapping):
            raise _err("text_config", text_config, "must be an object", source)
        merged = {k: v for k, v in cfg.items() if k != "text_config"}
        merged.update(text_config)
        cfg = merged

    model_type = cfg.get("model_type") or ""
    if not isinstance(model_type, str):
        raise _err("model_type", model_type, "must be a string", source)
    num_layers = _hf_int(cfg, _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
                         or "num_hidden_layers", source, maximum=MAX_LAYERS, required=True)
    assert num_layers is not None

    dtype_key = _first(cfg, "torch_dtype", "dtype")
    dtype = "bfloat16"
    if dtype_key is not None:
        raw = cfg[dtype_key]
        norm = raw.lower().removeprefix("torch.") if isinstance(raw, str) else None
        if norm not in _HF_DTYPES:
            raise _err(dtype_key, raw, f"unsupported model dtype; allowed: {', '.join(sorted(_HF_DTYPES))}",
                       source)
        dtype = _HF_DTYPES[norm]

    sliding_window = _hf_int(cfg, "sliding_window", source)
    if cfg.get("use_sliding_window") is False:
        sliding_window = None  # Qwen2-style configs: the window is present but off
    chunk = _hf_int(cfg, "attention_chunk_size", source)
    kv_lora_rank = _hf_int(cfg, "kv_lora_rank", source, maximum=MAX_DIM)
    qk_rope = _hf_int(cfg, "qk_rope_head_dim", source, minimum=0, maximum=MAX_DIM)
    if (kv_lora_rank is None) != (qk_rope is None):
        missing = "qk_rope_head_dim" if qk_rope is None else "kv_lora_rank"
        raise _err(missing, None, "kv_lora_rank and qk_rope_head_dim must be given together (MLA)",
                   source)
    attention_kind = "mla" if kv_lora_rank is not None else "full"

    kinds = _hf_layer_kinds(cfg, model_type, num_layers, attention_kind, sliding_window, chunk, source)
    present = set(kinds)

    num_kv_heads = head_dim = None
    if present & HEADED_ATTENTION_KINDS:
        heads_key = _first(cfg, "num_key_value_heads", "num_attention_heads")
        num_kv_heads = _hf_int(cfg, heads_key or "num_key_value_heads", source, maximum=MAX_DIM,
                               required=True, why="attention layers (num_key_value_heads, or "
                               "num_attention_heads when it is absent)")
        if cfg.get("head_dim") is not None:
            head_dim = _hf_int(cfg, "head_dim", source, maximum=MAX_DIM)
        else:
            hidden = _hf_int(cfg, "hidden_size", source, maximum=MAX_DIM, required=True,
                             why="attention layers when head_dim is not set")
            heads = _hf_int(cfg, "num_attention_heads", source, maximum=MAX_DIM, required=True,
                            why="attention layers when head_dim is not set")
            assert hidden is not None and heads is not None
            if hidden % heads:
                raise _err("hidden_size", hidden,
                           f"must be divisible by num_attention_heads={heads} when head_dim is not set",
                           source)
            head_dim = hidden // heads
    mamba = _hf_mamba(cfg, model_type, source) if "mamba" in present else None
    max_pos = _hf_int(cfg, "max_position_embeddings", source)
    lengths = length_config(cfg, source)
    multimodal = _hf_multimodal(data if isinstance(data, Mapping) else {}, cfg, source)
    if name is None:
        raw_name = cfg.get("_name_or_path") or model_type or "hf-model"
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", str(raw_name).strip("/").split("/")[-1]) or "hf-model"
        if not _NAME_RE.match(name):
            name = "hf-" + name.strip("-._") if name.strip("-._") else "hf-model"
    try:
        return ModelLayout(
            name=name, layer_kinds=tuple(kinds), dtype=dtype, num_kv_heads=num_kv_heads,
            head_dim=head_dim, sliding_window=sliding_window if "sliding" in present else None,
            attention_chunk_size=chunk if "chunked" in present else None,
            kv_lora_rank=kv_lora_rank if "mla" in present else None,
            qk_rope_head_dim=qk_rope if "mla" in present else None,
            mamba=mamba, max_position_embeddings=max_pos, source=source, length_config=lengths, multimodal=multimodal,
            non_causal_attention=model_type in _NON_CAUSAL_MODEL_TYPES,
            hf_id=cfg.get("_name_or_path") if isinstance(cfg.get("_name_or_path"), str) else None)
    except ConfigError as e:
        raise _reraise(e, source) from None


#: model types whose attention vLLM 0.33.0 runs as prefix LM (``PrefillPrefixLMAttention``: a
#: ``non_causal`` KV cache spec; ``vllm/model_executor/models/hrm_text.py``)
_NON_CAUSAL_MODEL_TYPES = ("hrm_text",)
#: model types whose image items vLLM's processor sizes from the config's ``mm_tokens_per_image``
#: (Gemma 3 without pan-and-scan), and that attend to them bidirectionally (``MM_PREFIX_LM_MODELS``)
_MM_TOKENS_PER_IMAGE_TYPES = {"gemma3": True, "paligemma": True}


def _hf_multimodal(outer: Mapping[str, Any], cfg: Mapping[str, Any], source: str) -> MultimodalLayout | None:
    """The largest encoder item of the multimodal configs kvverify can size (else ``None``)."""
    model_type = outer.get("model_type")
    if outer.get("vision_config") is None or model_type not in _MM_TOKENS_PER_IMAGE_TYPES:
        return None
    tokens = _hf_int(dict(outer), "mm_tokens_per_image", source)
    if tokens is None:
        return None
    return MultimodalLayout((("image", tokens),), mm_prefix_lm=_MM_TOKENS_PER_IMAGE_TYPES[str(model_type)])


def _hf_layer_kinds(cfg: Mapping[str, Any], model_type: str, n: int, attention_kind: str,
                    sliding_window: int | None, chunk: int | None, source: str) -> list[str]:
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list):
            raise _err("layer_types", layer_types, "must be a list of layer type strings", source)
        if len(layer_types) < n:
            raise _err("layer_types", f"{len(layer_types)} entries",
                       f"must list at least num_hidden_layers={n} layer types", source)
        kinds = [_kind(t, f"layer_types[{i}]", source) for i, t in enumerate(layer_types[:n])]
        kinds = [attention_kind if k == "full" else k for k in kinds]
        if "sliding" in kinds and sliding_window is None:
            raise _err("sliding_window", None, "is required: layer_types has sliding_attention layers",
                       source)
        if "chunked" in kinds and chunk is None:
            raise _err("attention_chunk_size", None,
                       "is required: layer_types has chunked_attention layers", source)
        return kinds
    if cfg.get("attn_layer_period") is not None or cfg.get("attn_layer_offset") is not None:
        period = _hf_int(cfg, "attn_layer_period", source, maximum=MAX_LAYERS, required=True,
                         why="attn_layer_offset (Jamba)")
        assert period is not None
        offset = _hf_int(cfg, "attn_layer_offset", source, minimum=0, maximum=period - 1,
                         required=True, why="attn_layer_period (Jamba)")
        return [attention_kind if i % period == offset else "mamba" for i in range(n)]
    if cfg.get("full_attention_interval") is not None:
        interval = _hf_int(cfg, "full_attention_interval", source, maximum=MAX_LAYERS)
        assert interval is not None
        return [attention_kind if (i + 1) % interval == 0 else "mamba" for i in range(n)]
    if chunk is not None:
        no_rope = cfg.get("no_rope_layers")
        if no_rope is not None:
            if not isinstance(no_rope, list) or len(no_rope) < n or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v in (0, 1) for v in no_rope):
                raise _err("no_rope_layers", no_rope,
                           f"must be a list of at least num_hidden_layers={n} entries, each 0 "
                           "(NoPE: full attention) or 1 (RoPE: chunked local attention)", source)
            return ["full" if no_rope[i] == 0 else "chunked" for i in range(n)]
        interval = _hf_int(cfg, "no_rope_layer_interval", source, maximum=MAX_LAYERS)
        if interval is None and model_type.startswith("llama4"):
            interval = 4  # Llama4TextConfig's default
        if interval is not None:
            return ["full" if (i + 1) % interval == 0 else "chunked" for i in range(n)]
        return ["chunked"] * n
    pattern = cfg.get("sliding_window_pattern")
    if pattern is not None and sliding_window is not None:
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise _err("sliding_window_pattern", pattern,
                       "must be an integer >= 1 (every N-th layer is full attention)", source)
        return ["sliding" if (i + 1) % pattern else attention_kind for i in range(n)]
    if model_type == "gemma2" and sliding_window is not None:
        return ["sliding" if i % 2 == 0 else attention_kind for i in range(n)]
    if model_type in _MAMBA_ONLY_MODEL_TYPES:
        return ["mamba"] * n
    if sliding_window is not None:
        return ["sliding"] * n
    return [attention_kind] * n


def _hf_mamba(cfg: Mapping[str, Any], model_type: str, source: str) -> MambaLayout:
    """State sizes of Mamba-kind layers from the config's Mamba / GDN fields."""
    if cfg.get("linear_num_value_heads") is not None or cfg.get("linear_num_key_heads") is not None:
        vals: dict[str, Any] = {}
        for hf_key, ours in (("linear_num_key_heads", "num_key_heads"),
                             ("linear_num_value_heads", "num_value_heads"),
                             ("linear_key_head_dim", "key_head_dim"),
                             ("linear_value_head_dim", "value_head_dim"),
                             ("linear_conv_kernel_dim", "conv_kernel")):
            vals[ours] = _hf_int(cfg, hf_key, source, minimum=2 if ours == "conv_kernel" else 1,
                                 maximum=MAX_DIM, required=True, why="Gated DeltaNet layers")
        return MambaLayout(type="gdn", **vals)
    d_state_key = _first(cfg, "mamba_d_state", "d_state", "state_size", "ssm_state_size")
    d_conv_key = _first(cfg, "mamba_d_conv", "d_conv", "conv_kernel", "mamba_conv_kernel")
    if d_state_key is None:
        raise _err("mamba_d_state", None, "is required for Mamba layers (also read as d_state, "
                   "state_size, ssm_state_size)", source)
    if d_conv_key is None:
        raise _err("mamba_d_conv", None, "is required for Mamba layers (also read as d_conv, "
                   "conv_kernel)", source)
    d_state = _hf_int(cfg, d_state_key, source, maximum=MAX_DIM)
    d_conv = _hf_int(cfg, d_conv_key, source, minimum=2, maximum=MAX_DIM)
    d_inner_key = _first(cfg, "mamba_d_inner", "d_inner")
    if d_inner_key is not None:
        d_inner = _hf_int(cfg, d_inner_key, source, maximum=MAX_DIM)
    else:
        expand_key = _first(cfg, "mamba_expand", "expand")
        if expand_key is not None:
            expand = _hf_int(cfg, expand_key, source, maximum=MAX_DIM)
            hidden = _hf_int(cfg, "hidden_size", source, maximum=MAX_DIM, required=True,
                             why=f"{expand_key} (d_inner = {expand_key} * hidden_size)")
            assert expand is not None and hidden is not None
            d_inner = expand * hidden
        elif model_type in _MAMBA_ONLY_MODEL_TYPES and cfg.get("intermediate_size") is not None:
            d_inner = _hf_int(cfg, "intermediate_size", source, maximum=MAX_DIM)
        else:
            raise _err("mamba_expand", None, "is required for Mamba layers: give mamba_d_inner/"
                       "d_inner, or mamba_expand/expand with hidden_size", source)
    n_groups_key = _first(cfg, "mamba_n_groups", "n_groups")
    if model_type == "mamba2" or n_groups_key is not None:
        n_groups = _hf_int(cfg, n_groups_key or "n_groups", source, maximum=MAX_DIM, required=True,
                           why="Mamba-2 layers")
        heads_key = _first(cfg, "mamba_n_heads", "mamba_num_heads", "num_heads")
        num_heads = _hf_int(cfg, heads_key or "mamba_n_heads", source, maximum=MAX_DIM, required=True,
                            why="Mamba-2 layers")
        hd_key = _first(cfg, "mamba_d_head", "mamba_head_dim", "head_dim")
        head_dim = _hf_int(cfg, hd_key or "mamba_head_dim", source, maximum=MAX_DIM, required=True,
                           why="Mamba-2 layers")
        return MambaLayout(type="mamba2", d_inner=d_inner, d_state=d_state, d_conv=d_conv,
                           n_groups=n_groups, num_heads=num_heads, head_dim=head_dim)
    return MambaLayout(type="mamba1", d_inner=d_inner, d_state=d_state, d_conv=d_conv)

