"""The startup traps (``kvverify check``'s predictions, :mod:`kvverify.check.traps`) against the
real vLLM's rules, and the runtime side on the reference.

* ``test_trap_rules_match_vllm``: on generated deployments, each predicted refusal is exactly
  vLLM 0.33.0's — the Mamba state slots vs ``max_num_seqs`` (``resolve_cudagraph_mode_and_sizes``
  over the plan's real KV cache config), the token budget (``SchedulerConfig`` /
  ``verify_max_model_len``: chunked prefill off, and ``max_num_seqs``), the multimodal encoder budget
  (``compute_mm_encoder_budget``: the largest item vs the budget with chunked MM input off, and the
  cache size). Skipped without vLLM; recorded for CI in ``properties/data/vllm-0.33.0-lengths.json.gz``.
* ``test_a_started_mamba_engine_serves_max_num_seqs_requests``: where vLLM starts
  (``max_num_seqs <= num_blocks``), ``max_num_seqs`` and more concurrent requests on a model with
  Mamba layers all finish on the reference — no deadlock at the slot boundary (#49064's question).
  ``tests/test_trap_mutations.py`` shows both catching planted mistakes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from kvverify.check import traps
from kvverify.reference.driver import WorkloadSpec
from kvverify.reference.managers.base import behaviour_spec
from kvverify.reference.specs import MambaSpec
from kvverify.strategies import StartupCase, boundary_int, startup_cases
from kvverify.targets.reference import ReferenceTarget
from test_differential import _pinned_release_only, vllm_target  # noqa: F401 - the fixture

REFERENCE = ReferenceTarget()


def _has_mamba(case: StartupCase) -> bool:
    return any(isinstance(behaviour_spec(s), MambaSpec) for w in case.kv_cache_specs for s in w.values())


@st.composite
def trap_cases(draw) -> dict[str, Any]:
    """One trap rule's inputs: ``{"rule": ..., ...}`` — a planned deployment (Mamba layers most of
    the time) and ``max_num_seqs`` at its block count +-2; a token budget around ``max_model_len``
    and ``max_num_seqs``; a largest multimodal item around the budget."""
    rule = draw(st.sampled_from(("mamba_state_slots", "token_budget", "encoder_budget")))
    if rule == "mamba_state_slots":
        kinds = draw(st.sampled_from(((), ("full", "sliding_window"), ("full",))))  # () : pure Mamba
        case = draw(startup_cases(allow_auto=False, max_len=512, sources=("override",), workers=False,
                                  allow_mamba=True, kinds=kinds))
        return {"rule": rule, "case": case, "max_num_seqs_delta": draw(st.integers(-2, 2)),
                "full_cudagraphs": draw(st.booleans())}
    if rule == "token_budget":
        length = draw(st.integers(2, 1 << 17))
        return {"rule": rule, "max_model_len": length,
                "max_num_batched_tokens": draw(boundary_int(length, low=1, high=1 << 18)),
                "max_num_seqs": draw(st.sampled_from((1, 128, 256, 1024))),
                "chunked_prefill": draw(st.booleans())}
    budget = draw(st.sampled_from((64, 128, 256, 2048, 8192)))
    return {"rule": rule, "max_num_batched_tokens": budget, "largest_item": draw(boundary_int(budget, low=1, high=1 << 15)),
            "disable_chunked_mm_input": draw(st.booleans())}


def kvverify_trap(case: dict[str, Any]) -> dict[str, Any]:
    """kvverify's prediction, in the shape :func:`vllm_trap` answers."""
    rule = case["rule"]
    if rule == "mamba_state_slots":
        plan = REFERENCE.plan(case["case"].vllm_config, case["case"].kv_cache_specs)
        seqs = max(1, plan.num_blocks + case["max_num_seqs_delta"])
        return {"refuses": traps.mamba_state_slots(plan.num_blocks, seqs, has_mamba=_has_mamba(case["case"]),
                                                   full_cudagraphs=case["full_cudagraphs"])}
    if rule == "token_budget":
        return {"refuses": traps.chunked_prefill_budget(case["max_model_len"], case["max_num_batched_tokens"],
                                                        chunked_prefill=case["chunked_prefill"],
                                                        max_num_seqs=case["max_num_seqs"])}
    budgets = traps.mm_encoder_budget(case["max_num_batched_tokens"], case["largest_item"],
                                      disable_chunked_mm_input=case["disable_chunked_mm_input"])
    if budgets is None:
        return {"refuses": True}
    return {"refuses": False, "encoder_compute_budget": budgets[0], "encoder_cache_size": budgets[1]}


