"""Root pytest configuration: Hypothesis profiles and the ``--flaw`` / ``--target`` options."""

from kvverify.pytest_plugin import *  # noqa: F401,F403  (profiles, options, fixtures)
