"""Differential: ``max_model_len`` as kvverify derives it (:mod:`kvverify.catalog.lengths`) and
as the pinned vLLM 0.33.0 does (its config loader and ``_get_and_verify_max_len``, through
:mod:`kvverify.targets.vllm.lengths`), on every catalog model and on generated ``config.json``
files (``length_configs()``): the same length, or both refuse the length (and
``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` lifts the same refusals), or both refuse the config.

Part of the differential (``properties/test_differential.py``: skipped, with the reason, when
vLLM is not importable); recorded for CI without vLLM in ``properties/data/vllm-0.33.0-lengths.json.gz``
(``properties/test_recorded_lengths.py``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kvverify import catalog
from kvverify.catalog import lengths
from kvverify.catalog_strategies import length_configs, requested_lengths
from kvverify.errors import ConfigError
from test_differential import _pinned_release_only, vllm_target  # noqa: F401 - the fixture

CATALOG_LENGTHS = (None, -1, "derived", "derived+1", 10_000_000)


def kvverify_outcome(config: dict[str, Any], requested: int | None, allow_long: bool) -> tuple[str, Any]:
    """``("max_model_len", n)``, ``("refused", message)`` or ``("config_error", message)``."""
    try:
        lc = lengths.length_config(config)
    except ConfigError as e:
        return "config_error", str(e)
    verified = lengths.verify(lc, requested, allow_long=allow_long)
    if verified.refusal is not None:
        return "refused", verified.refusal
    return "max_model_len", verified.max_model_len


def vllm_outcome(config: dict[str, Any], requested: int | None, allow_long: bool) -> tuple[str, Any]:
    from kvverify.targets.vllm.lengths import vllm_max_model_len

    (kind, value), = vllm_max_model_len(config, requested, allow_long=allow_long).items()
    return kind, value


def compare(config: dict[str, Any], requested: int | None, allow_long: bool) -> tuple[str, Any]:
    mine, theirs = kvverify_outcome(config, requested, allow_long), vllm_outcome(config, requested, allow_long)
    assert mine[0] == theirs[0] and (mine[0] != "max_model_len" or mine[1] == theirs[1]), (
        f"config {json.dumps(config)}, max_model_len={requested}, allow_long={allow_long}:\n"
        f"  kvverify: {mine}\n  vLLM:     {theirs}")
    return mine


def catalog_config(name: str) -> dict[str, Any]:
    layout = catalog.load_model(name)
    cfg = json.loads(layout.hf_config or "{}")
    if layout.max_position_embeddings is not None:
        cfg["max_position_embeddings"] = layout.max_position_embeddings
    return cfg


@pytest.mark.parametrize("name", catalog.list_models())
def test_catalog_model_lengths_match_vllm(vllm_target, name: str) -> None:  # noqa: F811
    _pinned_release_only(vllm_target)
    cfg = catalog_config(name)
    default = lengths.derive(lengths.length_config(cfg)).default
    for requested in CATALOG_LENGTHS:
        value = default if requested == "derived" else default + 1 if requested == "derived+1" else requested
        for allow in (False, True):
            compare(cfg, value if isinstance(value, int) or value is None else None, allow)


@settings(deadline=None, max_examples=300)
@given(cfg=length_configs(), data=st.data(), allow=st.booleans())
def test_max_model_len_derivation_matches_vllm(vllm_target, cfg: dict[str, Any], data, allow: bool) -> None:  # noqa: F811
    _pinned_release_only(vllm_target)
    try:
        derived: int | None = lengths.derive(lengths.length_config(cfg)).default
    except ConfigError:
        derived = None
    requested = data.draw(requested_lengths(derived), label="max_model_len")
    kind, _ = compare(cfg, requested, allow)
    event(kind)
