"""What a timeline says in words, from the counts it draws: one source for both.

:func:`trace_facts` reads the counts off the trace's rows (peak held, fewest free, admissions,
preemptions, refusals: the same rows the picture draws its bands, lines and markers from);
:func:`facts_line` and :func:`story` are written only from those counts, so the picture's text
can never claim what its drawing contradicts (a request "never admitted" while the markers show
admissions). ``tests/test_timeline_voice.py`` checks both on generated runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvverify.reference.steptrace import RuleTrace, StepTrace


@dataclass(frozen=True)
class TraceFacts:
    """The counts a run's picture shows (all from its rows, but ``steps`` and the ending)."""

    steps: int
    usable: int
    peak_held: int
    peak_step: int | None
    min_free: int
    admissions: int
    preemptions: int
    refusals: int
    completed: bool
    stall_reason: str | None
    error: str | None
    alone: bool


def trace_facts(trace: StepTrace) -> TraceFacts:
    rows = trace.rows
    totals = [sum(r.held) for r in rows]
    peak = max(totals, default=0)
    return TraceFacts(
        steps=trace.steps, usable=trace.usable_blocks, peak_held=peak,
        peak_step=next((r.step for r, t in zip(rows, totals) if t == peak), None) if rows else None,
        min_free=min((r.free_blocks for r in rows), default=trace.usable_blocks),
        admissions=sum(r.admitted for r in rows), preemptions=sum(r.preempted for r in rows),
        refusals=sum(r.refused for r in rows), completed=trace.completed, stall_reason=trace.stall_reason,
        error=trace.error, alone=max((r.running for r in rows), default=0) <= 1)


def _n(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def facts_line(trace: StepTrace, bound: int | None) -> list[str]:
    """The facts printed under a run's label."""
    f = trace_facts(trace)
    facts = [f"N = {trace.num_blocks:,} blocks ({f.usable:,} usable)"]
    if bound is not None:
        facts.append(f"startup bound {bound:,}/request")
    facts += [f"peak held {f.peak_held:,}", f"min free {f.min_free:,}", _n(f.admissions, "admission"),
              _n(f.preemptions, "preemption"), _n(f.refusals, "admission") + " refused"]
    if trace.stride > 1:
        facts.append(f"1 row per {trace.stride} steps")
    return facts


def story(trace: StepTrace, bound: int | None) -> str:
    """One line that says what the picture shows, from :func:`trace_facts` only."""
    f = trace_facts(trace)
    if bound is not None and f.peak_held > bound and f.alone:
        return (f"held {f.peak_held:,} blocks at step {f.peak_step:,}, more than the startup bound ({bound:,}) "
                "the pool was sized by")
    if f.completed:
        return (f"completed: at most {f.peak_held:,} of {f.usable:,} usable blocks held "
                f"({f.usable - f.peak_held:,} to spare)")
    if f.stall_reason == "no_progress" and f.preemptions:
        return (f"{_n(f.admissions, 'admission')} and {_n(f.preemptions, 'preemption')}, no output token since: "
                "the request needs a block the pool lacks, preempts itself and re-prefills (livelock)")
    if f.stall_reason == "head_of_line" and f.admissions == 0 and bound is not None and bound > f.usable:
        return (f"the startup bound ({bound:,}) exceeds the usable blocks ({f.usable:,}): the request is refused "
                "on the idle pool and never admitted")
    if f.stall_reason == "head_of_line":
        last = trace.rows[-1] if trace.rows else None
        free = f" ({last.free_blocks:,} of {f.usable:,} blocks free)" if last is not None else ""
        return (f"nothing runs and the head of the queue is refused on the idle pool{free}: "
                "it waits forever, 0 tok/s")
    if f.error:
        return f"the pool raised on a step the scheduler admitted: {f.error}"[:120]
    return f"stalled ({f.stall_reason}) with {f.peak_held:,} blocks held at most"


def rule_story(trace: RuleTrace) -> str:
    """One line from the trace's own numbers: where the run failed and the pool there."""
    rows = trace.rows
    peak = max((sum(r.held) for r in rows), default=0)
    if trace.failed_step is None:
        return f"no failure: at most {peak:,} of {trace.usable_blocks:,} usable blocks held"
    last = rows[-1]
    lost = trace.usable_blocks - sum(last.held) - last.free_blocks
    pool = f"{sum(last.held):,} held + {last.free_blocks:,} free of {trace.usable_blocks:,} usable"
    pool += f", {lost:,} unaccounted" if lost > 0 else (f", {-lost:,} counted twice" if lost < 0 else "")
    return f"failed in step {trace.failed_step:,} ({last.rule}) with {pool}"
