"""The length and trap differentials earn their place: planted mistakes in kvverify's length
derivation and trap rules are caught by the recorded vLLM answers (offline), and the started-
engine property catches a scheduler that stalls at the Mamba slot boundary."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import kvverify.catalog.lengths as lengths
import kvverify.check.traps as traps
from kvverify import flaws

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "properties"))

from test_recorded_lengths import records, replay  # noqa: E402


def mismatches() -> int:
    return sum(1 for r in records() if (lambda m: m[0] != m[1])(replay(r)))


def test_the_faithful_rules_match_every_record() -> None:
    assert mismatches() == 0


@pytest.mark.parametrize("mutation", ["yarn_scaled", "no_model_max_length", "no_gemma3_skip",
                                      "no_longrope_default", "no_class_default"])
def test_length_mutations_are_caught(monkeypatch, mutation: str) -> None:
    if mutation == "yarn_scaled":  # YaRN's factor applied again (what the issue expected of 0.33.0)
        monkeypatch.setattr(lengths, "UNSCALED_ROPE_TYPES", tuple(t for t in lengths.UNSCALED_ROPE_TYPES if t != "yarn"))
    elif mutation == "no_model_max_length":
        real = lengths.derive
        monkeypatch.setattr(lengths, "derive", lambda lc: real(lengths.LengthConfig(
            lc.model_type, tuple(kv for kv in lc.keys if kv[0] != "model_max_length"), None, lc.rope,
            lc.original_max_position_embeddings, lc.class_default)))
    elif mutation == "no_gemma3_skip":
        real = lengths.derive
        monkeypatch.setattr(lengths, "derive", lambda lc: real(lengths.LengthConfig(
            lc.model_type.replace("gemma3", "gemma"), lc.keys, lc.model_max_length, lc.rope,
            lc.original_max_position_embeddings, lc.class_default)))
    elif mutation == "no_longrope_default":
        real = lengths.derive
        monkeypatch.setattr(lengths, "derive", lambda lc: real(lengths.LengthConfig(
            lc.model_type, lc.keys, lc.model_max_length, lc.rope, None, lc.class_default)))
    else:
        monkeypatch.setattr(lengths, "CLASS_DEFAULT_MAX_POSITION_EMBEDDINGS", {})
    assert mismatches() > 0


@pytest.mark.parametrize("mutation", ["mamba_at_or_above", "mamba_without_cudagraph_gate", "budget_ignores_seqs",
                                      "encoder_cache_ignores_item"])
def test_trap_mutations_are_caught(monkeypatch, mutation: str) -> None:
    if mutation == "mamba_at_or_above":  # ">=" for ">": refuses max_num_seqs == num_blocks
        monkeypatch.setattr(traps, "mamba_state_slots",
                            lambda n, s, *, has_mamba, full_cudagraphs: full_cudagraphs and has_mamba and s >= n)
    elif mutation == "mamba_without_cudagraph_gate":
        monkeypatch.setattr(traps, "mamba_state_slots", lambda n, s, *, has_mamba, full_cudagraphs: has_mamba and s > n)
    elif mutation == "budget_ignores_seqs":
        monkeypatch.setattr(traps, "chunked_prefill_budget",
                            lambda length, m, *, chunked_prefill, max_num_seqs=1: not chunked_prefill and m < length)
    else:
        real = traps.mm_encoder_budget
        monkeypatch.setattr(traps, "mm_encoder_budget", lambda m, item, **kw: (
            None if real(m, item, **kw) is None else (m, m)))
    assert mismatches() > 0


def test_started_engine_property_catches_a_stalling_mamba_split() -> None:
    """Mamba align chunks rounded to 0 (#34445, the zoo's ``mamba_align_zero_chunk``): the started
    engine then stalls with requests waiting."""
    from test_traps import started_mamba_engines, test_a_started_mamba_engine_serves_max_num_seqs_requests as prop

    body = prop.hypothesis.inner_test

    @settings(max_examples=300, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(engine=started_mamba_engines())
    def under_flaw(engine) -> None:
        body(engine)

    with flaws.enabled("mamba_align_zero_chunk"), pytest.raises(AssertionError, match="no_tokens_scheduled|stall"):
        under_flaw()
