"""Every configuration field the reference honours is drawn with a non-default value (issue 15).

A field no strategy ever sets keeps the code behind it unexercised: a fault there survives
any number of examples. This test enumerates ``VllmConfig``'s fields and every spec class's
fields, draws from the strategies the properties use, and fails for a field that never
takes a non-default value, unless :data:`NOT_VARIED` lists it with a reason.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvverify.catalog_strategies import catalog_cases
from kvverify.reference import specs as specs_module
from kvverify.reference.config import VllmConfig
from kvverify.reference.specs import KVCacheSpec, iter_layer_specs
from kvverify.strategies import block_size_cases, startup_cases

#: field -> why no strategy varies it (every entry is a known gap, not an oversight)
NOT_VARIED: dict[str, str] = {
    "VllmConfig.max_concurrent_batches": "pipeline-parallel in-flight batches: the synchronous scheduler "
                                         "model steps one batch; only the in-flight cap formula reads it",
    "VllmConfig.kv_connector": "KV transfer connectors are out of the model (no remote blocks)",
    "VllmConfig.watermark": "upstream's watermark is outside the startup guarantee (admission may refuse a "
                            "request the check sized for); no property models it yet",
    "VllmConfig.max_num_encoder_input_tokens": "encoder-decoder budgets: no cross-attention workload "
                                               "strategy draws encoder tokens yet",
    "VllmConfig.num_prefill_lookahead_tokens": "multi-module MTP prefill lookahead: not mirrored by the "
                                               "reference scheduler",
    # spec fields: gaps of the spec-kind builders (kvverify/spec_kinds), to be drawn there
    "FullAttentionSpec.page_size_padded": "padding is drawn for Mamba pages only (hybrid page rule)",
    "MLAAttentionSpec.page_size_padded": "padding is drawn for Mamba pages only (hybrid page rule)",
    "SlidingWindowSpec.page_size_padded": "padding is drawn for Mamba pages only (hybrid page rule)",
    "ChunkedLocalAttentionSpec.page_size_padded": "padding is drawn for Mamba pages only (hybrid page rule)",
    "FullAttentionSpec.sliding_window": "set upstream only when the hybrid manager is disabled (SWA "
                                        "layers served as full); no builder draws that conversion yet",
    "FullAttentionSpec.attention_chunk_size": "as sliding_window: the disabled-hybrid conversion is not drawn",
    "MLAAttentionSpec.sliding_window": "MLA+SWA mixes: being added by the issue-17 strategies",
    "MLAAttentionSpec.attention_chunk_size": "as sliding_window: the disabled-hybrid conversion is not drawn",
    "MLAAttentionSpec.head_size_v": "MLA pages are one latent vector (head_size_v = 0 upstream)",
    "SlidingWindowSpec.extra_retained_tokens": "speculative-decoding retention: no builder draws it yet",
    "MambaSpec.num_speculative_blocks": "speculative Mamba blocks: no builder draws them yet",
    "MambaSpec.num_prefill_checkpoint_blocks": "Mamba prefill checkpoints: no builder draws them yet",
}


def _config_strategies() -> list[st.SearchStrategy[Any]]:
    """The case strategies the properties draw from (kvverify/props, properties/)."""
    return [
        startup_cases(),
        startup_cases(allow_auto=False, lookahead=True, allow_mamba=False),
        startup_cases(allow_auto=False, kinds=("full", "mla")),
        block_size_cases(),
        catalog_cases(),
    ]


def _non_default(obj: Any) -> set[str]:
    out = set()
    for f in dataclasses.fields(obj):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            continue  # required: always set
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if getattr(obj, f.name) != default:
            out.add(f.name)
    return out


def _specs_of(case: Any) -> list[KVCacheSpec]:
    out: list[KVCacheSpec] = []
    for worker in getattr(case, "kv_cache_specs", ()) or ():
        for spec in worker.values():
            out.extend(iter_layer_specs(spec))
    kv = getattr(case, "kv_cache_config", None)
    for group in getattr(kv, "kv_cache_groups", ()) or ():
        out.extend(iter_layer_specs(group.kv_cache_spec))
    return out


@functools.lru_cache(maxsize=1)
def _observed() -> dict[str, set[str]]:
    seen: dict[str, set[str]] = defaultdict(set)
    for strategy in _config_strategies():
        @settings(max_examples=150, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def collect(case: Any) -> None:
            config = getattr(case, "vllm_config", None)
            if isinstance(config, VllmConfig):
                seen["VllmConfig"] |= _non_default(config)
            for spec in _specs_of(case):
                seen[type(spec).__name__] |= _non_default(spec)
        collect()
    return seen


def _optional_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING]


def test_every_honoured_field_is_varied() -> None:
    seen = _observed()
    classes = [VllmConfig] + [c for c in vars(specs_module).values()
                              if isinstance(c, type) and issubclass(c, KVCacheSpec) and c is not KVCacheSpec
                              and dataclasses.is_dataclass(c) and c.__name__ in seen]
    unvaried = [f"{cls.__name__}.{name}" for cls in classes for name in _optional_fields(cls)
                if name not in seen[cls.__name__] and f"{cls.__name__}.{name}" not in NOT_VARIED]
    assert not unvaried, f"no strategy sets these fields to a non-default value: {unvaried}"


def test_not_varied_entries_are_real_and_still_unvaried() -> None:
    """A stale entry (field gone, or a strategy now varies it) must leave the list."""
    seen = _observed()
    for key in NOT_VARIED:
        cls_name, name = key.split(".")
        cls = VllmConfig if cls_name == "VllmConfig" else getattr(specs_module, cls_name)
        assert name in _optional_fields(cls), key
        assert name not in seen[cls_name], f"{key} is varied now: drop it from NOT_VARIED"



def test_a_knob_never_turned_is_reported(monkeypatch) -> None:
    """Teeth: with only the block-size cases, the scheduling policy (among others) is unvaried."""
    import sys

    import pytest

    me = sys.modules[__name__]
    monkeypatch.setattr(me, "_config_strategies", lambda: [block_size_cases()])
    _observed.cache_clear()
    try:
        with pytest.raises(AssertionError, match="VllmConfig.scheduling_policy"):
            test_every_honoured_field_is_varied()
    finally:
        _observed.cache_clear()
