"""Which known findings (``reports/findings/F<n>-*.md``) each supported release has.

A finding lives in a capability (:class:`~.compat.Compat`) or in how the release's startup
check counts memory (:class:`CheckRules`, probed on its own planner by
:func:`kvverify.targets.vllm.planner.memory_rules`); on a release where the predicate is
false the finding's strict xfail does not apply (its property must pass) and its replay must
*not* reproduce. :meth:`kvverify.targets.vllm.target.VllmTarget.expects_finding` and
``finding_replay_masked`` answer the Target contract from these tables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kvverify.targets.vllm.compat import Compat


@dataclasses.dataclass(frozen=True)
class CheckRules:
    """How the release's startup check counts memory, probed on its own planner
    (:func:`kvverify.targets.vllm.planner.memory_rules`)."""

    override_counted: bool   # num_gpu_blocks_override replaces the profiled memory in the check
    reserves_null_block: bool  # the check keeps the null block out of the usable memory
    counts_every_group: bool = True  # the check sums every group's blocks (#36030, from 0.19)


def _chunked_local_cap_short(caps: Compat, rules: CheckRules) -> bool:
    """F2's missing block shows as its preemption livelock where the chunked-local admission cap
    is applied (>= 0.20) and where nothing gates admission at all (<= 0.18: no cap, no
    full-sequence gate, the startup bound is one block short and the admitted request livelocks);
    0.19.1's ``can_fit_full_sequence`` gate charges the full ``cdiv(n, B)`` and refuses the request
    instead (a refusal, not F2's livelock)."""
    return caps.admission_caps != "none" or caps.admission_gate == "none"


def _reserves_null_block(caps: Compat, rules: CheckRules) -> bool:
    return rules.reserves_null_block


def _has_non_causal_specs(caps: Compat, rules: CheckRules) -> bool:
    """``AttentionSpec.non_causal`` and the engine core's hook on it came together (0.25.0); a
    release whose ``FullAttentionSpec`` was not detected stays strict, as an unknown finding does."""
    fields = caps.spec_fields.get("FullAttentionSpec")
    return fields is None or "non_causal" in fields


#: Finding (``reports/findings/F<n>-*.md``; a repro id of
#: ``properties/test_differential.py::test_finding_reproduces_on_vllm``) -> the capability the
#: defect lives in; ``None``: every supported release. Each entry is confirmed by running the
#: finding's minimal counterexample on every installed release (``docs/vllm-target.md``,
#: "Findings per release"); on a release where the predicate is false the finding's strict
#: xfail does not apply (its property must pass) and its repro must *not* reproduce.
FINDING_CAPABILITY: dict[str, Callable[[Compat, CheckRules], bool] | None] = {
    "F1": None,                      # concurrency = num_blocks / blocks per request, null block counted
    "F2": _chunked_local_cap_short,  # the chunked-local cap / bound one block short (0.19.1: gated)
    "F3": _reserves_null_block,      # the check reserves a block for the never-computed token...
    # SWA / chunked caps ignore lookahead; so does the SWA / chunked startup bound of a release
    # without caps (0.19.1: its replay livelocks the same way), hence every release
    "F4": None,
    "F5": None,                      # the SWA per-request blocks' unreachable +1 (max_memory_usage)
    "F6-estimate": _reserves_null_block,  # estimate (no null block) vs check (null block reserved)
    # the public check ignores group padding; where the planner's own check sizes every group by
    # the first (<= 0.18, before #36030) it is as lax as the public one and the two agree
    "F6-check": lambda caps, rules: rules.counts_every_group,
    "F7": None,                      # chunked-local hybrid with unequal pages asserts after startup
    # Mamba align's 2 + S: its replay's pool (N = 2) starts where the check reserves no null block
    # (replayed on every installed release: reproduces on 0.29.0 and later, as F3)
    "F9": _reserves_null_block,
    # the KV-transfer paths (issue 29)
    # pad_spec_decode in the waiting scan, also with nothing running (a re-sent cached prompt)
    "F10": lambda caps, rules: caps.spec_decode_padding and caps.spec_decode_padding_idle,
    "F11": lambda caps, rules: caps.kv_spec_step_blocks,           # the constant speculative reservation
    "F12": lambda caps, rules: caps.kv_connector,                  # full-hit rewind to num_tokens - 1
    "F13": lambda caps, rules: caps.kv_connector,                  # Mamba align + external tokens
    # EngineCore turns chunked prefill off for non-causal specs after the budget check, and
    # never checks again (properties/test_engine_core.py drives the real hook on this target)
    "F14": _has_non_causal_specs,
    # a pipeline stage without KV cache layers gets every group with no layers; the planner never
    # treats it as KV-less (0.18.1 - 0.28.0: AssertionError "group_size must be greater than 0";
    # 0.29.0 - 0.31.0: AssertionError in _get_kv_cache_bytes_per_block; 0.33.0: ZeroDivisionError)
    "F15": None,
    # CacheConfig.num_gpu_blocks_override has no positivity check in any supported release: the
    # startup check refuses with "No available memory" and never names the flag (every release run)
    "F16": None,
}


def _allocation_capped(caps: Compat) -> str | None:
    if caps.admission_caps == "on_allocation":
        return ("the release applies the SWA / chunked-local admission cap to the per-step allocation too "
                "(zoo flaw swa_cap_on_allocation, #39866; get_num_blocks_to_allocate has no "
                "apply_admission_cap): the replay's step crashes in allocate_slots ('Cannot get N free "
                "blocks from the pool') before the finding's own symptom can show")
    return None


#: Finding -> why its minimal counterexample cannot show it on a release that has it (another
#: defect of that release fails the replay first); ``None``: the replay judges it. The replay
#: then skips with that reason (``properties/test_differential.py``).
FINDING_REPLAY_MASKED: dict[str, Callable[[Compat], str | None]] = {
    "F2": _allocation_capped,
    "F4": _allocation_capped,
}


def finding_replay_masked(finding: str, caps: Compat) -> str | None:
    """Why ``finding``'s replay cannot judge the release described by ``caps``, or ``None``."""
    why = FINDING_REPLAY_MASKED.get(finding)
    return why(caps) if why is not None else None


def finding_expected(finding: str, caps: Compat, rules: CheckRules) -> bool:
    """Whether ``finding`` (``"F3"``, ``"F6-check"``; ``"F6"`` = any of its parts) exists in the
    release described by ``caps`` / ``rules``. Unknown findings are expected (strict)."""
    keys = [k for k in FINDING_CAPABILITY if k == finding or k.split("-")[0] == finding]
    if not keys:
        return True
    return any(FINDING_CAPABILITY[k] is None or FINDING_CAPABILITY[k](caps, rules) for k in keys)  # type: ignore[misc]


__all__ = ["CheckRules", "FINDING_CAPABILITY", "FINDING_REPLAY_MASKED", "finding_expected", "finding_replay_masked"]
