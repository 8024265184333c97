"""``max_model_len`` as vLLM 0.33.0 derives and verifies it from a model's ``config.json``.

Upstream ``vllm/config/model.py::_get_and_verify_max_len`` over the text config (for a
multimodal model, its ``text_config``), with what it reads:

* the *derived* length: the smallest of ``max_position_embeddings``, ``n_positions``,
  ``max_seq_len``, ``seq_length``, ``model_max_length``, ``max_target_positions``,
  ``max_sequence_length``, ``max_seq_length``, ``seq_len`` present
  (``ModelArchConfigConvertorBase.derive_max_model_len_and_key``), then ``model_max_length``
  when set (Command-R: it wins even when larger);
* none present: the config class's own default (transformers fills ``max_position_embeddings``
  for most model types: :data:`CLASS_DEFAULT_MAX_POSITION_EMBEDDINGS`), else vLLM assumes
  2048 (with a warning); a length the user gives is then taken as is;
* RoPE scaling: ``rope_scaling`` / ``rope_parameters`` (one dict, or one per layer type),
  legacy ``type`` read as ``rope_type`` (``su`` -> ``longrope``, ``mrope`` -> ``default``,
  ``telechat3-yarn`` -> ``yarn``); every type but ``su``, ``longrope``, ``llama3``, ``yarn``,
  ``deepseek_yarn`` and ``deepseek_llama_scaling`` multiplies the derived length by its
  ``factor`` (YaRN's ``max_position_embeddings`` is taken as already scaled); Gemma 3 is never
  scaled again; a ``null`` factor counts as 1;
* the default (``--max-model-len`` not given, or ``-1``/``auto``): the derived length, or
  ``original_max_position_embeddings`` for LongRoPE;
* a length above the derived one is refused unless ``model_max_length`` allows it, or
  ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` (or ``true``) is set: then it is accepted with a warning.

Transformers' RoPE validation is mirrored where it refuses a config (missing required keys
per type: ``KeyError`` upstream, a :class:`~kvverify.errors.ConfigError` here). Checked
against the real vLLM on every catalog model and on generated configs
(``properties/test_differential.py::test_max_model_len_derivation_matches_vllm``; recorded for
CI without vLLM in ``kvverify/golden/``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from kvverify.errors import MAX_TOKENS, ConfigError

#: ``derive_max_model_len_and_key``'s keys, in upstream's order
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
#: RoPE types whose ``factor`` does not scale the derived length (upstream's exclusion list)
UNSCALED_ROPE_TYPES = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
#: ``patch_legacy_rope_type``: legacy ``type`` values upstream rewrites
LEGACY_ROPE_TYPES = {"su": "longrope", "mrope": "default", "telechat3-yarn": "yarn"}
#: transformers ``_validate_<type>_rope_parameters``: keys a RoPE dict of that type must hold
REQUIRED_ROPE_KEYS = {
    "default": ("rope_type",),
    "linear": ("rope_type", "factor"),
    "dynamic": ("rope_type", "factor"),
    "yarn": ("rope_type", "factor", "original_max_position_embeddings"),
    "longrope": ("rope_type", "short_factor", "long_factor", "original_max_position_embeddings"),
    "llama3": ("rope_type", "factor", "original_max_position_embeddings", "low_freq_factor",
               "high_freq_factor", "rope_theta"),
}
#: transformers' ``standardize_rope_params`` fills these from ``max_position_embeddings``
_ORIGINAL_FILLED = ("llama3", "yarn", "longrope")
#: upstream's default when no key states a length (``_get_and_verify_max_len``)
DEFAULT_MAX_LEN = 2048
#: transformers 5.x config classes (the version the pinned vLLM installs): the
#: ``max_position_embeddings`` a ``config.json`` without one gets; a model type absent here
#: states no default (Mamba: none at all, so vLLM assumes :data:`DEFAULT_MAX_LEN`)
CLASS_DEFAULT_MAX_POSITION_EMBEDDINGS = {
    "llama": 2048, "mistral": 131072, "mixtral": 131072, "qwen2": 32768, "qwen3": 32768,
    "gemma2": 8192, "gemma3_text": 131072, "gpt_oss": 131072, "deepseek_v3": 4096,
    "qwen3_next": 32768, "jamba": 262144, "llama4_text": 131072,
}
ATTENTION_FREE_MODEL_TYPES = ("mamba", "falcon_mamba", "mamba2")
#: config classes that pre-fill ``rope_parameters`` with ``{"rope_type": "default"}`` and merge
#: ``rope_scaling`` into it (transformers' ``Gemma3TextConfig``): a legacy ``type`` key then
#: conflicts with that ``rope_type`` (upstream ``patch_legacy_rope_type`` raises)
MERGED_DEFAULT_ROPE_MODEL_TYPES = ("gemma3_text",)
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def allow_long_max_model_len(environ: Mapping[str, str] | None = None) -> bool:
    """``envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN``: ``"1"`` or ``"true"`` (any case, spaces stripped)."""
    env = os.environ if environ is None else environ
    return env.get(ALLOW_LONG_ENV, "0").strip().lower() in ("1", "true")


@dataclass(frozen=True)
class RopeParams:
    """One RoPE dict as upstream reads it: its type and its ``factor`` (``has_factor``: the key is there)."""

    rope_type: str
    factor: float | None = None
    has_factor: bool = False


@dataclass(frozen=True)
class LengthConfig:
    """What ``_get_and_verify_max_len`` reads from a text config (built by :func:`length_config`)."""

    model_type: str = ""
    keys: tuple[tuple[str, float], ...] = ()
    model_max_length: float | None = None
    rope: tuple[RopeParams, ...] = ()
    original_max_position_embeddings: int | None = None
    class_default: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": self.model_type, "keys": dict(self.keys), "model_max_length": self.model_max_length,
                "rope": [{"rope_type": r.rope_type, "factor": r.factor} for r in self.rope],
                "original_max_position_embeddings": self.original_max_position_embeddings,
                "class_default": self.class_default}


@dataclass(frozen=True)
class DerivedLength:
    """The derived length (``value``, after RoPE scaling; ``key``: where it came from) and the
    default ``max_model_len`` (``default``) vLLM takes when none is given."""

    value: float
    key: str | None
    scaling_factor: float
    default: int
    assumed: bool = False  # no key and no class default: upstream's 2048 guess
    unbounded: bool = False  # no key: a length the user gives is taken as is
    #: ``(rope_type, factor)`` of RoPE dicts whose factor upstream does not apply (YaRN, Llama 3...)
    unscaled: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class VerifiedLength:
    """``_get_and_verify_max_len``'s answer: the length, or why vLLM refuses it, and its warning."""

    max_model_len: int
    refusal: str | None = None
    warning: str | None = None


