"""Startup lemmas: the null block, num_blocks and the tensor plan, reported concurrency.

Guarantee 2: for every source of the block count (``num_gpu_blocks_override``,
``kv_cache_memory_bytes``, profiled memory) a passing startup check means one
max_model_len request fits the ``N - 1`` usable blocks of the runtime pool.
"""

from __future__ import annotations

from typing import Iterator, Mapping

from kvverify.reference import arith
from kvverify.reference.config import VllmConfig
from kvverify.errors import MAX_BLOCKS
from kvverify.reference.grouping import get_kv_cache_groups
from kvverify.lemmas.core import MAX_BYTES, Case, Finding, Lemma, ReplayOutcome, Var
from kvverify.lemmas.replay import (
    PAGE_CASES,
    full_layer,
    page_of,
    plan,
    plan_summary,
    source_kwargs,
)
from kvverify.reference.ops import and_, implies, min_
from kvverify.reference.planner import (
    bytes_per_block,
    get_max_concurrency_for_kv_cache_config,
    per_layer_spec,
    plan_kv_cache,
)
from kvverify.reference.specs import MambaSpec, SlidingWindowSpec

MAX_T = 2**30  # blocks one request may need (symbolic)
SOURCES = ("override", "explicit", "profiled")


def _memory_var(source: str) -> Var:
    if source == "profiled":  # profiling can leave nothing (or less than nothing)
        return Var("memory", -(MAX_BYTES - 1), MAX_BYTES)
    if source == "override":  # raw memory; 0 = the override alone
        return Var("memory", 0, MAX_BYTES)
    return Var("memory", 1, MAX_BYTES)


def _source_vars(source: str) -> tuple[Var, ...]:
    vs: tuple[Var, ...] = (_memory_var(source),)
    if source == "override":
        vs += (Var("override", 1, MAX_BLOCKS),)
    return vs


# --- null block: check passes => needed <= N - 1 ---------------------------------------


def _null_block_cases(source: str) -> Iterator[Case]:
    for block_size, head, dtype in PAGE_CASES:
        bpb = page_of(block_size, head, dtype)

        def claim(v: Mapping, bpb: int = bpb) -> object:
            override = v.get("override")
            passes = arith.startup_check_passes(
                arith.startup_check_memory(v["memory"], bpb, override),
                arith.needed_memory(bpb, v["T"]))
            n = arith.runtime_num_blocks(v["memory"], bpb, override)
            return implies(passes, arith.servable_alone(n, v["T"]))

        yield Case(label=f"B={block_size} bytes_per_block={bpb}",
                   params={"block_size": block_size, "head_size": head, "dtype": dtype,
                           "bytes_per_block": bpb, "source": source},
                   variables=(Var("T", 1, MAX_T),) + _source_vars(source),
                   domain=lambda v: [], claim=claim, shrink=("T", "override", "memory")
                   if source == "override" else ("T", "memory"))