def vllm_trap(case: dict[str, Any]) -> dict[str, Any]:
    """vLLM 0.33.0's answer (:mod:`kvverify.targets.vllm.traps`), only the fields kvverify predicts."""
    from kvverify.targets.vllm import traps as vt

    rule = case["rule"]
    if rule == "mamba_state_slots":
        plan = REFERENCE.plan(case["case"].vllm_config, case["case"].kv_cache_specs)
        seqs = max(1, plan.num_blocks + case["max_num_seqs_delta"])
        got = vt.mamba_state_slots(plan.kv_cache_config, seqs, full_cudagraphs=case["full_cudagraphs"])
    elif rule == "token_budget":
        got = vt.token_budget(case["max_model_len"], case["max_num_batched_tokens"], case["max_num_seqs"],
                              chunked_prefill=case["chunked_prefill"])
    else:
        got = vt.encoder_budget(case["max_num_batched_tokens"], case["largest_item"],
                                disable_chunked_mm_input=case["disable_chunked_mm_input"])
    return {k: got[k] for k in ("refuses", "encoder_compute_budget", "encoder_cache_size") if k in got}


@settings(deadline=None, max_examples=150)
@given(case=trap_cases())
def test_trap_rules_match_vllm(vllm_target, case: dict[str, Any]) -> None:  # noqa: F811
    _pinned_release_only(vllm_target)
    mine, theirs = kvverify_trap(case), vllm_trap(case)
    mamba = f" ({'Mamba' if _has_mamba(case['case']) else 'no Mamba'})" if case["rule"] == "mamba_state_slots" else ""
    event(f"{case['rule']}{mamba}: {'refuses' if theirs['refuses'] else 'starts'}")
    assert mine == theirs, f"{case}:\n  kvverify {mine}\n  vLLM     {theirs}"


@st.composite
def started_mamba_engines(draw) -> tuple[StartupCase, list[WorkloadSpec]]:
    """A deployment with Mamba layers that vLLM starts: its check passes and ``max_num_seqs`` is
    at its block count or just below (the Mamba-slot rule's boundary); ``max_num_seqs + 2`` short
    requests arrive together."""
    kinds = draw(st.sampled_from(((), ("full", "sliding_window"))))  # () : pure Mamba
    case = draw(startup_cases(allow_auto=False, max_len=96, sources=("override",), workers=False,
                              allow_mamba=True, max_layers=3, kinds=kinds))
    assume(_has_mamba(case))
    plan = REFERENCE.plan(case.vllm_config, case.kv_cache_specs)
    assume(plan.starts and plan.num_blocks <= 24)
    seqs = max(1, plan.num_blocks - draw(st.integers(0, 1)))
    assume(not traps.mamba_state_slots(plan.num_blocks, seqs, has_mamba=True, full_cudagraphs=True))
    length = plan.vllm_config.max_model_len
    assume(length >= 3)
    n = seqs + 2
    requests = [WorkloadSpec(f"r{i}", tuple(range(1000 * i, 1000 * i + draw(st.integers(1, length - 2)))),
                             draw(st.integers(1, 2))) for i in range(n)]
    return replace(case, vllm_config=replace(case.vllm_config, max_num_seqs=seqs)), requests


@settings(deadline=None, max_examples=80)
@given(engine=started_mamba_engines())
def test_a_started_mamba_engine_serves_max_num_seqs_requests(engine) -> None:
    case, requests = engine
    plan = REFERENCE.plan(case.vllm_config, case.kv_cache_specs)
    result = REFERENCE.run_workload(plan, requests, keep_trace=False)
    event(f"max_num_seqs {'=' if plan.vllm_config.max_num_seqs == plan.num_blocks else '<'} num_blocks")
    assert result.completed, (f"{len(requests)} requests with max_num_seqs={plan.vllm_config.max_num_seqs} on "
                              f"{plan.num_blocks} blocks: {result.stall_reason or result.error}, "
                              f"running={result.running}, waiting={result.waiting}")
