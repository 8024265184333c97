"""The event-based run (``kvverify.eventrun``) is the step-by-step driver, result and picture.

``kvverify check`` judges servability by the event-based run wherever it accepts a case; this
is why that is sound: on generated plans (every spec mix, lookahead, prefix caching on and off,
Mamba ``none`` / ``align``, pools at the startup boundary) and generated splits of a lone request,

* where it accepts, it returns the driver's :class:`~kvverify.reference.driver.WorkloadResult`
  and the driver's timeline trace (:class:`~kvverify.reference.steptrace.StepTrace`), row for row — so the
  same verdict and the same picture, byte for byte;
* it declines with :class:`~kvverify.eventrun.Preempts` exactly when the driver's run preempts
  (then the check runs the driver), and otherwise only for a reason it names.

``tests/test_eventrun_mutations.py`` shows planted mistakes in the event model caught here.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume, event, example, settings
from hypothesis import strategies as st

from kvverify.eventrun import Preempts, Unsupported, run_alone
from kvverify.hypothesis_hooks import given
from kvverify.reference.config import VllmConfig
from kvverify.reference.specs import MambaSpec, SlidingWindowSpec
from kvverify.reference.workloads import full_length_request
from kvverify.reports.timeline import render_timeline, TimelineRun
from kvverify.reference.steptrace import StepRecorder
from kvverify.strategies import StartupCase, startup_cases
from kvverify.targets.reference import ReferenceTarget

_REFERENCE = ReferenceTarget()
#: the reasons the event-based run may decline for on these inputs (none of them a plain miss)
_DECLINES = ("more than", "needs more than", "clamped tail", "disagree on the blocks admission takes")


def _peak(case: StartupCase, prompt: int, outputs: int) -> int:
    """The most blocks the lone request holds at once, on a pool it cannot outgrow."""
    cfg = case.vllm_config
    groups = _REFERENCE.plan(replace(cfg, num_gpu_blocks_override=1), case.kv_cache_specs).groups
    # more than a request alone can ever hold: every group's whole table, plus its spare blocks
    room = sum(-(-(cfg.max_model_len + cfg.num_lookahead_tokens) // g.kv_cache_spec.block_size) + 8
               for g in groups) + 8
    plan = _REFERENCE.plan(replace(cfg, num_gpu_blocks_override=room), case.kv_cache_specs)
    recorder = StepRecorder(max_rows=1 << 16)
    _REFERENCE.run_workload(plan, [full_length_request(prompt + outputs, outputs)], keep_trace=False,
                            recorder=recorder)
    assert recorder.result is not None
    return max((sum(r.held) for r in recorder.result.rows), default=0)


@st.composite
def lone_requests(draw) -> tuple[StartupCase, int, int]:
    """A plan (``startup_cases``, lookahead half the time) and a lone request's split:
    prompt-heavy and decode-heavy first (the check's two), else any ``prompt + outputs <= L``.
    Half the time the pool is re-sized to the request's own peak ``+ {-1, 0, +1}`` usable blocks
    (where a preemption starts, mid-stretch: the peak of a sliding window is reached every few
    steps, not at the end)."""
    case = draw(st.one_of(startup_cases(allow_auto=False, max_len=400, workers=False),
                          startup_cases(allow_auto=False, max_len=400, workers=False, lookahead=True)))
    length = case.vllm_config.max_model_len
    assume(length >= 2)
    split = draw(st.sampled_from(("prompt-heavy", "decode-heavy", "any")))
    if split == "prompt-heavy":
        prompt, outputs = length - 1, 1
    elif split == "decode-heavy":
        prompt, outputs = 1, length - 1
    else:
        prompt = draw(st.integers(1, length - 1))
        outputs = draw(st.integers(1, max(1, length - prompt + 2)))
        assume(prompt + outputs <= length)
    if draw(st.booleans()):
        usable = max(1, _peak(case, prompt, outputs) + draw(st.sampled_from((-1, 0, 1))))
        case = replace(case, vllm_config=replace(case.vllm_config, num_gpu_blocks_override=usable + 1),
                       available_memory=None)
    return case, prompt, outputs


def check_event_run_equals_driver(case: StartupCase, prompt: int, outputs: int) -> None:
    plan = _REFERENCE.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    assume(plan.num_blocks >= 1)
    recorder = StepRecorder()
    workload = full_length_request(prompt + outputs, outputs)
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


#: a sliding window's blocks peak for half of each block period, and a stretch that ends in the
#: low half hides the peak: SWA W=3, B=4, L=9, decode-heavy, one usable block (peak 2 at c=4)
SWA_PEAK_MIDSTRETCH = (StartupCase(VllmConfig(block_size=4, max_model_len=9, num_gpu_blocks_override=2,
                                              enable_prefix_caching=False),
                                   ({"l0": SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8,
                                                             sliding_window=3)},), "override"), 1, 8)


#: Mamba align with a budget below the block: the chunk split's pattern repeats every block and
#: the run skips the repeats (``_Run._jump_cycles``) until the last checkpoint
MAMBA_ALIGN_CYCLES = (StartupCase(VllmConfig(block_size=16, max_model_len=200, max_num_batched_tokens=3,
                                             num_gpu_blocks_override=40, mamba_cache_mode="align"),
                                  ({"m0": MambaSpec(block_size=16, shapes=((1,),), dtypes=("float32",),
                                                    mamba_cache_mode="align")},), "override"), 199, 1)


@settings(deadline=None)
@given(run=lone_requests())
@example(run=SWA_PEAK_MIDSTRETCH)
@example(run=MAMBA_ALIGN_CYCLES)
def test_event_run_equals_the_driver(run: tuple[StartupCase, int, int]) -> None:
    """Wherever the event-based run accepts, it is the driver's run: result, trace, picture."""
    check_event_run_equals_driver(*run)
