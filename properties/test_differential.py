"""Differential: the reference and the pinned upstream vLLM decide the same, on the same configs.

On every generated deployment (``startup_cases()``) both targets plan; they must agree on
the check verdict, ``num_blocks`` (every worker), bytes per block, the groups (count,
layer names, block sizes, spec kinds, page sizes, the specs themselves), the tensors
(size, layers, strides, offsets), the auto-fit length, blocks per group, the memory
the check saw, the reported max concurrency, the block-size pair, and — on an empty
pool — whether a request is admitted and how many blocks the full-sequence gate
charges it. On every group mix (``block_size_cases()``) they must agree on the
block-size pair (or both refuse), on whether the KV cache coordinator accepts it and on
``resolve_cache_hit_alignment_tokens``. Workloads (SWA / Mamba with prefix caching included)
must give the same steps, preemptions, per-request finish step and per-step trace; the public
capacity helpers must agree, ``max_model_len=-1`` included.

The first divergence fails the example as a :class:`~kvverify.invariants.base.Violation`
carrying both sides' numbers; Hypothesis shrinks it to a minimal counterexample.
Skipped, with the reason, when the pinned vLLM is not importable (see
``scripts/install-vllm-target.sh``). Independent of ``--target``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

from kvverify.reference.block_sizes import resolve_cache_hit_alignment_tokens, validate_coordinator_block_sizes
from kvverify.errors import KVVerifyError
from kvverify.invariants.base import Violation, assert_no_violations
from kvverify.reference.planner import StartupPlan, get_max_concurrency_for_kv_cache_config
from kvverify.props.recorder import recorded
from kvverify.strategies import (
    BlockSizeCase,
    StartupCase,
    block_size_cases,
    startup_cases,
)
from kvverify.targets.reference import ReferenceTarget
from kvverify.targets.vllm.target import VllmTarget


@pytest.fixture(scope="module")
def vllm_target() -> VllmTarget:
    from kvverify.targets.vllm import vllm_available

    ok, why = vllm_available()
    if not ok:
        pytest.skip(f"differential vs vLLM skipped: {why}")
    return VllmTarget()


REFERENCE = ReferenceTarget()


def _pinned_release_only(vllm_target: VllmTarget) -> None:
    """The differential compares the reference with the release it mirrors; an older release
    (``--target vllm`` in its venv) is judged by the properties, not by agreeing with the pin."""
    if vllm_target.version != REFERENCE.version:
        pytest.skip(f"differential vs vLLM skipped: the reference mirrors vLLM {REFERENCE.version}, "
                    f"found {vllm_target.version} (its defects are for the properties to find)")


# ------------------------------------------------------------------------ comparison

def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", value)`` or ``("raises", error)``.

    A refusal is a refusal whatever its class: the reference refuses with a clear
    :class:`KVVerifyError` where upstream sometimes asserts (``AssertionError``), and the
    two count as agreeing here (the class is kept in the evidence and as an event).
    """
    try:
        return "ok", fn()
    except (KVVerifyError, AssertionError, NotImplementedError) as e:
        from kvverify.targets.vllm.refusals import TargetUnsupported

        if isinstance(e, TargetUnsupported):
            raise  # an input the target cannot express: not an answer
        if isinstance(e, AssertionError):
            event("upstream refused with an AssertionError")
        if isinstance(e, NotImplementedError):
            event("raised NotImplementedError (finding F8: prefix lookup in a cross-attention group)")
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
    _pinned_release_only(vllm_target)
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
    _pinned_release_only(vllm_target)
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
        if not violations:
            ref_align = resolve_cache_hit_alignment_tokens(cfg, vc, scheduler, hash_size)
            event(f"hits align to {'hash' if ref_align == hash_size != scheduler else 'scheduler'} block size")
            violations += diff_values(
                "cache_hit_alignment_tokens", ref_align,
                vllm_target.resolve_cache_hit_alignment_tokens(cfg, vc, scheduler, hash_size),
                group_block_sizes=sizes, scheduler_block_size=scheduler, hash_block_size=hash_size)
    assert_no_violations(violations)


# --------------------------------------------------------------- a wider spec mix

