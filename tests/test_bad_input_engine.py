"""The bad-input properties judge the engine's own validation, and catch what they guard.

* kvverify's own config objects still refuse a non-positive field on construction (its users'
  path is unchanged); the property builds its config past them, so the *target* answers;
* from a cold start (derandomized, no database, no explicit example) the general property passes
  on the faithful reference, and fails under zoo flaw ``no_positive_validation`` with a crash
  (``block_size=0`` and friends reach a ``ZeroDivisionError``);
* the override property fails on the faithful reference from a cold start (finding F16: the
  startup check's refusal names ``gpu_memory_utilization``, not the override) and passes under
  the fix; F16's explicit case gives exactly that refusal;
* planted mutations of the engine's validation, each caught with its own violation: a refusal
  that does not name the field, a value silently clamped, an endless loop (a hang).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from hypothesis import Phase, settings

from kvverify import fixes, flaws
from kvverify.errors import ConfigError, KVVerifyError
from kvverify.hypothesis_hooks import rebuild
from kvverify.props import validation as pv
from kvverify.reference import planner
from kvverify.reference.config import VllmConfig
from kvverify.reference.validation import evolve, unchecked
from kvverify.targets import get_target

REFERENCE = get_target("reference")
COLD = settings(max_examples=100, derandomize=True, database=None, deadline=None,
                phases=[Phase.generate, Phase.shrink])


def _general(counts: Counter[str], failing: list[str]) -> None:
    def inner(target, case, field: str, value: int) -> None:
        counts[field] += 1
        violations = pv.bad_input_violations(target, case, field, value)
        if violations:
            failing.append(violations[0].name)
            raise AssertionError(str(violations[0]))
    rebuild(pv.test_bad_input_is_a_clear_error, inner=inner, settings=COLD)(target=REFERENCE)


def _override(failing: list[str]) -> None:
    def inner(target, case, value: int) -> None:
        violations = pv.bad_input_violations(target, case, "num_gpu_blocks_override", value)
        if violations:
            failing.append(violations[0].name)
            raise AssertionError(str(violations[0]))
    rebuild(pv.test_bad_block_override_is_a_clear_error, inner=inner, settings=COLD)(target=REFERENCE)


def test_kvverify_front_validation_is_unchanged() -> None:
    for field in ("block_size", "num_gpu_blocks_override", "max_model_len", "max_num_seqs"):
        with pytest.raises(ConfigError, match=field):
            VllmConfig(**{field: 0})


def test_unchecked_copies_stay_unchecked_and_checked_ones_are_validated() -> None:
    config = VllmConfig(num_gpu_blocks_override=4)
    bad = unchecked(config, num_gpu_blocks_override=0)
    assert bad.num_gpu_blocks_override == 0 and config.num_gpu_blocks_override == 4
    assert bad.with_max_model_len(32).num_gpu_blocks_override == 0  # no re-validation masks it
    assert evolve(bad, block_size=32).block_size == 32
    with pytest.raises(ConfigError, match="max_model_len"):
        config.with_max_model_len(0)  # a checked config is validated as before
    with pytest.raises(ConfigError, match="not a field"):
        unchecked(config, no_such_field=1)


def test_general_property_passes_on_the_reference_and_catches_the_zoo_flaw() -> None:
    counts: Counter[str] = Counter()
    failing: list[str] = []
    _general(counts, failing)
    assert not failing and set(counts) == set(pv.BAD_FIELDS), counts
    with flaws.enabled("no_positive_validation"):
        with pytest.raises(AssertionError, match="instead of a clear ValueError|silently accepted"):
            _general(Counter(), failing)
    assert failing[-1] in ("validation.crash", "validation.accepted")


def test_override_property_finds_F16_from_a_cold_start_and_passes_under_the_fix() -> None:
    failing: list[str] = []
    with pytest.raises(AssertionError, match="does not name the bad field"):
        _override(failing)
    assert failing[-1] == "validation.unnamed_field"
    failing.clear()
    with fixes.enabled("num_gpu_blocks_override_validated"):
        _override(failing)
    assert not failing


def test_F16_case_is_refused_naming_gpu_memory_utilization_only() -> None:
    bad = unchecked(pv.F16_CASE.vllm_config, num_gpu_blocks_override=0)
    plan = REFERENCE.plan(bad, pv.F16_CASE.kv_cache_specs, pv.F16_CASE.available_memory)
    assert not plan.starts and plan.error is not None
    assert "gpu_memory_utilization" in plan.error and "num_gpu_blocks_override" not in plan.error
    [v] = pv.bad_input_violations(REFERENCE, pv.F16_CASE, "num_gpu_blocks_override", 0)
    assert v.name == "validation.unnamed_field"
    with fixes.enabled("num_gpu_blocks_override_validated"):
        with pytest.raises(ConfigError, match="num_gpu_blocks_override"):
            REFERENCE.plan(bad, pv.F16_CASE.kv_cache_specs, pv.F16_CASE.available_memory)
        assert pv.bad_input_violations(REFERENCE, pv.F16_CASE, "num_gpu_blocks_override", 0) == []


def _caught_as(monkeypatch, mutant, match: str) -> str:
    """Plant ``mutant`` (called with the real check) as the engine's validation, run the general
    property from a cold start: it must fail with ``match``; the violation's name."""
    real = planner.validate_engine_config
    monkeypatch.setattr(planner, "validate_engine_config", lambda config: mutant(real, config))
    failing: list[str] = []
    with pytest.raises(AssertionError, match=match):
        _general(Counter(), failing)
    return failing[-1]


