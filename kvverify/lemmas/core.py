"""Lemma machinery: cases, the three-valued prover, shrinking and replay.

A :class:`Lemma` is a universally quantified claim over a stated domain. Its cases
(one per enumerated parameter, e.g. each block size of the real set) each give
symbolic variables with bounds, domain conditions and the claim — all built by calling
the shared :mod:`kvverify.reference.arith` functions, so the same code the reference executes on
ints is proved on z3 terms. The claim holds on a case when ``domain ∧ ¬claim`` is unsat.

Three results (:class:`Result`):

* ``proved`` — every case unsat;
* ``counterexample`` — a case is sat; the model is shrunk, turned into concrete ints,
  re-evaluated on the int backend, and replayed on the reference (``plan_kv_cache``,
  the managers) which must confirm the violation. A replay that does not confirm it
  means the lemma is wrong: the result is then ``unknown`` with that reason, a failure;
* ``unknown`` — the solver gave up (rlimit/timeout) or the lemma is inconsistent;
  always a failure, never a proof.

Flaws and fixes are context switches (``flaws.enabled``, ``fixes.enabled``): a lemma
proved under a flaw builds its claim with the flaw on, because the arith functions
consult the switches when they are called.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

import z3

from kvverify import engines

#: The real block sizes lemmas enumerate to keep the arithmetic linear (544: a hybrid
#: attention+Mamba block size after page unification).
BLOCK_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 544)

#: z3 resource limit per check (deterministic across runs of one z3 version), and a
#: wall-clock backstop.
RLIMIT = 5_000_000
TIMEOUT_MS = 20_000

MAX_BYTES = 2**50
MAX_TOKENS_SYM = 2**24  # symbolic lengths: up to 16M tokens
MAX_WINDOW = 2**20


@dataclass(frozen=True)
class Var:
    """A symbolic integer with its bounds (inclusive)."""

    name: str
    lo: int
    hi: int


@dataclass
class Case:
    """One enumerated instance of a lemma.

    ``domain`` and ``claim`` take a mapping from variable name to value — z3 terms when
    proving, ints when replaying — and must only use :mod:`kvverify.reference.ops` /
    :mod:`kvverify.reference.arith`, so both backends work. ``params`` are the concrete
    enumerated parameters (block size, spec mix...), ``shrink`` the variables to
    minimise, in order, for a small counterexample.
    """

    label: str
    params: dict[str, Any]
    variables: tuple[Var, ...]
    domain: Callable[..., list[Any]]  # (values: Mapping[str, Any]) -> conditions
    claim: Callable[..., Any]  # (values: Mapping[str, Any]) -> condition
    shrink: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    """An upstream defect a lemma exposes on the faithful reference."""

    id: str
    title: str
    upstream: str
    consequence: str
    fix: str  # a fix option of its engine (kvverify.fixes, kvverify.sglang.fixes)


@dataclass(frozen=True)
class ReplayOutcome:
    """The reference's verdict on a concrete counterexample."""

    confirmed: bool
    detail: str
    evidence: dict[str, Any] = field(default_factory=dict)


Replay = Callable[[Case, Mapping[str, int]], ReplayOutcome]


@dataclass(frozen=True)
class Lemma:
    name: str
    topic: str
    statement: str
    domain: str
    cases: Callable[[], Iterable[Case]]
    replay: Replay | None = None
    expected: str = "proved"
    finding: Finding | None = None
    #: bug-zoo flaws under which this lemma must return a (replay-confirmed) counterexample
    catches: tuple[str, ...] = ()