_KINDS = ("full", "sliding_window", "chunked_local", "mla", "mamba", "cross_attention")


@st.composite
def wide_startup_cases(draw) -> StartupCase:
    """Mixes ``startup_cases`` does not draw: per-layer heads / head sizes / dtypes (uniform-type
    groups, pages that must be padded or cannot be unified), MLA next to other attention,
    ``disable_hybrid_kv_cache_manager``, ``prefix_match_unit``, a watermark and two workers
    with different layer sets (pipeline parallel). Either both targets refuse or both plan.
    """
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import (
        ChunkedLocalAttentionSpec,
        CrossAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
    )
    from kvverify.strategies import BLOCK_SIZES, lengths

    block_size = draw(st.sampled_from(BLOCK_SIZES))
    max_len = draw(lengths(block_size, low=2, high=1024))
    caching = draw(st.booleans())
    mode = "align" if caching else "none"
    n = draw(st.integers(1, 6))
    kinds = draw(st.lists(st.sampled_from(_KINDS), min_size=n, max_size=n))
    shared = draw(st.booleans())  # one heads x dims for all attention layers, or per layer
    # head size 12 (and 576-like MLA latents in real models) gives pages that divide no other:
    # MLA next to such a sliding-window layer takes upstream's full-allocation fallback
    dims = st.tuples(st.sampled_from((1, 2, 4)), st.sampled_from((2, 4, 8, 16, 12)),
                     st.sampled_from(("bfloat16", "float32", "fp8")))
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
        elif kind == "cross_attention":  # encoder-decoder (Whisper-like): sized by the encoder budget
            spec = CrossAttentionSpec(**common)
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
              watermark=draw(st.sampled_from((0.0, 0.0, 0.01, 0.1))),
              max_num_encoder_input_tokens=draw(st.one_of(st.none(), st.integers(1, 2048))))
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
    _pinned_release_only(vllm_target)
    test_reference_and_vllm_agree_on_startup.hypothesis.inner_test(vllm_target, case=case, data=data)


# ------------------------------------------------------------------------- runtime

@given(case=startup_cases(allow_auto=False, max_len=256), lookahead=st.sampled_from((0, 0, 1, 3)),
       data=st.data())
@recorded
def test_reference_and_vllm_agree_on_workloads(vllm_target, case: StartupCase, lookahead: int, data) -> None:
    """Same plan and workload -> the same schedule: step count, preemptions, finish order,
    stall verdict and the per-step trace (running, waiting, free blocks, scheduled tokens)."""
    _pinned_release_only(vllm_target)
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
    if sched.junction_stops:
        # upstream's _mamba_block_aligned_split stops a Mamba-align prefill chunk at the Marconi
        # shared-prefix junction (Request.shared_prefix_boundary); the reference models it (issue 17)
        event("Marconi junction stop")
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


# ------------------------------------------- SWA + full with prefix caching (issue 17)

def _run_traced(target: Any, plan: StartupPlan, workload: Any, **kw: Any) -> tuple[str, Any]:
    """Run a workload, recording the step each request finished at (``(result, finish steps)``)."""
    finish: dict[str, int] = {}

    def on_step(sched: Any, step: int) -> None:
        for rid in sched.finished:
            finish.setdefault(rid, step)

    out = _outcome(lambda: target.run_workload(plan, workload, on_step=on_step, **kw))
    return (out[0], (out[1], dict(sorted(finish.items())))) if out[0] == "ok" else out


def diff_traces(a: tuple[str, Any], b: tuple[str, Any], **context: Any) -> list[Violation]:
    """The first of: outcome, steps, preemptions, per-request finish step, stall verdict, trace."""
    if a[0] != "ok" or b[0] != "ok":
        return diff_values("run_workload.raises", a, b, **context)
    (ra, fa), (rb, fb) = a[1], b[1]
    for name, x, y in (("steps", ra.steps, rb.steps), ("preemptions", ra.preemptions, rb.preemptions),
                       ("finish_step", fa, fb), ("stall_reason", ra.stall_reason, rb.stall_reason),
                       ("error", ra.error, rb.error), ("finished", ra.finished, rb.finished)):
        if x != y:
            return diff_values(f"run_workload.{name}", x, y, **context)
    if ra.trace != rb.trace:
        first = next((i for i, (p, q) in enumerate(zip(ra.trace, rb.trace)) if p != q), None)
        return diff_values("run_workload.trace", ra.trace[first:first + 3] if first is not None else len(ra.trace),
                           rb.trace[first:first + 3] if first is not None else len(rb.trace),
                           first_differing_step=first, **context)
    return []