def test_planted_mutation_unnamed_refusal_is_caught(monkeypatch) -> None:
    """Mutation: the engine refuses every bad value, but with a message that names no field."""
    def vague(real, config: VllmConfig) -> None:
        try:
            real(config)
        except ConfigError:
            raise KVVerifyError("invalid configuration") from None

    assert _caught_as(monkeypatch, vague, "does not name the bad field") == "validation.unnamed_field"


def test_planted_mutation_silent_clamp_is_caught(monkeypatch) -> None:
    """Mutation: a non-positive ``max_num_seqs`` is clamped to 1 instead of refused."""
    def clamping(real, config: VllmConfig) -> None:
        if config.max_num_seqs < 1:
            object.__setattr__(config, "max_num_seqs", 1)
        real(config)

    assert _caught_as(monkeypatch, clamping, "silently accepted") == "validation.accepted"


def test_planted_mutation_endless_loop_is_a_hang(monkeypatch) -> None:
    """Mutation: a zero ``block_size`` makes planning loop forever (#43521's shape)."""
    real = planner.validate_engine_config

    def looping(config: VllmConfig) -> None:
        if config.block_size == 0:
            while True:
                time.sleep(0.01)
        real(config)

    monkeypatch.setattr(planner, "validate_engine_config", looping)
    monkeypatch.setattr(pv, "HANG_SECONDS", 1)
    case = pv.F16_CASE
    [v] = pv.bad_input_violations(REFERENCE, case, "block_size", 0)
    assert v.name == "validation.hang"


def test_a_crash_says_where_it_was_raised_without_the_machines_paths() -> None:
    with flaws.enabled("no_positive_validation"):
        [v] = pv.bad_input_violations(REFERENCE, pv.F16_CASE, "block_size", 0)
    assert v.name == "validation.crash" and "ZeroDivisionError" in v.reason
    assert str(v.evidence["where"]).startswith("kvverify/reference/"), v.evidence


def test_an_input_the_target_cannot_express_is_not_an_answer() -> None:
    """A release that lacks a knob refuses the input (``unsupported``: a rejected example inside
    Hypothesis, ``TargetUnsupported`` outside); that is neither a clear error nor a crash (the
    first validation run on 0.25.0-0.28.0 counted Hypothesis' rejection as a crash)."""
    from kvverify.targets.base import TargetUnsupported
    from kvverify.targets.vllm.refusals import unsupported

    class Lacking:
        def __getattr__(self, name: str):
            return getattr(REFERENCE, name)

        def plan(self, *args, **kwargs):
            unsupported("vLLM 0.25.0 has no prefix_match_unit")

    with pytest.raises(TargetUnsupported):
        pv.bad_input_violations(Lacking(), pv.F16_CASE, "prefix_match_unit", 0)  # type: ignore[arg-type]


def test_adapter_drift_is_not_an_answer() -> None:
    """A ``DriftError`` (the adapter no longer matches the release) propagates: it is counted
    neither as the release crashing nor as a clear refusal."""
    from kvverify.targets.vllm.compat import DriftError

    class Drifting:
        def __getattr__(self, name: str):
            return getattr(REFERENCE, name)

        def plan(self, *args, **kwargs):
            raise DriftError("vLLM 9.9.9: get_kv_cache_configs moved")

    with pytest.raises(DriftError):
        pv.bad_input_violations(Drifting(), pv.F16_CASE, "block_size", 0)  # type: ignore[arg-type]
