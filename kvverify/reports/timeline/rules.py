"""A state machine's run (the pool machine's falsifying program), rule by rule, as an SVG."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from kvverify.reports.timeline.legend import LegendItem, group_colors, group_items, layout_items
from kvverify.reports.timeline.story import rule_story
from kvverify.reports.timeline.svg import (
    BLOCKS_H,
    DONE,
    FONT,
    FREE,
    LEFT,
    REQS_H,
    RIGHT,
    RUNNING,
    STALL,
    USABLE,
    WIDTH,
    _band,
    _f,
    _panel,
    _spread,
    _step_points,
    _text,
    _wrap,
    nice_ticks,
)
from kvverify.reference.steptrace import RuleTrace

ALLOC, FREED, HIT, EVICT = "#4c78a8", "#2e9e44", "#b279a2", "#e07b00"
#: the rule-kind markers: (event, colour, legend label), drawn in this order, one row each
RULE_EVENTS = (("allocated", ALLOC, "allocate"), ("freed", FREED, "free"), ("hits", HIT, "prefix hit"),
               ("evicted", EVICT, "eviction"))


def render_rule_timeline(trace: RuleTrace, *, title: str, subtitle: str = "", label: str = "") -> str:
    """The SVG (text) of a state machine's run, one column per rule step; deterministic.

    Step ``k`` spans ``[k, k + 1)`` on the x axis (step 0: the ``@initialize`` rule). Blocks
    panel: held per KV cache group (stacked), free blocks, the usable line ``N - 1``; a row of
    markers per rule kind (allocate, free, prefix hit, eviction: ``data-event``, ``data-count``);
    the failing step (``data-event="failed"``). Requests panel: live requests.
    """
    rows = trace.rows
    if not rows:
        raise ValueError("trace.rows must hold at least one RuleStep")
    parts: list[str] = [_text(LEFT, 24, title, size=15, weight="bold")]
    y0 = 32.0
    for line in _wrap(subtitle, 135, 3):
        parts.append(_text(LEFT, y0 + 12, line, size=11, fill="#5a6375"))
        y0 += 15
    if subtitle:
        y0 += 5
    plot_w = WIDTH - LEFT - RIGHT
    x_end = rows[-1].step + 1

    def xs(step: float) -> float:
        return LEFT + step / x_end * plot_w

    totals = [sum(r.held) for r in rows]
    failed = trace.failed_step
    facts = [f"N = {trace.num_blocks:,} blocks ({trace.usable_blocks:,} usable)", f"peak held {max(totals):,}",
             f"min free {min(r.free_blocks for r in rows):,}", f"{len(rows):,} rule steps"]
    facts += [f"{sum(getattr(r, ev) for r in rows):,} {name}" for ev, _, name in RULE_EVENTS]
    outcome = f"failed at step {failed:,}" if failed is not None else f"passed {len(rows):,} steps"
    parts.append(_text(LEFT, y0 + 14, label or "the falsifying program, rule by rule", size=13, weight="bold"))
    parts.append(_text(WIDTH - 12, y0 + 14, outcome, size=12, anchor="end", weight="bold",
                       fill=STALL if failed is not None else DONE))
    parts.append(_text(LEFT, y0 + 30, " · ".join(facts), size=11, fill="#3c4454"))
    parts.append(_text(LEFT, y0 + 47, rule_story(trace), size=12, weight="bold",
                       fill=STALL if failed is not None else DONE))

    # --- blocks panel (markers in their own strip above the plot)
    strip = 12 * len(RULE_EVENTS)
    top = y0 + 64 + strip
    bottom = top + BLOCKS_H
    spans = [(r.step, r.step + 1) for r in rows]
    ys = _panel(parts, "blocks", top=top, height=BLOCKS_H, plot_w=plot_w, step0=0, step1=x_end,
                vmax=max([trace.num_blocks, max(totals), max(r.free_blocks for r in rows)]))
    lower = [0.0] * len(rows)
    colors = group_colors(trace.groups)
    for g in range(len(trace.groups)):
        upper = [lo + (r.held[g] if g < len(r.held) else 0) for lo, r in zip(lower, rows)]
        color = colors[g]
        parts.append(f'<polygon data-series="held:{g}" points="{_band(spans, lower, upper, xs, ys)}" '
                     f'fill="{color}" fill-opacity="0.55" stroke="{color}" stroke-width="1"/>')
        lower = upper
    parts.append(f'<polyline data-series="free_blocks" points="'
                 f'{_step_points(spans, [r.free_blocks for r in rows], xs, ys)}" fill="none" '
                 f'stroke="{FREE}" stroke-width="2"/>')
    yu = ys(trace.usable_blocks)
    parts.append(f'<line data-series="usable" x1="{LEFT}" y1="{_f(yu)}" x2="{LEFT + plot_w}" y2="{_f(yu)}" '
                 f'stroke="{USABLE}" stroke-width="1.5"/>')
    labels = [(yu + 4, f"usable N − 1 = {trace.usable_blocks:,}", USABLE),
              (ys(rows[-1].free_blocks) + 4, f"free at end = {rows[-1].free_blocks:,}", FREE),
              (ys(totals[-1]) + 4, f"held at end = {totals[-1]:,}", "#2f5f9e")]
    for y, s, c in _spread(labels, 13, top + 10, bottom + 4):
        parts.append(_text(LEFT + plot_w + 8, y, s, size=11, fill=c))
    for i, (ev, color, name) in enumerate(RULE_EVENTS):
        ym = top - strip + 12 * i + 6
        parts.append(_text(LEFT - 6, ym + 4, name, size=9, anchor="end", fill=color))
        for (a, b), r in zip(spans, rows):
            n = getattr(r, ev)
            if n:
                xm = xs((a + b) / 2)
                parts.append(f'<circle data-event="{ev}" data-step="{r.step}" data-count="{n}" cx="{_f(xm)}" '
                             f'cy="{_f(ym)}" r="4" fill="{color}"/>')
                parts.append(_text(xm + 6, ym + 3.5, f"{n:,}", size=9, fill=color))
    parts.append("</g>")

    # --- requests panel
    rtop = bottom + 14
    rbottom = rtop + REQS_H
    yr = _panel(parts, "requests", top=rtop, height=REQS_H, plot_w=plot_w, step0=0, step1=x_end,
                vmax=max([r.live for r in rows] + [1]), count=2, grid=False, headroom=False)
    parts.append(f'<polyline data-series="live" points="{_step_points(spans, [r.live for r in rows], xs, yr)}" '
                 f'fill="none" stroke="{RUNNING}" stroke-width="2"/>')
    parts.append(_text(LEFT + plot_w + 8, yr(rows[-1].live) + 4, f"live = {rows[-1].live}", size=11,
                       fill=RUNNING))
    parts.append("</g>")

    # --- x axis: the rule of each step when they fit, else numbered ticks
    if len(rows) <= 40:
        for r in rows:
            x = xs(r.step + 0.5)
            parts.append(_text(x, rbottom + 12, str(r.step), size=9, anchor="middle", fill="#5a6375"))
            parts.append(_text(x, rbottom + 22, r.rule.replace("_", " ")[:14], size=8, anchor="end",
                               fill="#5a6375", extra=f' transform="rotate(-40 {_f(x)} {_f(rbottom + 22)})"'))
        axis_y = rbottom + 84
    else:
        for tick in [t for t in nice_ticks(x_end, 8) if t <= x_end]:
            x = xs(tick)
            parts.append(f'<line x1="{_f(x)}" y1="{_f(rbottom)}" x2="{_f(x)}" y2="{_f(rbottom + 4)}" '
                         'stroke="#5a6375"/>')
            parts.append(_text(x, rbottom + 16, f"{tick:,}", size=10, anchor="middle", fill="#5a6375"))
        axis_y = rbottom + 30
    parts.append(_text(LEFT + plot_w / 2, axis_y, "rule step (step 0: setup)", size=11, anchor="middle",
                       fill="#5a6375"))

    # --- the failing step, across both panels
    if failed is not None:
        x = xs(failed + 0.5)
        parts.append(f'<line data-event="failed" data-step="{failed}" x1="{_f(x)}" y1="{_f(top)}" '
                     f'x2="{_f(x)}" y2="{_f(rbottom)}" stroke="{STALL}" stroke-width="2.5"/>')
        what = f"failed: {trace.failure}" if trace.failure else "failed"
        anchor, lx = ("end", x - 6) if x > LEFT + plot_w / 2 else ("start", x + 6)
        parts.append(_text(lx, top + 16, what[:90], size=11, anchor=anchor, fill=STALL, weight="bold"))

    # --- legend: each group under its kind, then the lines and the rule markers
    items = group_items(trace.groups)
    items += [LegendItem(f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{FREE}" stroke-width="2"/>', "free blocks"),
              LegendItem(f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{USABLE}" stroke-width="1.5"/>',
                         "usable (N − 1)"),
              LegendItem(f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{RUNNING}" stroke-width="2"/>',
                         "live requests")]
    items += [LegendItem(f'<circle cx="7" cy="-4" r="4" fill="{color}"/>', name) for _, color, name in RULE_EVENTS]
    items.append(LegendItem(f'<line x1="7" y1="-11" x2="7" y2="1" stroke="{STALL}" stroke-width="2.5"/>',
                            "failing step"))
    ly = axis_y + 22
    legend, lrows = layout_items(items, ly)
    parts += legend
    height = int(math.ceil(ly + 18 * (lrows - 1) + 12))
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img" {FONT}>'
            f"<title>{escape(title)}</title>"
            f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>')
    return head + "\n".join(parts) + "</svg>\n"


def rule_timeline_json(trace: RuleTrace, *, title: str, subtitle: str = "", label: str = "") -> dict[str, Any]:
    """What a stateful report stores (``kind: stateful``; :func:`render_json` draws it again)."""
    return {"kind": "stateful", "title": title, "subtitle": subtitle, "label": label, "trace": trace.to_json()}
