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
from kvverify.errors import KVVerifyError
from kvverify.reference.grouping import get_global_kv_cache_groups
from kvverify.reference import specs as specs_module
from kvverify.reference.config import VllmConfig
from kvverify.reference.specs import KVCacheSpec, iter_layer_specs
from kvverify.strategies import block_size_cases, engine_core_cases, startup_cases

#: field -> why no strategy varies it: the reference does not read it, or no input upstream
#: accepts sets it (a gap the strategies could close does not belong here)
NOT_VARIED: dict[str, str] = {
    "MLAAttentionSpec.sliding_window": "upstream sets it only when promoting a SlidingWindowMLASpec "
                                       "(DeepSeek-V4) to MLA under a disabled hybrid manager; the reference "
                                       "registers no sliding-window MLA kind (an MLA layer has no window: "
                                       "upstream's attention layer asserts it), so no input reaches it",
    "MLAAttentionSpec.attention_chunk_size": "as sliding_window: upstream's promotions never produce an MLA "
                                             "spec with a chunk (chunked local layers become FullAttentionSpec)",
    "MLAAttentionSpec.head_size_v": "MLA pages are one latent vector (head_size_v = 0 upstream)",
    "CrossAttentionSpec.non_causal": "the engine core reads non_causal only to turn chunked prefill off late; "
                                     "an encoder-decoder model has it off before the budget check "
                                     "(SchedulerConfig.__post_init__), so on its cross-attention layers the flag "
                                     "only turns prefix caching off, the encoder-decoder case of F8's property "
                                     "(engine_core_cases varies it on every other kind)",
}


def _config_strategies() -> list[st.SearchStrategy[Any]]:
    """The case strategies the properties draw from (kvverify/props, properties/)."""
    from kvverify.connector_strategies import connector_cases
    from kvverify.props.encoder_decoder import encoder_decoder_cases

    return [
        startup_cases(),
        startup_cases(allow_auto=False, lookahead=True, allow_mamba=False),
        startup_cases(allow_auto=False, kinds=("full", "mla")),
        block_size_cases(),
        catalog_cases(),
        encoder_decoder_cases(),
        engine_core_cases(),
        connector_cases(),
        connector_cases(drafter_slots=True, connector_off=False),
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
    """The layer specs a case gives and the groups' specs the managers run on (grouping
    sets fields from the config: ``extra_retained_tokens``, a disabled hybrid manager's
    promoted windows)."""
    out: list[KVCacheSpec] = []
    workers = list(getattr(case, "kv_cache_specs", ()) or ())
    if getattr(case, "layer_specs", None):  # a catalog case
        workers.append(case.layer_specs)
    for worker in workers:
        for spec in worker.values():
            out.extend(iter_layer_specs(spec))
    config = getattr(case, "vllm_config", None)
    groups: list[Any] = list(getattr(getattr(case, "kv_cache_config", None), "kv_cache_groups", ()) or ())
    if workers and isinstance(config, VllmConfig):
        try:
            groups += get_global_kv_cache_groups(config, workers)
        except KVVerifyError:
            pass  # refused at startup: no group runs
    for group in groups:
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