@dataclass
class Result:
    name: str
    topic: str
    statement: str
    domain: str
    result: str  # "proved" | "counterexample" | "unknown"
    seconds: float
    expected: str
    finding: str | None = None
    finding_title: str | None = None
    fix: str | None = None  # the fix this run was evaluated under, if any
    proposed_fix: str | None = None  # the finding's fix name
    flaw: str | None = None
    cases: int = 0
    counterexample: dict[str, Any] | None = None
    replay: str | None = None
    replay_confirmed: bool | None = None
    reason: str | None = None
    catches: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Matches the expectation (a known finding reproduced counts as ok)."""
        return self.result == self.expected

    @property
    def known_finding(self) -> bool:
        return self.finding is not None and self.result == "counterexample" == self.expected

    @property
    def status(self) -> str:
        if self.ok:
            return "known finding" if self.known_finding else "ok"
        if self.result == "unknown":
            return "UNKNOWN"
        if self.expected == "counterexample":
            return "STRICT: finding no longer reproduces"
        return "COUNTEREXAMPLE"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "topic": self.topic, "statement": self.statement,
            "domain": self.domain, "result": self.result, "seconds": round(self.seconds, 4),
            "expected": self.expected, "ok": self.ok, "status": self.status,
            "finding": self.finding, "finding_title": self.finding_title,
            "proposed_fix": self.proposed_fix, "fix": self.fix, "flaw": self.flaw,
            "cases": self.cases, "counterexample": self.counterexample,
            "replay": self.replay, "replay_confirmed": self.replay_confirmed,
            "reason": self.reason, "catches": list(self.catches),
        }


# --- the prover ----------------------------------------------------------------------


def _as_z3(cond: Any) -> Any:
    if isinstance(cond, bool):
        return z3.BoolVal(cond)
    if isinstance(cond, z3.BoolRef):
        return cond
    raise TypeError(f"lemma condition must be a bool or z3 BoolRef, got {type(cond).__name__}")


@dataclass
class _CaseOutcome:
    verdict: str  # "unsat" | "sat" | "unknown"
    model: dict[str, int] | None = None
    reason: str | None = None


def _solver(rlimit: int, timeout_ms: int) -> z3.Solver:
    s = z3.Solver()
    s.set("rlimit", rlimit)
    s.set("timeout", timeout_ms)
    return s


def _model_values(model: z3.ModelRef, symbols: Mapping[str, z3.ArithRef]) -> dict[str, int]:
    return {n: model.eval(t, model_completion=True).as_long() for n, t in symbols.items()}


def _shrink(s: z3.Solver, symbols: Mapping[str, z3.ArithRef], variables: tuple[Var, ...],
            order: tuple[str, ...], values: dict[str, int], budget: int = 400) -> dict[str, int]:
    """Greedy minimisation: for each variable in ``order``, bisect its value down."""
    bounds = {v.name: v for v in variables}
    for name in order:
        if name not in symbols:
            continue
        term, lo, hi = symbols[name], bounds[name].lo, values[name]
        while lo < hi and budget > 0:
            budget -= 1
            mid = (lo + hi) // 2
            s.push()
            s.add(term <= mid)
            r = s.check()
            if r == z3.sat:
                values = _model_values(s.model(), symbols)
                hi = values[name]
            else:
                lo = mid + 1
            s.pop()
        s.add(term == values[name])
    return values


def check_case(case: Case, rlimit: int = RLIMIT, timeout_ms: int = TIMEOUT_MS) -> _CaseOutcome:
    """Is ``domain ∧ ¬claim`` satisfiable on this case?"""
    if not case.variables:
        # fully enumerated: the claim is a concrete bool (or a closed z3 term)
        dom = case.domain({})
        claim = case.claim({})
        if all(isinstance(c, bool) for c in [*dom, claim]):
            return _CaseOutcome("sat", {}) if all(dom) and not claim else _CaseOutcome("unsat")
    symbols = {v.name: z3.Int(v.name) for v in case.variables}
    s = _solver(rlimit, timeout_ms)
    for v in case.variables:
        s.add(symbols[v.name] >= v.lo, symbols[v.name] <= v.hi)
    for cond in case.domain(symbols):
        s.add(_as_z3(cond))
    s.add(z3.Not(_as_z3(case.claim(symbols))))
    r = s.check()
    if r == z3.unsat:
        return _CaseOutcome("unsat")
    if r == z3.unknown:
        reason = s.reason_unknown()
        if reason == "canceled" or "resource limit" in reason:
            reason = f"{reason} (rlimit {rlimit} / timeout {timeout_ms} ms exhausted)"
        return _CaseOutcome("unknown", reason=reason)
    values = _model_values(s.model(), symbols)
    values = _shrink(s, symbols, case.variables, case.shrink, values)
    return _CaseOutcome("sat", values)


def evaluate_on_ints(case: Case, values: Mapping[str, int]) -> tuple[bool, bool]:
    """(domain holds, claim holds) on the int backend for concrete values."""
    dom = case.domain(values)
    claim = case.claim(values)
    return all(bool(c) for c in dom), bool(claim)


@contextlib.contextmanager
def switches(flaw: str | None, fix: str | None) -> Iterator[None]:
    """``flaw`` / ``fix`` on, each in its engine's catalogue (:mod:`kvverify.engines`)."""
    with engines.enabled(flaws=() if flaw is None else (flaw,), fixes=() if fix is None else (fix,)):
        yield