@given(case=startup_cases(allow_auto=False, max_len=160, kinds=("full", "sliding_window"), allow_mamba=True,
                          prefix_caching=True, sources=("override",), workers=False),
       data=st.data())
@recorded
def test_swa_prefix_caching_traces_agree(vllm_target, case: StartupCase, data) -> None:
    """SWA / Mamba-align (+ full) models with prefix caching on a tight pool (preemptions, shared
    prefixes, repeated prompts): the same steps, preemptions, per-request finish step and trace.

    Sparse retention of SWA / Mamba prefix-cache blocks (``prefix_cache_retention_interval``)
    decides which hits a preempted or later request gets, and a Mamba-align prefill chunk stops
    at the shared-prefix junction the lookup reports: this is where both show."""
    _pinned_release_only(vllm_target)
    from dataclasses import replace

    from kvverify.strategies import workloads

    config = replace(case.vllm_config, max_num_seqs=min(case.vllm_config.max_num_seqs,
                                                        case.vllm_config.max_num_batched_tokens))
    ref = REFERENCE.plan(config, case.kv_cache_specs, case.available_memory)
    if not ref.groups or ref.num_blocks < 2 or ref.vllm_config.max_model_len < 2:
        return
    up = vllm_target.plan(config, case.kv_cache_specs, case.available_memory)
    assert_no_violations(diff_plans(ref, up))
    work = data.draw(workloads(ref.vllm_config.max_model_len, max_requests=4, max_outputs=24), label="workload")
    if data.draw(st.booleans(), label="resend"):  # the same prompt again: a replay-boundary hit
        first = work[0]
        work = [*work, replace(first, request_id="again", arrival_step=first.arrival_step + data.draw(
            st.integers(0, 12), label="resend_after"))]
    a = _run_traced(REFERENCE, ref, work)
    b = _run_traced(vllm_target, up, work, scheduler=vllm_target.scheduler(up))
    if a[0] == "ok":
        event(f"preempted={a[1][0].preemptions > 0}; groups={len(ref.groups)}")
    assert_no_violations(diff_traces(a, b, num_blocks=ref.num_blocks, groups=_groups_view(ref),
                                     max_model_len=ref.vllm_config.max_model_len))


# ---------------------------------------- public capacity helpers, auto length (issue 17)

@given(case=startup_cases(sources=("memory",), workers=False, max_len=512, allow_mamba=False), auto=st.booleans())
@recorded
def test_public_capacity_helpers_agree(vllm_target, case: StartupCase, auto: bool) -> None:
    """The public ``check_enough_kv_cache_memory`` and ``estimate_max_model_len`` decide the same,
    ``max_model_len=-1`` (auto) included: upstream checks the derived maximum, never ``-1``."""
    _pinned_release_only(vllm_target)
    from dataclasses import replace

    config = case.vllm_config
    if auto:
        config = replace(config, max_model_len=-1, max_position_embeddings=config.planning_max_model_len)
    specs, memory = case.kv_cache_specs[0], config.kv_cache_memory_bytes
    assert memory is not None
    event(f"auto={auto}")
    a = _outcome(lambda: REFERENCE.check_enough_kv_cache_memory(config, specs, memory))
    b = _outcome(lambda: vllm_target.check_enough_kv_cache_memory(config, specs, memory))
    if a[0] == b[0] == "ok":
        event(f"check passes={a[1] is None}")
        a, b = ("ok", a[1] is None), ("ok", b[1] is None)  # the verdict; messages differ in wording
    violations = diff_values("check_enough_kv_cache_memory.passes", a, b, memory=memory,
                             max_model_len=config.max_model_len)
    if not violations:
        violations = diff_values(
            "estimate_max_model_len", _outcome(lambda: REFERENCE.estimate_max_model_len(config, specs, memory)),
            _outcome(lambda: vllm_target.estimate_max_model_len(config, specs, memory)), memory=memory)
    assert_no_violations(violations)


