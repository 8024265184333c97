"""Auto-fit (``max_model_len=auto``) and the length estimate.

The binary search itself is int code (``planner.binary_search_max``, tested by the
properties). What the lemmas prove is what makes it correct and safe: the predicate
``fits(v) = bytes_per_block * sum_g blocks_g(v) <= search memory`` is monotone in the
length, and the maximal ``v`` characterised by ``fits(v) ∧ (v = cap ∨ ¬fits(v + 1))`` —
the value a binary search on a monotone predicate returns — starts, is servable on
the runtime pool, and is maximal (``v + 1`` is not servable).
"""

from __future__ import annotations

from typing import Iterator, Mapping

from kvverify.reference import arith
from kvverify.reference.config import VllmConfig
from kvverify.errors import MAX_BLOCKS
from kvverify.lemmas.core import (
    BLOCK_SIZES,
    MAX_BYTES,
    MAX_TOKENS_SYM,
    MAX_WINDOW,
    Case,
    Lemma,
    ReplayOutcome,
    Var,
)
from kvverify.lemmas.replay import mix_specs, page_of, plan, plan_summary, source_kwargs
from kvverify.reference.ops import and_, implies, not_, or_

MIXES = ("full", "full+swa")
SOURCES = ("explicit", "override")


def group_blocks(mix: str, length, v: Mapping, block_size: int) -> list:
    """``blocks_g(length)`` of each group of the mix, in the planner's group order (sized by
    ``planned_request_tokens``: ``length`` upstream, the written tokens under fix F3)."""
    tokens = arith.planned_request_tokens(length)
    blocks = [arith.full_attention_blocks(tokens, block_size)]
    if mix == "full+swa":
        blocks.append(arith.sliding_window_admission_blocks(v["W"], 0, v["F"], tokens, block_size))
    return blocks


def fits(mix: str, length, v: Mapping, block_size: int, bpb: int) -> object:
    """The auto-fit predicate at ``length`` (flaw-aware: search memory, first group only)."""
    total = _helper_total(mix, length, v, block_size)
    search = arith.auto_fit_search_memory(v["memory"], bpb, v.get("override"))
    return arith.needed_memory(bpb, total) <= search


def _total(mix: str, length, v: Mapping, block_size: int):
    """The blocks one request holds on the runtime pool (every group)."""
    return arith.total_blocks_per_request(group_blocks(mix, length, v, block_size))


def _helper_total(mix: str, length, v: Mapping, block_size: int):
    """The blocks ``_max_memory_usage_bytes_from_groups`` counts (auto-fit's search and the
    startup check; flaw ``autofit_first_group_only``: the first group only)."""
    return arith.total_blocks_per_request(group_blocks(mix, length, v, block_size), in_memory_helper=True)


def _vars(mix: str, source: str, *names: str) -> tuple[Var, ...]:
    vs = tuple(Var(n, 1, MAX_TOKENS_SYM) for n in names)
    vs += (Var("memory", 1, MAX_BYTES),) if source == "explicit" else (
        Var("memory", 0, MAX_BYTES), Var("override", 1, MAX_BLOCKS))
    if mix == "full+swa":
        vs += (Var("W", 1, MAX_WINDOW), Var("F", 1, MAX_WINDOW))
    return vs


def _cases(kind: str) -> Iterator[Case]:
    for mix in MIXES:
        for source in SOURCES:
            for b in BLOCK_SIZES:
                bpb = page_of(b)
                params = {"mix": mix, "source": source, "block_size": b, "bytes_per_block": bpb}
                label = f"{mix}, {source}, B={b}"
                if kind == "monotone":
                    yield Case(label, params, _vars(mix, source, "v", "w"),
                               domain=lambda v: [v["v"] <= v["w"]],
                               claim=lambda v, mix=mix, b=b, bpb=bpb: implies(
                                   fits(mix, v["w"], v, b, bpb), fits(mix, v["v"], v, b, bpb)),
                               shrink=("w", "v", "memory"))
                    continue

                def maximal_at(v: Mapping, mix=mix, b=b, bpb=bpb) -> object:
                    return and_(fits(mix, v["v"], v, b, bpb),
                                or_(v["v"] == v["cap"], not_(fits(mix, v["v"] + 1, v, b, bpb))))

                if kind == "servable":
                    def claim(v: Mapping, mix=mix, b=b, bpb=bpb) -> object:
                        total = _total(mix, v["v"], v, b)
                        override = v.get("override")
                        starts = arith.startup_check_passes(
                            arith.startup_check_memory(v["memory"], bpb, override),
                            arith.needed_memory(bpb, _helper_total(mix, v["v"], v, b)))
                        n = arith.runtime_num_blocks(v["memory"], bpb, override)
                        return and_(starts, arith.servable_alone(n, total))

                    yield Case(label, params, _vars(mix, source, "v", "cap"),
                               domain=lambda v, m=maximal_at: [v["v"] <= v["cap"], m(v)],
                               claim=claim, shrink=("cap", "v", "memory", "override", "W", "F"))
                else:  # maximal
                    def claim(v: Mapping, mix=mix, b=b, bpb=bpb) -> object:
                        n = arith.runtime_num_blocks(v["memory"], bpb, v.get("override"))
                        return not_(arith.servable_alone(n, _total(mix, v["v"] + 1, v, b)))

                    yield Case(label, params, _vars(mix, source, "v", "cap"),
                               domain=lambda v, m=maximal_at: [v["v"] < v["cap"], m(v)],
                               claim=claim, shrink=("cap", "v", "memory", "override", "W", "F"))


