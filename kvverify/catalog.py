"""Real architectures' KV-cache layouts: the model catalog and Hugging Face ``config.json``.

A :class:`ModelLayout` says, per layer, what kind of KV state the layer keeps (full
attention, sliding window, chunked local, MLA, or Mamba-like state) and the numbers that
size it. Layouts come from three places:

* the shipped catalog (``kvverify/models/*.json``, schema in ``models/README.md``):
  :func:`list_models`, :func:`load_model`;
* a catalog-format file of your own: :func:`load_model_file`;
* a Hugging Face ``config.json`` (path, directory or dict): :func:`read_hf_config`.

:func:`build_layer_specs` turns a layout into per-layer :mod:`kvverify.reference.specs` (layer name
-> spec, as upstream's per-layer ``get_kv_cache_spec`` does), including what upstream does
around it for hybrid attention+Mamba models (``Platform._align_hybrid_block_size``): the
attention block size is raised to ``k * cdiv(mamba_page, k * p1)`` and the Mamba page is
padded to the attention page. :func:`build_model` returns the effective config (with the
aligned ``block_size``) together with the specs.

Every malformed input raises :class:`~kvverify.errors.ConfigError` naming the field (or
:class:`CatalogError` for a file that cannot be read or parsed).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from kvverify.reference import arith
from kvverify.reference.config import VllmConfig
from kvverify.reference.dtypes import DTYPE_BYTES, get_dtype_size
from kvverify.errors import MAX_TOKENS, ConfigError, KVVerifyError, require_int
from kvverify.reference.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

#: Canonical per-layer kinds. ``mamba`` is any recurrent-state layer (Mamba-1, Mamba-2 or
#: Gated DeltaNet "linear attention"); which one is said by the layout's ``mamba`` section.
LAYER_KINDS = ("full", "sliding", "chunked", "mla", "mamba")
ATTENTION_KINDS = frozenset({"full", "sliding", "chunked", "mla"})
#: Accepted spellings (Hugging Face ``layer_types`` values among them) -> canonical kind.
LAYER_KIND_ALIASES = {
    "full": "full", "full_attention": "full", "attention": "full", "global": "full",
    "sliding": "sliding", "sliding_attention": "sliding", "local": "sliding",
    "chunked": "chunked", "chunked_attention": "chunked",
    "mla": "mla",
    "mamba": "mamba", "linear_attention": "mamba", "gdn": "mamba",
}
MAMBA_TYPES = ("mamba1", "mamba2", "gdn")
#: FlashAttention's supported kernel block sizes are ``MultipleOf(16)`` (upstream).
DEFAULT_KERNEL_BLOCK_SIZE = 16
#: TRTLLM / FlashInfer MLA decode kernels: hybrid MLA models align to 128 (upstream).
MLA_KERNEL_BLOCK_ALIGNMENT = 128
MAX_LAYERS = 10_000
MAX_DIM = 2**20

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class CatalogError(KVVerifyError):
    """A model file that cannot be read or parsed (the message names the path)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


# --- recurrent state layouts --------------------------------------------------------