# ------------------------------------------------- the findings, replayed on real vLLM

def _finding_f1(t) -> None:
    """F1: upstream logs N / blocks: 1.00x on a pool whose N - 1 usable blocks serve no request,
    2.00x on one where two full-length requests cannot run together."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.driver import WorkloadSpec
    from kvverify.reference.specs import FullAttentionSpec

    spec = {"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)}
    # ample profiled memory: the override alone sizes the pool, on releases whose check reads
    # the override (>= 0.27) and on those whose check reads the profiled memory (0.19.1)
    plan = t.plan(VllmConfig(block_size=16, max_model_len=32, num_gpu_blocks_override=2,
                             kv_cache_memory_bytes=1 << 20), [spec])
    assert plan.blocks_needed_per_request == 2
    if plan.starts:  # a release whose check counts the null block as usable (0.27.1) starts this pool,
        # a defect of its own (G2); the request still cannot be served on the one usable block
        from kvverify.reference.workloads import full_length_request
        assert not t.run_workload(plan, [full_length_request(32, 1)], max_steps=50).completed
    assert t.max_concurrency(plan) == 1.0, "F1 no longer reproduces: upstream does not report 1.00x"
    plan = t.plan(VllmConfig(block_size=16, max_model_len=32, num_gpu_blocks_override=4,
                             kv_cache_memory_bytes=1 << 20), [spec])
    assert plan.starts and t.max_concurrency(plan) == 2.0
    both = [WorkloadSpec(f"r{i}", tuple(range(100 * i, 100 * i + 16)), 16) for i in range(2)]
    result = t.run_workload(plan, both)
    assert result.completed and result.preemptions >= 1, result  # they could not run together


def _finding_f2(t) -> None:
    """F2: chunked-local cap one block short when B does not divide C -> livelock at the startup size."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import ChunkedLocalAttentionSpec
    from kvverify.reference.workloads import full_length_request

    spec = {"l0": ChunkedLocalAttentionSpec(block_size=32, num_kv_heads=1, head_size=8, attention_chunk_size=3)}
    plan = t.plan(VllmConfig(block_size=32, max_model_len=64, max_num_batched_tokens=8,
                             num_gpu_blocks_override=2, enable_prefix_caching=False,
                             kv_cache_memory_bytes=1 << 20), [spec])  # the override alone sizes the pool
    assert plan.starts and plan.blocks_per_group == (1,)
    result = t.run_workload(plan, [full_length_request(64, 1)])
    assert result.stall_reason == "no_progress" and result.preemptions > 0, "F2 no longer reproduces"


