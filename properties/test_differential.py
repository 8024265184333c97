"""Differential: the reference and the pinned upstream vLLM decide the same, on the same configs.

On every generated deployment (``startup_cases()``) both targets plan; they must agree on
the check verdict, ``num_blocks`` (every worker), bytes per block, the groups (count,
layer names, block sizes, spec kinds, page sizes, the specs themselves), the tensors
(size, layers, strides, offsets), the auto-fit length, blocks per group, the memory
the check saw, the reported max concurrency, the block-size pair, and — on an empty
pool — whether a request is admitted and how many blocks the full-sequence gate
charges it. On every group mix (``block_size_cases()``) they must agree on the
block-size pair (or both refuse) and on whether the KV cache coordinator accepts it.

The first divergence fails the example as a :class:`~kvverify.invariants.base.Violation`
carrying both sides' numbers; Hypothesis shrinks it to a minimal counterexample.
Skipped, with the reason, when the pinned vLLM is not importable (see
``scripts/install-vllm-target.sh``). Independent of ``--target``.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

from kvverify.block_sizes import validate_coordinator_block_sizes
from kvverify.errors import KVVerifyError
from kvverify.invariants.base import Violation, assert_no_violations
from kvverify.planner import StartupPlan, get_max_concurrency_for_kv_cache_config
from kvverify.props.recorder import recorded
from kvverify.strategies import BlockSizeCase, StartupCase, block_size_cases, startup_cases
from kvverify.targets.reference import ReferenceTarget


@pytest.fixture(scope="module")
def vllm_target():
    from kvverify.targets.vllm import vllm_available

    ok, why = vllm_available()
    if not ok:
        pytest.skip(f"differential vs vLLM skipped: {why}")
    from kvverify.targets.vllm import VllmTarget
    return VllmTarget()


REFERENCE = ReferenceTarget()


# ------------------------------------------------------------------------ comparison

def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", value)`` or ``("raises", error)``.

    A refusal is a refusal whatever its class: the reference refuses with a clear
    :class:`KVVerifyError` where upstream sometimes asserts (``AssertionError``), and the
    two count as agreeing here (the class is kept in the evidence and as an event).
    """
    try:
        return "ok", fn()
    except (KVVerifyError, AssertionError) as e:
        if isinstance(e, AssertionError):
            event("upstream refused with an AssertionError")
        return "raises", f"{type(e).__name__}: {str(e)[:120]}"


def _same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    return a == b or (a[0] == b[0] == "raises")


def _groups_view(plan: StartupPlan) -> list[tuple]:
    return [(g.layer_names, g.kv_cache_spec.kind, g.kv_cache_spec.block_size, g.kv_cache_spec.page_size_bytes)
            for g in plan.groups]


def _tensors_view(plan: StartupPlan) -> list[list[tuple]]:
    return [[(t.size, t.layers, t.layer_stride, t.block_stride, t.offset) for t in c.kv_cache_tensors]
            for c in plan.kv_cache_configs]


#: (field, how to read it from a plan), compared in this order; the first difference wins
PLAN_FIELDS: list[tuple[str, Callable[[StartupPlan], Any]]] = [
    ("groups.count", lambda p: len(p.groups)),
    ("groups.layer_names", lambda p: [g.layer_names for g in p.groups]),
    ("groups.spec_kinds", lambda p: [g.kv_cache_spec.kind for g in p.groups]),
    ("groups.block_sizes", lambda p: [g.kv_cache_spec.block_size for g in p.groups]),
    ("groups.page_sizes", lambda p: [g.kv_cache_spec.page_size_bytes for g in p.groups]),
    ("groups.specs", lambda p: [g.kv_cache_spec for g in p.groups]),
    ("bytes_per_block", lambda p: p.bytes_per_block),
    ("num_blocks", lambda p: [c.num_blocks for c in p.kv_cache_configs]),
    ("available_memory", lambda p: p.available_memory),
    ("check_memory", lambda p: p.check_memory),
    ("auto_fit_max_model_len", lambda p: p.auto_fit_max_model_len),
    ("max_model_len", lambda p: p.vllm_config.max_model_len),
    ("blocks_per_group", lambda p: p.blocks_per_group),
    ("starts", lambda p: p.starts),
    ("tensors", _tensors_view),
    ("worker_groups", lambda p: [[g.layer_names for g in w] for w in p.worker_groups]),
]


