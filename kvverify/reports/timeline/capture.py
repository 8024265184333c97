"""A report's timeline: re-run the failing workload with a recorder and keep the trace."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from kvverify.reports.timeline.runs import TimelineRun, timeline_json
from kvverify.reference.steptrace import StepTrace

if TYPE_CHECKING:
    from kvverify.targets.base import SchedulerTarget

#: keyword arguments of ``run_workload`` a re-run does not pass on: the scheduler (already
#: stepped), callbacks (their side effects belong to the property) and the recorder
_NOT_REPLAYED = ("scheduler", "on_step", "recorder", "keep_trace")


def record_run(target: SchedulerTarget, plan: Any, workload: Sequence[Any], **kw: Any) -> tuple[StepTrace, Any]:
    """Run ``workload`` on ``target`` with a :class:`~kvverify.reference.steptrace.StepRecorder`.

    Returns the trace and the :class:`WorkloadResult` (``None`` when the run raised; the
    trace then ends at the last recorded step with the exception as its ``error``).
    """
    from kvverify.reference.steptrace import StepRecorder

    rec = StepRecorder()
    sched = target.scheduler(plan)
    try:
        result = target.run_workload(plan, workload, recorder=rec, scheduler=sched, **kw)
    except Exception as exc:  # noqa: BLE001 - the picture shows how far the run got
        steps = rec.rows[-1].step if rec.rows else 0
        return rec.finish(sched, steps=steps, stall_reason=None,
                          error=f"{type(exc).__name__}: {exc}"[:300]), None
    assert rec.result is not None
    return rec.result, result


def timeline_of_capture(capture: Any, violation: Mapping[str, Any], property_name: str) -> dict[str, Any] | None:
    """The timeline of a captured failure: its last workload, re-run deterministically under
    the capture's flaws and fixes with a recorder. ``None`` when it ran no workload."""
    from kvverify.reports.common import switched

    runs = getattr(capture, "runs", None) or []
    if not runs:
        return None
    target, plan, workload, kw = runs[-1]
    kw = {k: v for k, v in kw.items() if k not in _NOT_REPLAYED}
    with switched(capture.flaws, capture.fixes):
        trace, _ = record_run(target, plan, workload, **kw)
    bound = getattr(plan, "blocks_needed_per_request", None)
    step = (violation.get("evidence") or {}).get("step")
    mark = (step, f"violated: {violation.get('name')}") if isinstance(step, int) and step > 0 else None
    n = len(workload)
    label = (f"the last workload the property ran: {n} request" + ("" if n == 1 else "s")
             + f", max_model_len {plan.vllm_config.max_model_len:,}, B = {plan.vllm_config.block_size}")
    on = ", ".join([f"flaw {f}" for f in capture.flaws] + [f"fix {f}" for f in capture.fixes])
    subtitle = str(violation.get("reason") or "") + (f"  [{on}]" if on else "")
    title = f"{violation.get('name')} — {property_name}"
    return timeline_json([TimelineRun(label, trace, int(bound) if bound is not None else None, mark=mark)],
                         title=title, subtitle=subtitle)
