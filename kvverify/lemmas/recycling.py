"""Recycling managers: sliding window, chunked local attention, Mamba.

A step of one request: ``n`` tokens computed (earlier chunks or prefix hits), ``k`` new
tokens scheduled (``1 <= k <= F``: a chunked-prefill chunk or a decode step), ``n + k <= L``.
``remove_skipped_blocks`` frees the blocks below the first token still attended at
``n``; then the table grows to ``cdiv(n + k, B)`` slots. The lemmas bound the real blocks
held then by the spec's ``max_admission_blocks_per_request`` (SWA, chunked) or the Mamba
startup bound, show startup bound = admission cap (one source of truth, PR #40946), that
the capped gate admits on an empty pool whatever passed the startup check, and that the
per-step prediction equals what the allocator pulls (PR #40027).
"""

from __future__ import annotations

import functools
from typing import Iterator, Mapping

from kvverify.reference import arith
from kvverify.reference.config import VllmConfig
from kvverify.errors import PoolExhaustedError
from kvverify.lemmas.core import (
    BLOCK_SIZES,
    MAX_BYTES,
    MAX_TOKENS_SYM,
    MAX_WINDOW,
    Case,
    Finding,
    Lemma,
    ReplayOutcome,
    Var,
)
from kvverify.lemmas.replay import (
    attention_kwargs,
    chunk_schedule,
    mix_specs,
    page_of,
    plan,
    plan_summary,
    run_steps,
    too_big,
)
from kvverify.reference import kinds
from kvverify.reference.managers.registry import get_manager_for_kv_cache_spec
from kvverify.reference.ops import and_, cdiv, divides, ite, max_, min_
from kvverify.reference.pool import BlockPool


def _models() -> dict[str, kinds.SpecKind]:
    """Recycling kinds by their lemma label (``swa``, ``chunked``), from the kinds registry."""
    return {k.held.label: k for k in kinds.recycling_kinds() if k.held is not None}


def recycling_labels() -> tuple[str, ...]:
    """The lemma labels of every registered recycling kind: each gets the held/bound/gate/
    predictor lemmas below."""
    return tuple(_models())


def held_model(kind: str) -> kinds.HeldBlockModel:
    held = _models()[kind].held
    assert held is not None
    return held


def _params(kind: str, v: Mapping) -> dict:
    """The kind's window params by spec field, from the lemma variables (by symbol)."""
    return held_model(kind).values({p.field: v[p.symbol] for p in held_model(kind).params
                                    if p.symbol in v})


def cap_of(kind: str, v: Mapping, block_size: int):
    """``max_admission_blocks_per_request`` of the kind's spec (``F`` in flight, length ``L``)."""
    return held_model(kind).admission_cap(_params(kind, v), v["F"], v["L"], block_size)


def skipped_tokens(kind: str, num_computed, v: Mapping):
    return held_model(kind).skipped_tokens(num_computed, _params(kind, v))


def held(kind: str, v: Mapping, block_size: int):
    """Real blocks held after the step ``(n, k)``."""
    return arith.blocks_held_after_step(v["n"] + v["k"], skipped_tokens(kind, v["n"], v), block_size)


def _window_vars(kind: str, first_only: bool = False) -> tuple[Var, ...]:
    params = held_model(kind).params[:1] if first_only else held_model(kind).params
    return tuple(Var(p.symbol, p.minimum, MAX_WINDOW if p.maximum is None else p.maximum)
                 for p in params)


def _step_vars(kind: str, first_n: int = 0) -> tuple[Var, ...]:
    return (Var("L", 1, MAX_TOKENS_SYM), Var("n", first_n, MAX_TOKENS_SYM),
            Var("k", 1, MAX_WINDOW), Var("F", 1, MAX_WINDOW)) + _window_vars(kind)


def _step_domain(v: Mapping) -> list:
    return [v["k"] <= v["F"], v["n"] + v["k"] <= v["L"]]


def _spec(kind: str, block_size: int, v: Mapping[str, int]):
    return _models()[kind].spec_cls(**attention_kwargs(block_size), **_params(kind, v))