def diff_plans(ref: StartupPlan, up: StartupPlan) -> list[Violation]:
    """The first field on which the two plans differ, as a violation (or none)."""
    for name, read in PLAN_FIELDS:
        a, b = read(ref), read(up)
        if a != b:
            return [Violation(f"differential.{name}", f"reference and vLLM disagree on {name}",
                              {"reference": a, "vllm": b, "num_blocks": (ref.num_blocks, up.num_blocks),
                               "starts": (ref.starts, up.starts), "groups": _groups_view(ref),
                               "vllm_error": (up.error or "")[:160], "reference_error": (ref.error or "")[:160]})]
    return []


def diff_values(name: str, a: Any, b: Any, **context: Any) -> list[Violation]:
    if a == b or (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 2
                  and a[0] == b[0] == "raises"):
        return []
    return [Violation(f"differential.{name}", f"reference and vLLM disagree on {name}",
                      {"reference": a, "vllm": b, **context})]


# -------------------------------------------------------------------------- properties

@given(case=startup_cases(), data=st.data())
@recorded
def test_reference_and_vllm_agree_on_startup(vllm_target, case: StartupCase, data) -> None:
    """Same config -> same plan, check verdict, auto-fit, block sizes and empty-pool admission."""
    event(f"source={case.source}")
    ref_out = _outcome(lambda: REFERENCE.plan(case.vllm_config, case.kv_cache_specs, case.available_memory))
    up_out = _outcome(lambda: vllm_target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory))
    if ref_out[0] != "ok" or up_out[0] != "ok":
        event("a planner refused the specs")
        if not _same(ref_out, up_out):
            assert_no_violations(diff_values("plan.raises", ref_out[1] if ref_out[0] == "raises" else "plans",
                                             up_out[1] if up_out[0] == "raises" else "plans"))
        return
    ref, up = ref_out[1], up_out[1]
    event(f"starts={ref.starts}; groups={min(len(ref.groups), 4)}")
    note(f"reference: num_blocks={ref.num_blocks} starts={ref.starts} per-group={ref.blocks_per_group}")
    note(f"vllm:      num_blocks={up.num_blocks} starts={up.starts} per-group={up.blocks_per_group}")
    violations = diff_plans(ref, up)
    if violations or not ref.groups:
        assert_no_violations(violations)
        return

    # reported max concurrency (what the engine logs at startup)
    violations += diff_values("max_concurrency",
                              round(get_max_concurrency_for_kv_cache_config(ref.vllm_config, ref.kv_cache_config), 9),
                              round(vllm_target.max_concurrency(up), 9), num_blocks=ref.num_blocks)

    # block-size pair, on the same input (or both refuse)
    violations += diff_values(
        "block_sizes",
        _outcome(lambda: REFERENCE.resolve_block_sizes(ref.kv_cache_config, ref.vllm_config)),
        _outcome(lambda: vllm_target.resolve_block_sizes(ref.kv_cache_config, ref.vllm_config)),
        group_block_sizes=[g.kv_cache_spec.block_size for g in ref.groups])

    # blocks to allocate for one request on an empty pool (each target on its own plan)
    length = ref.vllm_config.max_model_len
    if not violations and ref.num_blocks >= 1 and length >= 2:
        num_tokens = data.draw(st.one_of(st.just(length - 1), st.integers(1, length - 1)), label="num_tokens")
        a = _outcome(lambda: REFERENCE.admit_on_empty_pool(ref, num_tokens))
        b = _outcome(lambda: vllm_target.admit_on_empty_pool(up, num_tokens))
        event(f"admitted={a[1][0]}" if a[0] == "ok" else f"admission refused: {a[1].split(':')[0]}")
        violations += diff_values("admit_on_empty_pool", a, b, num_tokens=num_tokens,
                                  num_blocks=ref.num_blocks, starts=ref.starts)
    assert_no_violations(violations[:1])


