"""Encoder-decoder (cross-attention) layouts: startup and completion (issue 17, item 4).

Whisper-like models: decoder self-attention layers next to cross-attention layers whose
blocks hold the encoder states (``cdiv(max_num_encoder_input_tokens, B)`` per request,
allocated once, never prefix-cached). With prefix caching on, upstream's
``CrossAttentionManager`` raises on the first prefix lookup (finding F8): the property with
caching on is a strict known failure, and passes under the fix
``encoder_decoder_prefix_caching_refused``.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import Phase, assume, event, example, note, settings
from hypothesis import strategies as st

from kvverify.errors import KVVerifyError
from kvverify.hypothesis_hooks import given
from kvverify.invariants.admission import check_workload_completes
from kvverify.invariants.base import Violation, assert_no_violations
from kvverify.props.recorder import recorded
from kvverify.props.runtime import allocation_violations
from kvverify.reference.config import VllmConfig
from kvverify.reference.grouping import get_global_kv_cache_groups
from kvverify.reference.planner import StartupPlan, blocks_per_request, bytes_per_block
from kvverify.reference.specs import CrossAttentionSpec, FullAttentionSpec, KVCacheSpec
from kvverify.reference.workloads import full_length_request
from kvverify.strategies import BLOCK_SIZES, StartupCase, boundary_int, lengths, override_memory, workloads
from kvverify.targets.base import Feature, Target, TargetUnsupported, require


@st.composite
def encoder_decoder_cases(draw, *, prefix_caching: bool | None = False, max_len: int = 256) -> StartupCase:
    """1-3 decoder self-attention layers and as many cross-attention layers (same heads x dims),
    ``max_num_encoder_input_tokens`` in 1..512, an override at the startup boundary (+-2)."""
    block_size = draw(st.sampled_from(BLOCK_SIZES))
    length = draw(lengths(block_size, low=2, high=max_len))
    n = draw(st.integers(1, 3))
    common = dict(block_size=block_size, num_kv_heads=draw(st.sampled_from((1, 2))),
                  head_size=draw(st.sampled_from((8, 4))), dtype=draw(st.sampled_from(("bfloat16", "fp8"))))
    cross = CrossAttentionSpec(**common)
    # CrossAttentionSpec.page_size_padded (unpadded first): the cross pages grown by some bytes
    pad = draw(st.one_of(st.none(), st.integers(0, 2 * cross.real_page_size_bytes)))
    if pad is not None:
        cross = replace(cross, page_size_padded=cross.real_page_size_bytes + pad)
    specs: dict[str, KVCacheSpec] = {**{f"decoder.layers.{i}.self_attn": FullAttentionSpec(**common) for i in range(n)},
             **{f"decoder.layers.{i}.encoder_attn": cross for i in range(n)}}
    encoder = draw(st.one_of(st.sampled_from((1500, 448)), st.integers(1, 512)))
    caching = draw(st.booleans()) if prefix_caching is None else prefix_caching
    base = VllmConfig(block_size=block_size, max_model_len=length, max_num_encoder_input_tokens=encoder,
                      enable_prefix_caching=caching, max_num_batched_tokens=draw(st.sampled_from((2048, 64, 16))),
                      num_gpu_blocks_override=1)
    groups = get_global_kv_cache_groups(base, [specs])
    needed = blocks_per_request(groups, base)
    target = draw(boundary_int(needed + 1, low=1, high=3 * needed + 8))
    # the profiled KV memory beside the override, drawn as startup_cases' override source draws
    # it (generous first: a small override on a big GPU). Without it a case had 0 profiled bytes,
    # which no engine has: a release whose check reads the profiled memory, not the override
    # (<= 0.20, #27181), refused every case and the property ran on nothing there.
    memory = draw(override_memory(target * bytes_per_block(groups), bytes_per_block(groups)))
    return StartupCase(replace(base, num_gpu_blocks_override=target, kv_cache_memory_bytes=memory), (specs,),
                       "override", None, target, needed)


def _refused_at_engine_build(target: Target, plan: StartupPlan) -> bool:
    """Does building the engine (``target.scheduler(plan)``: upstream ``Scheduler`` ->
    ``KVCacheManager`` -> KV cache coordinator) refuse the config? A startup refusal is a
    refusal whatever its class, as in the differential: the reference raises a
    :class:`KVVerifyError` naming the field, upstream's coordinator asserts
    (``AssertionError``, as its neighbouring startup checks do). An input the target cannot
    express (:class:`TargetUnsupported`) is not an answer and propagates."""
    try:
        target.scheduler(plan)
    except TargetUnsupported:
        raise
    except (KVVerifyError, AssertionError) as e:
        event(f"refused at engine build: {type(e).__name__}")
        note(f"engine build refused: {type(e).__name__}: {str(e)[:200]}")
        return True
    return False


def _completes(target, case: StartupCase, data) -> None:
    try:
        plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    except KVVerifyError:
        return  # refused at startup: nothing is promised
    assume(plan.starts and plan.vllm_config.max_model_len >= 2)
    encoder = case.vllm_config.encoder_tokens
    work = data.draw(workloads(plan.vllm_config.max_model_len, max_requests=3, max_outputs=16), label="workload")
    work = [replace(w, num_encoder_tokens=data.draw(st.integers(1, encoder), label="encoder_tokens"))
            for w in work]
    note(f"num_blocks={plan.num_blocks} needed={plan.blocks_needed_per_request} per-group={plan.blocks_per_group}")
    event(f"caching={case.vllm_config.enable_prefix_caching}")
    if _refused_at_engine_build(target, plan):
        return  # refused at startup (the F8 fix): nothing is promised
    try:
        violations = check_workload_completes(target, plan, work)
    except (KVVerifyError, NotImplementedError, ValueError) as e:
        violations = [Violation("encoder_decoder.raised", "a started encoder-decoder engine raised on a request",
                                {"error": f"{type(e).__name__}: {e}"[:200], "num_blocks": plan.num_blocks})]
    assert_no_violations(violations)


@given(case=encoder_decoder_cases(prefix_caching=False), data=st.data())
@recorded
def test_encoder_decoder_workload_completes(target: Target, case: StartupCase, data) -> None:
    """A started encoder-decoder engine (cross-attention holding the encoder states) serves an
    admitted workload: every request finishes, no stall, no raise."""
    _completes(target, case, data)


@settings(phases=(Phase.explicit, Phase.reuse, Phase.generate))  # a strict known failure: no need to shrink
@given(case=encoder_decoder_cases(prefix_caching=True), data=st.data())
@recorded
def test_encoder_decoder_with_prefix_caching_completes(target: Target, case: StartupCase, data) -> None:
    """The same with an explicit ``enable_prefix_caching``: fails on upstream's behaviour (F8)."""
    _completes(target, case, data)


