"""pytest options of :mod:`kvverify.props.attribution` (loaded by :mod:`kvverify.pytest_plugin`).

``--attribute-flaws`` names the bug-zoo flaw that explains each failing example on a
target; ``--absorb-flaws NAMES`` turns failures those flaws explain into Hypothesis events
(so the search goes on); ``--attribution-log PATH`` appends every attribution as JSON.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvverify")
    group.addoption("--attribute-flaws", action="store_true", default=False,
                    help="name the bug-zoo flaw that makes the reference fail like the target "
                         "on each failing example (kvverify/props/attribution.py)")
    group.addoption("--absorb-flaws", action="append", default=[], metavar="NAMES",
                    help="failures explained by these zoo flaws (comma-separated, or 'all') record an "
                         "event instead of failing, so the search goes on (repeatable)")
    group.addoption("--attribution-log", default=None, metavar="PATH",
                    help="append every attribution as one JSON line to PATH")


def pytest_configure(config: pytest.Config) -> None:
    from kvverify.errors import ConfigError
    from kvverify.props import attribution
    try:
        attribution.configure(name=bool(config.getoption("attribute_flaws", default=False)),
                              absorb=config.getoption("absorb_flaws", default=None) or [],
                              log_path=config.getoption("attribution_log", default=None))
    except ConfigError as e:
        raise pytest.UsageError(f"--absorb-flaws: {e}") from None
