"""Proposed fixes for findings: named options on the reference, off by default.

The reference mirrors upstream, warts included. When a property fails on it because
upstream behaves that way, the finding is kept as a strict known failure and the fix
is offered here; under the fix the property passes (tests show both).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvverify.switches import Switches


@dataclass(frozen=True)
class Fix:
    """A proposed fix for finding ``finding`` (its write-up's file stem under ``reports/findings/``).

    ``explains_general_failures``: the finding also trips general properties on some inputs,
    which re-run such a case under this fix before failing (:mod:`kvverify.props.known`).
    """

    name: str
    finding: str
    change: str
    explains_general_failures: bool = False

    @property
    def finding_id(self) -> str:
        """``F2`` for ``F2-chunked-local-cap-misaligned-chunk``."""
        return self.finding.split("-", 1)[0]


CATALOG: dict[str, Fix] = {f.name: f for f in (
    Fix("concurrency_counts_usable_blocks", "F1-concurrency-counts-null-block",
        "get_max_concurrency_for_kv_cache_config divides the usable blocks (N - 1) instead of N, "
        "so 1.00x is never reported for a pool that cannot serve one full request"),
    Fix("check_plans_computed_tokens", "F3-check-reserves-never-computed-token",
        "the startup check and auto-fit size a request by the tokens whose KV is ever written "
        "(L - 1 + num_lookahead_tokens for generate runners) instead of L"),
    Fix("caps_count_lookahead", "F4-admission-caps-ignore-lookahead",
        "max_in_flight_tokens (and so the SWA / chunked-local admission caps and startup bound) "
        "includes num_lookahead_tokens, the extra slots every step reserves",
        explains_general_failures=True),
    Fix("chunked_local_cap_plus_one", "F2-chunked-local-cap-misaligned-chunk",
        "ChunkedLocalAttentionSpec.max_admission_blocks_per_request adds one block when the chunk "
        "size is not a multiple of the block size (a chunk may start mid-block)",
        explains_general_failures=True),
    Fix("swa_cap_exact", "F5-swa-admission-cap-slack",
        "SlidingWindowSpec.max_admission_blocks_per_request returns the exact worst case "
        "min(cdiv(W - 1 + E + F + B - 1, B), cdiv(L, B)) instead of cdiv(min(W - 1 + E + F, L), B) + 1, "
        "whose +1 no step ever needs when L <= W - 1 + E + F or W - 1 + E + F = 1 (mod B)"),
    Fix("capacity_helpers_plan_like_engine", "F6-public-capacity-helpers-disagree-with-planner",
        "the public estimate_max_model_len and check_enough_kv_cache_memory plan as the engine does: "
        "over the grouped (padded) specs, with the null block reserved"),
    Fix("chunked_local_alignment_checked_at_startup", "F7-chunked-local-hybrid-asserts-after-startup",
        "the KV cache coordinator refuses at startup a prefix-cached chunked-local group whose block "
        "size differs from the cache-hit alignment, instead of asserting on the first request"),
    Fix("encoder_decoder_prefix_caching_refused", "F8-encoder-decoder-prefix-caching-crashes",
        "an explicit enable_prefix_caching on a model with cross-attention layers is refused (or turned "
        "off) at startup, as is_prefix_caching_supported already says for encoder-decoder models, instead "
        "of CrossAttentionManager raising NotImplementedError on the first request's prefix lookup"),
    Fix("mamba_align_bound_exact", "F9-mamba-align-bound-slack",
        "MambaSpec.max_memory_usage_bytes in align mode reserves 1 + S pages, not 2 + S + P, when the "
        "tokens a request is sized by fit in one block (T <= B; T = L, or L - 1 under "
        "check_plans_computed_tokens): no previous state block is ever held, no checkpoint taken"),
    Fix("spec_decode_padding_fits_budget", "F10-spec-decode-padding-exceeds-token-budget",
        "the waiting scan pads a new one-token decode to 1 + num_speculative_tokens slots only when the "
        "padded step fits max_num_scheduled_tokens; otherwise it schedules the token unpadded instead of "
        "breaking the scan on every step",
        explains_general_failures=True),
    Fix("async_load_reserves_own_need", "F11-async-load-spec-reservation-refuses-forever",
        "an async KV load reserves for its own speculative step at most the blocks the request will still "
        "need after this allocation (its full sequence with the speculative slots, capped at max_model_len "
        "as allocate_slots caps them, minus what the load takes), not always _spec_decode_step_blocks, "
        "which a pool sized for one request can never spare",
        explains_general_failures=True),
    Fix("landed_load_not_reloaded", "F12-one-token-full-hit-reloads-forever",
        "a request promoted from a landed KV load keeps its loaded KV and is never offered to the "
        "connector again: a one-token prompt whose full hit rewinds to num_tokens - 1 = 0 computed "
        "tokens is scheduled, not treated as a new request and loaded again",
        explains_general_failures=True),
    Fix("mamba_align_counts_loaded_state", "F13-mamba-align-uncounted-loaded-state-block",
        "MambaManager.get_num_blocks_to_allocate (align mode) counts the state block that "
        "allocate_external_computed_blocks takes for a new request's KV-connector tokens, and never "
        "returns a negative count, so an admitted step never raises 'Cannot get N free blocks'",
        explains_general_failures=True),
    Fix("budget_rechecked_after_late_chunked_prefill_off", "F14-late-chunked-prefill-off-skips-budget-check",
        "the engine core re-runs SchedulerConfig.verify_max_model_len after it turns chunked prefill off late "
        "(non-causal attention layers, no KV cache groups), so a budget below max_model_len is refused at "
        "startup instead of leaving longer prompts waiting forever (upstream PR #55130)"),
    Fix("kv_less_stage_planned", "F15-kv-less-pipeline-stage-divides-by-zero",
        "get_kv_cache_configs plans a worker whose projected KV cache groups hold no layer (a pipeline "
        "stage without KV cache layers) as holding no KV cache, as its own `if not groups` guards intend: "
        "no override adjustment, no null-block reservation, no check, and its block count is left out of "
        "the cross-worker minimum (it takes the KV workers' count), instead of dividing by its 0 bytes per "
        "block (ZeroDivisionError)"),
    Fix("num_gpu_blocks_override_validated", "F16-non-positive-block-override-blames-memory",
        "CacheConfig refuses a num_gpu_blocks_override <= 0 on construction (pydantic gt=0, as #43794 did "
        "for block_size and hash_block_size; upstream PR #44233 for #43842), so the operator is told which "
        "flag is wrong instead of 'No available memory for the cache blocks. Try increasing "
        "gpu_memory_utilization'"),
)}

_SWITCHES = Switches("fix", CATALOG)
is_on = _SWITCHES.is_on  #: whether fix option ``name`` is on in the current context
active = _SWITCHES.active
enabled = _SWITCHES.enabled  #: ``with enabled("chunked_local_cap_plus_one"): ...``
only = _SWITCHES.only  #: exactly these fixes on, nothing inherited
set_global = _SWITCHES.set_global  #: for the rest of this context (``pytest --fix``, ``kvverify --fix``)
