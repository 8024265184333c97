"""Fixtures for the property suites: the system under test."""

from __future__ import annotations

import pytest

from kvverify.targets import get_target


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest):
    return get_target(request.config.getoption("target"))