def prove(lemma: Lemma, flaw: str | None = None, fix: bool = False,
          rlimit: int = RLIMIT, timeout_ms: int = TIMEOUT_MS) -> Result:
    """Prove ``lemma`` on the reference (optionally with a flaw on, or under its fix)."""
    fix_name = lemma.finding.fix if (fix and lemma.finding is not None) else None
    if fix and lemma.finding is None:
        raise ValueError(f"lemma {lemma.name} has no finding, hence no fix to evaluate it under")
    expected = "proved" if fix_name else lemma.expected
    res = Result(name=lemma.name, topic=lemma.topic, statement=lemma.statement,
                 domain=lemma.domain, result="proved", seconds=0.0, expected=expected,
                 finding=lemma.finding.id if lemma.finding else None,
                 finding_title=lemma.finding.title if lemma.finding else None,
                 proposed_fix=lemma.finding.fix if lemma.finding else None,
                 fix=fix_name, flaw=flaw, catches=lemma.catches)
    t0 = time.perf_counter()
    try:
        with switches(flaw, fix_name):
            active = sorted(engines.active_flaws())  # incl. pytest --flaw
            res.flaw = ",".join(active) or None
            for case in lemma.cases():
                res.cases += 1
                out = check_case(case, rlimit, timeout_ms)
                if out.verdict == "unsat":
                    continue
                if out.verdict == "unknown":
                    res.result, res.reason = "unknown", f"case {case.label}: {out.reason}"
                    break
                _counterexample(lemma, case, out.model or {}, res)
                break
    except Exception as e:  # a lemma that cannot be built is not proved
        res.result, res.reason = "unknown", f"lemma raised {type(e).__name__}: {e}"
    res.seconds = time.perf_counter() - t0
    return res


def _counterexample(lemma: Lemma, case: Case, values: dict[str, int], res: Result) -> None:
    res.counterexample = {"case": case.label, "params": _plain(case.params), "values": dict(values)}
    dom_ok, claim_ok = evaluate_on_ints(case, values)
    if not dom_ok or claim_ok:
        res.result = "unknown"
        res.replay_confirmed = False
        res.reason = ("lemma error: the z3 counterexample does not violate the claim on the int "
                      f"backend (domain holds: {dom_ok}, claim holds: {claim_ok})")
        return
    if lemma.replay is None:
        res.result, res.replay_confirmed = "counterexample", True
        res.replay = "int backend: claim violated (no reference-level replay for this lemma)"
        return
    outcome = lemma.replay(case, values)
    res.replay, res.replay_confirmed = outcome.detail, outcome.confirmed
    if outcome.evidence:
        res.counterexample["evidence"] = _plain(outcome.evidence)
    if outcome.confirmed:
        res.result = "counterexample"
    else:
        res.result = "unknown"
        res.reason = f"lemma error: the reference replay did not confirm the violation: {outcome.detail}"


from kvverify.invariants.base import _plain  # noqa: E402  (one JSON-plain conversion for all results)
