"""One arithmetic, two backends: every shared formula gives the same answer on ints and on
z3 terms (``z3.simplify`` of the formula applied to ``IntVal``/``BoolVal`` inputs).

This is what lets the lemmas stand for the reference: they are built by calling the same
functions on z3 terms, so a formula whose z3 path drifts from its int path would make
every proof about it worthless. A planted z3-only mutation of ``ops.cdiv`` is caught.
Flaws and proposed fixes are switched on too: the flaw-/fix-aware compositions must agree
on both backends under every switch.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import z3
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from kvverify.hypothesis_hooks import given
from kvverify import fixes, flaws

from kvverify.reference import arith, ops

# --- argument kinds ---------------------------------------------------------------------


@dataclass(frozen=True)
class N:  # an int argument: IntVal on the z3 path
    v: int


@dataclass(frozen=True)
class B:  # a bool argument that may be symbolic: BoolVal on the z3 path
    v: bool


@dataclass(frozen=True)
class S:  # a Python-level argument (None, a static flag): passed as-is on both paths
    v: Any


@dataclass(frozen=True)
class LN:  # a list of ints: IntVals on the z3 path
    v: tuple[int, ...]


def _ints(lo: int, hi_small: int = 70, hi_big: int = 2**40) -> st.SearchStrategy[int]:
    """Mostly small (boundaries), sometimes huge."""
    return st.one_of(st.integers(lo, max(lo, hi_small)), st.integers(lo, hi_big))


nat = _ints(0)
pos = _ints(1)
any_int = st.one_of(_ints(-70, 70), st.integers(-(2**40), 2**40))
n, p, z = (st.builds(N, s) for s in (nat, pos, any_int))
flag = st.builds(B, st.booleans())
maybe_pos = st.one_of(st.just(S(None)), p)


def args(*parts: st.SearchStrategy) -> st.SearchStrategy[tuple]:
    return st.tuples(*parts)


#: every public formula of kvverify.reference.arith and a strategy for its arguments (divisors > 0)
FORMULAS: dict[str, st.SearchStrategy[tuple]] = {
    "full_attention_blocks": args(n, p),
    "sliding_window_admission_blocks": args(p, n, p, p, p),
    "chunked_local_admission_blocks": args(p, p, p, p),
    "max_in_flight_tokens": args(p, p, n),
    "mamba_max_blocks": args(flag, n, st.builds(N, st.integers(0, 1))),
    "mamba_startup_blocks": args(flag, n, st.builds(N, st.integers(0, 1)), p, p),
    "cross_attention_blocks": args(n, p),
    "capped_blocks": args(n, n, flag),
    "pages_for_bytes": args(n, p),
    "sliding_window_skipped_tokens": args(n, p, n),
    "chunked_local_skipped_tokens": args(n, p),
    "mamba_skipped_tokens": args(n),
    "skipped_blocks": args(z, p),
    "num_blocks_from_memory": args(z, p),
    "override_memory": args(p, p),
    "check_memory": args(z, p),
    "needed_memory": args(p, n),
    "startup_check_passes": args(z, n),
    "min_written_tokens": args(p, n),
    "planned_request_tokens": args(p, n),
    "spec_step_tokens": args(n, n),
    "usable_blocks": args(p),
    "servable_alone": args(p, n),
    "reported_concurrency_at_least_one": args(p, n),
    "allocation_fits": args(n, n, z),
    "hybrid_attention_block_size": args(p, p, p, p, p),
    "startup_available_memory": args(z, p, maybe_pos),
    "startup_check_memory": args(z, p, maybe_pos),
    "auto_fit_search_memory": args(z, p, maybe_pos),
    "runtime_num_blocks": args(z, p, maybe_pos),
    "total_blocks_per_request": args(st.builds(LN, st.lists(nat, max_size=4).map(tuple)),
                                     st.builds(S, st.booleans())),
    "admission_required_blocks": args(n, p, maybe_pos, st.builds(S, st.booleans())),
    "new_blocks_for_running": args(n, n),
    "blocks_held_after_step": args(n, z, p),
    "mamba_blocks_held": args(st.builds(S, st.booleans()), p, n, p, n),
    "concurrency_blocks": args(p),
    "reported_concurrency_at_least": args(p, n, p),
    "servable_concurrently": args(p, n, p),
    "kv_cache_tensor_bytes": args(p, n),
    "prefix_match_unit_valid": args(p, st.builds(LN, st.lists(pos, min_size=1, max_size=4).map(tuple))),
}

#: int-only helpers (not part of any proof)
INT_ONLY = {"watermark_blocks"}  # takes a float watermark

SWITCHES: list[tuple[str | None, str | None]] = (
    [(None, None)] + [(f, None) for f in sorted(flaws.CATALOG)] + [(None, x) for x in sorted(fixes.CATALOG)])


def _to_int_path(a: Any) -> Any:
    return list(a.v) if isinstance(a, LN) else a.v


def _to_z3_path(a: Any) -> Any:
    if isinstance(a, N):
        return z3.IntVal(a.v)
    if isinstance(a, B):
        return z3.BoolVal(a.v)
    if isinstance(a, LN):
        return [z3.IntVal(x) for x in a.v]
    return a.v


def _concrete(value: Any) -> int | bool:
    """A z3 term simplified to a constant, as an int/bool (ints/bools pass through)."""
    if isinstance(value, (bool, int)):
        return value
    simple = z3.simplify(value)
    if z3.is_int_value(simple):
        return simple.as_long()
    if z3.is_true(simple):
        return True
    if z3.is_false(simple):
        return False
    raise AssertionError(f"z3 path did not simplify to a constant: {simple}")


@contextlib.contextmanager
def _switched(switch: tuple[str | None, str | None]):
    flaw, fix = switch
    with contextlib.ExitStack() as stack:
        if flaw:
            stack.enter_context(flaws.enabled(flaw))
        if fix:
            stack.enter_context(fixes.enabled(fix))
        yield


def check_backends_agree(fn: Callable, arguments: tuple, switch=(None, None)) -> None:
    with _switched(switch):
        on_ints = fn(*[_to_int_path(a) for a in arguments])
        on_z3 = _concrete(fn(*[_to_z3_path(a) for a in arguments]))
    as_int = on_ints if isinstance(on_ints, int) else bool(on_ints)
    assert as_int == on_z3 and isinstance(on_z3, bool) == isinstance(as_int, bool), (
        f"{fn.__name__}{tuple(_to_int_path(a) for a in arguments)} under {switch}: "
        f"int {on_ints!r} != z3 {on_z3!r}")


def _property(name: str):
    @settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(arguments=FORMULAS[name], switch=st.sampled_from(SWITCHES))
    def prop(arguments, switch):
        check_backends_agree(getattr(arith, name), arguments, switch)
    return prop


def test_every_formula_is_covered():
    public = {n for n, f in inspect.getmembers(arith, inspect.isfunction)
              if f.__module__ == arith.__name__ and not n.startswith("_")
              and "__mutmut_" not in n}  # mutmut's trampolined copies (docs/mutation.md)
    assert public - INT_ONLY == set(FORMULAS), (
        f"add these arith formulas to FORMULAS: {sorted(public - INT_ONLY - set(FORMULAS))}; "
        f"stale entries: {sorted(set(FORMULAS) - public)}")


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_backends_agree(name):
    _property(name)()


# --- the property has teeth --------------------------------------------------------------


def _cdiv_wrong_on_z3(a, b):
    if ops.is_symbolic(a, b):
        return (a + b) / b  # off by one whenever b divides a — on the z3 path only
    return -(a // -b)


@pytest.mark.parametrize("name", ["full_attention_blocks", "sliding_window_admission_blocks",
                                  "startup_check_memory"])
def test_planted_z3_only_mutation_is_caught(monkeypatch, name):
    monkeypatch.setattr(ops, "cdiv", _cdiv_wrong_on_z3)
    monkeypatch.setattr(arith, "cdiv", _cdiv_wrong_on_z3)  # arith imported the name
    if name == "startup_check_memory":
        # no cdiv in it: the mutation must NOT be reported (no false alarm)
        _property(name)()
        return
    with pytest.raises(AssertionError, match="int .* != z3"):
        _property(name)()


def test_planted_mutation_in_a_flaw_branch_is_caught(monkeypatch):
    """A z3 path that ignores a flaw switch disagrees with the int path under that flaw."""
    real = arith.startup_check_memory

    def drifted(available, bpb, override=None):
        if ops.is_symbolic(available, bpb, override):
            with flaws.only():  # pretend the flaw were invisible on the z3 path
                return real(available, bpb, override)
        return real(available, bpb, override)

    monkeypatch.setattr(arith, "startup_check_memory", drifted)
    with pytest.raises(AssertionError, match="int .* != z3"):
        check_backends_agree(arith.startup_check_memory, (N(1000), N(10), S(None)),
                             ("null_block_not_reserved", None))