def _config(case: Case, v: Mapping[str, int], max_model_len: int) -> VllmConfig:
    p = case.params
    return VllmConfig(block_size=p["block_size"], max_model_len=max_model_len,
                      max_position_embeddings=v["cap"] if max_model_len == -1 else None,
                      max_num_batched_tokens=v.get("F", 2048),
                      **source_kwargs(p["source"], v))


def _replay_monotone(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    """Plan at the two lengths: the longer one must need fewer bytes per request."""
    p = case.params
    specs = mix_specs(p["mix"], p["block_size"], v.get("W"))
    short, long_ = (plan(_config(case, {**v, "cap": 0}, length), specs) for length in (v["v"], v["w"]))
    need = [pl.bytes_per_block * pl.blocks_needed_per_request for pl in (short, long_)]
    return ReplayOutcome(need[1] < need[0], f"needed bytes at {v['v']}: {need[0]}, at {v['w']}: {need[1]}",
                         {"short": plan_summary(short), "long": plan_summary(long_)})


def _replay(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    """Run auto-fit on the reference; it must return the characterised ``v`` and the
    violation (not servable / not starting / not maximal) must show on the plan."""
    p = case.params
    specs = mix_specs(p["mix"], p["block_size"], v.get("W"))
    auto = plan(_config(case, v, -1), specs)
    evidence = {"auto": plan_summary(auto)}
    if auto.auto_fit_max_model_len != v["v"]:
        return ReplayOutcome(False, f"auto-fit returned {auto.auto_fit_max_model_len}, the lemma's "
                             f"maximal length is {v['v']}", evidence)
    servable = auto.starts and auto.blocks_needed_per_request <= auto.usable_blocks
    if not servable:
        return ReplayOutcome(True, f"auto-fit picked max_model_len={v['v']}: starts={auto.starts}, "
                             f"needs {auto.blocks_needed_per_request} blocks, pool has "
                             f"{auto.usable_blocks} usable", evidence)
    longer = plan(_config(case, v, v["v"] + 1), specs)
    evidence["longer"] = plan_summary(longer)
    if longer.blocks_needed_per_request <= longer.usable_blocks:
        return ReplayOutcome(True, f"auto-fit picked {v['v']} but the runtime pool serves "
                             f"{v['v'] + 1} (needs {longer.blocks_needed_per_request} of "
                             f"{longer.usable_blocks} usable blocks; startup check at {v['v'] + 1} "
                             f"passes: {longer.starts}): not maximal", evidence)
    return ReplayOutcome(False, f"auto-fit picked {v['v']}, which is servable and maximal", evidence)


_DOMAIN = ("mix enumerated {full, full+SWA(W symbolic, F symbolic <= 2^20, E = 0)}; block source "
           "{kv_cache_memory_bytes symbolic <= 2^50, num_gpu_blocks_override <= 2^40 with raw memory}; "
           "lengths symbolic <= 2^24; B enumerated over the real set {1..256, 544} (bpb = its page, "
           "2*B bytes)")

MONOTONE = Lemma(
    name="autofit_fits_monotone",
    topic="auto-fit",
    statement="fits(w) => fits(v) for v <= w: the auto-fit / estimate predicate is monotone in the length",
    domain=_DOMAIN, cases=lambda: _cases("monotone"), replay=_replay_monotone)

SERVABLE = Lemma(
    name="autofit_result_servable",
    topic="auto-fit",
    statement=("the maximal v with fits(v) and (v = cap or not fits(v + 1)) passes the startup check "
               "and is servable: sum_g blocks_g(v) <= N - 1"),
    domain=_DOMAIN, cases=lambda: _cases("servable"), replay=_replay,
    catches=("null_block_not_reserved", "override_ignored_in_check", "autofit_ignores_null_block",
             "autofit_first_group_only"))

MAXIMAL = Lemma(
    name="autofit_result_maximal",
    topic="auto-fit",
    statement="the maximal v with fits(v), v < cap, not fits(v + 1): length v + 1 is not servable",
    domain=_DOMAIN, cases=lambda: _cases("maximal"), replay=_replay,
    catches=("override_ignored_in_check",))

LEMMAS = [MONOTONE, SERVABLE, MAXIMAL]
