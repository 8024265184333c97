"""Properties that fail on the faithful reference because upstream does: known findings.

One registry, used by the suite files (``xfail(strict=True)`` marks) and by
``kvverify fuzz`` (which must recognise them wherever it runs, suite files or not).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

KNOWN_FAILURES: dict[str, str] = {
    "test_reported_concurrency_matches_servability":
        "finding F1: upstream reports N / blocks, so 1.00x for a pool whose N - 1 usable blocks cannot "
        "serve one request (reports/findings/F1-concurrency-counts-null-block.md)",
    "test_chunked_local_held_blocks_within_admission_caps":
        "finding F2: the chunked-local cap has no +1 for chunks that start mid-block "
        "(reports/findings/F2-chunked-local-cap-misaligned-chunk.md)",
    "test_startup_refusal_is_necessary":
        "finding F3: the check reserves a block for the never-computed last token "
        "(reports/findings/F3-check-reserves-never-computed-token.md); and finding F9: Mamba align "
        "mode reserves 2 + S + P pages when a request fits in one block, which needs 1 + S "
        "(reports/findings/F9-mamba-align-bound-slack.md)",
    "test_startup_check_passes_implies_servable_with_lookahead":
        "finding F4: SWA / chunked admission caps ignore num_lookahead_tokens "
        "(reports/findings/F4-admission-caps-ignore-lookahead.md)",
    "test_encoder_decoder_refusal_is_necessary":
        "finding F3: the check reserves a block for the never-computed last token, here on an "
        "encoder-decoder model's self-attention (reports/findings/F3-check-reserves-never-computed-token.md)",
    "test_encoder_decoder_with_prefix_caching_completes":
        "finding F8: an explicit enable_prefix_caching on an encoder-decoder model starts, then "
        "CrossAttentionManager raises NotImplementedError on the first prefix lookup "
        "(reports/findings/F8-encoder-decoder-prefix-caching-crashes.md)",
    "test_cached_prompt_is_scheduled_under_speculative_decoding":
        "finding F10: a new one-token decode is padded to 1 + num_speculative_tokens slots even when no "
        "step's token budget holds them, and the waiting scan breaks on it every step "
        "(reports/findings/F10-spec-decode-padding-exceeds-token-budget.md)",
    "test_async_load_is_admitted_on_a_pool_that_fits":
        "finding F11: the async-load gate reserves a constant speculative step (_spec_decode_step_blocks) "
        "on top of the load, which a pool sized for one request can never spare "
        "(reports/findings/F11-async-load-spec-reservation-refuses-forever.md)",
    "test_fully_loaded_prompt_completes":
        "finding F12: a one-token prompt whose token the connector holds rewinds to 0 computed tokens "
        "after its load and is loaded again, forever "
        "(reports/findings/F12-one-token-full-hit-reloads-forever.md)",
    "test_loaded_mamba_state_is_predicted":
        "finding F13: Mamba align's get_num_blocks_to_allocate does not count the state block a "
        "connector's tokens take, so an admitted step raises 'Cannot get N free blocks' "
        "(reports/findings/F13-mamba-align-uncounted-loaded-state-block.md)",
    "test_started_engine_admits_only_what_it_completes":
        "finding F14: the engine core turns chunked prefill off after the token budget was checked "
        "(non-causal attention layers, no KV cache groups) and never checks again, so a prompt above "
        "max_num_batched_tokens is accepted and waits forever "
        "(reports/findings/F14-late-chunked-prefill-off-skips-budget-check.md)",
    "test_pipeline_split_plans_clearly_and_serves":
        "finding F15: a pipeline stage that holds no KV cache layer gets every group with no layers, "
        "so the planner's guards never fire and get_kv_cache_configs divides by its 0 bytes per block "
        "(ZeroDivisionError) (reports/findings/F15-kv-less-pipeline-stage-divides-by-zero.md)",
    "test_bad_block_override_is_a_clear_error":
        "finding F16: CacheConfig does not check num_gpu_blocks_override, so an override <= 0 reaches the "
        "startup check, which refuses with 'No available memory for the cache blocks. Try increasing "
        "gpu_memory_utilization' and never names the flag "
        "(reports/findings/F16-non-positive-block-override-blames-memory.md)",
}


#: the fix options under which each known failure must pass (all of them on: F4's minimal
#: shapes also need F2's block); ``pytest --fix`` / ``kvverify fuzz --fix`` switch them on
FIXED_BY: dict[str, tuple[str, ...]] = {
    "test_reported_concurrency_matches_servability": ("concurrency_counts_usable_blocks",),
    "test_chunked_local_held_blocks_within_admission_caps": ("chunked_local_cap_plus_one",),
    "test_startup_refusal_is_necessary": ("check_plans_computed_tokens", "mamba_align_bound_exact"),
    "test_encoder_decoder_refusal_is_necessary": ("check_plans_computed_tokens",),
    "test_encoder_decoder_with_prefix_caching_completes": ("encoder_decoder_prefix_caching_refused",),
    "test_startup_check_passes_implies_servable_with_lookahead": ("caps_count_lookahead",
                                                                  "chunked_local_cap_plus_one"),
    "test_cached_prompt_is_scheduled_under_speculative_decoding": ("spec_decode_padding_fits_budget",),
    # a one-token prompt fully held by the connector is F12's shape too
    "test_async_load_is_admitted_on_a_pool_that_fits": ("async_load_reserves_own_need", "landed_load_not_reloaded"),
    "test_fully_loaded_prompt_completes": ("landed_load_not_reloaded",),
    "test_loaded_mamba_state_is_predicted": ("mamba_align_counts_loaded_state",),
    "test_started_engine_admits_only_what_it_completes": ("budget_rechecked_after_late_chunked_prefill_off",),
    "test_pipeline_split_plans_clearly_and_serves": ("kv_less_stage_planned",),
    "test_bad_block_override_is_a_clear_error": ("num_gpu_blocks_override_validated",),
}

#: fixes whose vLLM patch the vllm target cannot exercise (the known failure stays expected there)
ADAPTER_GAPS: dict[str, str] = {}


def is_fixed(name: str, target: str | None = None) -> bool:
    """Whether known failure ``name`` must pass now: its fixes are on (and, on the vllm target,
    their patches are applied and reachable through the adapter)."""
    from kvverify import fixes
    needed = FIXED_BY.get(name)
    if not needed or not all(fixes.is_on(f) for f in needed):
        return False
    return not (target == "vllm" and any(f in ADAPTER_GAPS for f in needed))


def finding_of(name: str) -> str:
    """The finding id (``"F3"``) behind known failure ``name`` (from its reason)."""
    import re
    m = re.search(r"finding (F\d+)", KNOWN_FAILURES[name])
    return m.group(1) if m else name


def present_on(name: str, target: str | None = None) -> bool:
    """Whether the finding behind known failure ``name`` exists in the run's target (the
    ``--target`` name; ``None``: the reference), as the target answers it
    (``Target.expects_finding``): always on the reference (it mirrors the pinned release); on
    the vllm target, per the installed release's capabilities
    (``kvverify/targets/vllm/findings.py``: ``FINDING_CAPABILITY``). Where it does not, the
    strict xfail does not apply and the property must pass. A run whose target offers another
    engine's contract (``--target sglang``) skips vLLM's properties: no finding applies."""
    from kvverify.targets import DEFAULT_TARGET, get_target, targets_for
    mine = targets_for(target or DEFAULT_TARGET).get("vllm")
    return mine is not None and get_target(mine).expects_finding(finding_of(name))


def xfail_mark(name: str) -> pytest.MarkDecorator:
    """The strict known-failure mark for property ``name``; it does not apply (the property
    must pass) when :func:`is_fixed` or when the target's release does not have the finding
    (:func:`present_on`) (condition evaluated at run time, with the run's target)."""
    mod = "__import__('kvverify.props.findings').props.findings"
    condition = (f"not {mod}.is_fixed({name!r}, config.getoption('target')) and "
                 f"{mod}.present_on({name!r}, config.getoption('target'))")
    return pytest.mark.xfail(condition, strict=True, raises=AssertionError, reason=KNOWN_FAILURES[name])


def known_failure(fn: Callable) -> Callable:
    """Mark a property (or its suite wrapper) as the strict known failure its name registers."""
    return xfail_mark(fn.__name__)(fn)


def _unless_unsupported(target: Any, finding: str, replay: Callable[[Any], None]) -> None:
    """``replay(target)``; a release that cannot express the replay's input (``TargetUnsupported``:
    e.g. 0.14.1's ``MambaSpec`` has no ``mamba_cache_mode`` for F9's align-mode pool) lacks the
    path the finding lives in: a skip naming what is missing, as every property skips on a missing
    capability, never a failure counted against the release nor a pass."""
    from kvverify.targets.base import TargetUnsupported

    try:
        replay(target)
    except TargetUnsupported as e:
        pytest.skip(f"{finding}: the release cannot express this replay's input: {e}")


def replay_on_vllm(target: Any, finding: str, replay: Callable[[Any], None], fix: str) -> None:
    """One finding's minimal counterexample (``replay``, which raises ``AssertionError`` where it
    reproduces) on the real vLLM ``target``, with ``fix`` its fix option. Strict both ways:

    * unpatched, a release with the finding (``target.expects_finding``) must reproduce it and a
      release without it must not; a replay the release's other defects mask is skipped with the
      reason (``target.finding_replay_masked``);
    * under ``--fix`` (the patched vLLM, :mod:`kvverify.targets.overlay`) the finding's own replay
      must no longer reproduce; the other replays describe unpatched 0.33.0 and are skipped, as is
      a fix the adapter cannot apply yet (:data:`ADAPTER_GAPS`).
    """
    from kvverify import fixes

    if not fixes.active():
        why = target.finding_replay_masked(finding)
        if why:
            pytest.skip(f"{finding}: {why}")
        if not target.expects_finding(finding):
            # absent from this release (kvverify/targets/vllm/findings.py, FINDING_CAPABILITY):
            # the minimal counterexample must not reproduce here
            with pytest.raises(AssertionError):
                _unless_unsupported(target, finding, replay)
            return
        _unless_unsupported(target, finding, replay)
        return
    if not fixes.is_on(fix):
        pytest.skip(f"vLLM is patched ({', '.join(sorted(fixes.active()))}); this replay is of unpatched 0.33.0")
    if fix in ADAPTER_GAPS:
        pytest.skip(f"{fix}: {ADAPTER_GAPS[fix]}")
    with pytest.raises(AssertionError):
        replay(target)  # the patch removes the finding