@given(case=block_size_cases())
@recorded
def test_reference_and_vllm_agree_on_block_sizes(vllm_target, case: BlockSizeCase) -> None:
    """Same groups -> same (scheduler, hash) block sizes or both refuse; same coordinator verdict."""
    cfg, vc = case.kv_cache_config, case.vllm_config
    sizes = [g.kv_cache_spec.block_size for g in cfg.kv_cache_groups]
    event(f"groups={len(sizes)}; prefix_match_unit {'set' if vc.prefix_match_unit else 'unset'}")
    a = _outcome(lambda: REFERENCE.resolve_block_sizes(cfg, vc))
    b = _outcome(lambda: vllm_target.resolve_block_sizes(cfg, vc))
    violations = diff_values("block_sizes", a, b, group_block_sizes=sizes,
                             prefix_match_unit=vc.prefix_match_unit, caching=vc.enable_prefix_caching)
    if not violations and a[0] == "ok":
        scheduler, hash_size = a[1]
        try:
            validate_coordinator_block_sizes(cfg, scheduler, hash_size, vc.enable_prefix_caching)
            ref_accepts = True
        except KVVerifyError:
            ref_accepts = False
        up_error = vllm_target.coordinator_accepts(cfg, vc, scheduler, hash_size)
        event(f"coordinator accepts={ref_accepts}")
        violations += diff_values("coordinator_accepts", ref_accepts, up_error is None, group_block_sizes=sizes,
                                  scheduler_block_size=scheduler, hash_block_size=hash_size,
                                  vllm_error=(up_error or "")[:200])
    assert_no_violations(violations)


# --------------------------------------------------------------- a wider spec mix

_KINDS = ("full", "sliding_window", "chunked_local", "mla", "mamba")


@st.composite
def wide_startup_cases(draw) -> StartupCase:
    """Mixes ``startup_cases`` does not draw: per-layer heads / head sizes / dtypes (uniform-type
    groups, pages that must be padded or cannot be unified), MLA next to other attention,
    ``disable_hybrid_kv_cache_manager``, ``prefix_match_unit``, a watermark and two workers
    with different layer sets (pipeline parallel). Either both targets refuse or both plan.
    """
    from kvverify.config import VllmConfig
    from kvverify.specs import (ChunkedLocalAttentionSpec, FullAttentionSpec, MambaSpec, MLAAttentionSpec,
                                SlidingWindowSpec)
    from kvverify.strategies import BLOCK_SIZES, lengths

    block_size = draw(st.sampled_from(BLOCK_SIZES))
    max_len = draw(lengths(block_size, low=2, high=1024))
    caching = draw(st.booleans())
    mode = "align" if caching else "none"
    n = draw(st.integers(1, 6))
    kinds = draw(st.lists(st.sampled_from(_KINDS), min_size=n, max_size=n))
    shared = draw(st.booleans())  # one heads x dims for all attention layers, or per layer
    dims = st.tuples(st.sampled_from((1, 2, 4)), st.sampled_from((2, 4, 8, 16)), st.sampled_from(("bfloat16", "float32", "fp8")))
    base_dims = draw(dims)
    window = draw(st.integers(1, 2 * max_len))
    chunk = draw(st.integers(1, 2 * max_len))
    specs = {}
    for i, kind in enumerate(kinds):
        heads, head, dtype = base_dims if shared else draw(dims)
        common = dict(block_size=block_size, num_kv_heads=heads, head_size=head, dtype=dtype)
        if kind == "full":
            spec = FullAttentionSpec(**common)
        elif kind == "sliding_window":
            spec = SlidingWindowSpec(**common, sliding_window=window)
        elif kind == "chunked_local":
            spec = ChunkedLocalAttentionSpec(**common, attention_chunk_size=chunk)
        elif kind == "mla":
            spec = MLAAttentionSpec(**{**common, "num_kv_heads": 1})
        else:
            spec = MambaSpec(block_size=block_size if caching else max_len,
                             shapes=((draw(st.integers(1, 4)), 4), (draw(st.integers(1, 64)),)),
                             dtypes=(dtype, "float32"), mamba_cache_mode=mode)
        specs[f"model.layers.{i}"] = spec
    workers: tuple[dict, ...] = (specs,)
    if n >= 2 and draw(st.integers(0, 3)) == 0:
        cut = draw(st.integers(1, n - 1))
        names = list(specs)
        workers = ({k: specs[k] for k in names[:cut]}, {k: specs[k] for k in names[cut:]})
    attention = [s for s in specs.values() if not isinstance(s, MambaSpec)]
    cache_bs = attention[0].block_size if attention else (block_size if caching else max_len)
    auto = draw(st.integers(0, 3)) == 0
    kw = dict(block_size=cache_bs, max_num_batched_tokens=draw(st.sampled_from((2048, 16, 64, 256))),
              enable_prefix_caching=caching, mamba_cache_mode=mode,
              disable_hybrid_kv_cache_manager=draw(st.booleans()),
              prefix_match_unit=draw(st.one_of(st.none(), st.sampled_from((1, 2, 4, 8, 16)))),
              watermark=draw(st.sampled_from((0.0, 0.0, 0.01, 0.1))))
    kw.update(max_model_len=-1, max_position_embeddings=max_len) if auto else kw.update(max_model_len=max_len)
    blocks = draw(st.integers(1, 400))
    if draw(st.booleans()):
        kw["num_gpu_blocks_override"] = blocks
        return StartupCase(VllmConfig(**kw), workers, "override")
    page = max(s.page_size_bytes for s in specs.values())
    memory = tuple(blocks * page * draw(st.integers(1, 3)) + draw(st.integers(0, page)) for _ in workers)
    kw["kv_cache_memory_bytes"] = memory[0]
    return StartupCase(VllmConfig(**kw), workers, "memory", memory if len(workers) > 1 else None)


