"""The Hypothesis behaviour the zoo, ``kvverify fuzz`` and report replay rely on, pinned.

They use public API only (:mod:`kvverify.hypothesis_hooks`): a Hypothesis upgrade that
changes what a rebuilt property draws, drops its ``@example`` cases, stops honouring
``@seed`` / ``@reproduce_failure`` on a state machine, or builds ``Machine.TestCase`` anew on
each access fails here, not silently in the zoo. The one undocumented name the project uses
(``hypothesis.statistics.collector``, through :mod:`kvverify.hypothesis_statistics`) is
pinned here too; ``tests/test_hypothesis_api.py`` allow-lists every name used.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, example, settings
from hypothesis import strategies as st
from hypothesis.errors import DidNotReproduce
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from kvverify.hypothesis_hooks import (
    given,
    is_genuine_failure,
    rebuild,
    reproducing_machine,
    seeded_machine,
    state_machine_of,
    strategies_of,
)
from kvverify.hypothesis_statistics import collecting

QUIET = dict(database=None, deadline=None, suppress_health_check=list(HealthCheck), print_blob=False)


def _body(seen: list[int]):
    def prop(n: int, flag: bool) -> None:
        seen.append(n)
    return prop


def _draws(test, **kw) -> list[int]:
    seen: list[int] = []
    t = given(n=st.integers(0, 10**6), flag=st.booleans())(_body(seen)) if test is None else test(seen)
    rebuild(t, **kw)()
    return seen


def test_a_derandomized_rebuild_draws_what_the_property_draws() -> None:
    s = settings(max_examples=25, derandomize=True, **QUIET)
    seen_plain: list[int] = []
    body = _body(seen_plain)
    settings(s)(hypothesis.given(n=st.integers(0, 10**6), flag=st.booleans())(body))()
    seen_rebuilt: list[int] = []
    rebuild(given(n=st.integers(0, 10**6), flag=st.booleans())(_body(seen_rebuilt)), settings=s)()
    assert seen_rebuilt == seen_plain and len(set(seen_plain)) > 5


def test_rebuild_leaves_the_original_alone_and_keeps_strategies() -> None:
    seen: list[int] = []
    body = _body(seen)
    t = given(n=st.integers(0, 3), flag=st.booleans())(body)
    r = rebuild(t, settings=settings(max_examples=5, derandomize=True, **QUIET))
    assert r is not t and t.hypothesis.inner_test is body
    assert set(strategies_of(t) or {}) == {"n", "flag"}
    assert strategies_of(hypothesis.given(n=st.integers())(lambda n: None)) is None
    with pytest.raises(TypeError, match="kvverify.hypothesis_hooks.given"):
        rebuild(hypothesis.given(n=st.integers())(lambda n: None))


def test_examples_come_along_unless_the_phase_is_off() -> None:
    seen: list[int] = []

    @given(n=st.integers(0, 10), flag=st.booleans())
    @example(n=424242, flag=True)
    def t(n: int, flag: bool) -> None:
        seen.append(n)

    rebuild(t, settings=settings(max_examples=3, derandomize=True, **QUIET))()
    assert seen[0] == 424242
    seen.clear()
    rebuild(t, settings=settings(max_examples=3, derandomize=True, phases=[Phase.generate], **QUIET))()
    assert 424242 not in seen and seen


def test_seed_fixes_the_draws() -> None:
    s = settings(max_examples=20, **QUIET)

    def make(seen: list[int]):
        return given(n=st.integers(0, 10**6), flag=st.booleans())(_body(seen))

    assert _draws(make, settings=s, seed=7) == _draws(make, settings=s, seed=7)
    assert _draws(make, settings=s, seed=7) != _draws(make, settings=s, seed=8)


class _Counter(RuleBasedStateMachine):
    programs: list[list[int]] = []

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[int] = []
        type(self).programs.append(self.steps)

    @rule(n=st.integers(0, 100))
    def add(self, n: int) -> None:
        self.steps.append(n)
        assert n < 90, "too big"


def _run(machine, **kw) -> None:
    run_state_machine_as_test(machine, settings=settings(max_examples=30, stateful_step_count=5, **QUIET, **kw))


def test_a_seeded_machine_replays_its_programs() -> None:
    class Passing(_Counter):
        @rule(n=st.integers(0, 100))
        def add(self, n: int) -> None:
            self.steps.append(n)

    runs = []
    for _ in range(2):
        Passing.programs = []
        _run(seeded_machine(Passing, 1234))
        runs.append([list(p) for p in Passing.programs])
    assert runs[0] == runs[1] and any(runs[0])
    assert seeded_machine(Passing, 1234).__name__ == "Passing"


def test_a_failure_blob_replays_on_a_machine() -> None:
    with pytest.raises(AssertionError, match="too big") as info:
        run_state_machine_as_test(_Counter, settings=settings(max_examples=200, stateful_step_count=5,
                                                              database=None, deadline=None, print_blob=True,
                                                              suppress_health_check=list(HealthCheck)))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    found = re.search(r"@reproduce_failure\('([^']+)', b'([^']+)'\)", notes)
    assert found, notes
    version, blob = found.group(1), found.group(2).encode("ascii")
    with pytest.raises(AssertionError, match="too big"):
        _run(reproducing_machine(_Counter, version, blob))

    class NeverFails(_Counter):
        @rule(n=st.integers(0, 100))
        def add(self, n: int) -> None:
            pass

    with pytest.raises(DidNotReproduce):
        _run(reproducing_machine(NeverFails, version, blob))


def test_every_property_keeps_its_strategies() -> None:
    """The zoo, fuzz and replay rebuild every ``@given`` property of kvverify.props."""
    import kvverify.props as props

    found = 0
    for info in pkgutil.iter_modules(props.__path__):
        module = importlib.import_module(f"kvverify.props.{info.name}")
        for name, value in vars(module).items():
            if hypothesis.is_hypothesis_test(value) and getattr(value, "__module__", None) == module.__name__:
                assert strategies_of(value) is not None, f"{module.__name__}.{name} uses hypothesis.given directly"
                found += 1
    assert found >= 10


def test_the_public_names_we_lean_on_still_behave() -> None:
    """``assume`` rejects with ``hypothesis.errors.UnsatisfiedAssumption`` (the recorders tell a
    rejection from a failure by it) and ``currently_in_test_context`` tells where we run."""
    from hypothesis import assume
    from hypothesis.control import currently_in_test_context
    from hypothesis.errors import UnsatisfiedAssumption

    assert currently_in_test_context() is False
    inside: list[bool] = []
    rejected: list[bool] = []

    @given(n=st.just(1))
    def t(n: int) -> None:
        inside.append(currently_in_test_context())
        try:
            assume(False)
        except UnsatisfiedAssumption:
            rejected.append(True)

    rebuild(t, settings=settings(max_examples=1, **QUIET))()
    assert inside and all(inside) and rejected


def test_genuine_failures_are_the_code_under_tests() -> None:
    from hypothesis.errors import InvalidArgument, Unsatisfiable, UnsatisfiedAssumption

    assert is_genuine_failure(AssertionError("x")) and is_genuine_failure(ZeroDivisionError())
    seen: list[BaseException] = []

    @given(n=st.integers(0, 3))
    def t(n: int) -> None:
        try:
            hypothesis.assume(False)
        except BaseException as e:
            seen.append(e)
            raise

    with pytest.raises(Unsatisfiable):  # every example rejected
        rebuild(t, settings=settings(max_examples=2, **QUIET))()
    assert seen and not any(is_genuine_failure(e) for e in seen)
    assert isinstance(seen[0], UnsatisfiedAssumption)
    assert not is_genuine_failure(InvalidArgument()) and not is_genuine_failure(KeyboardInterrupt())
    with pytest.raises(pytest.skip.Exception) as skipped:
        pytest.skip("a skip is no counterexample")
    assert not is_genuine_failure(skipped.value)


def test_the_machine_behind_its_test_case() -> None:
    class Machine(_Counter):
        pass

    assert Machine.TestCase is Machine.TestCase  # built once per class: the lookup relies on it
    assert state_machine_of(Machine.TestCase) is Machine
    assert state_machine_of(_Counter.TestCase) is _Counter
    assert state_machine_of(seeded_machine(Machine, 1).TestCase).__name__ == "Machine"
    assert state_machine_of(type("NotAMachineCase", (), {})) is None and state_machine_of(None) is None
    assert hypothesis.is_hypothesis_test(Machine.TestCase().runTest)


def test_run_statistics_come_through_the_one_adapter() -> None:
    """What :mod:`benchmarks.probe` reads: a run's test cases with status and events, and why it stopped."""
    runs = []

    @given(n=st.integers(0, 10**6))
    def t(n: int) -> None:
        hypothesis.event("even" if n % 2 == 0 else "odd")
        hypothesis.assume(n != 3)

    with collecting(runs.append):
        rebuild(t, settings=settings(max_examples=20, derandomize=True, **QUIET))()
    assert len(runs) == 1
    run = runs[0]
    assert run.stopped_because and len(run.test_cases) >= 20
    assert {c.status for c in run.test_cases} <= {"valid", "invalid", "overrun", "interesting"}
    assert sum(c.status == "valid" for c in run.test_cases) >= 20
    assert all(any(e in ("even", "odd") for e in c.events) for c in run.test_cases if c.status == "valid")

