"""Findings F10–F13 on the KV-transfer paths: strict known failures (they fail on the faithful
reference and on vLLM 0.33.0; under the finding's fix option they pass), and each finding's
minimal counterexample replayed on the real, pinned vLLM (reports/findings/)."""

from __future__ import annotations

import pytest

from kvverify.props import connector_findings as cf
from kvverify.props.findings import known_failure
from properties.test_differential import vllm_target  # noqa: F401  (the fixture)

test_cached_prompt_is_scheduled_under_speculative_decoding = known_failure(
    cf.test_cached_prompt_is_scheduled_under_speculative_decoding)
test_async_load_is_admitted_on_a_pool_that_fits = known_failure(cf.test_async_load_is_admitted_on_a_pool_that_fits)
test_fully_loaded_prompt_completes = known_failure(cf.test_fully_loaded_prompt_completes)
test_loaded_mamba_state_is_predicted = known_failure(cf.test_loaded_mamba_state_is_predicted)


# ------------------------------------------------------------------ replays on vLLM

def _run(t, config_kw: dict, specs: dict, work: list, script):
    from kvverify.reference.config import VllmConfig

    plan = t.plan(VllmConfig(**config_kw), [specs])
    return t.run_connector_workload(plan, work, script)


def _full16() -> dict:
    from kvverify.reference.specs import FullAttentionSpec
    return {"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)}


def _finding_f10(t) -> None:
    """F10: speculative decoding with 2 draft tokens and no lookahead slots (an n-gram drafter),
    a token budget of 2: a prompt of 17 tokens sent again (16 tokens cached, 1 to compute) is
    padded to 3 slots that no step holds, and the waiting scan breaks on it every step."""
    from kvverify.reference.driver import WorkloadSpec

    prompt = tuple(range(17))
    result = _run(t, dict(block_size=16, max_model_len=64, max_num_batched_tokens=2, num_speculative_tokens=2,
                          num_gpu_blocks_override=9, kv_cache_memory_bytes=1 << 24), _full16(),
                  [WorkloadSpec("a", prompt, 1), WorkloadSpec("b", prompt, 1, arrival_step=20)], None)
    assert result.stall_reason == "head_of_line" and result.finished == ("a",), "F10 no longer reproduces"


def _finding_f11(t) -> None:
    """F11: MTP-style (1 draft token, 1 lookahead slot), L = 64 on a pool of 4 usable blocks (one
    full request); the connector holds the whole 63-token prompt: the load needs the 4 blocks,
    the gate also reserves a speculative step's block, and the request is refused forever."""
    from kvverify.reference.connector import ConnectorScript, RequestScript
    from kvverify.reference.driver import WorkloadSpec

    result = _run(t, dict(block_size=16, max_model_len=64, max_num_batched_tokens=2048, num_speculative_tokens=1,
                          num_lookahead_tokens=1, kv_connector=True, num_gpu_blocks_override=5,
                          kv_cache_memory_bytes=1 << 24), _full16(),
                  [WorkloadSpec("a", tuple(range(63)), 1)],
                  ConnectorScript.of({"a": RequestScript(hit_tokens=63, load_steps=1)}))
    assert result.stall_reason == "head_of_line" and not result.finished, "F11 no longer reproduces"


def _finding_f12(t) -> None:
    """F12: a one-token prompt whose token the connector holds: after the load it rewinds to
    0 computed tokens, reads as a new request and is loaded again, forever."""
    from kvverify.reference.connector import ConnectorScript, RequestScript
    from kvverify.reference.driver import WorkloadSpec

    result = _run(t, dict(block_size=16, max_model_len=64, max_num_batched_tokens=2048, kv_connector=True,
                          num_gpu_blocks_override=9, kv_cache_memory_bytes=1 << 24), _full16(),
                  [WorkloadSpec("a", (7,), 3)], ConnectorScript.of({"a": RequestScript(hit_tokens=1, load_steps=1)}))
    assert result.stall_reason == "no_progress" and not result.finished, "F12 no longer reproduces"


def _finding_f13(t) -> None:
    """F13: one Mamba layer in align mode (B = 1), 2 usable blocks; a 1-token request takes one,
    a 2-token request whose first token the connector loads synchronously is predicted one
    block but takes two (its loaded state block and the next): 'Cannot get 1 free blocks'."""
    from kvverify.reference.connector import ConnectorScript, RequestScript
    from kvverify.reference.driver import WorkloadSpec
    from kvverify.reference.specs import MambaSpec

    specs = {"m": MambaSpec(block_size=1, shapes=((1, 4), (1,)), dtypes=("bfloat16", "float32"),
                            mamba_cache_mode="align")}
    result = _run(t, dict(block_size=1, max_model_len=3, max_num_batched_tokens=2048, num_gpu_blocks_override=3,
                          kv_cache_memory_bytes=1 << 20, enable_prefix_caching=True, mamba_cache_mode="align",
                          kv_connector=True), specs,
                  [WorkloadSpec("r0", (10000,), 1), WorkloadSpec("r1", (20000, 20001), 1)],
                  ConnectorScript.of({"r1": RequestScript(hit_tokens=1, load_steps=0)}))
    assert result.error is not None and "Cannot get 1 free blocks" in result.error, "F13 no longer reproduces"


FINDINGS = {"F10": _finding_f10, "F11": _finding_f11, "F12": _finding_f12, "F13": _finding_f13}
FINDING_FIXES = {"F10": "spec_decode_padding_fits_budget", "F11": "async_load_reserves_own_need",
                 "F12": "landed_load_not_reloaded", "F13": "mamba_align_counts_loaded_state"}


@pytest.mark.parametrize("finding", sorted(FINDINGS))
def test_connector_finding_reproduces(finding: str) -> None:
    """Each finding's minimal counterexample fails on the faithful reference and passes under its fix."""
    from kvverify import fixes
    from kvverify.targets import get_target

    if fixes.active():
        pytest.skip(f"fixes are on ({', '.join(sorted(fixes.active()))}): this replays the faithful reference")
    ref = get_target("reference")
    FINDINGS[finding](ref)
    with fixes.enabled(FINDING_FIXES[finding]), pytest.raises(AssertionError):
        FINDINGS[finding](ref)


@pytest.mark.parametrize("finding", sorted(FINDINGS))
def test_connector_finding_reproduces_on_vllm(vllm_target, finding: str) -> None:
    """Each finding's minimal counterexample on the real, pinned vLLM (strict: the day upstream
    changes, this fails and names the finding). Under ``--fix`` (the patched vLLM) the finding's
    own replay must no longer reproduce; the others describe unpatched 0.33.0 and are skipped."""
    from kvverify.props.findings import replay_on_vllm

    replay_on_vllm(vllm_target, finding, FINDINGS[finding], FINDING_FIXES[finding])
