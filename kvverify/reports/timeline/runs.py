"""A workload's run, step by step, as a self-contained SVG (one or more runs, stacked).

Per scheduler step (a :class:`kvverify.reference.steptrace.StepTrace`): the blocks held per KV cache
group (stacked, coloured by kind), the free blocks, the usable-block line (``N - 1``: block 0 is
the null block) and the startup bound (blocks the check promised one full-length request), the
running and waiting counts, and markers for preemptions, admissions refused and the step where
the stall was declared (or the pool raised). The text (facts line, story) comes from the same
rows the drawing does (:mod:`kvverify.reports.timeline.story`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from html import escape
from typing import Any, Mapping, Sequence

from kvverify.reports.timeline.rules import render_rule_timeline
from kvverify.reports.timeline.legend import LegendItem, group_colors, group_items, layout_items
from kvverify.reports.timeline.story import facts_line, story
from kvverify.reports.timeline.svg import (
    BLOCKS_H,
    BOUND,
    DONE,
    FONT,
    FREE,
    LEFT,
    PREEMPT,
    REFUSED,
    REQS_H,
    RIGHT,
    RUNNING,
    STALL,
    USABLE,
    VIOLATION,
    WAITING,
    WIDTH,
    _band,
    _f,
    _panel,
    _spans,
    _spread,
    _step_points,
    _text,
    _wrap,
    nice_ticks,
)
from kvverify.reference.steptrace import RuleTrace, StepTrace

HELD_TEXT = "#2f5f9e"


@dataclass(frozen=True)
class TimelineRun:
    """One run to draw: a label, its trace and the startup bound (blocks per request)."""

    label: str
    trace: StepTrace
    bound: int | None = None
    note: str | None = None  # the one-line story; default: :func:`story`
    mark: tuple[int, str] | None = None  # (step, label): where an invariant was violated

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "bound": self.bound, "note": self.note,
                "mark": list(self.mark) if self.mark else None, "trace": self.trace.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TimelineRun:
        bound, mark = data.get("bound"), data.get("mark")
        return cls(str(data.get("label", "")), StepTrace.from_json(data["trace"]),
                   None if bound is None else int(bound), data.get("note"),
                   (int(mark[0]), str(mark[1])) if mark else None)


def _run_svg(run: TimelineRun, y0: float) -> tuple[list[str], float]:
    """The SVG elements of one run, starting at ``y0``; returns them and the height used."""
    t = run.trace
    parts: list[str] = []
    plot_w = WIDTH - LEFT - RIGHT
    x_end = max(t.steps + (1 if t.error else 0), max((r.step for r in t.rows), default=0), 1)
    x_start = 0

    def xs(step: float) -> float:
        return LEFT + (step - x_start) / (x_end - x_start) * plot_w

    rows = t.rows
    totals = [sum(r.held) for r in rows]
    peak_held = max(totals, default=0)
    facts = facts_line(t, run.bound)
    outcome = (f"stall: {t.stall_reason} at step {t.steps:,}" if t.stall_reason else
               f"error at step {t.steps + 1:,}" if t.error else f"completed in {t.steps:,} steps")
    parts.append(_text(LEFT, y0 + 14, run.label, size=13, weight="bold"))
    parts.append(_text(WIDTH - 12, y0 + 14, outcome, size=12, anchor="end", weight="bold",
                       fill=DONE if t.completed else STALL))
    parts.append(_text(LEFT, y0 + 30, " · ".join(facts), size=11, fill="#3c4454"))
    note = run.note if run.note is not None else story(t, run.bound)
    fine = t.completed and run.mark is None and not note.startswith("held ")
    parts.append(_text(LEFT, y0 + 47, note, size=12, weight="bold", fill=DONE if fine else STALL))

    # --- blocks panel
    top = y0 + 58
    bottom = top + BLOCKS_H
    vmax = max([t.num_blocks, peak_held, max((r.free_blocks for r in rows), default=0)]
               + ([run.bound] if run.bound is not None else []))
    ys = _panel(parts, "blocks", top=top, height=BLOCKS_H, plot_w=plot_w, step0=x_start, step1=x_end, vmax=vmax)
    spans = _spans(t)
    lower = [0.0] * len(rows)
    colors = group_colors(t.groups)
    for g, name in enumerate(t.groups):
        upper = [lo + (r.held[g] if g < len(r.held) else 0) for lo, r in zip(lower, rows)]
        color = colors[g]
        if rows:
            parts.append(f'<polygon data-series="held:{g}" points="{_band(spans, lower, upper, xs, ys)}" '
                         f'fill="{color}" fill-opacity="0.55" stroke="{color}" stroke-width="1"/>')
        lower = upper
    if rows:
        parts.append(f'<polyline data-series="free_blocks" points="'
                     f'{_step_points(spans, [r.free_blocks for r in rows], xs, ys)}" fill="none" '
                     f'stroke="{FREE}" stroke-width="2"/>')
    labels: list[tuple[float, str, str]] = []
    yu = ys(t.usable_blocks)
    parts.append(f'<line data-series="usable" x1="{LEFT}" y1="{_f(yu)}" x2="{LEFT + plot_w}" y2="{_f(yu)}" '
                 f'stroke="{USABLE}" stroke-width="1.5"/>')
    labels.append((yu + 4, f"usable N − 1 = {t.usable_blocks:,}", USABLE))
    if run.bound is not None:
        yb = ys(run.bound)
        parts.append(f'<line data-series="bound" x1="{LEFT}" y1="{_f(yb)}" x2="{LEFT + plot_w}" '
                     f'y2="{_f(yb)}" stroke="{BOUND}" stroke-width="2" stroke-dasharray="7 4"/>')
        labels.append((yb + 4, f"startup bound = {run.bound:,}", BOUND))
    if rows:
        labels.append((ys(rows[-1].free_blocks) + 4, f"free at end = {rows[-1].free_blocks:,}", FREE))
        labels.append((ys(totals[-1]) + 4, f"held at end = {totals[-1]:,}", HELD_TEXT))
    for y, s, c in _spread(labels, 13, top + 10, bottom + 4):
        parts.append(_text(LEFT + plot_w + 8, y, s, size=11, fill=c))
    # event markers along the top edge: preemptions (triangles), refusals (bars)
    for (a, b), r in zip(spans, rows):
        xm = xs((a + b) / 2)
        if r.preempted:
            parts.append(f'<polygon data-event="preempted" data-step="{r.step}" data-count="{r.preempted}" '
                         f'points="{_f(xm - 4)},{_f(top + 2)} {_f(xm + 4)},{_f(top + 2)} {_f(xm)},{_f(top + 10)}" '
                         f'fill="{PREEMPT}"/>')
        if r.refused:
            parts.append(f'<rect data-event="refused" data-step="{r.step}" data-count="{r.refused}" '
                         f'x="{_f(xm - 1.5)}" y="{_f(top + 12)}" width="3" height="8" fill="{REFUSED}"/>')
    parts.append("</g>")

    # --- requests panel
    rtop = bottom + 14
    rbottom = rtop + REQS_H
    yr = _panel(parts, "requests", top=rtop, height=REQS_H, plot_w=plot_w, step0=x_start, step1=x_end,
                vmax=max([r.running + r.waiting for r in rows] + [1]), count=2, grid=False, headroom=False)
    if rows:
        parts.append(f'<polyline data-series="waiting" points="'
                     f'{_step_points(spans, [r.waiting for r in rows], xs, yr)}" fill="none" stroke="{WAITING}" '
                     'stroke-width="2" stroke-dasharray="5 3"/>')
        parts.append(f'<polyline data-series="running" points="'
                     f'{_step_points(spans, [r.running for r in rows], xs, yr)}" fill="none" stroke="{RUNNING}" '
                     'stroke-width="2"/>')
        last = rows[-1]
        for y, s, c in _spread([(yr(last.running) + 4, f"running = {last.running}", RUNNING),
                                (yr(last.waiting) + 4, f"waiting = {last.waiting}", WAITING)],
                               13, rtop + 8, rbottom + 4):
            parts.append(_text(LEFT + plot_w + 8, y, s, size=11, fill=c))
    parts.append("</g>")

    # --- x axis
    xticks = [tick for tick in nice_ticks(x_end, 8) if tick <= x_end]
    for tick in xticks:
        x = xs(tick)
        parts.append(f'<line x1="{_f(x)}" y1="{_f(rbottom)}" x2="{_f(x)}" y2="{_f(rbottom + 4)}" stroke="#5a6375"/>')
        parts.append(_text(x, rbottom + 16, f"{tick:,}", size=10, anchor="middle", fill="#5a6375"))
    parts.append(_text(LEFT + plot_w / 2, rbottom + 30, "scheduler step", size=11, anchor="middle",
                       fill="#5a6375"))

    # --- where an invariant was violated (an after-step check's ``step``)
    if run.mark is not None:
        at, what = run.mark
        x = xs(min(max(at, 0), x_end))
        parts.append(f'<line data-event="violation" data-step="{at}" x1="{_f(x)}" y1="{_f(top)}" x2="{_f(x)}" '
                     f'y2="{_f(rbottom)}" stroke="{VIOLATION}" stroke-width="2" stroke-dasharray="4 3"/>')
        anchor, lx = ("end", x - 6) if x > LEFT + plot_w / 2 else ("start", x + 6)
        parts.append(_text(lx, top + 52, f"{what} after step {at:,}", size=11, anchor=anchor,
                           fill=VIOLATION, weight="bold"))

    # --- the end of the run: stall / error / completion, across both panels
    if not t.completed:
        at = t.steps + (1 if t.error and not t.stall_reason else 0)
        x = xs(at) if at > 0 else xs(0)
        what = t.stall_reason or "pool raised"
        end = rows[-1] if rows else None
        detail = f" (running {end.running}, waiting {end.waiting})" if end is not None else ""
        parts.append(f'<line data-event="stall" data-step="{at}" x1="{_f(x)}" y1="{_f(top)}" x2="{_f(x)}" '
                     f'y2="{_f(rbottom)}" stroke="{STALL}" stroke-width="2.5"/>')
        label = f"stall declared: {what}{detail}" if t.stall_reason else f"error: {t.error}"[:90]
        anchor, lx = ("end", x - 6) if x > LEFT + plot_w / 2 else ("start", x + 6)
        parts.append(_text(lx, top + 36, label, size=11, anchor=anchor, fill=STALL, weight="bold"))
    return parts, rbottom + 40 - y0


def _legend(y: float, group_sets: Sequence[Sequence[str]], violation: bool = False) -> tuple[list[str], int]:
    """The legend's elements (wrapped to the width) and how many rows it takes: each group drawn,
    under its kind (:mod:`kvverify.reports.timeline.legend`), then the lines and markers."""
    items: list[LegendItem] = []
    for groups in group_sets:
        items += [i for i in group_items(groups) if i not in items]
    items += [LegendItem(f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{FREE}" stroke-width="2"/>', "free blocks"),
              LegendItem(f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{USABLE}" stroke-width="1.5"/>',
                         "usable (N − 1)"),
              LegendItem(f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{BOUND}" stroke-width="2" '
                         'stroke-dasharray="5 3"/>', "startup bound"),
              LegendItem(f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{RUNNING}" stroke-width="2"/>', "running"),
              LegendItem(f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{WAITING}" stroke-width="2" '
                         'stroke-dasharray="5 3"/>', "waiting"),
              LegendItem(f'<polygon points="3,-9 11,-9 7,-1" fill="{PREEMPT}"/>', "preemption"),
              LegendItem(f'<rect x="5" y="-10" width="3" height="9" fill="{REFUSED}"/>', "admission refused"),
              LegendItem(f'<line x1="7" y1="-11" x2="7" y2="1" stroke="{STALL}" stroke-width="2.5"/>', "stall / error")]
    if violation:
        items.append(LegendItem(f'<line x1="7" y1="-11" x2="7" y2="1" stroke="{VIOLATION}" stroke-width="2" '
                                'stroke-dasharray="4 3"/>', "invariant violated"))
    return layout_items(items, y)


def render_timeline(runs: Sequence[TimelineRun], *, title: str, subtitle: str = "") -> str:
    """The SVG (text) of one or more runs, stacked; deterministic in its inputs."""
    if not runs:
        raise ValueError("runs must hold at least one TimelineRun")
    body: list[str] = [_text(LEFT, 24, title, size=15, weight="bold")]
    y = 32.0
    for line in _wrap(subtitle, 135, 3):
        body.append(_text(LEFT, y + 12, line, size=11, fill="#5a6375"))
        y += 15
    if subtitle:
        y += 5
    for run in runs:
        elems, used = _run_svg(run, y)
        body += elems
        y += used
    groups = _legend_groups(runs)
    legend, legend_rows = _legend(y + 8, groups, violation=any(run.mark is not None for run in runs))
    height = int(math.ceil(y + 8 + 18 * legend_rows + 6))
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img" {FONT}>'
            f"<title>{escape(title)}</title>"
            f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>')
    return head + "\n".join(body + legend) + "</svg>\n"


def _legend_groups(runs: Sequence[TimelineRun]) -> list[tuple[str, ...]]:
    """Each distinct set of groups the runs draw (the runs of one plan share one)."""
    out: list[tuple[str, ...]] = []
    for run in runs:
        if run.trace.groups not in out:
            out.append(run.trace.groups)
    return out


def render_json(data: Mapping[str, Any]) -> str:
    """The SVG of a timeline as stored in a report (``report["timeline"]``)."""
    if data.get("kind") == "stateful":
        return render_rule_timeline(RuleTrace.from_json(data["trace"]), title=str(data.get("title", "")),
                                    subtitle=str(data.get("subtitle", "")), label=str(data.get("label", "")))
    return render_timeline([TimelineRun.from_json(r) for r in data["runs"]], title=str(data.get("title", "")),
                           subtitle=str(data.get("subtitle", "")))


def timeline_json(runs: Sequence[TimelineRun], *, title: str, subtitle: str = "") -> dict[str, Any]:
    """What a report stores: the runs, rows included (:func:`render_json` draws it again)."""
    return {"title": title, "subtitle": subtitle, "runs": [r.to_json() for r in runs]}


def svg_sha256(svg: str) -> str:
    return hashlib.sha256(svg.encode("utf-8")).hexdigest()
