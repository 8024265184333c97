"""Catalog files: the shipped models (``kvverify/models/*.json``, schema in
``models/README.md``) and catalog-format files of your own, parsed into layouts."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from kvverify.catalog.layout import (
    _NAME_RE,
    LAYER_KIND_ALIASES,
    LAYER_KINDS,
    MAMBA_TYPES,
    MAX_DIM,
    MAX_LAYERS,
    CatalogError,
    MambaLayout,
    ModelLayout,
    MultimodalLayout,
)
from kvverify.catalog.lengths import length_config
from kvverify.errors import MAX_TOKENS, ConfigError, require_int
from kvverify.reference.dtypes import DTYPE_BYTES

_TOP_KEYS = ("$schema", "schema_version", "name", "hf_id", "source", "notes", "illustrative",
             "num_layers", "layers", "dtype", "num_kv_heads", "head_dim", "sliding_window",
             "attention_chunk_size", "kv_lora_rank", "qk_rope_head_dim", "mamba",
             "max_position_embeddings", "hf_config", "multimodal", "non_causal_attention")
_MAMBA_KEYS = ("type", "d_inner", "d_state", "d_conv", "n_groups", "num_heads", "head_dim",
               "num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim",
               "conv_kernel", "ssm_dtype")
SCHEMA_VERSION = 1


def _where(source: str | None) -> str:
    return f" (in {source})" if source else ""


def _err(field_name: str, value: object, allowed: str, source: str | None) -> ConfigError:
    return ConfigError(field_name, value, allowed + _where(source))


def _reraise(e: ConfigError, source: str | None) -> ConfigError:
    return ConfigError(e.field, e.value, e.allowed + _where(source))


def _opt_int(data: Mapping[str, Any], key: str, source: str | None, *, prefix: str = "",
             minimum: int = 1, maximum: int = MAX_TOKENS) -> int | None:
    if key not in data or data[key] is None:
        return None
    try:
        return require_int(prefix + key, data[key], minimum=minimum, maximum=maximum)
    except ConfigError as e:
        raise _reraise(e, source) from None


def _opt_str(data: Mapping[str, Any], key: str, source: str | None) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _err(key, value, "must be a string", source)
    return value


def _kind(value: object, field_name: str, source: str | None) -> str:
    if not isinstance(value, str) or value.lower() not in LAYER_KIND_ALIASES:
        raise _err(field_name, value, f"unknown layer type; allowed: {', '.join(LAYER_KINDS)} "
                   f"(or {', '.join(k for k in LAYER_KIND_ALIASES if k not in LAYER_KINDS)})",
                   source)
    return LAYER_KIND_ALIASES[value.lower()]


def layout_from_dict(data: Mapping[str, Any], source: str | None = None) -> ModelLayout:
    """Validate a catalog-format mapping and build its :class:`ModelLayout`.

    ``source`` (a path or label) is added to every error message.
    """
    if not isinstance(data, Mapping):
        raise _err("model", type(data).__name__, "a model file must hold a JSON object", source)
    for key in data:
        if key not in _TOP_KEYS:
            raise _err(str(key), data[key], f"unknown field; allowed: {', '.join(_TOP_KEYS[1:])}",
                       source)
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise _err("schema_version", version, f"must be {SCHEMA_VERSION}", source)
    for key in ("name", "source", "num_layers", "layers", "dtype"):
        if key not in data:
            raise _err(key, None, "is required", source)
    name = _opt_str(data, "name", source)
    if not name or not _NAME_RE.match(name):
        raise _err("name", data.get("name"), "must be a non-empty string of letters, digits, "
                   "'.', '_' or '-'", source)
    num_layers = _opt_int(data, "num_layers", source, maximum=MAX_LAYERS)
    assert num_layers is not None
    layers = data["layers"]
    if not isinstance(layers, Mapping) or len(layers) != 1 or \
            next(iter(layers)) not in ("pattern", "layer_types"):
        raise _err("layers", layers, 'must be {"pattern": [kinds...]} (repeated to num_layers) '
                   'or {"layer_types": [one kind per layer]}', source)
    (how, kinds_raw), = layers.items()
    if not isinstance(kinds_raw, list) or not kinds_raw:
        raise _err(f"layers.{how}", kinds_raw, "must be a non-empty list of layer kinds", source)
    kinds = [_kind(k, f"layers.{how}[{i}]", source) for i, k in enumerate(kinds_raw)]
    if how == "layer_types":
        if len(kinds) != num_layers:
            raise _err("layers.layer_types", f"{len(kinds)} entries",
                       f"must list exactly num_layers={num_layers} kinds", source)
        layer_kinds = tuple(kinds)
    else:
        if len(kinds) > num_layers:
            raise _err("layers.pattern", f"{len(kinds)} entries",
                       f"must not be longer than num_layers={num_layers}", source)
        layer_kinds = tuple(kinds[i % len(kinds)] for i in range(num_layers))
    dtype = _opt_str(data, "dtype", source)
    if dtype not in DTYPE_BYTES:
        raise _err("dtype", data.get("dtype"), f"unknown dtype; allowed: {', '.join(sorted(DTYPE_BYTES))}",
                   source)
    illustrative = data.get("illustrative", [])
    if not isinstance(illustrative, list) or not all(isinstance(x, str) for x in illustrative):
        raise _err("illustrative", illustrative, "must be a list of field names (strings)", source)
    mamba = None
    if data.get("mamba") is not None:
        mamba = _mamba_from_dict(data["mamba"], source)
    fields: dict[str, Any] = dict(
        num_kv_heads=_opt_int(data, "num_kv_heads", source, maximum=MAX_DIM),
        head_dim=_opt_int(data, "head_dim", source, maximum=MAX_DIM),
        sliding_window=_opt_int(data, "sliding_window", source),
        attention_chunk_size=_opt_int(data, "attention_chunk_size", source),
        kv_lora_rank=_opt_int(data, "kv_lora_rank", source, maximum=MAX_DIM),
        qk_rope_head_dim=_opt_int(data, "qk_rope_head_dim", source, minimum=0, maximum=MAX_DIM),
        max_position_embeddings=_opt_int(data, "max_position_embeddings", source),
        source=_opt_str(data, "source", source) or "",
        notes=_opt_str(data, "notes", source) or "",
        hf_id=_opt_str(data, "hf_id", source),
    )
    fields["length_config"] = _length_config(data, fields["max_position_embeddings"], source)
    if data.get("hf_config") is not None:
        fields["hf_config"] = json.dumps(data["hf_config"], sort_keys=True)
    if data.get("multimodal") is not None:
        fields["multimodal"] = _multimodal(data["multimodal"], source)
    if data.get("non_causal_attention") is not None:
        if not isinstance(data["non_causal_attention"], bool):
            raise _err("non_causal_attention", data["non_causal_attention"], "must be true or false", source)
        fields["non_causal_attention"] = data["non_causal_attention"]
    try:
        return ModelLayout(name=name, layer_kinds=layer_kinds, dtype=dtype, mamba=mamba,
                           illustrative=tuple(illustrative), **fields)
    except ConfigError as e:
        raise _reraise(e, source) from None


def _length_config(data: Mapping[str, Any], max_pos: int | None, source: str | None) -> Any:
    """``hf_config``: the public ``config.json``'s length-relevant keys (model type, RoPE
    scaling...), read as vLLM reads them; its ``max_position_embeddings`` must be the file's."""
    hf = data.get("hf_config")
    if hf is None:
        return None
    if not isinstance(hf, Mapping):
        raise _err("hf_config", hf, "must be an object of config.json keys", source)
    if "max_position_embeddings" in hf and hf["max_position_embeddings"] != max_pos:
        raise _err("hf_config.max_position_embeddings", hf["max_position_embeddings"],
                   f"must equal max_position_embeddings ({max_pos})", source)
    merged = dict(hf)
    if max_pos is not None:
        merged["max_position_embeddings"] = max_pos
    return length_config(merged, source or "catalog file")