def _startup_vs_full_request(target: Target, case: StartupCase, outputs: int, *, refused: bool) -> None:
    """Guarantee 2 for cross-attention: one max_model_len request carrying the largest encoder
    input (``max_num_encoder_input_tokens``), run alone, completes iff the check passed.

    Reference only for now: the vLLM adapter's Requests are decoder-only (it would drop the
    encoder input, and with it the cross-attention blocks this judges)."""
    require(target, Feature.ENCODER_INPUTS)  # the vllm adapter's Requests are decoder-only
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    length = plan.vllm_config.max_model_len
    assume(length >= 2 and plan.starts != refused and (plan.starts or plan.num_blocks >= 2))
    if plan.starts and _refused_at_engine_build(target, plan):
        return  # refused when the engine is built: nothing is promised
    encoder = plan.vllm_config.encoder_tokens
    request = replace(full_length_request(length, max(1, min(outputs, length - 1))), num_encoder_tokens=encoder)
    event(f"starts={plan.starts}")
    note(f"num_blocks={plan.num_blocks} needed={plan.blocks_needed_per_request} per-group={plan.blocks_per_group}")
    result = target.run_workload(plan, [request])
    evidence = {"num_blocks": plan.num_blocks, "blocks_needed": plan.blocks_needed_per_request,
                "blocks_per_group": plan.blocks_per_group, "max_model_len": length, "encoder_tokens": encoder,
                "stall": result.stall_reason, "error": result.error, "steps": result.steps}
    if plan.starts and not result.completed:
        assert_no_violations([Violation("startup.too_loose", "startup check passed but a max_model_len request "
                                        "with the largest encoder input does not complete", evidence)])
    if not plan.starts and result.completed:
        assert_no_violations([Violation("startup.needlessly_strict", "startup check refused, yet a "
                                        "max_model_len request with the largest encoder input completes alone",
                                        evidence)])


@given(case=encoder_decoder_cases(prefix_caching=False), outputs=st.one_of(st.just(1), st.integers(1, 16)))
@recorded
def test_encoder_decoder_startup_passes_implies_servable(target: Target, case: StartupCase, outputs: int) -> None:
    """Check passes => a max_model_len request with the largest encoder input completes alone."""
    _startup_vs_full_request(target, case, outputs, refused=False)


#: F3's shape with cross-attention next to the decoder's: B=1, L=2, one encoder token. The
#: check needs cdiv(2, 1) + 1 = 3 blocks > 2 usable; the request writes decoder KV for 1 token.
F3_ENCODER_DECODER_CASE = StartupCase(
    VllmConfig(block_size=1, max_model_len=2, max_num_encoder_input_tokens=1, enable_prefix_caching=False,
               num_gpu_blocks_override=3),
    ({"decoder.layers.0.self_attn": FullAttentionSpec(block_size=1, num_kv_heads=1, head_size=8),
      "decoder.layers.0.encoder_attn": CrossAttentionSpec(block_size=1, num_kv_heads=1, head_size=8)},),
    "override", None, 3, 3)


@given(case=encoder_decoder_cases(prefix_caching=False))
@example(case=F3_ENCODER_DECODER_CASE)
@recorded
def test_encoder_decoder_refusal_is_necessary(target: Target, case: StartupCase) -> None:
    """Check refuses => that request does not complete (known finding F3 on the decoder's
    self-attention: the check reserves a block for the never-computed last token)."""
    _startup_vs_full_request(target, case, 1, refused=True)


@given(case=encoder_decoder_cases(prefix_caching=False), data=st.data())
@recorded
def test_encoder_decoder_predictor_equals_allocator(target: Target, case: StartupCase, data) -> None:
    """Every admitted step of an encoder-decoder workload pulls exactly the blocks it predicted
    (cross-attention blocks included); reference only, as above."""
    require(target, Feature.ENCODER_INPUTS)  # the vllm adapter's Requests are decoder-only
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.starts and plan.vllm_config.max_model_len >= 2)
    encoder = plan.vllm_config.encoder_tokens
    work = data.draw(workloads(plan.vllm_config.max_model_len, max_requests=3, max_outputs=16), label="workload")
    work = [replace(w, num_encoder_tokens=data.draw(st.integers(1, encoder), label="encoder_tokens"))
            for w in work]
    assert_no_violations(allocation_violations(target, plan, work))

