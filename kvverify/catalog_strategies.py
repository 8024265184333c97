"""Hypothesis strategies drawing configurations from the real-model catalog.

:func:`catalog_configs` yields ``(VllmConfig, layer_specs)`` pairs built from a catalog
model (optionally truncated to its first few pattern repeats, so examples stay fast)
with a drawn block size from the real set {16, 32, 64, 128}, a max_model_len at a block
multiple or one token either side, speculative tokens, KV dtype, prefix caching (which
selects the Mamba cache mode as upstream does), and a block-count source (explicit KV
memory, ``num_gpu_blocks_override`` or profiled memory) sized so that ``num_blocks``
lands at the minimum a full-length request needs, one either side, or anywhere in a
wide range. The boundary branch is one boolean the shrinker can turn off. Nothing is
filtered, so the strategy never fails Hypothesis's ``filter_too_much`` health check.

:func:`catalog_cases` yields the richer :class:`CatalogCase` (model name, layout, the
expected block count and the blocks one max_model_len request needs) for properties
that want to state expectations.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Sequence

from hypothesis import strategies as st

from kvverify.catalog import ModelLayout, build_model, hybrid_block_size, list_models, load_model
from kvverify.reference.config import VllmConfig
from kvverify.reference.grouping import get_global_kv_cache_groups
from kvverify.reference.planner import blocks_per_request, bytes_per_block
from kvverify.reference.specs import KVCacheSpec

#: Block sizes real deployments use.
REAL_BLOCK_SIZES = (16, 32, 64, 128)
MEMORY_SOURCES = ("memory", "override", "profiled")


@dataclass(frozen=True)
class CatalogCase:
    """One drawn configuration of a catalog model, with what the planner should find.

    ``num_blocks`` is the block count the memory source yields (null block included);
    ``blocks_needed`` is ``sum_g blocks_g(L)`` at the planned length (the auto-fit upper
    bound when ``max_model_len`` is auto), so the startup check passes for an explicit
    length iff ``blocks_needed <= num_blocks - 1``.
    """

    model: str
    layout: ModelLayout
    vllm_config: VllmConfig
    layer_specs: dict[str, KVCacheSpec]
    bytes_per_block: int
    blocks_needed: int
    num_blocks: int
    memory_source: str

    @property
    def pair(self) -> tuple[VllmConfig, dict[str, KVCacheSpec]]:
        return self.vllm_config, self.layer_specs


@functools.lru_cache(maxsize=None)
def _layout(name: str) -> ModelLayout:
    return load_model(name)


def catalog_layouts(models: Sequence[str] | None = None, *,
                    max_pattern_repeats: int | None = 2) -> st.SearchStrategy[ModelLayout]:
    """A catalog layout, truncated to its first 1..``max_pattern_repeats`` pattern repeats."""
    names = list(models) if models is not None else list_models()
    layouts = st.sampled_from(names).map(_layout)
    if max_pattern_repeats is None:
        return layouts
    return st.builds(lambda layout, k: layout.truncated(k), layouts,
                     st.integers(1, max_pattern_repeats))


@st.composite
def catalog_cases(draw: st.DrawFn, models: Sequence[str] | None = None, *,
                  max_pattern_repeats: int | None = 2, max_len_blocks: int = 64,
                  max_speculative_tokens: int = 3) -> CatalogCase:
    """Draw a :class:`CatalogCase`.

    ``models``: restrict to these catalog names (default: all). ``max_pattern_repeats``:
    keep only the first 1..K repetitions of the model's layer pattern (``None``: all
    layers). ``max_len_blocks``: max_model_len is at most this many blocks (+1 token).
    """
    names = list(models) if models is not None else list_models()
    name = draw(st.sampled_from(names))
    layout = _layout(name)
    if max_pattern_repeats is not None:
        layout = layout.truncated(draw(st.integers(1, max_pattern_repeats)))

    block_size = draw(st.sampled_from(REAL_BLOCK_SIZES))
    prefix_caching = draw(st.booleans())
    # Upstream (MambaModelConfig): prefix caching selects Mamba cache mode "align".
    mamba_mode = "align" if (layout.has_mamba and prefix_caching) else "none"
    spec_tokens = draw(st.integers(0, max_speculative_tokens))
    checkpoint = draw(st.integers(0, 1)) if mamba_mode == "align" else 0
    kv_dtype = draw(st.sampled_from(("auto", "fp8")))
    batched = draw(st.one_of(st.sampled_from((2048, 512)), st.integers(1, 16384)))
    disable_hybrid = (layout.has_local_attention and not layout.has_mamba and draw(st.booleans()))

    base = VllmConfig(block_size=block_size, max_num_batched_tokens=batched,
                      enable_prefix_caching=prefix_caching, mamba_cache_mode=mamba_mode,
                      num_lookahead_tokens=spec_tokens,
                      disable_hybrid_kv_cache_manager=disable_hybrid)
    options: dict[str, Any] = dict(kv_cache_dtype=kv_dtype, num_prefill_checkpoint_blocks=checkpoint)
    eff_block = hybrid_block_size(layout, base, kv_cache_dtype=kv_dtype,
                                  num_speculative_tokens=spec_tokens)

    # max_model_len: a block multiple, or one token either side.
    length = max(1, draw(st.integers(1, max_len_blocks)) * eff_block + draw(st.sampled_from((0, -1, 1))))
    auto = draw(st.booleans())
    base = replace(base, max_model_len=-1 if auto else length,
                   max_position_embeddings=length if auto else layout.max_position_embeddings)
    config, specs = build_model(layout, base, **options)

    groups = get_global_kv_cache_groups(config, [specs])
    bpb = bytes_per_block(groups)
    needed = blocks_per_request(groups, config.with_max_model_len(config.planning_max_model_len))
    minimum = needed + 1  # the null block
    if draw(st.booleans()):  # boundary branch: the smallest pool that starts, one either side
        num_blocks = max(1, minimum + draw(st.integers(-1, 1)))
    else:
        num_blocks = draw(st.integers(1, 2 * minimum + 2))

    source = draw(st.sampled_from(MEMORY_SOURCES))
    slack = draw(st.one_of(st.just(0), st.just(bpb - 1), st.integers(0, bpb - 1)))
    kv_bytes = num_blocks * bpb + slack
    if source == "override":
        config = replace(config, num_gpu_blocks_override=num_blocks)
    elif source == "memory":
        config = replace(config, kv_cache_memory_bytes=kv_bytes)
    else:
        shift = draw(st.sampled_from((0, 1, 2)))  # utilisation 1, 1/2, 1/4: exact in floats
        non_kv = draw(st.integers(0, 2**30))
        config = replace(config, gpu_memory_bytes=(kv_bytes + non_kv) << shift,
                         gpu_memory_utilization=1.0 / (1 << shift), non_kv_cache_memory_bytes=non_kv)
    return CatalogCase(model=name, layout=layout, vllm_config=config, layer_specs=specs,
                       bytes_per_block=bpb, blocks_needed=needed, num_blocks=num_blocks,
                       memory_source=source)


def catalog_configs(models: Sequence[str] | None = None, *, max_pattern_repeats: int | None = 2,
                    max_len_blocks: int = 64, max_speculative_tokens: int = 3,
                    ) -> st.SearchStrategy[tuple[VllmConfig, dict[str, KVCacheSpec]]]:
    """``(VllmConfig, layer_specs)`` drawn from the catalog; see :func:`catalog_cases`."""
    return catalog_cases(models, max_pattern_repeats=max_pattern_repeats,
                         max_len_blocks=max_len_blocks,
                         max_speculative_tokens=max_speculative_tokens).map(lambda c: c.pair)


__all__ = ["CatalogCase", "MEMORY_SOURCES", "REAL_BLOCK_SIZES", "catalog_cases", "catalog_configs",
           "catalog_layouts"]


# --- config.json length keys (the max_model_len derivation) ---------------------------------

#: model types whose transformers config class vLLM 0.33.0 loads without remote code, with the
#: architecture a config.json names for them
LENGTH_MODEL_TYPES = {
    "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM",
    "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM", "gpt_oss": "GptOssForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM", "qwen3_next": "Qwen3NextForCausalLM", "jamba": "JambaForCausalLM",
    "falcon_mamba": "FalconMambaForCausalLM", "llama4_text": "Llama4ForCausalLM",
}
_ROPE_TYPES = ("linear", "dynamic", "yarn", "llama3", "longrope", "default", "su", "deepseek_yarn", "ntk_unknown")


@st.composite
def rope_scalings(draw: st.DrawFn, max_pos: int | None) -> dict[str, Any] | None:
    """A ``rope_scaling`` dict: a type (legacy ``type`` or ``rope_type``), a factor (int, float or
    ``null``) and the type's other keys — all of them first, one missing now and then (transformers
    refuses that config)."""
    rope_type = draw(st.sampled_from(_ROPE_TYPES))
    key = draw(st.sampled_from(("rope_type", "type")))
    out: dict[str, Any] = {key: rope_type}
    out["factor"] = draw(st.one_of(st.sampled_from((2.0, 4.0, 8.0, 1.5, 32.0)), st.integers(1, 16), st.none()))
    original = draw(st.one_of(st.none(), st.integers(256, 65536)))
    if rope_type in ("yarn", "llama3", "longrope", "su", "deepseek_yarn") and original is not None:
        out["original_max_position_embeddings"] = original
    if rope_type == "llama3":
        out.update(low_freq_factor=1.0, high_freq_factor=4.0, rope_theta=500000.0)
    if rope_type in ("longrope", "su"):
        out.update(short_factor=[1.0] * 32, long_factor=[1.0] * 32)
    if draw(st.integers(0, 9)) == 0 and len(out) > 1:  # a required key missing: refused
        victim = draw(st.sampled_from(sorted(k for k in out if k not in ("rope_type", "type"))))
        del out[victim]
    return out


@st.composite
def length_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A ``config.json`` carrying what vLLM derives ``max_model_len`` from: a model type of
    :data:`LENGTH_MODEL_TYPES`, ``max_position_embeddings`` (absent now and then: the config
    class's default, or vLLM's 2048), sometimes another length key (``seq_length``,
    ``n_positions``, ``max_seq_len``, ``model_max_length``), ``rope_theta`` and a drawn
    ``rope_scaling`` (none first), ``original_max_position_embeddings`` at the top level sometimes."""
    model_type = draw(st.sampled_from(sorted(LENGTH_MODEL_TYPES)))
    cfg: dict[str, Any] = {"architectures": [LENGTH_MODEL_TYPES[model_type]], "model_type": model_type}
    max_pos = draw(st.one_of(st.sampled_from((4096, 8192, 32768, 131072)), st.integers(64, 1 << 20), st.none()))
    if max_pos is not None:
        cfg["max_position_embeddings"] = max_pos
    for key in draw(st.lists(st.sampled_from(("seq_length", "n_positions", "max_seq_len", "model_max_length")),
                             max_size=2, unique=True)):
        cfg[key] = draw(st.integers(64, 1 << 20))
    if model_type not in ("falcon_mamba", "jamba"):
        cfg["rope_theta"] = draw(st.sampled_from((10000.0, 500000.0, 1000000.0)))
        if draw(st.booleans()):
            cfg["rope_scaling"] = draw(rope_scalings(max_pos))
    longrope = (cfg.get("rope_scaling") or {}).get("rope_type", (cfg.get("rope_scaling") or {}).get("type")) in (
        "longrope", "su")
    if draw(st.integers(0, 1 if longrope else 5)) == 0:  # Phi-3 keeps it at the top (LongRoPE's default length)
        cfg["original_max_position_embeddings"] = draw(st.integers(256, 65536))
    return cfg


@st.composite
def requested_lengths(draw: st.DrawFn, derived: int | None) -> int | None:
    """``--max-model-len``: none, ``-1`` (auto), the derived length +-1, or anything."""
    around = [derived - 1, derived, derived + 1] if derived else []
    return draw(st.one_of(st.sampled_from([None, -1, *[x for x in around if x >= 1]]), st.integers(1, 1 << 22)))