@given(case=wide_startup_cases(), data=st.data())
@recorded
def test_reference_and_vllm_agree_on_wider_mixes(vllm_target, case: StartupCase, data) -> None:
    """The startup differential over mixes the main generator does not draw."""
    test_reference_and_vllm_agree_on_startup.hypothesis.inner_test(vllm_target, case=case, data=data)


# ------------------------------------------------------------------------- runtime

@given(case=startup_cases(allow_auto=False, max_len=256), lookahead=st.sampled_from((0, 0, 1, 3)),
       data=st.data())
@recorded
def test_reference_and_vllm_agree_on_workloads(vllm_target, case: StartupCase, lookahead: int, data) -> None:
    """Same plan and workload -> the same schedule: step count, preemptions, finish order,
    stall verdict and the per-step trace (running, waiting, free blocks, scheduled tokens)."""
    from dataclasses import replace

    from kvverify.strategies import workloads

    config = case.vllm_config
    # upstream refuses max_num_seqs > max_num_batched_tokens; the adapter clamps, so do both
    config = replace(config, max_num_seqs=min(config.max_num_seqs, config.max_num_batched_tokens),
                     num_lookahead_tokens=lookahead)
    ref = REFERENCE.plan(config, case.kv_cache_specs, case.available_memory)
    if not ref.groups or ref.num_blocks < 2 or ref.vllm_config.max_model_len < 2:
        return
    up = vllm_target.plan(config, case.kv_cache_specs, case.available_memory)
    violations = diff_plans(ref, up)
    if violations:
        assert_no_violations(violations)
    workload = data.draw(workloads(ref.vllm_config.max_model_len), label="workload")
    sched = vllm_target.scheduler(up)
    a = _outcome(lambda: REFERENCE.run_workload(ref, workload))
    b = _outcome(lambda: vllm_target.run_workload(up, workload, scheduler=sched))
    if a[0] != "ok" or b[0] != "ok":
        assert_no_violations(diff_values("run_workload.raises", a, b))
        return
    ra, rb = a[1], b[1]
    if sched.junction_stops and (ra.steps, ra.trace) != (rb.steps, rb.trace):
        # KNOWN REFERENCE GAP (reported to the lead; remove once the reference models it):
        # upstream's _mamba_block_aligned_split also stops a Mamba-align prefill chunk at the
        # request's Marconi shared-prefix junction (Request.shared_prefix_boundary, the third
        # value of KVCacheManager.get_computed_blocks); the reference scheduler does not, so
        # the chunk schedule (not the capacity) differs. Only the verdicts are compared then.
        event("known reference gap: Marconi junction stop (schedule differs)")
        assert_no_violations(diff_values("run_workload.completed", (ra.completed, ra.stall_reason, ra.error),
                                         (rb.completed, rb.stall_reason, rb.error),
                                         num_blocks=ref.num_blocks, groups=_groups_view(ref)))
        return
    event(f"completed={ra.completed}; stall={ra.stall_reason}; lookahead={lookahead > 0}")
    for name in ("completed", "stall_reason", "error", "finished", "preemptions", "steps", "trace"):
        x, y = getattr(ra, name), getattr(rb, name)
        if x != y:
            first = next((i for i, (p, q) in enumerate(zip(ra.trace, rb.trace)) if p != q), None)
            assert_no_violations(diff_values(
                f"run_workload.{name}", x if name != "trace" else ra.trace[first:first + 3] if first is not None else len(x),
                y if name != "trace" else rb.trace[first:first + 3] if first is not None else len(y),
                num_blocks=ref.num_blocks, starts=ref.starts, max_model_len=ref.vllm_config.max_model_len,
                groups=_groups_view(ref), first_differing_step=first))