@dataclass(frozen=True)
class MambaLayout:
    """A recurrent-state layer's sizes (upstream ``MambaStateShapeCalculator``).

    ``type``:
      * ``mamba1``: conv ``(d_conv - 1, d_inner)``, SSM ``(d_inner, d_state)``;
      * ``mamba2``: conv ``(d_conv - 1 + S, d_inner + 2 * n_groups * d_state)``,
        SSM ``(num_heads, head_dim, d_state)``;
      * ``gdn`` (Gated DeltaNet): conv ``(conv_kernel - 1 + S, 2 * num_key_heads *
        key_head_dim + num_value_heads * value_head_dim)``, SSM ``(num_value_heads,
        value_head_dim, key_head_dim)``.
    ``S`` is the number of speculative tokens (Mamba-1 conv state does not grow with it,
    as upstream). Conv layout is upstream's default ``SD`` (state_len, dim) and tensor
    parallelism is 1. ``ssm_dtype`` overrides the SSM state dtype (else the model dtype).
    """

    type: str
    d_inner: int | None = None
    d_state: int | None = None
    d_conv: int | None = None
    n_groups: int | None = None
    num_heads: int | None = None
    head_dim: int | None = None
    num_key_heads: int | None = None
    num_value_heads: int | None = None
    key_head_dim: int | None = None
    value_head_dim: int | None = None
    conv_kernel: int | None = None
    ssm_dtype: str | None = None

    REQUIRED = {
        "mamba1": ("d_inner", "d_state", "d_conv"),
        "mamba2": ("d_inner", "d_state", "d_conv", "n_groups", "num_heads", "head_dim"),
        "gdn": ("num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim", "conv_kernel"),
    }

    def __post_init__(self) -> None:
        if self.type not in MAMBA_TYPES:
            raise ConfigError("mamba.type", self.type, f"must be one of {MAMBA_TYPES}")
        allowed = set(self.REQUIRED[self.type])
        for name in ("d_inner", "d_state", "d_conv", "n_groups", "num_heads", "head_dim",
                     "num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim",
                     "conv_kernel"):
            value = getattr(self, name)
            if name in allowed:
                if value is None:
                    raise ConfigError(f"mamba.{name}", None, f"is required for mamba.type={self.type!r}")
                minimum = 2 if name in ("d_conv", "conv_kernel") else 1
                require_int(f"mamba.{name}", value, minimum=minimum, maximum=MAX_DIM)
            elif value is not None:
                raise ConfigError(f"mamba.{name}", value,
                                  f"is not a field of mamba.type={self.type!r}; "
                                  f"allowed: {', '.join(self.REQUIRED[self.type])}, ssm_dtype")
        if self.ssm_dtype is not None:
            get_dtype_size(self.ssm_dtype, "mamba.ssm_dtype")

    def state_shapes(self, num_speculative_tokens: int = 0) -> tuple[tuple[int, ...], ...]:
        """``(conv_state_shape, ssm_state_shape)`` per layer and request (TP = 1)."""
        s = num_speculative_tokens
        if self.type == "mamba1":
            assert self.d_inner and self.d_state and self.d_conv
            return (self.d_conv - 1, self.d_inner), (self.d_inner, self.d_state)
        if self.type == "mamba2":
            assert self.d_inner and self.d_state and self.d_conv and self.n_groups
            assert self.num_heads and self.head_dim
            conv_dim = self.d_inner + 2 * self.n_groups * self.d_state
            return (self.d_conv - 1 + s, conv_dim), (self.num_heads, self.head_dim, self.d_state)
        assert self.num_key_heads and self.num_value_heads and self.key_head_dim
        assert self.value_head_dim and self.conv_kernel
        conv_dim = 2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim
        return ((self.conv_kernel - 1 + s, conv_dim),
                (self.num_value_heads, self.value_head_dim, self.key_head_dim))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for name in self.REQUIRED[self.type]:
            out[name] = getattr(self, name)
        if self.ssm_dtype is not None:
            out["ssm_dtype"] = self.ssm_dtype
        return out


# --- the layout ---------------------------------------------------------------------


