"""Re-running a property under other settings, with Hypothesis's public API only.

The zoo, ``kvverify fuzz`` and report replay run the properties of :mod:`kvverify.props`
with their own settings, seed or example. Hypothesis exposes a ``@given`` test's body
(``test.hypothesis.inner_test``, public) but not the strategies it was given, so the
properties use :func:`given` from here, which keeps them; :func:`rebuild` then makes a fresh
``@given`` test over the same body and strategies (its ``@example`` cases included) and
leaves the original untouched. State machines get a seed or a failure blob through the
public ``hypothesis.seed`` / ``hypothesis.reproduce_failure`` decorators on a subclass.
:func:`is_genuine_failure` tells a failure of the code under test from Hypothesis's own
control flow, and :func:`state_machine_of` finds the machine behind a ``Machine.TestCase``.
``tests/test_hypothesis_hooks.py`` pins the behaviour this relies on, so a Hypothesis
upgrade that changes it fails there, loudly; ``tests/test_hypothesis_api.py`` allow-lists
every Hypothesis name the project uses (all public but one, isolated in
:mod:`kvverify.hypothesis_statistics`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar, cast

import hypothesis
from hypothesis import settings as Settings
from hypothesis.errors import HypothesisException
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.strategies import SearchStrategy

T = TypeVar("T", bound=type)

#: the attributes :func:`given` stores the strategies under (kvverify's own, not Hypothesis's)
STRATEGIES_ATTR = "kvverify_strategies"
POSITIONAL_ATTR = "kvverify_positional_strategies"


def given(*positional: SearchStrategy[Any], **strategies: SearchStrategy[Any]) -> Callable[[Callable[..., Any]], Any]:
    """``hypothesis.given(*positional, **strategies)`` that also keeps the strategies on the test."""
    def decorate(fn: Callable[..., Any]) -> Any:
        test = hypothesis.given(*positional, **strategies)(fn)
        setattr(test, STRATEGIES_ATTR, MappingProxyType(dict(strategies)))
        setattr(test, POSITIONAL_ATTR, tuple(positional))
        return test
    return decorate


def strategies_of(test: Any) -> Mapping[str, SearchStrategy[Any]] | None:
    """The keyword strategies a :func:`given` test draws, or ``None`` for any other test."""
    found = getattr(test, STRATEGIES_ATTR, None)
    return found if isinstance(found, Mapping) else None


def rebuild(test: Any, *, settings: Settings | None = None, seed: int | None = None,
            inner: Callable[..., Any] | None = None) -> Any:
    """A fresh ``@given`` test: ``test``'s strategies over its body (or ``inner``), with
    ``settings`` and ``seed`` applied. ``test`` itself is not changed.

    The body's ``@example`` cases come along (they live on the body); drop them with
    ``settings`` whose ``phases`` leave out ``Phase.explicit``. A derandomized rebuild draws
    what the original draws (Hypothesis derives the seed from the body).
    """
    strategies = strategies_of(test)
    if strategies is None:
        raise TypeError(f"{getattr(test, '__name__', test)!r} was not decorated with kvverify.hypothesis_hooks.given")
    positional = getattr(test, POSITIONAL_ATTR, ())
    new = hypothesis.given(*positional, **strategies)(inner if inner is not None else test.hypothesis.inner_test)
    if settings is not None:
        new = settings(new)
    if seed is not None:
        new = hypothesis.seed(seed)(new)
    return new


def _subclass(machine: T) -> T:
    """A same-named subclass: decorating it leaves ``machine`` itself untouched."""
    return cast(T, type(machine.__name__, (machine,), {"__module__": machine.__module__,
                                                        "__qualname__": machine.__qualname__}))


def seeded_machine(machine: T, seed: int) -> T:
    """A subclass of the state machine ``machine`` that runs with ``seed`` (``@hypothesis.seed``)."""
    return hypothesis.seed(seed)(_subclass(machine))


def reproducing_machine(machine: T, version: str, blob: bytes) -> T:
    """A subclass of ``machine`` that replays a failure blob (``@hypothesis.reproduce_failure``)."""
    return hypothesis.reproduce_failure(version, blob)(_subclass(machine))


def is_genuine_failure(e: BaseException) -> bool:
    """Whether ``e``, raised through a property body, is a failure of the code under test.

    Hypothesis's own exceptions (``assume`` / ``reject``, a health check, a frozen draw: every
    ``hypothesis.errors.HypothesisException``) are its business, and so is a
    ``BaseException`` that is no ``Exception`` (its stop signal, pytest's skip, Ctrl-C):
    neither is ever a counterexample."""
    return isinstance(e, Exception) and not isinstance(e, HypothesisException)


def state_machine_of(test_case: object) -> type[RuleBasedStateMachine] | None:
    """The state machine whose public ``Machine.TestCase`` is the class ``test_case`` (what
    pytest collects from ``TestMachine = Machine.TestCase``), or ``None``. Hypothesis builds
    ``TestCase`` once per machine class, so the identity holds (pinned in
    ``tests/test_hypothesis_hooks.py``)."""
    if not isinstance(test_case, type):
        return None
    pending: list[type[RuleBasedStateMachine]] = list(RuleBasedStateMachine.__subclasses__())
    while pending:
        machine = pending.pop()
        if machine.TestCase is test_case:
            return machine
        pending.extend(machine.__subclasses__())
    return None


__all__ = ["POSITIONAL_ATTR", "STRATEGIES_ATTR", "given", "is_genuine_failure", "rebuild", "reproducing_machine",
           "seeded_machine", "state_machine_of", "strategies_of"]
