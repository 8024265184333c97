"""The peak of the blocks one request holds over a stretch of equal steps, by looking at few.

A *stretch* is ``m`` consecutive steps that each schedule ``k`` tokens, from ``c0`` computed
tokens: step ``j`` starts at ``c_j = c0 + j * k``. The run needs the peak of
``T(j) = sum_g held_g(c_j, k)`` to know whether any step of the stretch outgrows the pool
(then the request would be preempted, and the check runs step by step instead).

Split at every group's ``steady_from`` and at the step where the slots reach
``max_model_len``. Inside a piece, every group is either non-decreasing or periodic in ``c``
(:mod:`kvverify.eventrun.held`); with ``pi`` the common period in steps, ``T(j) <= T(j + pi)``,
so the peak of a piece lies in its last ``pi`` steps. The clamped tail (a few steps: the
lookahead and one chunk) is evaluated step by step. Anything that would need more than
:data:`EVAL_LIMIT` evaluations declines (:class:`~kvverify.eventrun.held.Unsupported`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvverify.eventrun.held import GroupModel, Unsupported

#: the most ``T(j)`` evaluations one stretch may take before the event-based run declines
EVAL_LIMIT = 1 << 18


def held_at(models: Sequence[GroupModel], c: int, k: int) -> tuple[int, ...]:
    """Blocks held per group during a step from ``c`` computed tokens scheduling ``k``."""
    return tuple(g.held(c, k) for g in models)


def stretch_peak(models: Sequence[GroupModel], c0: int, k: int, m: int, *, lookahead: int,
                 max_model_len: int) -> int:
    """``max_j sum_g held_g(c0 + j k, k)`` over ``j`` in ``[0, m)`` (``m >= 1``, ``k >= 1``)."""
    if m < 1 or k < 1:
        raise ValueError(f"a stretch needs m >= 1 and k >= 1 (got m={m}, k={k})")
    if not models:
        return 0

    def total(j: int) -> int:
        c = c0 + j * k
        return sum(g.held(c, k) for g in models)

    # first step whose slots are clamped at max_model_len (for the groups that count slots)
    tail = m
    if any(g.uses_slots for g in models):
        room = max_model_len - k - lookahead - c0  # c_j <= this: unclamped
        tail = 0 if room < 0 else min(m, room // k + 1)
    cuts = {0, tail}
    for g in models:
        if g.period and g.steady_from > c0:
            j = -(-(g.steady_from - c0) // k)
            if j < tail:
                cuts.add(j)
    bounds = sorted(cuts)
    peak = 0
    evaluations = 0
    for a, b in zip(bounds, bounds[1:]):
        if a >= b:
            continue
        ca = c0 + a * k
        periods = [g.period // math.gcd(g.period, k) for g in models if g.period and g.steady_from <= ca]
        pi = 1
        for p in periods:
            pi = pi * p // math.gcd(pi, p)
        first = b - 1 if not periods else max(a, b - pi)
        evaluations += b - first
        if evaluations > EVAL_LIMIT:
            raise Unsupported(f"a stretch of {m:,} steps needs more than {EVAL_LIMIT:,} evaluations "
                              f"(common period {pi:,} steps)")
        peak = max(peak, max(total(j) for j in range(first, b)))
    if tail < m:
        evaluations += m - tail
        if evaluations > EVAL_LIMIT:
            raise Unsupported(f"the clamped tail of a stretch has {m - tail:,} steps")
        peak = max(peak, max(total(j) for j in range(tail, m)))
    return peak
