"""The connector properties attribute a known finding's failure to it, as the plain ones do.

A random run of ``test_connector_workload_completes`` (priority policy, 2026-12-02) found on the
faithful reference a chunked-local deployment (chunk 1 < B = 16, L = 17, one usable block, a
drafter's speculative token and lookahead slot) that starts and then preempts its only request
forever: finding F2 (the chunked-local cap / bound one block short when B does not divide C).
Under F2's fix the deployment is refused at startup, so nothing is admitted and nothing is owed;
the connector checks used to run the refused plan anyway, stall, and fail instead of recording
"explained by known finding F2" (``kvverify/props/known.py``).
"""

from __future__ import annotations

import pytest

from kvverify import fixes, flaws
from kvverify.props.connector import completion_violations
from kvverify.props.known import check_or_known
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec
from kvverify.reference.specs import ChunkedLocalAttentionSpec
from kvverify.targets import get_target

SPECS = ({"model.layers.0": ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=1, head_size=8,
                                                      dtype="bfloat16", attention_chunk_size=1)},)
CONFIG = VllmConfig(block_size=16, max_model_len=17, max_num_batched_tokens=8, kv_cache_memory_bytes=1024,
                    enable_prefix_caching=False, num_lookahead_tokens=1, num_speculative_tokens=1)
WORK = [WorkloadSpec("r0", tuple(range(10_000, 10_016)), 1, 0)]
SCRIPT = None  # the connector switched off: the same scheduler paths without it (connector_cases)


def _violations(t):  # type: ignore[no-untyped-def]
    return completion_violations(t, t.plan(CONFIG, SPECS), WORK, SCRIPT)


def test_the_f2_stall_through_the_connector_scheduler_is_explained_by_f2() -> None:
    ref = get_target("reference")
    plan = ref.plan(CONFIG, SPECS)
    assert plan.starts and plan.num_blocks == 2
    found = _violations(ref)
    assert found and found[0].name == "admission.stall.no_progress"
    with fixes.enabled("chunked_local_cap_plus_one"):
        assert not ref.plan(CONFIG, SPECS).starts and _violations(ref) == []  # refused: nothing owed
    check_or_known(ref, _violations)  # attributed to F2, not a failure


def test_a_failure_no_fix_explains_still_fails() -> None:
    ref = get_target("reference")
    cfg = VllmConfig(block_size=16, max_model_len=2, kv_cache_memory_bytes=1 << 20, num_gpu_blocks_override=1)
    from kvverify.reference.specs import FullAttentionSpec
    specs = ({"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)},)
    with flaws.enabled("null_block_not_reserved"):
        plan = ref.plan(cfg, specs)
        assert plan.starts
        with pytest.raises(AssertionError, match="admission.stall"):
            check_or_known(ref, lambda t: completion_violations(t, t.plan(cfg, specs), [WorkloadSpec("r", (1,), 1, 0)],
                                                                SCRIPT))


def test_a_flaws_failure_is_never_explained_by_a_fix_that_refuses_the_deployment() -> None:
    """With a zoo flaw on, a failure the faithful reference does not share is the flaw's doing:
    a fix that refuses the deployment at startup (nothing owed) must not explain it away, or
    F2's / F4's fixes, which refuse tight pools, would hide the tight-pool failures a flaw shows
    (they did: priority_strands_parked_loads and spec_step_blocks_not_per_group went uncaught)."""
    from kvverify.invariants.base import Violation

    ref = get_target("reference")

    def compute(t):  # type: ignore[no-untyped-def]
        if fixes.is_on("chunked_local_cap_plus_one"):
            return []  # the fix refuses the deployment: nothing admitted, nothing owed
        return [Violation("admission.stall.no_progress", "stall", {})] if flaws.is_on("null_block_not_reserved") else []

    with flaws.enabled("null_block_not_reserved"):
        with pytest.raises(AssertionError, match="admission.stall"):
            check_or_known(ref, compute)

    def compute_shared(t):  # type: ignore[no-untyped-def]  # the faithful reference fails too
        return [] if fixes.is_on("chunked_local_cap_plus_one") else [Violation("admission.stall.no_progress", "stall", {})]

    with flaws.enabled("null_block_not_reserved"):
        check_or_known(ref, compute_shared)  # explained by F2, flaw or not