def _manager(kind: str, block_size: int, v: Mapping[str, int], num_blocks: int):
    pool = BlockPool(num_blocks, enable_caching=False, hash_block_size=block_size)
    return get_manager_for_kv_cache_spec(_spec(kind, block_size, v), pool,
                                         max_in_flight_tokens=v["F"], max_model_len=v["L"],
                                         enable_caching=False, kv_cache_group_id=0,
                                         scheduler_block_size=block_size)


# --- held <= cap ---------------------------------------------------------------------------


def _held_cases(kind: str, aligned_only: bool = False) -> Iterator[Case]:
    for b in BLOCK_SIZES:
        domain = _step_domain
        if aligned_only:
            def domain(v: Mapping, b: int = b) -> list:
                return _step_domain(v) + [divides(b, v["C"])]
        yield Case(f"{kind}, B={b}", {"kind": kind, "block_size": b},
                   _step_vars(kind), domain=domain,
                   claim=lambda v, b=b: held(kind, v, b) <= cap_of(kind, v, b),
                   shrink=("L", "n", "k", "F", "W", "C", "E"))


def _replay_held(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    kind, b = case.params["kind"], case.params["block_size"]
    if too_big(cdiv(v["L"], b) + 2):
        return ReplayOutcome(False, f"too large to replay (L={v['L']}, B={b})")
    schedule = chunk_schedule(v["n"], v["F"]) + [v["k"]]
    m = _manager(kind, b, v, cdiv(v["L"], b) + 2)
    cap = m.max_admission_blocks_per_request
    got = run_steps(m, "req", schedule)
    evidence = {"schedule": schedule, "held": got, "cap": cap}
    detail = f"{type(m).__name__}: schedule {schedule} holds {got} blocks, cap {cap}"
    if got > cap:
        # consequence: a pool sized by the startup bound (cap usable blocks) runs dry
        small = _manager(kind, b, v, cap + 1)
        try:
            run_steps(small, "req", schedule)
            detail += "; a pool of cap + 1 blocks survived"
        except PoolExhaustedError as e:
            evidence["exhausted"] = str(e)
            detail += (f"; with the pool the startup check sizes for it (cap + 1 = {cap + 1} blocks) "
                       f"the step raises: {e}")
    return ReplayOutcome(got > cap, detail, evidence)


_STEP_DOMAIN = ("any step of one request: n computed (chunks or prefix hits) symbolic <= 2^24, "
                "k new tokens in [1, F], n + k <= L <= 2^24, F <= 2^20; no lookahead")

SWA_HELD = Lemma(
    name="swa_held_within_cap",
    topic="sliding window",
    statement=("blocks held after recycling at any chunked-prefill or decode step <= "
               "max_admission_blocks_per_request = cdiv(min(W - 1 + E + F, L), B) + 1"),
    domain=f"{_STEP_DOMAIN}; W <= 2^20 and E <= 2^10 symbolic; B enumerated {list(BLOCK_SIZES)}",
    cases=lambda: _held_cases("swa"), replay=_replay_held)

F2 = Finding(
    id="F2-chunked-local-cap-misaligned-chunk",
    title="chunked-local admission cap has no +1 for a chunk that starts mid-block",
    upstream=("vllm/v1/kv_cache_interface.py: ChunkedLocalAttentionSpec.max_admission_blocks_per_request "
              "(and max_memory_usage_bytes): cdiv(min(C + F, L), B)"),
    consequence=("when B does not divide C the current chunk starts mid-block: the chunk's first block "
                 "also holds tokens of the previous chunk, so a step can hold cdiv(min(C + F, L), B) + 1 "
                 "blocks. A pool sized by the startup check then runs dry mid-request (the request is "
                 "preempted and re-prefilled forever when alone), e.g. B=16, C=2, F=14, L=17: tokens 2..16 "
                 "span blocks 0 and 1, cap 1. Latent for Llama 4 (C=8192, power-of-two B); real for "
                 "block sizes such as 544 or chunk sizes that are not a multiple of B"),
    fix="chunked_local_cap_plus_one")

CHUNKED_HELD = Lemma(
    name="chunked_local_held_within_cap",
    topic="chunked local",
    statement=("blocks held after recycling at any step <= max_admission_blocks_per_request = "
               "cdiv(min(C + F, L), B) (upstream: no +1), for every chunk size C"),
    domain=f"{_STEP_DOMAIN}; C <= 2^20 symbolic (z3 div by C); B enumerated {list(BLOCK_SIZES)}",
    cases=lambda: _held_cases("chunked"), replay=_replay_held,
    expected="counterexample", finding=F2)

CHUNKED_HELD_ALIGNED = Lemma(
    name="chunked_local_held_within_cap_aligned",
    topic="chunked local",
    statement="the same bound holds when the chunk size is a multiple of the block size (B | C)",
    domain=f"{_STEP_DOMAIN}; C <= 2^20 symbolic with B | C; B enumerated {list(BLOCK_SIZES)}",
    cases=lambda: _held_cases("chunked", aligned_only=True), replay=_replay_held)


# --- is the SWA cap needed? (guarantee 2: no needlessly reserved block) ------------------


def worst_step(v: Mapping, block_size: int) -> dict:
    """The step that holds the most SWA blocks (a Skolem witness, so no quantifier).

    Window span ``T = W - 1 + E + F``. If ``L <= T`` the whole request fits one span:
    compute ``max(0, L - F)`` tokens, then schedule the rest (held: ``cdiv(L, B)``).
    Otherwise start the span at offset ``s = min(B - 1, L - T)`` into a block: ``n = s + W - 1
    + E`` computed, ``k = F`` new (held: ``cdiv(s + T, B)``).
    """
    span = v["W"] - 1 + v["E"] + v["F"]
    short = v["L"] <= span
    offset = min_(block_size - 1, v["L"] - span)
    n = ite(short, max_(0, v["L"] - v["F"]), offset + v["W"] - 1 + v["E"])
    k = ite(short, v["L"] - n, v["F"])
    return {**v, "n": n, "k": k}


def _tight_cases() -> Iterator[Case]:
    for b in BLOCK_SIZES:
        def domain(v: Mapping, b: int = b) -> list:
            return []

        def claim(v: Mapping, b: int = b) -> object:
            w = worst_step(v, b)
            return and_(*_step_domain(w), w["n"] >= 0, w["k"] >= 1,
                        held("swa", w, b) == cap_of("swa", v, b))

        yield Case(f"swa, B={b}", {"kind": "swa", "block_size": b},
                   (Var("L", 1, MAX_TOKENS_SYM), Var("F", 1, MAX_WINDOW)) + _window_vars("swa"),
                   domain=domain, claim=claim, shrink=("L", "F", "W", "E"))


def _replay_tight(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    """Every step of the concrete config on the real manager: none reaches the cap."""
    b = case.params["block_size"]
    if v["L"] * min(v["F"], v["L"]) > 20_000:
        return ReplayOutcome(False, f"too large to enumerate every step (L={v['L']}, F={v['F']})")
    best, where, cap = -1, (0, 0), 0
    for n in range(v["L"]):
        for k in range(1, min(v["F"], v["L"] - n) + 1):
            m = _manager("swa", b, v, cdiv(v["L"], b) + 2)
            cap = m.max_admission_blocks_per_request
            got = run_steps(m, "req", chunk_schedule(n, v["F"]) + [k])
            if got > best:
                best, where = got, (n, k)
    return ReplayOutcome(best < cap, f"SlidingWindowManager over every step (n, k): at most {best} "
                         f"blocks held (first at n={where[0]}, k={where[1]}), the cap reserves {cap}",
                         {"max_held": best, "cap": cap, "at": list(where)})


F5 = Finding(
    id="F5-swa-admission-cap-slack",
    title="the sliding-window cap's +1 is reserved where no step can need it",
    upstream=("vllm/v1/kv_cache_interface.py: SlidingWindowSpec.max_admission_blocks_per_request "
              "(and max_memory_usage_bytes): cdiv(min(W - 1 + E + F, L), B) + 1"),
    consequence=("the +1 covers a window starting mid-block, which needs room behind the span; when "
                 "L <= W - 1 + E + F (e.g. Gemma 3: W=1024, max_model_len 8192, "
                 "max_num_batched_tokens 8192) no step holds more than cdiv(L, B) blocks, and when "
                 "W - 1 + E + F = 1 (mod B) the +1 never materialises either. Each SWA group then reserves one "
                 "block per request that no workload uses: the startup check refuses pools that could "
                 "serve, auto-fit picks a shorter max_model_len, and admission is one block stricter"),
    fix="swa_cap_exact")

SWA_TIGHT = Lemma(
    name="swa_cap_reached_at_worst_step",
    topic="sliding window",
    statement=("the SWA admission cap is needed: the worst-case step (witness: the span W - 1 + E + F "
               "placed at block offset min(B - 1, L - span), or the whole request when L <= span) "
               "holds exactly max_admission_blocks_per_request blocks"),
    domain="L <= 2^24, F, W <= 2^20, E <= 2^10 symbolic; B enumerated; witness step explicit (no quantifier)",
    cases=_tight_cases, replay=_replay_tight,
    expected="counterexample", finding=F5)


# --- startup bound = admission cap ---------------------------------------------------------


def _bound_cases() -> Iterator[Case]:
    for kind in recycling_labels():
        for b in BLOCK_SIZES:
            def claim(v: Mapping, kind: str = kind, b: int = b) -> object:
                cap = cap_of(kind, v, b)
                # spec.max_memory_usage_bytes = cap * page; startup bound = pages_for_bytes(that, page)
                return arith.pages_for_bytes(cap * v["page"], v["page"]) == cap

            yield Case(f"{kind}, B={b}", {"kind": kind, "block_size": b},
                       (Var("L", 1, MAX_TOKENS_SYM), Var("F", 1, MAX_WINDOW), Var("page", 1, 2**30))
                       + _window_vars(kind), domain=lambda v: [], claim=claim,
                       shrink=("L", "F", "page"))


def _replay_bound(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    kind, b = case.params["kind"], case.params["block_size"]
    spec = _spec(kind, b, v)
    cfg = VllmConfig(block_size=b, max_model_len=v["L"], max_num_batched_tokens=v["F"],
                     kv_cache_memory_bytes=1)
    startup = spec.max_blocks_per_request(cfg)
    cap = spec.max_admission_blocks_per_request(cfg.max_in_flight_tokens, cfg.max_model_len)
    return ReplayOutcome(startup != cap, f"startup bound {startup}, admission cap {cap}",
                         {"startup": startup, "cap": cap})


ONE_SOURCE = Lemma(
    name="recycling_startup_bound_is_admission_cap",
    topic="sliding window",
    statement=("startup bound (pages_for_bytes(max_memory_usage_bytes, page)) = runtime admission cap "
               "(max_admission_blocks_per_request), for SWA and chunked local"),
    domain=("L <= 2^24, F <= 2^20, W/C <= 2^20, E <= 2^10 and page <= 2^30 B symbolic (page: "
            "non-linear, z3 decides it); B enumerated"),
    cases=_bound_cases, replay=_replay_bound)


# --- the capped gate admits on an empty pool ------------------------------------------------


def _gate_cases() -> Iterator[Case]:
    for kind in recycling_labels():
        mix = f"full+{kind}"
        for b in BLOCK_SIZES:
            bpb = page_of(b)

            def caps(v: Mapping, kind: str = kind, b: int = b) -> list:
                return [None, cap_of(kind, v, b)]

            def domain(v: Mapping, b: int = b, bpb: int = bpb, caps=caps) -> list:
                total = arith.total_blocks_per_request(
                    [arith.full_attention_blocks(v["L"], b), caps(v)[1]])
                starts = arith.startup_check_passes(arith.startup_check_memory(v["memory"], bpb),
                                                    arith.needed_memory(bpb, total))
                return [starts, v["n"] <= v["L"]]

            def claim(v: Mapping, b: int = b, bpb: int = bpb, caps=caps) -> object:
                need = arith.total_blocks_per_request(
                    [arith.admission_required_blocks(v["n"], b, cap, True) for cap in caps(v)])
                free = arith.usable_blocks(arith.runtime_num_blocks(v["memory"], bpb))
                return arith.allocation_fits(need, 0, free)

            window = _window_vars(kind, first_only=True)
            yield Case(f"{mix}, B={b}", {"kind": kind, "mix": mix, "block_size": b, "bytes_per_block": bpb},
                       (Var("L", 1, MAX_TOKENS_SYM), Var("n", 1, MAX_TOKENS_SYM), Var("F", 1, MAX_WINDOW),
                        Var("memory", 1, MAX_BYTES)) + window,
                       domain=domain, claim=claim, shrink=("L", "memory", "n", "F", "W", "C"))


def _replay_gate(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    p = case.params
    b = p["block_size"]
    specs = mix_specs(p["mix"], b, v[held_model(p["kind"]).params[0].symbol])
    cfg = VllmConfig(block_size=b, max_model_len=v["L"], max_num_batched_tokens=v["F"],
                     kv_cache_memory_bytes=v["memory"])
    pl = plan(cfg, specs)
    if too_big(pl.num_blocks):
        return ReplayOutcome(False, f"too large to replay ({pl.num_blocks} blocks)", plan_summary(pl))
    pool = BlockPool(pl.num_blocks, enable_caching=False, hash_block_size=b)
    need = 0
    for gid, g in enumerate(pl.groups):
        m = get_manager_for_kv_cache_spec(g.kv_cache_spec, pool, max_in_flight_tokens=v["F"],
                                          max_model_len=v["L"], enable_caching=False,
                                          kv_cache_group_id=gid, scheduler_block_size=b)
        need += m.get_num_blocks_to_allocate("req", v["n"], [], 0, apply_admission_cap=True)
    free = pool.get_num_free_blocks()
    refused = pl.starts and need > free
    return ReplayOutcome(refused, f"startup check passed={pl.starts}; a new {v['n']}-token request "
                         f"on the empty pool: gate needs {need} blocks, {free} free -> "
                         f"{'refused forever (head-of-line hang)' if refused else 'admitted'}",
                         {"need": need, "free": free, **plan_summary(pl)})


GATE = Lemma(
    name="recycling_gate_admits_on_empty_pool",
    topic="sliding window",
    statement=("startup check passes => every request of n <= L tokens passes the full-sequence gate "
               "on an empty pool (sum_g capped R_g <= N - 1): no false rejection, no hang"),
    domain=("mix enumerated {full+SWA(W), full+chunked(C)}, one layer each; kv_cache_memory_bytes "
            "<= 2^50, L, n <= 2^24, F, W, C <= 2^20 symbolic; B enumerated (bpb = page = 2*B)"),
    cases=_gate_cases, replay=_replay_gate,
    catches=("swa_admission_uncapped", "null_block_not_reserved"))


# --- predictor == allocator -----------------------------------------------------------------


def _predictor_cases() -> Iterator[Case]:
    for kind in recycling_labels():
        for b in BLOCK_SIZES:
            def claim(v: Mapping, kind: str = kind, b: int = b) -> object:
                slots = arith.full_attention_blocks(v["n"], b)  # table after the previous steps
                cap = cap_of(kind, v, b)
                predicted = arith.new_blocks_for_running(
                    arith.admission_required_blocks(v["n"] + v["k"], b, cap, False), slots)
                pulled = arith.new_blocks_for_running(arith.full_attention_blocks(v["n"] + v["k"], b), slots)
                return predicted == pulled

            yield Case(f"{kind}, B={b}", {"kind": kind, "block_size": b},
                       _step_vars(kind, first_n=1), domain=_step_domain, claim=claim,
                       shrink=("L", "n", "k", "F", "W", "C", "E"))


def _replay_predictor(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    kind, b = case.params["kind"], case.params["block_size"]
    if too_big(cdiv(v["L"], b) + 2):
        return ReplayOutcome(False, f"too large to replay (L={v['L']}, B={b})")
    m = _manager(kind, b, v, cdiv(v["L"], b) + 2)
    run_steps(m, "req", chunk_schedule(v["n"], v["F"]))
    m.remove_skipped_blocks("req", v["n"])
    predicted = m.get_num_blocks_to_allocate("req", v["n"] + v["k"], [], v["n"])
    pulled = len(m.allocate_new_blocks("req", v["n"] + v["k"]))
    return ReplayOutcome(predicted != pulled,
                         f"{type(m).__name__} step ({v['n']} computed + {v['k']} new): "
                         f"get_num_blocks_to_allocate predicts {predicted}, allocate_new_blocks pulls "
                         f"{pulled}" + (" -> 'Cannot get free blocks' when the pool holds exactly the "
                                        "prediction" if pulled > predicted else ""),
                         {"predicted": predicted, "pulled": pulled})


PREDICTOR = Lemma(
    name="recycling_predictor_equals_allocator",
    topic="sliding window",
    statement=("per-step prediction (get_num_blocks_to_allocate, uncapped) = blocks allocate_new_blocks "
               "pulls, for a running request"),
    domain=f"{_STEP_DOMAIN}, n >= 1 (running); kind enumerated {{SWA, chunked}}; B enumerated",
    cases=_predictor_cases, replay=_replay_predictor,
    catches=("swa_cap_on_allocation",))


# --- Mamba ---------------------------------------------------------------------------------


def _mamba_cases() -> Iterator[Case]:
    common = (Var("L", 1, MAX_TOKENS_SYM), Var("n", 0, MAX_TOKENS_SYM), Var("k", 1, MAX_WINDOW),
              Var("F", 1, MAX_WINDOW), Var("S", 0, 64), Var("P", 0, 1))

    def none_claim(v: Mapping) -> object:
        # mode none: the spec's block size is max_model_len (one block holds the whole state)
        got = arith.mamba_blocks_held(False, v["n"] + v["k"], v["n"], v["L"], v["S"])
        return got <= arith.mamba_startup_blocks(False, v["S"], v["P"], v["L"], v["L"])

    yield Case("none, block_size = L (symbolic divisor)", {"mode": "none"}, common,
               domain=_step_domain, claim=none_claim, shrink=("L", "n", "k", "S"))
    for b in BLOCK_SIZES:
        def align_claim(v: Mapping, b: int = b) -> object:
            got = arith.mamba_blocks_held(True, v["n"] + v["k"], v["n"], b, v["S"])
            return got <= arith.mamba_startup_blocks(True, v["S"], v["P"], v["L"], b)

        yield Case(f"align, B={b}", {"mode": "align", "block_size": b}, common,
                   domain=_step_domain, claim=align_claim, shrink=("L", "n", "k", "S"))


MAMBA = Lemma(
    name="mamba_held_within_startup_bound",
    topic="mamba",
    statement=("Mamba blocks held at any step, speculative blocks included, <= startup bound "
               "(none: 1 + S; align: 2 + S + P)"),
    domain=(f"{_STEP_DOMAIN}; S in [0, 64], P in [0, 1] symbolic; none: block size = L symbolic; "
            f"align: B enumerated, only the first (previous state, none on the first step) and last "
            f"(running state) retained slots are real: the MambaManager layout, checked step by step "
            f"against the manager by properties/test_lemma_models.py; prefill checkpoint blocks not taken"),
    cases=_mamba_cases)


def _mamba_tight_cases() -> Iterator[Case]:
    for b in BLOCK_SIZES:
        def claim(v: Mapping, b: int = b) -> object:
            # witness: the whole request in one step when L <= B, else the step crossing into
            # block 1 (n = B computed, 1 new: the previous state block is still held)
            short = v["L"] <= b
            n = ite(short, 0, b)
            k = ite(short, v["L"], 1)
            got = arith.mamba_blocks_held(True, n + k, n, b, v["S"])
            return and_(n + k <= v["L"], got == arith.mamba_startup_blocks(True, v["S"], 0, v["L"], b))

        yield Case(f"align, B={b}", {"mode": "align", "block_size": b},
                   (Var("L", 1, MAX_TOKENS_SYM), Var("S", 0, 64)),
                   domain=lambda v: [], claim=claim, shrink=("L", "S"))


def _replay_mamba_tight(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    """A lone request of max_model_len L + 1 (L tokens of state computed) on a pool one block
    below the startup bound: it completes."""
    from kvverify.reference.driver import run_workload
    from kvverify.reference.planner import plan_kv_cache
    from kvverify.reference.specs import MambaSpec
    from kvverify.reference.workloads import full_length_request

    b, length = case.params["block_size"], v["L"] + 1
    spec = MambaSpec(block_size=b, shapes=((1,),), dtypes=("float32",), mamba_cache_mode="align",
                     num_speculative_blocks=v["S"])
    base = dict(block_size=b, max_model_len=length, max_num_batched_tokens=max(length, 8),
                enable_prefix_caching=True, mamba_cache_mode="align", kv_cache_memory_bytes=1 << 20)
    bound = plan_kv_cache(VllmConfig(**base, num_gpu_blocks_override=1), [{"m": spec}]).blocks_per_group[0]
    plan = plan_kv_cache(VllmConfig(**base, num_gpu_blocks_override=bound), [{"m": spec}])  # bound - 1 usable
    result = run_workload(plan.vllm_config, plan.kv_cache_config, [full_length_request(length, 1)],
                          max_steps=4 * length + 16)
    return ReplayOutcome(bool(result.completed),
                         f"startup bound {bound} blocks; a lone max_model_len={length} request "
                         f"{'completes' if result.completed else 'does not complete'} on {bound - 1}",
                         {"bound": bound, "completed": bool(result.completed)})


F9 = Finding(
    id="F9-mamba-align-bound-slack",
    title="Mamba align reserves a second state block a one-block request never holds",
    upstream="vllm/v1/kv_cache_interface.py: MambaSpec.max_memory_usage_bytes (align): 2 + S + P pages",
    consequence=("the second page is the previous state, kept while the next block's state is written; "
                 "a request whose L - 1 computed tokens fit in one block (max_model_len <= B + 1) never "
                 "has one, nor a prefill checkpoint, and holds 1 + S: the check refuses pools that "
                 "serve it, auto-fit stops short, reported concurrency is low (one page per Mamba group)"),
    fix="mamba_align_bound_exact")

MAMBA_TIGHT = Lemma(
    name="mamba_align_bound_reached",
    topic="mamba",
    statement=("the Mamba align startup bound is reached: a step (witness: the whole request when "
               "L <= B, else the step crossing into block 1) holds exactly that many blocks"),
    domain=("L (tokens whose state is computed) <= 2^24 and S in [0, 64] symbolic; B enumerated; "
            "P = 0 (prefill checkpoint blocks are not modelled); witness step explicit"),
    cases=_mamba_tight_cases, replay=_replay_mamba_tight,
    expected="counterexample", finding=F9)


# --- held <= cap for every other registered recycling kind ---------------------------------


def held_lemma_labels(lemma: Lemma) -> set[str]:
    """The recycling kinds (lemma labels) a held-within-cap lemma's cases cover."""
    return {c.params["kind"] for c in lemma.cases()}


def generated_held_lemmas() -> list[Lemma]:
    """``held <= cap`` for each registered recycling kind that no hand-written lemma above
    covers (a new kind is proved against its registered formulas without a lemma of its own)."""
    covered = held_lemma_labels(SWA_HELD) | held_lemma_labels(CHUNKED_HELD)
    out = []
    for label, kind in _models().items():
        if label in covered:
            continue
        symbols = ", ".join(p.symbol for p in held_model(label).params)
        out.append(Lemma(
            name=f"{kind.name}_held_within_cap", topic=kind.name,
            statement=("blocks held after recycling at any step <= max_admission_blocks_per_request "
                       "(the registered formula)"),
            domain=f"{_STEP_DOMAIN}; {symbols} symbolic; B enumerated {list(BLOCK_SIZES)}",
            cases=functools.partial(_held_cases, label), replay=_replay_held))
    return out


LEMMAS = [SWA_HELD, SWA_TIGHT, CHUNKED_HELD, CHUNKED_HELD_ALIGNED, ONE_SOURCE, GATE, PREDICTOR, MAMBA,
          MAMBA_TIGHT,
          *generated_held_lemmas()]
