"""The property bodies, importable so the bug zoo, the CLI and pytest run the same code.

``properties/test_*.py`` re-export these for ``pytest properties/``; ``kvverify zoo``
and ``kvverify fuzz`` call them directly with a flaw switched on. Each property takes
the system under test as ``target`` (a pytest fixture, or passed explicitly): a
:class:`kvverify.targets.base.Target`. The ``@given`` bodies leave that parameter
unannotated on purpose: a derandomized run (the zoo, CI) seeds itself from the property's
source text, so editing a property's lines moves the zoo's counts; the helpers they call
(:func:`kvverify.props.known.check_or_known`, ...) carry the type. Properties are declared
with :func:`kvverify.hypothesis_hooks.given`, which keeps their strategies for the zoo,
``kvverify fuzz`` and report replay.
"""

from kvverify.props.recorder import RECORDER, recorded

__all__ = ["RECORDER", "recorded"]
