"""Invariant checkers: plain functions returning :class:`Violation` lists, one concern per module.

Used alike by the properties (``properties/``), the CLI (``kvverify check``) and the
counterexample reports, so a report can say *why* with the evidence numbers.
"""

from kvverify.invariants.base import Violation, first_violation

__all__ = ["Violation", "first_violation"]
