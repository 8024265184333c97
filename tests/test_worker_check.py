"""The model runner's sampled-token check (#53812): every fake worker makes it, the driver reports it.

Upstream's GPU model runner raises ``RuntimeError: Sampled token IDs exceed the max model length``
when a step's sampled token would land past ``max_model_len``, which kills the engine. The
scheduler's running path keeps room for it; 0.25 - 0.28's waiting-path padding did not (flaw
``spec_pad_leaves_no_sampled_slot``). The check lives in one function that the reference's worker
and both vLLM adapters' workers call. So does the model runner's other precondition, a positive
token count for every scheduled request (0.25 - 0.27 sent a padded decode rescheduled while its
batch was in flight out with a negative one: flaw ``spec_pad_rescheduled_negative``).
"""

from __future__ import annotations

import pytest

from kvverify import flaws
from kvverify.errors import WorkerError
from kvverify.invariants.admission import workload_violations
from kvverify.reference.connector import ConnectorScript, RequestScript
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec, run_workload
from kvverify.reference.request import check_sampled_within_max_model_len, check_scheduled_token_counts
from kvverify.targets import get_target
from runtime_helpers import full


def test_the_last_slot_is_the_sampled_token() -> None:
    """A request with ``M - 1`` tokens computed samples its ``M``-th: allowed; one more is not."""
    check_sampled_within_max_model_len(15, 16)
    with pytest.raises(WorkerError, match=r"Sampled token IDs exceed the max model length\. "
                                          r"Total number of tokens: 17 > max_model_len: 16"):
        check_sampled_within_max_model_len(16, 16)


def _padded_case():
    """B = L = 16, one speculative token, a 15-token prompt with 14 tokens loaded synchronously:
    a new one-token decode that the flaw pads to 14 + 2 = 16 computed tokens."""
    cfg = VllmConfig(block_size=16, max_model_len=16, max_num_batched_tokens=2048, num_gpu_blocks_override=4,
                     kv_connector=True, enable_prefix_caching=False, num_speculative_tokens=1)
    plan = get_target("reference").plan(cfg, [{"l0": full()}])
    work = [WorkloadSpec("r0", tuple(range(10000, 10015)), 1)]
    script = ConnectorScript.of({"r0": RequestScript(hit_tokens=14, load_steps=0)})
    return plan, work, script


def test_the_driver_reports_a_worker_crash_and_the_violation_names_it() -> None:
    plan, work, script = _padded_case()
    assert run_workload(plan.vllm_config, plan.kv_cache_config, work, connector=script).completed
    with flaws.enabled("spec_pad_leaves_no_sampled_slot"):
        result = run_workload(plan.vllm_config, plan.kv_cache_config, work, connector=script)
    assert result.error is not None and result.error.startswith("WorkerError: Sampled token IDs exceed")
    assert not result.completed and result.stalled_request_ids == ("r0",)
    (violation,) = workload_violations(result, plan, work)
    assert violation.name == "admission.worker_raised"
    assert "model runner" in violation.reason


def test_a_worker_that_skips_the_check_lets_the_padded_step_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted mutation: without the check the flawed pad 'completes' — only the model
    runner's check sees that its token landed past ``max_model_len``."""
    import kvverify.reference.sched.scheduler as sched_mod

    monkeypatch.setattr(sched_mod, "check_sampled_within_max_model_len", lambda n, m: None)
    plan, work, script = _padded_case()
    with flaws.enabled("spec_pad_leaves_no_sampled_slot"):
        result = run_workload(plan.vllm_config, plan.kv_cache_config, work, connector=script)
    assert result.completed


# -- a positive token count for every scheduled request (0.25 - 0.27's negative reschedule) --

def test_a_scheduled_count_must_be_positive() -> None:
    check_scheduled_token_counts({"a": 1, "b": 3})
    for bad in (0, -1):
        with pytest.raises(WorkerError, match=rf"scheduled {bad} tokens for request b"):
            check_scheduled_token_counts({"a": 1, "b": bad})


def _rescheduled_case():
    """Two batches in flight, one speculative token: a 15-token prompt with 14 tokens loaded
    synchronously is padded to 16 computed tokens; the next step, its batch still in flight,
    counts 15 - 16 = -1."""
    cfg = VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=2048, num_gpu_blocks_override=6,
                     kv_connector=True, enable_prefix_caching=False, num_speculative_tokens=1,
                     max_concurrent_batches=2)
    plan = get_target("reference").plan(cfg, [{"l0": full()}])
    work = [WorkloadSpec("r0", tuple(range(10000, 10015)), 2)]
    script = ConnectorScript.of({"r0": RequestScript(hit_tokens=14, load_steps=0)})
    return plan, work, script


def test_a_negative_reschedule_is_a_worker_error_in_every_connector_property() -> None:
    """Under ``spec_pad_rescheduled_negative`` the run ends in the worker's error, and the
    properties that watch something else (slots, zero-progress preemption) report it too: a run
    the engine ended by raising is never a pass."""
    from kvverify.props.connector import completion_violations, preemption_violations, slot_violations

    plan, work, script = _rescheduled_case()
    t = get_target("reference")
    for check in (completion_violations, slot_violations, preemption_violations):
        assert check(t, plan, work, script) == []
    with flaws.enabled("spec_pad_rescheduled_negative"):
        for check in (completion_violations, slot_violations, preemption_violations):
            (v,) = check(t, plan, work, script)
            assert v.name == "admission.worker_raised", (check.__name__, v)
            assert "scheduled -1 tokens for request r0" in v.evidence["error"]


def test_a_worker_without_the_count_check_lets_the_negative_step_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted mutation: without the check, the reference applies the -1 and 'completes'."""
    import kvverify.reference.sched.scheduler as sched_mod

    monkeypatch.setattr(sched_mod, "check_scheduled_token_counts", lambda counts: None)
    plan, work, script = _rescheduled_case()
    with flaws.enabled("spec_pad_rescheduled_negative"):
        result = run_workload(plan.vllm_config, plan.kv_cache_config, work, connector=script)
    assert result.error is None and result.completed
