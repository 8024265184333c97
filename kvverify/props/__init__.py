"""The property bodies, importable so the bug zoo, the CLI and pytest run the same code.

``properties/test_*.py`` re-export these for ``pytest properties/``; ``kvverify zoo``
and ``kvverify fuzz`` call them directly with a flaw switched on. Each property takes
the system under test as ``target: Target`` (a pytest fixture, or passed explicitly), typed
with the contract :class:`kvverify.targets.base.Target`. Properties are declared
with :func:`kvverify.hypothesis_hooks.given`, which keeps their strategies for the zoo,
``kvverify fuzz`` and report replay.
"""

from kvverify.props.recorder import RECORDER, recorded

__all__ = ["RECORDER", "recorded"]