def _number(value: object, field: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise ConfigError(field, value, f"must be a positive number (in {source})")
    if value > MAX_TOKENS:
        raise ConfigError(field, value, f"must be at most {MAX_TOKENS} (in {source})")
    return float(value) if isinstance(value, float) else int(value)


def _rope(raw: object, field: str, source: str, max_pos: float | None, top_original: object) -> RopeParams:
    if not isinstance(raw, Mapping):
        raise ConfigError(field, raw, f"must be an object of RoPE parameters (in {source})")
    legacy, modern = raw.get("type"), raw.get("rope_type")
    if legacy is not None and modern is not None and legacy != modern and \
            LEGACY_ROPE_TYPES.get(str(legacy)) != modern:
        raise ConfigError(field, dict(raw), f"rope_type={modern!r} and the legacy type={legacy!r} conflict: give "
                          f"one of them (in {source})")
    rope_type = modern if modern is not None else (legacy if legacy is not None else "default")
    if not isinstance(rope_type, str):
        raise ConfigError(f"{field}.rope_type", rope_type, f"must be a string (in {source})")
    rope_type = LEGACY_ROPE_TYPES.get(rope_type, rope_type)
    keys = set(raw) | {"rope_type"}
    if rope_type in _ORIGINAL_FILLED and (max_pos is not None or top_original is not None):
        keys.add("original_max_position_embeddings")
    required = REQUIRED_ROPE_KEYS.get(rope_type, ())
    if rope_type == "llama3":  # standardize_rope_params fills rope_theta from the config's own
        keys.add("rope_theta")
    missing = [k for k in required if k not in keys]
    if missing:
        raise ConfigError(field, dict(raw), f"RoPE type {rope_type!r} needs {', '.join(missing)} (transformers "
                          f"refuses the config without; in {source})")
    factor = raw.get("factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                               or not math.isfinite(factor) or factor <= 0):
        raise ConfigError(f"{field}.factor", factor, f"must be a positive number (in {source})")
    return RopeParams(rope_type, None if factor is None else float(factor), "factor" in raw)


def length_config(cfg: Mapping[str, Any], source: str = "config.json") -> LengthConfig:
    """The length-relevant part of a (text) config: raises :class:`ConfigError` naming the field
    for a value upstream would not accept."""
    model_type = cfg.get("model_type") or ""
    if not isinstance(model_type, str):
        raise ConfigError("model_type", model_type, f"must be a string (in {source})")
    keys = tuple((k, _number(cfg[k], k, source)) for k in LENGTH_KEYS if cfg.get(k) is not None)
    mml = cfg.get("model_max_length")
    max_pos = dict(keys).get("max_position_embeddings")
    class_default = CLASS_DEFAULT_MAX_POSITION_EMBEDDINGS.get(model_type)
    if max_pos is None and class_default is not None:
        max_pos = class_default
    raw = cfg.get("rope_scaling") if cfg.get("rope_scaling") is not None else cfg.get("rope_parameters")
    top_original = cfg.get("original_max_position_embeddings")
    rope: tuple[RopeParams, ...] = ()
    field = "rope_scaling" if cfg.get("rope_scaling") is not None else "rope_parameters"
    if raw is not None:
        if not isinstance(raw, Mapping):
            raise ConfigError(field, raw, f"must be an object (in {source})")
        layer_types = cfg.get("layer_types")
        labels = set(layer_types) if isinstance(layer_types, list) and all(isinstance(x, str) for x in layer_types) \
            else set()
        nested = [k for k in raw if k in labels]
        if nested:
            rope = tuple(_rope(raw[k], f"{field}.{k}", source, max_pos, top_original)
                         for k in nested if raw[k] is not None)
        elif raw:
            if model_type in MERGED_DEFAULT_ROPE_MODEL_TYPES and cfg.get("rope_scaling") is not None \
                    and "rope_type" not in raw and raw.get("type") not in (None, "default"):
                raise ConfigError(f"{field}.type", raw.get("type"), f"conflicts with the rope_type 'default' the "
                                  f"{model_type} config class sets: give rope_type instead (in {source})")
            rope = (_rope(raw, field, source, max_pos, top_original),)
    original = None
    if top_original is not None:
        original = int(_number(top_original, "original_max_position_embeddings", source))
    return LengthConfig(model_type=model_type, keys=keys,
                        model_max_length=None if mml is None else _number(mml, "model_max_length", source),
                        rope=rope, original_max_position_embeddings=original, class_default=class_default)


def derive(lc: LengthConfig) -> DerivedLength:
    """The derived length and the default ``max_model_len`` (upstream, step by step)."""
    derived: float = math.inf
    key: str | None = None
    keys = dict(lc.keys)
    if "max_position_embeddings" not in keys and lc.class_default is not None:
        keys["max_position_embeddings"] = lc.class_default  # the config class fills it in
    for k in LENGTH_KEYS:
        if k in keys and keys[k] < derived:
            derived, key = keys[k], k
    if lc.model_max_length:
        derived, key = lc.model_max_length, "model_max_length"
    unbounded = derived == math.inf
    assumed = unbounded
    if unbounded:
        derived = DEFAULT_MAX_LEN
    factor = 1.0
    unscaled = tuple((rp.rope_type, rp.factor) for rp in lc.rope
                     if rp.factor is not None and rp.factor != 1 and (rp.rope_type in UNSCALED_ROPE_TYPES
                                                                       or "gemma3" in lc.model_type))
    if lc.rope and "gemma3" not in lc.model_type:
        scaling: float | None = 1.0
        for rp in lc.rope:
            if rp.rope_type not in UNSCALED_ROPE_TYPES and rp.has_factor:
                scaling = rp.factor
        factor = 1.0 if scaling is None else scaling
        derived *= factor
    if any(rp.rope_type == "longrope" for rp in lc.rope):
        default = int(lc.original_max_position_embeddings if lc.original_max_position_embeddings is not None
                      else derived)
    else:
        default = int(derived)
    return DerivedLength(derived, key, factor, default, assumed=assumed, unbounded=unbounded, unscaled=unscaled)


def unscaled_note(d: DerivedLength) -> str | None:
    """Why a RoPE factor in the config did not raise the length (or ``None``)."""
    if not d.unscaled:
        return None
    what = ", ".join(f"{t} factor {f:g}" for t, f in d.unscaled)
    return (f"rope_scaling ({what}) does not raise the derived length: vLLM 0.33.0 takes "
            f"{d.key or 'the stated length'} as already scaled for this RoPE type (Gemma 3: always)")


def verify(lc: LengthConfig, max_model_len: int | None, *, allow_long: bool | None = None) -> VerifiedLength:
    """``_get_and_verify_max_len(max_model_len)``: ``None`` or ``-1`` take the default."""
    d = derive(lc)
    if max_model_len is not None and d.unbounded:  # upstream returns it as given, -1 included
        return VerifiedLength(max_model_len)
    if max_model_len is None or max_model_len == -1:
        warning = (f"the config states none of {', '.join(LENGTH_KEYS)}: vLLM assumes {DEFAULT_MAX_LEN}"
                   if d.assumed else None)
        return VerifiedLength(d.default, warning=warning)
    if max_model_len > d.value:
        mml = lc.model_max_length
        if mml is None or max_model_len > mml:
            value = f"{d.value:g}" if d.value != int(d.value) else f"{int(d.value)}"
            msg = (f"max_model_len {max_model_len} is greater than the derived max_model_len ({d.key}={value}"
                   + (f", RoPE scaling x{d.scaling_factor:g}" if d.scaling_factor != 1 else "")
                   + f" in the model's config.json)")
            if allow_long_max_model_len() if allow_long is None else allow_long:
                return VerifiedLength(max_model_len, warning=f"{msg}; accepted because {ALLOW_LONG_ENV}=1 is set "
                                      "(positions beyond it can give NaNs or out-of-bounds errors)")
            return VerifiedLength(max_model_len, refusal=f"{msg}; vLLM refuses it unless {ALLOW_LONG_ENV}=1 is set")
    return VerifiedLength(max_model_len)
