"""The vllm target's startup-check refusal (no vLLM needed): ``planner.checked_attempt``.

The adapter plans a refused deployment a second time with the checks off, only to describe the
refused plan. Measured on 0.14.1 and 0.22.0 (2026-12-04, finding F16): with
``num_gpu_blocks_override=0`` the check refuses ("No available memory"), and the second attempt
then divides by the override in the cross-worker block minimum. That crash is kvverify's doing,
not the engine's answer (the engine stopped at its check): it must come back as the refusal,
never as the ``ZeroDivisionError`` the bad-input property would count as the release crashing.
"""

from __future__ import annotations

import pytest

from kvverify.errors import KVVerifyError
from kvverify.targets.vllm.planner import CheckRefusedUnplannable, checked_attempt

REFUSAL = "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"


def test_a_passing_check_plans_once() -> None:
    calls: list[bool] = []
    assert checked_attempt(lambda checks: calls.append(checks) or "plan", "0.33.0") == ("plan", None)
    assert calls == [True]


def test_a_refusal_is_planned_past_the_check_and_reported() -> None:
    def attempt(checks: bool) -> str:
        if checks:
            raise ValueError(REFUSAL)
        return "plan past the check"

    assert checked_attempt(attempt, "0.33.0") == ("plan past the check", REFUSAL)


def test_a_crash_past_the_check_is_the_refusal_not_the_engine_crashing() -> None:
    def attempt(checks: bool) -> str:
        if checks:
            raise ValueError(REFUSAL)
        return str(1 % 0)

    with pytest.raises(CheckRefusedUnplannable) as info:
        checked_attempt(attempt, "0.22.0")
    assert info.value.refusal == REFUSAL and str(info.value).startswith(REFUSAL)
    assert isinstance(info.value, KVVerifyError) and isinstance(info.value.__cause__, ZeroDivisionError)


def test_another_value_error_is_upstream_planning_failing() -> None:
    def attempt(checks: bool) -> str:
        raise ValueError("1 validation error for CacheConfig\nblock_size\n  Input should be greater than 0")

    with pytest.raises(KVVerifyError, match="(?s)upstream planning failed: ValueError: .*block_size"):
        checked_attempt(attempt, "0.33.0")


def test_a_crash_with_the_checks_on_is_the_engines() -> None:
    def attempt(checks: bool) -> str:
        return str(1 // 0)

    with pytest.raises(ZeroDivisionError):
        checked_attempt(attempt, "0.22.0")
