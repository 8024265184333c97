"""Fixtures for the property suites: the system under test, one per engine
(:func:`kvverify.targets.targets_for`: ``--target reference`` gives each engine its reference)."""

from __future__ import annotations

import pytest

from kvverify.targets import get_sglang_target, get_target, targets_for


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest):
    name = request.config.getoption("target")
    mine = targets_for(name).get("vllm")
    if mine is None:
        pytest.skip(f"vLLM property: --target {name} offers SGLang's contract, not vLLM's")
    return get_target(mine)


@pytest.fixture(scope="session")
def sglang_target(request: pytest.FixtureRequest):
    """The SGLang target of ``--target`` (the SGLang reference for ``--target reference``)."""
    name = request.config.getoption("target")
    mine = targets_for(name).get("sglang")
    if mine is None:
        pytest.skip(f"SGLang property: --target {name} offers vLLM's contract, not SGLang's")
    return get_sglang_target(mine)
