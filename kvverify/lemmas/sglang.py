"""SGLang's boundary lemmas, built from :mod:`kvverify.sglang.arith` (the formulas the SGLang
reference executes), over page sizes enumerated from SGLang's ``--page-size`` values.

* ``sglang_page_rounding`` — ``ceil_paged_tokens`` / ``floor_paged_tokens`` bracket ``n``
  within one page and are whole pages (the ``cdiv`` the engines share);
* ``sglang_validated_is_schedulable`` — an input under ``max_req_input_len`` (the ``- 5``),
  with ``max_new_tokens`` as ``init_req_max_new_tokens`` clamps it, is charged strictly less
  than an empty pool: a counterexample on the faithful reference, finding SG1 (replayed on
  ``PrefillAdder``); proved under its fix;
* ``sglang_clamped_max_new_fits`` — the clamp leaves the page overhead free whenever the
  input leaves room for it (catches ``sglang_max_new_tokens_unclamped``);
* ``sglang_decode_check_is_allocation`` — ``check_decode_mem`` asks for exactly what
  ``prepare_for_decode`` allocates (catches ``sglang_decode_mem_counts_tokens``);
* ``sglang_retract_budget_suffices`` — the retract loop waits for at least that much
  (catches ``sglang_retract_counts_tokens``, ``sglang_retract_ignores_multiplier``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from kvverify.lemmas.core import Case, Finding, Lemma, ReplayOutcome, Var
from kvverify.reference.ops import and_, divides, implies
from kvverify.sglang import arith

PAGE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
MAX_TOKENS = 2**22


def _per_page(variables: tuple[Var, ...], domain, claim, shrink: tuple[str, ...]) -> Iterator[Case]:
    for p in PAGE_SIZES:
        yield Case(f"page_size={p}", {"page_size": p}, variables,
                   domain=lambda v, p=p: domain(v, p), claim=lambda v, p=p: claim(v, p), shrink=shrink)


def _rounding_cases() -> Iterator[Case]:
    def claim(v: Mapping, p: int) -> object:
        up, down = arith.ceil_paged_tokens(v["n"], p), arith.floor_paged_tokens(v["n"], p)
        return and_(up >= v["n"], up < v["n"] + p, down <= v["n"], down > v["n"] - p,
                    divides(p, up), divides(p, down))
    return _per_page((Var("n", 0, MAX_TOKENS),), lambda v, p: [], claim, ("n",))


PAGE_ROUNDING = Lemma(
    name="sglang_page_rounding", topic="sglang",
    statement="ceil_paged(n) and floor_paged(n) are whole pages within one page of n",
    domain=f"n symbolic in [0, 2^22]; page_size in {list(PAGE_SIZES)}", cases=_rounding_cases)


def _admission_vars() -> tuple[Var, ...]:
    return (Var("pages", 1, 2**16), Var("ctx", 2, MAX_TOKENS), Var("L", 1, MAX_TOKENS), Var("m", 0, MAX_TOKENS))


def _admission_domain(v: Mapping, p: int) -> list[object]:
    pool = v["pages"] * p
    return [arith.input_accepted(v["L"], arith.max_req_input_len(v["ctx"], pool, p))]


def _admission_claim(v: Mapping, p: int) -> object:
    pool = v["pages"] * p
    max_new = arith.clamped_max_new_tokens(v["m"], v["L"], arith.max_req_len(v["ctx"], pool), pool, p)
    return arith.prefill_admits(arith.prefill_charge(v["L"], max_new, p), pool)


def _replay_admission(case: Case, values: Mapping[str, int]) -> ReplayOutcome:
    from kvverify.sglang.config import SglangConfig
    from kvverify.targets.sglang_reference import SglangReferenceTarget
    p = case.params["page_size"]
    cfg = SglangConfig(page_size=p, context_len=values["ctx"], max_total_num_tokens=values["pages"] * p,
                       chunked_prefill_size=None, max_prefill_tokens=values["pages"] * p)
    probe = SglangReferenceTarget().probe_admission(cfg, values["L"], values["m"])
    confirmed = probe.accepted and probe.add_result != "admitted"
    return ReplayOutcome(confirmed, f"PrefillAdder on an empty pool: {probe.add_result} "
                         f"(validation {'accepted' if probe.accepted else 'refused'})",
                         {"max_req_input_len": probe.max_req_input_len, "max_new_tokens": probe.max_new_tokens,
                          "rem_total_tokens": probe.rem_total_tokens})


SG1 = Finding(
    id="SG1", title="validate_input_length accepts requests PrefillAdder never admits",
    upstream="sgl-project/sglang #29249 (open), follow-up of #25126 / #28530",
    consequence="with page_size >= 7 and a pool smaller than the context, an input of "
                "[pool - page_size, pool - 7] tokens passes validation and waits forever (0 tok/s)",
    fix="sglang_input_bound_page_aware")

VALIDATED_IS_SCHEDULABLE = Lemma(
    name="sglang_validated_is_schedulable", topic="sglang",
    statement=("an input L < max_req_input_len = min(ctx - 1, C - 1) - 5, with max_new clamped by "
               "init_req_max_new_tokens, is charged L + max_new + page_size < C (PrefillAdder admits it)"),
    domain=f"pool C = pages x page_size, pages in [1, 2^16]; ctx, L, max_new symbolic; page_size in {list(PAGE_SIZES)}",
    cases=lambda: _per_page(_admission_vars(), _admission_domain, _admission_claim, ("pages", "L", "ctx", "m")),
    replay=_replay_admission, expected="counterexample", finding=SG1)


def _clamp_cases() -> Iterator[Case]:
    def claim(v: Mapping, p: int) -> object:
        pool = v["pages"] * p
        room = arith.ceil_paged_tokens(v["L"], p) + p + 1 <= pool
        max_new = arith.clamped_max_new_tokens(v["m"], v["L"], v["bound"], pool, p)
        return implies(room, arith.ceil_paged_tokens(v["L"], p) + max_new + p + 1 <= pool)
    return _per_page((Var("pages", 1, 2**16), Var("L", 1, MAX_TOKENS), Var("m", 0, MAX_TOKENS),
                      Var("bound", 1, MAX_TOKENS)), lambda v, p: [], claim, ("pages", "L", "m", "bound"))


CLAMPED_MAX_NEW_FITS = Lemma(
    name="sglang_clamped_max_new_fits", topic="sglang",
    statement="if ceil_paged(L) + page_size + 1 <= C, the clamped max_new keeps ceil_paged(L) + max_new + page_size + 1 <= C",
    domain=f"pages, L, max_new, max_req_len symbolic; page_size in {list(PAGE_SIZES)}",
    cases=_clamp_cases, catches=("sglang_max_new_tokens_unclamped",))


def _decode_vars() -> tuple[Var, ...]:
    return (Var("seq", 1, MAX_TOKENS), Var("k", 1, 64))


def _check_cases() -> Iterator[Case]:
    def claim(v: Mapping, p: int) -> object:
        return arith.decode_tokens_required(v["seq"], v["k"], p) == arith.num_new_pages(v["seq"], v["k"], p) * p
    return _per_page(_decode_vars(), lambda v, p: [], claim, ("seq", "k"))


DECODE_CHECK_IS_ALLOCATION = Lemma(
    name="sglang_decode_check_is_allocation", topic="sglang",
    statement="check_decode_mem's per-request demand = the pages prepare_for_decode allocates, in tokens",
    domain=f"seq_len in [1, 2^22], tokens per step in [1, 64]; page_size in {list(PAGE_SIZES)}",
    cases=_check_cases, catches=("sglang_decode_mem_counts_tokens",))


def _retract_cases() -> Iterator[Case]:
    def claim(v: Mapping, p: int) -> object:
        return arith.retract_budget_tokens(v["seq"], v["k"], p) >= arith.num_new_pages(v["seq"], v["k"], p) * p
    return _per_page(_decode_vars(), lambda v, p: [], claim, ("seq", "k"))


RETRACT_BUDGET_SUFFICES = Lemma(
    name="sglang_retract_budget_suffices", topic="sglang",
    statement="the retract loop stops only when each kept request's next decode allocation is free",
    domain=f"seq_len in [1, 2^22], tokens per step in [1, 64]; page_size in {list(PAGE_SIZES)}",
    cases=_retract_cases, catches=("sglang_retract_counts_tokens", "sglang_retract_ignores_multiplier"))

LEMMAS: tuple[Lemma, ...] = (PAGE_ROUNDING, VALIDATED_IS_SCHEDULABLE, CLAMPED_MAX_NEW_FITS,
                             DECODE_CHECK_IS_ALLOCATION, RETRACT_BUDGET_SUFFICES)