def _multimodal(data: object, source: str | None) -> MultimodalLayout:
    if not isinstance(data, Mapping) or set(data) - {"max_tokens_per_item", "mm_prefix_lm"}:
        raise _err("multimodal", data, 'must be {"max_tokens_per_item": {modality: tokens}, "mm_prefix_lm": bool}',
                   source)
    items = data.get("max_tokens_per_item")
    if not isinstance(items, Mapping):
        raise _err("multimodal.max_tokens_per_item", items, "must map each modality to its largest item's "
                   "encoder tokens", source)
    try:
        return MultimodalLayout(tuple(items.items()), bool(data.get("mm_prefix_lm", False))
                                if isinstance(data.get("mm_prefix_lm", False), bool) else data["mm_prefix_lm"])
    except ConfigError as e:
        raise _reraise(e, source) from None


def _mamba_from_dict(data: object, source: str | None) -> MambaLayout:
    if not isinstance(data, Mapping):
        raise _err("mamba", data, "must be an object with a 'type' and its sizes", source)
    for key in data:
        if key not in _MAMBA_KEYS:
            raise _err(f"mamba.{key}", data[key], f"unknown field; allowed: {', '.join(_MAMBA_KEYS)}",
                       source)
    kwargs: dict[str, Any] = {}
    for key in _MAMBA_KEYS:
        if key in data and data[key] is not None:
            kwargs[key] = data[key]
    if "type" not in kwargs:
        raise _err("mamba.type", None, f"is required; one of {MAMBA_TYPES}", source)
    try:
        return MambaLayout(**kwargs)
    except ConfigError as e:
        raise _reraise(e, source) from None


def _models_dir() -> Any:
    return resources.files("kvverify") / "models"


def list_models() -> list[str]:
    """Names of the shipped catalog models, sorted."""
    return sorted(p.name[: -len(".json")] for p in _models_dir().iterdir()
                  if p.name.endswith(".json"))


def load_model(name: str) -> ModelLayout:
    """Load a shipped catalog model by name (e.g. ``"llama-3.1-8b"``)."""
    names = list_models()
    if not isinstance(name, str) or name not in names:
        raise ConfigError("model", name, f"unknown catalog model; available: {', '.join(names)}")
    resource = _models_dir() / f"{name}.json"
    layout = _layout_from_text(resource.read_text(encoding="utf-8"), f"kvverify/models/{name}.json")
    if layout.name != name:
        raise ConfigError("name", layout.name, f"must equal the file name {name!r} "
                          f"(in kvverify/models/{name}.json)")
    return layout


def load_model_file(path: str | Path) -> ModelLayout:
    """Load a catalog-format JSON file of your own."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CatalogError(str(p), f"cannot read model file: {e}") from None
    return _layout_from_text(text, str(p))


def _parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CatalogError(source, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


def _layout_from_text(text: str, source: str) -> ModelLayout:
    return layout_from_dict(_parse_json(text, source), source)


def load_all_models() -> dict[str, ModelLayout]:
    """Every shipped catalog model, by name."""
    return {name: load_model(name) for name in list_models()}

