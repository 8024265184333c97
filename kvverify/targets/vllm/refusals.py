"""How the vllm target says "no": per input, per property, per release.

Three outcomes, never a silent pass and never an adapter crash counted as a defect:

* :func:`unsupported` — *this input* cannot be expressed on upstream (a knob the adapter
  cannot build, or one the installed release does not have): inside a Hypothesis example
  the example is rejected, elsewhere :class:`TargetUnsupported` is raised.
* :func:`skip_unsupported` — the *property* asks for something the adapter cannot do on
  upstream at all (e.g. a reference ``Scheduler`` passed in): pytest skips it with the reason.
* :func:`lacks` — the *installed release* lacks a capability the property needs (e.g. vLLM
  0.19.1 has no ``resolve_kv_cache_block_sizes``): the property skips, the reason names the
  release and what it lacks (:class:`ReleaseLacks` outside pytest).

A property that needs a :class:`~kvverify.targets.base.Feature` asks before it starts
(:func:`kvverify.targets.base.require`); :meth:`.target.VllmTarget.lacks` gives the reason.
"""

from __future__ import annotations

from typing import NoReturn

from kvverify.targets.base import TargetUnsupported, in_pytest_test


class ReleaseLacks(TargetUnsupported):
    """The installed vLLM release lacks a capability a property needs (the property skips)."""

    def __init__(self, version: str, what: str) -> None:
        self.version, self.what = version, what
        super().__init__(f"vLLM {version} {what}")


def unsupported(reason: str) -> NoReturn:
    """Refuse an input: a rejected example inside Hypothesis, else :class:`TargetUnsupported`."""
    try:
        from hypothesis import reject
        from hypothesis.control import currently_in_test_context
    except ImportError:  # pragma: no cover - hypothesis is a dependency
        raise TargetUnsupported(reason) from None
    if currently_in_test_context():
        reject()
    raise TargetUnsupported(reason)


def skip_unsupported(reason: str) -> NoReturn:
    """Skip the whole property (pytest) or raise :class:`TargetUnsupported` (elsewhere)."""
    if in_pytest_test():
        import pytest
        pytest.skip(f"vllm target: {reason}")
    raise TargetUnsupported(reason)


def lacks(version: str, what: str) -> NoReturn:
    """The release lacks ``what``: skip the property with that reason (pytest), else
    :class:`ReleaseLacks`. ``what`` reads after the version: ``"has no X (why)"``."""
    if in_pytest_test():
        import pytest
        pytest.skip(f"vllm target: vLLM {version} {what}")
    raise ReleaseLacks(version, what)


__all__ = ["ReleaseLacks", "TargetUnsupported", "lacks", "skip_unsupported", "unsupported"]