def _finding_f3(t) -> None:
    """F3: the check refuses a pool on which every admissible generate request completes."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import FullAttentionSpec
    from kvverify.reference.workloads import full_length_request

    spec = FullAttentionSpec(block_size=1, num_kv_heads=1, head_size=8)
    # N = 2 from the memory, not an override: every release's check reads it (<= 0.20 ignore
    # the override), so where F3 is absent (no null block reserved) it is the check that accepts
    plan = t.plan(VllmConfig(block_size=1, max_model_len=2, kv_cache_memory_bytes=2 * spec.page_size_bytes),
                  [{"l0": spec}])
    assert plan.num_blocks == 2
    assert not plan.starts, "F3 no longer reproduces: the check accepts L=2, B=1, N=2"
    assert t.run_workload(plan, [full_length_request(2, 1)]).completed


def _finding_f4(t) -> None:
    """F4: with 3 lookahead slots a sliding-window engine that passed its check livelocks
    (W=2, B=2, M=2, L=7, N=4: cap cdiv(W-1+M, B)+1 = 3 blocks, a step holds 4). No F2 in it:
    the window is no chunk. (The chunked C=16, B=32 case once written here is F2's.)"""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import SlidingWindowSpec
    from kvverify.reference.workloads import full_length_request

    spec = {"l0": SlidingWindowSpec(block_size=2, num_kv_heads=1, head_size=8, sliding_window=2)}
    plan = t.plan(VllmConfig(block_size=2, max_model_len=7, max_num_batched_tokens=2, num_gpu_blocks_override=4,
                             num_lookahead_tokens=3, enable_prefix_caching=False,
                             kv_cache_memory_bytes=1 << 20), [spec])  # the override alone sizes the pool
    assert plan.starts and plan.blocks_per_group == (3,)
    result = t.run_workload(plan, [full_length_request(7, 1)])
    assert result.stall_reason == "no_progress" and result.preemptions >= 10, "F4 no longer reproduces"


def _finding_f5(t) -> None:
    """F5: the SWA cap's +1 is never held when L <= W - 1 + F (W=8, B=4, F=8, L=14: cap 5)."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.driver import WorkloadSpec
    from kvverify.reference.specs import SlidingWindowSpec

    plan = t.plan(VllmConfig(block_size=4, max_model_len=14, max_num_batched_tokens=8, num_gpu_blocks_override=100,
                             enable_prefix_caching=False),
                  [{"s": SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8, sliding_window=8)}])
    assert plan.blocks_per_group == (5,), "F5 no longer reproduces: the cap changed"
    most = 0
    for outputs in range(1, 14):
        for other in range(4):  # a competing request shifts the chunk schedule
            held = [0]

            def on_step(sched, step, held=held):
                held[0] = max(held[0], sched.kv_cache_manager.num_held_blocks("r"))

            work = [WorkloadSpec("r", tuple(range(14 - outputs)), outputs)]
            if other:
                work.insert(0, WorkloadSpec("x", tuple(range(500, 500 + other)), 1))
            t.run_workload(plan, work, on_step=on_step)
            most = max(most, held[0])
    assert most < 5, most


def _finding_f6_estimate(t) -> None:
    """F6 (1): the public estimate is refused by the public check for the same memory."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import FullAttentionSpec

    spec = {"l0": FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype="float16")}
    memory = 128 * spec["l0"].page_size_bytes
    est = t.estimate_max_model_len(VllmConfig(block_size=16, max_model_len=4096, kv_cache_memory_bytes=memory),
                                   spec, memory)
    assert est == 2048
    refusal = t.check_enough_kv_cache_memory(VllmConfig(block_size=16, max_model_len=est,
                                                        kv_cache_memory_bytes=memory), spec, memory)
    assert refusal is not None and "estimated maximum model length is 2032" in refusal, "F6 no longer reproduces"


def _finding_f6_check(t) -> None:
    """F6 (2): the public check passes memory the planner refuses (group padding)."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import FullAttentionSpec, SlidingWindowSpec

    common = dict(block_size=16, num_kv_heads=2, head_size=64, dtype="float16")
    specs = {"f0": FullAttentionSpec(**common), "f1": FullAttentionSpec(**common),
             **{f"s{i}": SlidingWindowSpec(**common, sliding_window=64) for i in range(3)}}
    memory = 160 * specs["f0"].page_size_bytes
    config = VllmConfig(block_size=16, max_model_len=1024, max_num_batched_tokens=64, kv_cache_memory_bytes=memory)
    assert t.check_enough_kv_cache_memory(config, specs, memory) is None, "F6 no longer reproduces"
    plan = t.plan(config, [specs])
    assert not plan.starts and plan.blocks_per_group == (64, 9, 9)


def _finding_f7(t) -> None:
    """F7: a chunked-local hybrid with unequal pages starts, then asserts on its first request."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import ChunkedLocalAttentionSpec, FullAttentionSpec
    from kvverify.reference.workloads import full_length_request

    specs = {"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8),
             "l1": ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, attention_chunk_size=64)}
    plan = t.plan(VllmConfig(block_size=16, max_model_len=256, max_num_batched_tokens=64,
                             kv_cache_memory_bytes=1 << 24), [specs])
    assert plan.starts and [g.kv_cache_spec.block_size for g in plan.groups] == [32, 16]
    scheduler_block_size, hash_block_size = t.resolve_block_sizes(plan.kv_cache_config, plan.vllm_config)
    assert t.coordinator_accepts(plan.kv_cache_config, plan.vllm_config, scheduler_block_size,
                                 hash_block_size) is None, "F7 no longer reproduces: refused at startup"
    with pytest.raises(AssertionError, match="not compatible with chunked local attention"):
        t.run_workload(plan, [full_length_request(100, 1)])


