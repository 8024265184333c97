"""The event-based run (``kvverify.eventrun``) is the step-by-step driver, result and picture.

``kvverify check`` judges servability by the event-based run wherever it accepts a case; this
is why that is sound: on generated plans (every spec mix, lookahead, prefix caching on and off,
Mamba ``none`` / ``align``, pools at the startup boundary) and generated splits of a lone request,

* where it accepts, it returns the driver's :class:`~kvverify.reference.driver.WorkloadResult`
  and the driver's timeline trace (:class:`~kvverify.steptrace.StepTrace`), row for row — so the
  same verdict and the same picture, byte for byte;
* it declines with :class:`~kvverify.eventrun.Preempts` exactly when the driver's run preempts
  (then the check runs the driver), and otherwise only for a reason it names.

``tests/test_eventrun_mutations.py`` shows planted mistakes in the event model caught here.
"""

from __future__ import annotations

from hypothesis import assume, event, settings
from hypothesis import strategies as st

from kvverify.eventrun import Preempts, Unsupported, run_alone
from kvverify.hypothesis_hooks import given
from kvverify.reference.workloads import full_length_request
from kvverify.reports.timeline import render_timeline, TimelineRun
from kvverify.steptrace import StepRecorder
from kvverify.strategies import StartupCase, startup_cases
from kvverify.targets.reference import ReferenceTarget

_REFERENCE = ReferenceTarget()
#: the reasons the event-based run may decline for on these inputs (none of them a plain miss)
_DECLINES = ("more than", "needs more than", "clamped tail", "disagree on the blocks admission takes")


@st.composite
def lone_requests(draw) -> tuple[StartupCase, int, int]:
    """A plan (``startup_cases``, lookahead half the time) and a lone request's split:
    prompt-heavy and decode-heavy first (the check's two), else any ``prompt + outputs <= L``."""
    case = draw(st.one_of(startup_cases(allow_auto=False, max_len=400, workers=False),
                          startup_cases(allow_auto=False, max_len=400, workers=False, lookahead=True)))
    length = case.vllm_config.max_model_len
    assume(length >= 2)
    split = draw(st.sampled_from(("prompt-heavy", "decode-heavy", "any")))
    if split == "prompt-heavy":
        return case, length - 1, 1
    if split == "decode-heavy":
        return case, 1, length - 1
    prompt = draw(st.integers(1, length - 1))
    outputs = draw(st.integers(1, max(1, length - prompt + 2)))
    return case, prompt, outputs


def check_event_run_equals_driver(case: StartupCase, prompt: int, outputs: int) -> None:
    plan = _REFERENCE.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.num_blocks >= 1)
    recorder = StepRecorder()
    workload = full_length_request(prompt + outputs, outputs) if prompt + outputs <= plan.vllm_config.max_model_len \
        else None
    assume(workload is not None)
    real = _REFERENCE.run_workload(plan, [workload], keep_trace=False, recorder=recorder)
    assert recorder.result is not None
    try:
        mine, trace = run_alone(plan.vllm_config, plan.kv_cache_config, prompt, outputs, record=True)
    except Preempts as e:
        event("declined: preempts")
        assert real.preemptions > 0 or real.error is not None, (
            f"the event-based run predicted a preemption ({e}) but the driver ran without one: {real}")
        return
    except Unsupported as e:
        event("declined: other")
        assert any(reason in str(e) for reason in _DECLINES), f"declined for an unexpected reason: {e}"
        return
    event("accepted: " + ("completed" if real.completed else str(real.stall_reason)))
    assert mine == real, f"result differs:\n event-based {mine}\n driver      {real}"
    assert trace is not None
    assert trace.to_json() == recorder.result.to_json(), (
        f"trace differs:\n event-based {trace.to_json()}\n driver      {recorder.result.to_json()}")
    picture = [TimelineRun("run", trace, plan.blocks_needed_per_request)]
    assert render_timeline(picture, title="t") == render_timeline(
        [TimelineRun("run", recorder.result, plan.blocks_needed_per_request)], title="t")


@settings(deadline=None)
@given(run=lone_requests())
def test_event_run_equals_the_driver(run: tuple[StartupCase, int, int]) -> None:
    """Wherever the event-based run accepts, it is the driver's run: result, trace, picture."""
    check_event_run_equals_driver(*run)
