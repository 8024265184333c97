"""Fixtures for the property suites: the system under test."""

from __future__ import annotations

import pytest

from kvverify.targets import SGLANG_TARGET_FOR, engine_of, get_sglang_target, get_target


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest):
    name = request.config.getoption("target")
    if engine_of(name) != "vllm":
        pytest.skip(f"vLLM property: --target {name} offers SGLang's contract, not vLLM's")
    return get_target(name)


@pytest.fixture(scope="session")
def sglang_target(request: pytest.FixtureRequest):
    """The SGLang target of ``--target`` (the SGLang reference for ``--target reference``)."""
    name = request.config.getoption("target")
    if name not in SGLANG_TARGET_FOR:
        pytest.skip(f"SGLang property: --target {name} offers vLLM's contract, not SGLang's")
    return get_sglang_target(SGLANG_TARGET_FOR[name])