def _finding_f8(t) -> None:
    """F8: an encoder-decoder model with prefix caching explicitly on starts, then its first
    request's prefix lookup raises NotImplementedError in CrossAttentionManager."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.driver import WorkloadSpec
    from kvverify.reference.specs import CrossAttentionSpec, FullAttentionSpec

    common = dict(block_size=16, num_kv_heads=1, head_size=8)
    specs = {"self_attn": FullAttentionSpec(**common), "encoder_attn": CrossAttentionSpec(**common)}
    work = [WorkloadSpec("r", tuple(range(10)), 2, num_encoder_tokens=20)]
    for caching in (False, True):
        plan = t.plan(VllmConfig(block_size=16, max_model_len=64, max_num_encoder_input_tokens=32,
                                 num_gpu_blocks_override=16, enable_prefix_caching=caching,
                                 kv_cache_memory_bytes=1 << 24), [specs])  # the override alone sizes the pool
        assert plan.starts and plan.blocks_per_group == (4, 2)
        if not caching:
            assert t.run_workload(plan, work).completed
    with pytest.raises(NotImplementedError, match="CrossAttentionManager does not support caching"):
        t.run_workload(plan, work)


def _finding_f9(t) -> None:
    """F9: Mamba ``align`` reserves ``2 + S + P`` pages per request, yet a request whose tokens fit in
    one block holds one state block (+ S): the check refuses a pool it would be served on
    (B=16, L=16, N=2: one usable block). Two blocks' worth of tokens (L=18) really need two."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import MambaSpec
    from kvverify.reference.workloads import full_length_request

    def plan(max_model_len: int):
        spec = {"m": MambaSpec(block_size=16, shapes=((4, 8),), dtypes=("float16",), mamba_cache_mode="align")}
        return t.plan(VllmConfig(block_size=16, max_model_len=max_model_len, num_gpu_blocks_override=2,
                                 enable_prefix_caching=True, mamba_cache_mode="align",
                                 kv_cache_memory_bytes=1 << 20), [spec])  # the override alone sizes the pool

    short = plan(16)
    assert not short.starts and short.blocks_per_group == (2,), "F9 no longer reproduces: the check accepts"
    assert t.run_workload(short, [full_length_request(16, 1)]).completed
    assert not t.run_workload(plan(18), [full_length_request(18, 1)], max_steps=50).completed


FINDINGS = {"F1": _finding_f1, "F2": _finding_f2, "F3": _finding_f3, "F4": _finding_f4, "F5": _finding_f5,
            "F6-estimate": _finding_f6_estimate, "F6-check": _finding_f6_check, "F7": _finding_f7, "F8": _finding_f8,
            "F9": _finding_f9}


#: replay -> the fix option whose patch (reports/findings/patches/) removes it
FINDING_FIXES = {"F1": "concurrency_counts_usable_blocks", "F2": "chunked_local_cap_plus_one",
                 "F3": "check_plans_computed_tokens", "F4": "caps_count_lookahead", "F5": "swa_cap_exact",
                 "F6-estimate": "capacity_helpers_plan_like_engine",
                 "F6-check": "capacity_helpers_plan_like_engine",
                 "F7": "chunked_local_alignment_checked_at_startup",
                 "F8": "encoder_decoder_prefix_caching_refused", "F9": "mamba_align_bound_exact"}


@pytest.mark.parametrize("finding", sorted(FINDINGS))
def test_finding_reproduces_on_vllm(vllm_target: VllmTarget, finding: str) -> None:
    """Every finding's minimal counterexample, replayed on the real, pinned vLLM (strict: the
    day upstream changes, this fails and names the finding). See reports/findings/.

    Under ``--fix`` (patched vLLM, kvverify/targets/overlay.py) the finding's own replay must
    no longer reproduce; the other replays describe unpatched 0.33.0 and are skipped.
    """
    from kvverify.props.findings import replay_on_vllm

    replay_on_vllm(vllm_target, finding, FINDINGS[finding], FINDING_FIXES[finding])
