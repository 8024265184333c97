"""The tiny ops layer shared by execution (``int``) and proof (``z3``).

Every capacity formula in :mod:`kvverify.reference.arith` is written once on top of these
helpers. Called with Python ints they compute; called with z3 terms they build the
term the lemmas reason about. Dispatch is by argument type, so one function serves
both backends and no formula is ever typed twice.

z3 facts this module encodes: integer ``/`` is floor division only for a positive
divisor (every divisor here is a positive block size or byte count, stated as a
domain constraint by each lemma), ``//`` does not exist on z3 terms, and ``If``
replaces Python's ``if``.
"""

from __future__ import annotations

import math
from typing import Any, Union

try:  # z3 is a hard dependency, but keep the int path importable without it.
    import z3
except ImportError:  # pragma: no cover
    z3 = None

Num = Union[int, Any]  # an int, or a z3 ArithRef / BoolRef


def is_symbolic(*values: object) -> bool:
    """True when any value is a z3 expression."""
    return z3 is not None and any(isinstance(v, z3.ExprRef) for v in values)


def floordiv(a: Num, b: Num) -> Num:
    """``a // b`` for a positive divisor ``b``."""
    if type(a) is int and type(b) is int:
        return a // b
    if is_symbolic(a, b):
        return a / b
    return a // b


def mod(a: Num, b: Num) -> Num:
    """``a % b`` for a positive divisor ``b``."""
    if is_symbolic(a, b):
        return a % b
    return a % b


def cdiv(a: Num, b: Num) -> Num:
    """Ceiling division ``ceil(a / b)`` for a positive divisor ``b`` (vLLM's ``cdiv``)."""
    if type(a) is int and type(b) is int:
        return -(a // -b)
    if is_symbolic(a, b):
        return (a + b - 1) / b
    return -(a // -b)


def ite(cond: Any, then: Num, other: Num) -> Num:
    """``then if cond else other`` on ints, ``z3.If`` on terms."""
    if type(cond) is bool and type(then) is int and type(other) is int:
        return then if cond else other
    if is_symbolic(cond, then, other):
        return z3.If(cond, then, other)
    return then if cond else other


def min_(a: Num, b: Num) -> Num:
    if type(a) is int and type(b) is int:
        return a if a <= b else b
    if is_symbolic(a, b):
        return z3.If(a <= b, a, b)
    return a if a <= b else b


def max_(a: Num, b: Num) -> Num:
    if type(a) is int and type(b) is int:
        return a if a >= b else b
    if is_symbolic(a, b):
        return z3.If(a >= b, a, b)
    return a if a >= b else b


def sum_(values: list[Num]) -> Num:
    """Sum that stays an int for ints and a term for terms (0 for empty)."""
    total: Num = 0
    for v in values:
        total = total + v
    return total


def and_(*conds: Any) -> Any:
    if is_symbolic(*conds):
        return z3.And(*conds)
    return all(conds)


def or_(*conds: Any) -> Any:
    if is_symbolic(*conds):
        return z3.Or(*conds)
    return any(conds)


def not_(cond: Any) -> Any:
    if is_symbolic(cond):
        return z3.Not(cond)
    return not cond


def implies(a: Any, b: Any) -> Any:
    if is_symbolic(a, b):
        return z3.Implies(a, b)
    return (not a) or b


def gcd(*values: int) -> int:
    """gcd over concrete block sizes (enumerated, never symbolic)."""
    return math.gcd(*values)


def lcm(*values: int) -> int:
    """lcm over concrete block sizes (enumerated, never symbolic)."""
    return math.lcm(*values)


def divides(d: Num, n: Num) -> Any:
    """``d`` divides ``n`` (``d`` positive)."""
    return mod(n, d) == 0
