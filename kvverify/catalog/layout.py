"""The layout model: per-layer kinds and the numbers that size them (:class:`ModelLayout`,
:class:`MambaLayout`), and the catalog's layer-kind vocabulary, derived from the kinds
registry (:mod:`kvverify.reference.kinds`: each kind's ``layout_name`` and aliases)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from kvverify.catalog.lengths import LengthConfig
from kvverify.errors import MAX_TOKENS, ConfigError, KVVerifyError, require_int
from kvverify.reference import kinds
from kvverify.reference.dtypes import get_dtype_size

#: Canonical per-layer kinds: the registered kinds' catalog spellings. ``mamba`` is any
#: recurrent-state layer (Mamba-1, Mamba-2 or Gated DeltaNet "linear attention"); which one
#: is said by the layout's ``mamba`` section.
LAYER_KINDS = tuple(k.layout_name for k in kinds.layout_kinds() if k.layout_name)
ATTENTION_KINDS = frozenset(k.layout_name for k in kinds.layout_kinds() if k.layout_name and k.is_attention)
#: Attention kinds sized by per-head KV (``num_kv_heads`` + ``head_dim``): all but MLA's latent.
HEADED_ATTENTION_KINDS = ATTENTION_KINDS - {"mla"}
#: Accepted spellings (Hugging Face ``layer_types`` values among them) -> canonical kind.
LAYER_KIND_ALIASES = {s: k.layout_name for k in kinds.layout_kinds() if k.layout_name for s in k.spellings}
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


# --- multimodal inputs ----------------------------------------------------------------


@dataclass(frozen=True)
class MultimodalLayout:
    """A multimodal model's encoder inputs, as vLLM's processor profiles them: the largest item
    per modality in encoder embeddings (``get_mm_max_tokens_per_item`` with default processor
    kwargs) and whether the model attends to them bidirectionally (``is_mm_prefix_lm``: vLLM
    then forces ``disable_chunked_mm_input`` on CUDA)."""

    max_tokens_per_item: tuple[tuple[str, int], ...]
    mm_prefix_lm: bool = False

    def __post_init__(self) -> None:
        if not self.max_tokens_per_item:
            raise ConfigError("multimodal.max_tokens_per_item", {}, "must name at least one modality")
        for modality, tokens in self.max_tokens_per_item:
            if not isinstance(modality, str) or not modality:
                raise ConfigError("multimodal.max_tokens_per_item", modality, "modality names must be strings")
            require_int(f"multimodal.max_tokens_per_item.{modality}", tokens, minimum=1, maximum=MAX_TOKENS)
        if not isinstance(self.mm_prefix_lm, bool):
            raise ConfigError("multimodal.mm_prefix_lm", self.mm_prefix_lm, "must be true or false")

    @property
    def largest_item(self) -> tuple[str, int]:
        """``(modality, tokens)`` of the largest item (upstream ``max(mm_max_toks_per_item.values())``)."""
        return max(self.max_tokens_per_item, key=lambda kv: kv[1])

    def to_dict(self) -> dict[str, Any]:
        return {"max_tokens_per_item": dict(self.max_tokens_per_item), "mm_prefix_lm": self.mm_prefix_lm}


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
    #: what vLLM's ``_get_and_verify_max_len`` reads (:mod:`kvverify.catalog.lengths`); ``None``:
    #: only ``max_position_embeddings`` is known
    length_config: LengthConfig | None = None
    #: the catalog file's ``hf_config`` section (canonical JSON): the public ``config.json``'s
    #: model type and length keys, which the vLLM differential feeds to vLLM's own config loader
    hf_config: str | None = None
    #: encoder inputs of a multimodal model (``None``: text only, or not known)
    multimodal: MultimodalLayout | None = None
    #: some attention layer runs non-causally (prefix LM: upstream tags its KV cache spec
    #: ``non_causal``, and the engine core then turns chunked prefill off, late)
    non_causal_attention: bool = False

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
        if present & HEADED_ATTENTION_KINDS:
            self._need("num_kv_heads", 1, MAX_DIM, "full / sliding / chunked attention layers")
            self._need("head_dim", 1, MAX_DIM, "full / sliding / chunked attention layers")
        if "sliding" in present:
            self._need("sliding_window", 1, MAX_TOKENS, "sliding-window layers")
        if "chunked" in present:
            self._need("attention_chunk_size", 1, MAX_TOKENS, "chunked local attention layers")
        if "mla" in present:
            if present & HEADED_ATTENTION_KINDS:
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

    def lengths(self) -> LengthConfig:
        """The length-relevant config (only ``max_position_embeddings`` when nothing else is known)."""
        if self.length_config is not None:
            return self.length_config
        keys = (("max_position_embeddings", self.max_position_embeddings),) \
            if self.max_position_embeddings is not None else ()
        return LengthConfig(keys=keys)

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
    def has_local_attention(self) -> bool:
        """Some layer's kind recycles blocks under an admission cap (sliding window, chunked)."""
        return any(kinds.resolve(k).held is not None for k in self.layer_kinds)

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
        if self.hf_config is not None:
            out["hf_config"] = json.loads(self.hf_config)
        if self.multimodal is not None:
            out["multimodal"] = self.multimodal.to_dict()
        if self.non_causal_attention:
            out["non_causal_attention"] = True
        return out