@dataclass(frozen=True)
class ModelLayout:
    """One model's KV-cache layout: per-layer kinds and the numbers that size them.

    Attention fields are required exactly when a layer of that kind exists:
    ``num_kv_heads`` + ``head_dim`` for full / sliding / chunked layers,
    ``sliding_window`` for sliding layers, ``attention_chunk_size`` for chunked layers,
    ``kv_lora_rank`` + ``qk_rope_head_dim`` for MLA layers (one latent "head" of
    ``kv_lora_rank + qk_rope_head_dim``), ``mamba`` for Mamba-kind layers.
    """

    name: str
    layer_kinds: tuple[str, ...]
    dtype: str = "bfloat16"
    num_kv_heads: int | None = None
    head_dim: int | None = None
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    mamba: MambaLayout | None = None
    max_position_embeddings: int | None = None
    source: str = ""
    notes: str = ""
    hf_id: str | None = None
    illustrative: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ConfigError("name", self.name,
                              "must be a non-empty string of letters, digits, '.', '_' or '-'")
        kinds = self.layer_kinds
        if not isinstance(kinds, tuple) or not kinds:
            raise ConfigError("layer_kinds", kinds, "must be a non-empty tuple of layer kinds")
        if len(kinds) > MAX_LAYERS:
            raise ConfigError("num_layers", len(kinds), f"must be in [1, {MAX_LAYERS}]")
        for i, kind in enumerate(kinds):
            if kind not in LAYER_KINDS:
                raise ConfigError(f"layer_kinds[{i}]", kind,
                                  f"unknown layer kind; allowed: {', '.join(LAYER_KINDS)}")
        get_dtype_size(self.dtype, "dtype")
        present = set(kinds)
        if present & {"full", "sliding", "chunked"}:
            self._need("num_kv_heads", 1, MAX_DIM, "full / sliding / chunked attention layers")
            self._need("head_dim", 1, MAX_DIM, "full / sliding / chunked attention layers")
        if "sliding" in present:
            self._need("sliding_window", 1, MAX_TOKENS, "sliding-window layers")
        if "chunked" in present:
            self._need("attention_chunk_size", 1, MAX_TOKENS, "chunked local attention layers")
        if "mla" in present:
            if present & {"full", "sliding", "chunked"}:
                raise ConfigError("layer_kinds", sorted(present),
                                  "MLA layers cannot be mixed with full / sliding / chunked "
                                  "attention layers (upstream's use_mla is model-wide)")
            self._need("kv_lora_rank", 1, MAX_DIM, "MLA layers")
            self._need("qk_rope_head_dim", 0, MAX_DIM, "MLA layers")
        if "mamba" in present:
            if not isinstance(self.mamba, MambaLayout):
                raise ConfigError("mamba", self.mamba, "a mamba section is required for mamba layers")
        for opt in ("num_kv_heads", "head_dim", "kv_lora_rank"):
            if getattr(self, opt) is not None:
                require_int(opt, getattr(self, opt), minimum=1, maximum=MAX_DIM)
        if self.qk_rope_head_dim is not None:
            require_int("qk_rope_head_dim", self.qk_rope_head_dim, minimum=0, maximum=MAX_DIM)
        for opt in ("sliding_window", "attention_chunk_size", "max_position_embeddings"):
            if getattr(self, opt) is not None:
                require_int(opt, getattr(self, opt), minimum=1, maximum=MAX_TOKENS)
        if self.mamba is not None and not isinstance(self.mamba, MambaLayout):
            raise ConfigError("mamba", self.mamba, "must be a MambaLayout")

    def _need(self, name: str, minimum: int, maximum: int, why: str) -> None:
        value = getattr(self, name)
        if value is None:
            raise ConfigError(name, None, f"is required by the model's {why}")
        require_int(name, value, minimum=minimum, maximum=maximum)

    # -- shape facts ---------------------------------------------------------------

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    def kind_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for kind in self.layer_kinds:
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    @property
    def has_attention(self) -> bool:
        return any(k in ATTENTION_KINDS for k in self.layer_kinds)

    @property
    def has_mamba(self) -> bool:
        return "mamba" in self.layer_kinds

    @property
    def is_hybrid(self) -> bool:
        """Attention and Mamba layers in one model (upstream ``model_config.is_hybrid``)."""
        return self.has_attention and self.has_mamba

    @property
    def uses_mla(self) -> bool:
        return "mla" in self.layer_kinds

    @property
    def period(self) -> int:
        """Length of the shortest prefix whose repetition gives every layer's kind."""
        kinds = self.layer_kinds
        n = len(kinds)
        for p in range(1, n + 1):
            if all(kinds[i] == kinds[i % p] for i in range(n)):
                return p
        return n  # pragma: no cover - p == n always matches

    @property
    def pattern(self) -> tuple[str, ...]:
        return self.layer_kinds[: self.period]

    def truncated(self, repeats: int) -> ModelLayout:
        """The first ``repeats`` repetitions of the layer pattern (never more than all layers).

        Keeps the kind ratio (hence the grouping shape) with fewer layers, so properties
        over real models stay fast.
        """
        require_int("repeats", repeats, minimum=1, maximum=MAX_LAYERS)
        keep = min(self.num_layers, repeats * self.period)
        if keep == self.num_layers:
            return self
        return replace(self, layer_kinds=self.layer_kinds[:keep])

    def kv_cache_dtype(self, kv_cache_dtype: str = "auto") -> str:
        """Element dtype of attention KV: the model dtype for ``auto``."""
        if kv_cache_dtype == "auto":
            return self.dtype
        get_dtype_size(kv_cache_dtype, "kv_cache_dtype")
        return kv_cache_dtype

    def attention_page_bytes_per_token(self, kv_cache_dtype: str = "auto") -> int:
        """``p1``: one token of one attention layer (MLA: ``(kv_lora_rank + rope) * dtype``)."""
        size = get_dtype_size(self.kv_cache_dtype(kv_cache_dtype), "kv_cache_dtype")
        if self.uses_mla:
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            return (self.kv_lora_rank + self.qk_rope_head_dim) * size
        assert self.num_kv_heads is not None and self.head_dim is not None
        return 2 * self.num_kv_heads * self.head_dim * size

    def mamba_state_dtypes(self, mamba_cache_dtype: str = "auto",
                           mamba_ssm_cache_dtype: str = "auto") -> tuple[str, str]:
        """``(conv dtype, ssm dtype)`` (upstream ``MambaStateDtypeCalculator``)."""
        conv = self.dtype if mamba_cache_dtype == "auto" else mamba_cache_dtype
        get_dtype_size(conv, "mamba_cache_dtype")
        if mamba_ssm_cache_dtype != "auto":
            ssm = mamba_ssm_cache_dtype
        elif self.mamba is not None and self.mamba.ssm_dtype is not None:
            ssm = self.mamba.ssm_dtype
        else:
            ssm = conv
        get_dtype_size(ssm, "mamba_ssm_cache_dtype")
        return conv, ssm

    def mamba_page_bytes(self, num_speculative_tokens: int = 0, mamba_cache_dtype: str = "auto",
                         mamba_ssm_cache_dtype: str = "auto") -> int:
        """Real (unpadded) Mamba page: ``sum(prod(shape) * dtype_bytes)`` over the states."""
        if self.mamba is None:
            return 0
        shapes = self.mamba.state_shapes(num_speculative_tokens)
        dtypes = self.mamba_state_dtypes(mamba_cache_dtype, mamba_ssm_cache_dtype)
        return sum(math.prod(s) * get_dtype_size(d) for s, d in zip(shapes, dtypes))

    def layer_name(self, index: int) -> str:
        """Upstream-style layer name of layer ``index``."""
        kind = self.layer_kinds[index]
        if kind == "mamba":
            suffix = "linear_attn" if self.mamba is not None and self.mamba.type == "gdn" else "mamba"
            return f"model.layers.{index}.{suffix}"
        return f"model.layers.{index}.self_attn"

    def to_dict(self) -> dict[str, Any]:
        """The catalog-file form of this layout (round-trips through :func:`layout_from_dict`)."""
        out: dict[str, Any] = {"name": self.name}
        if self.hf_id is not None:
            out["hf_id"] = self.hf_id
        out["source"] = self.source
        if self.notes:
            out["notes"] = self.notes
        if self.illustrative:
            out["illustrative"] = list(self.illustrative)
        out["num_layers"] = self.num_layers
        if self.period < self.num_layers:
            out["layers"] = {"pattern": list(self.pattern)}
        else:
            out["layers"] = {"layer_types": list(self.layer_kinds)}
        out["dtype"] = self.dtype
        for name in ("num_kv_heads", "head_dim", "sliding_window", "attention_chunk_size",
                     "kv_lora_rank", "qk_rope_head_dim"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.mamba is not None:
            out["mamba"] = self.mamba.to_dict()
        out["max_position_embeddings"] = self.max_position_embeddings
        return out


# --- catalog files ------------------------------------------------------------------

_TOP_KEYS = ("$schema", "schema_version", "name", "hf_id", "source", "notes", "illustrative",
             "num_layers", "layers", "dtype", "num_kv_heads", "head_dim", "sliding_window",
             "attention_chunk_size", "kv_lora_rank", "qk_rope_head_dim", "mamba",
             "max_position_embeddings")
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
    fields = dict(
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
    try:
        return ModelLayout(name=name, layer_kinds=layer_kinds, dtype=dtype, mamba=mamba,
                           illustrative=tuple(illustrative), **fields)
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


# --- Hugging Face config.json -------------------------------------------------------

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
        norm = raw.lower().removeprefix("torch.") if isinstance(raw, str) else raw
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
    if present & {"full", "sliding", "chunked"}:
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
            mamba=mamba, max_position_embeddings=max_pos, source=source,
            hf_id=cfg.get("_name_or_path") if isinstance(cfg.get("_name_or_path"), str) else None)
    except ConfigError as e:
        raise _reraise(e, source) from None


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
        vals = {}
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


# --- layout -> layer specs ----------------------------------------------------------


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
        if kind == "full":
            specs[name] = FullAttentionSpec(**common)
        elif kind == "sliding":
            specs[name] = SlidingWindowSpec(**common, sliding_window=layout.sliding_window)
        elif kind == "chunked":
            specs[name] = ChunkedLocalAttentionSpec(**common,
                                                    attention_chunk_size=layout.attention_chunk_size)
        elif kind == "mla":
            assert layout.kv_lora_rank is not None and layout.qk_rope_head_dim is not None
            specs[name] = MLAAttentionSpec(block_size=block_size, num_kv_heads=1,
                                           head_size=layout.kv_lora_rank + layout.qk_rope_head_dim,
                                           dtype=kv_dtype)
        else:
            assert mamba_spec is not None
            specs[name] = mamba_spec
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



__all__ = [
    "ATTENTION_KINDS", "BuiltModel", "CatalogError", "LAYER_KINDS", "MambaLayout", "ModelLayout",
    "build_layer_specs", "build_model", "effective_config", "hybrid_block_size", "layout_from_dict",
    "list_models", "load_all_models", "load_model", "load_model_file", "read_hf_config",
]