def _replay_null_block(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    p = case.params
    cfg = VllmConfig(block_size=p["block_size"], max_model_len=v["T"] * p["block_size"],
                     **source_kwargs(p["source"], v))
    pl = plan(cfg, {"layers.0": full_layer(p["block_size"], p["head_size"], p["dtype"])})
    violated = pl.starts and pl.blocks_needed_per_request > pl.usable_blocks
    return ReplayOutcome(violated,
                         f"plan_kv_cache: starts={pl.starts}, needs {pl.blocks_needed_per_request} "
                         f"blocks per request, runtime pool has {pl.usable_blocks} usable",
                         plan_summary(pl))


def _null_block_lemma(source: str) -> Lemma:
    catches: tuple[str, ...] = ("null_block_not_reserved",)
    if source == "override":
        catches += ("override_ignored_in_check",)
    what = {"override": "num_gpu_blocks_override (raw memory also symbolic, 0 = unset)",
            "explicit": "kv_cache_memory_bytes", "profiled": "profiled memory (may be <= 0)"}[source]
    return Lemma(
        name=f"null_block_{source}",
        topic="null block",
        statement="startup check passes => sum_g blocks_g(L) <= N - 1 (the runtime's usable blocks)",
        domain=(f"block source {what}; T = sum_g blocks_g(L) symbolic in [1, 2^30]; memory symbolic "
                f"up to 2^50 B{'; override up to 2^40' if source == 'override' else ''}; "
                f"bytes_per_block enumerated over real pages "
                f"{sorted({page_of(b, h, d) for b, h, d in PAGE_CASES})}"),
        cases=lambda: _null_block_cases(source),
        replay=_replay_null_block,
        catches=catches)


# --- pipeline parallel: each worker checks its own memory, the pool is the min --------------

#: (block size, head size of worker 0's layer, of worker 1's layer): pages differ per worker
PP_CASES = ((1, 1, 3), (16, 1, 2), (16, 64, 8), (544, 1, 1))


def _pp_cases() -> Iterator[Case]:
    for block_size, h0, h1 in PP_CASES:
        bpbs = (page_of(block_size, h0), page_of(block_size, h1))

        def claim(v: Mapping, bpbs=bpbs) -> object:
            mems = (v["memory0"], v["memory1"])
            passes = and_(*[arith.startup_check_passes(arith.startup_check_memory(m, bpb),
                                                       arith.needed_memory(bpb, v["T"]))
                            for m, bpb in zip(mems, bpbs)])
            n = min_(*[arith.runtime_num_blocks(m, bpb) for m, bpb in zip(mems, bpbs)])
            return implies(passes, arith.servable_alone(n, v["T"]))

        yield Case(label=f"B={block_size} bytes_per_block={bpbs}",
                   params={"block_size": block_size, "heads": (h0, h1), "bytes_per_block": bpbs},
                   variables=(Var("T", 1, MAX_T), Var("memory0", 1, MAX_BYTES), Var("memory1", 1, MAX_BYTES)),
                   domain=lambda v: [], claim=claim, shrink=("T", "memory0", "memory1"))


def _replay_pp(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    b, (h0, h1) = case.params["block_size"], case.params["heads"]
    cfg = VllmConfig(block_size=b, max_model_len=v["T"] * b)
    pl = plan_kv_cache(cfg, [{"layers.0": full_layer(b, h0)}, {"layers.1": full_layer(b, h1)}],
                       available_memory=[v["memory0"], v["memory1"]])
    violated = pl.starts and pl.blocks_needed_per_request > pl.usable_blocks
    return ReplayOutcome(violated, f"plan_kv_cache (2 workers): starts={pl.starts}, needs "
                         f"{pl.blocks_needed_per_request} blocks, pool (min over workers) has "
                         f"{pl.usable_blocks} usable", plan_summary(pl))


NULL_BLOCK_PP = Lemma(
    name="null_block_pipeline_parallel",
    topic="null block",
    statement=("every worker's startup check passes => sum_g blocks_g(L) <= min_w N_w - 1 "
               "(the pool takes the smallest worker's block count)"),
    domain=("2 workers, each with its own kv memory symbolic up to 2^50 and its own bytes_per_block "
            "(one layer each, different head sizes) enumerated; T symbolic in [1, 2^30]"),
    cases=_pp_cases, replay=_replay_pp,
    catches=("null_block_not_reserved",))


# --- num_blocks x bytes per block <= memory; tensor plan fits -------------------------------

#: spec mixes whose real groups (via the planner's grouping) the tensor lemma enumerates
def _tensor_mixes() -> list[tuple[str, dict]]:
    mamba = MambaSpec(block_size=16, shapes=((4, 1024), (16, 64, 8)), dtypes=("bfloat16", "float32"))
    return [
        ("1 full layer", {"l0": full_layer(16, 64, "bfloat16")}),
        ("3 full layers", {f"l{i}": full_layer(16, 64, "bfloat16") for i in range(3)}),
        ("uniform type (two head sizes)", {"l0": full_layer(16, 64, "bfloat16"),
                                           "l1": full_layer(16, 128, "bfloat16")}),
        ("full + swa (2:1)", {"l0": full_layer(16, 64, "bfloat16"), "l1": full_layer(16, 64, "bfloat16"),
                              "l2": SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=64,
                                                      dtype="bfloat16", sliding_window=128)}),
        ("attention + mamba", {"l0": full_layer(16, 64, "bfloat16"), "l1": mamba}),
    ]


def _tensor_cases() -> Iterator[Case]:
    for label, specs in _tensor_mixes():
        cfg = VllmConfig(block_size=16, max_model_len=4096, kv_cache_memory_bytes=1 << 30)
        groups = get_kv_cache_groups(cfg, specs)
        bpb = bytes_per_block(groups)
        group_pages = [sum(per_layer_spec(g, n).page_size_bytes for n in g.layer_names) for g in groups]
        for source in ("explicit", "profiled"):
            def claim(v: Mapping, bpb: int = bpb, group_pages=tuple(group_pages)) -> object:
                n = arith.runtime_num_blocks(v["memory"], bpb)
                size = arith.kv_cache_tensor_bytes(bpb, n)
                return and_(size <= v["memory"],
                            *[arith.kv_cache_tensor_bytes(pg, n) <= size for pg in group_pages])

            # profiled memory <= 0 never reaches tensor allocation (the check refuses first)
            variables = (Var("memory", 1 if source == "explicit" else 0, MAX_BYTES),)
            yield Case(label=f"{label}, {source}", params={"mix": label, "source": source,
                                                           "bytes_per_block": bpb,
                                                           "group_pages": group_pages},
                       variables=variables, domain=lambda v: [], claim=claim, shrink=("memory",))


def _replay_tensors(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    mixes = dict(_tensor_mixes())
    specs = mixes[case.params["mix"]]
    cfg = VllmConfig(block_size=16, max_model_len=16, **source_kwargs(case.params["source"], v))
    pl = plan(cfg, specs)
    kv = pl.kv_cache_config
    memory = pl.available_memory[0]
    over = [t for t in kv.kv_cache_tensors
            if t.size > memory or t.offset + len(t.layers) * t.layer_stride > t.size]
    return ReplayOutcome(bool(over), f"plan_kv_cache: {len(over)} tensors exceed memory {memory} "
                         f"or their own size", {"num_blocks": kv.num_blocks, "memory": memory})


TENSOR_PLAN = Lemma(
    name="tensor_plan_fits_memory",
    topic="num_blocks",
    statement=("num_blocks * bytes_per_block <= memory, and every group's layers fit in the "
               "shared tensors (sum of its pages * N <= bytes_per_block * N)"),
    domain=("block source kv_cache_memory_bytes or profiled memory, symbolic in [0, 2^50] (with "
            "num_gpu_blocks_override the tensors are override * bpb by definition: upstream trusts "
            "the override, so it is outside this lemma); spec mixes enumerated (1 and 3 full layers, "
            "uniform-type, full+SWA 2:1, attention+Mamba) with their real grouping and pages"),
    cases=_tensor_cases, replay=_replay_tensors)


# --- reported concurrency (finding F1) ------------------------------------------------------

F1 = Finding(
    id="F1-concurrency-counts-null-block",
    title="reported max concurrency divides N, not the usable N - 1",
    upstream="vllm/v1/core/kv_cache_utils.py: get_max_concurrency_for_kv_cache_config",
    consequence=("the engine logs 'Maximum concurrency ... 1.00x' for a pool that cannot hold one "
                 "full request (the log line users saw before 0 tok/s in #35541), and on engines that "
                 "start it overstates: N = 2T reports 2.00x while only one full request fits"),
    fix="concurrency_counts_usable_blocks")


def _concurrency_cases(started: bool) -> Iterator[Case]:
    ks = (2, 3, 4) if started else (1,)
    for k in ks:
        def domain(v: Mapping) -> list:
            return [arith.servable_alone(v["N"], v["T"])] if started else []

        def claim(v: Mapping, k: int = k) -> object:
            reported = arith.reported_concurrency_at_least(v["N"], v["T"], k)
            fits = arith.servable_concurrently(v["N"], v["T"], k)
            return reported == fits

        yield Case(label=f"k={k}", params={"k": k, "started": started},
                   variables=(Var("N", 1, MAX_BLOCKS), Var("T", 1, MAX_T)),
                   domain=domain, claim=claim, shrink=("T", "N"))


def _replay_concurrency(case: Case, v: Mapping[str, int]) -> ReplayOutcome:
    k, b = case.params["k"], 16
    layer = full_layer(b)
    # realise N through kv_cache_memory_bytes (the override path is what some flaws change)
    cfg = VllmConfig(block_size=b, max_model_len=v["T"] * b,
                     kv_cache_memory_bytes=v["N"] * layer.page_size_bytes)
    pl = plan(cfg, {"layers.0": layer})
    reported = get_max_concurrency_for_kv_cache_config(pl.vllm_config, pl.kv_cache_config)
    fit = k * pl.blocks_needed_per_request <= pl.usable_blocks
    confirmed = (reported >= k) != fit and (pl.starts or not case.params["started"])
    return ReplayOutcome(confirmed,
                         f"get_max_concurrency_for_kv_cache_config reports {reported:.2f}x; "
                         f"{k} full request(s) of {pl.blocks_needed_per_request} blocks "
                         f"{'fit' if fit else 'do not fit'} the {pl.usable_blocks} usable blocks "
                         f"(engine starts: {pl.starts})",
                         {"reported": reported, **plan_summary(pl)})


CONCURRENCY_ONE = Lemma(
    name="concurrency_reports_servable",
    topic="concurrency",
    statement="reported concurrency >= 1 <=> one max_model_len request is servable (T <= N - 1)",
    domain="N symbolic in [1, 2^40], T = sum_g blocks_g(L) symbolic in [1, 2^30]",
    cases=lambda: _concurrency_cases(False), replay=_replay_concurrency,
    expected="counterexample", finding=F1)

CONCURRENCY_K = Lemma(
    name="concurrency_counts_requests_on_started_engine",
    topic="concurrency",
    statement="on an engine that starts (T <= N - 1): reported concurrency >= k <=> k full requests fit",
    domain="N in [1, 2^40], T in [1, 2^30] symbolic with T <= N - 1; k enumerated {2, 3, 4}",
    cases=lambda: _concurrency_cases(True), replay=_replay_concurrency,
    expected="counterexample", finding=F1)


LEMMAS = [_null_block_lemma(s) for s in SOURCES] + [NULL_BLOCK_PP, TENSOR_PLAN, CONCURRENCY_ONE, CONCURRENCY_K]
