"""Timeline pictures: a workload run, step by step, as a self-contained SVG.

Per scheduler step (a :class:`kvverify.reference.steptrace.StepTrace`): the blocks held per KV cache
group (stacked), the free blocks, the usable-block line (``N - 1``: block 0 is the null
block) and the startup bound (blocks the check promised one full-length request), the
running and waiting counts, and markers for preemptions, admissions refused and the step
where the stall was declared (or the pool raised).

**Hand-written SVG, no plotting library.** The picture is a few polylines, rectangles and
labels; writing them directly keeps the core install free of matplotlib (tens of MB,
native wheels) and — the reason that decides it — makes the bytes a pure function of the
trace: no library version, font cache, timestamp or random id can change them, so an
identical trace gives an identical file (the reports are content-addressed) on every
machine. Coordinates are printed with one decimal; the SVG has no ids, scripts, external
references or XML declaration, so it can be written as a file *and* inlined into the HTML
report (several per page) unchanged.

Every panel carries its axis mapping as ``data-*`` attributes and every series its name
(``data-series``), so tests read the numbers back out of the picture and compare them with
the trace.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from kvverify.reference.steptrace import RuleTrace, StepTrace

if TYPE_CHECKING:
    from kvverify.targets.base import SchedulerTarget

WIDTH = 960
LEFT, RIGHT = 64, 196  # plot margins: the right one holds the line labels
BLOCKS_H, REQS_H = 210, 70
GROUP_COLORS = ("#4c78a8", "#72b7b2", "#b279a2", "#9d755d", "#eeca3b", "#54a24b", "#ff9da6", "#bab0ac")
FREE, USABLE, BOUND = "#2e9e44", "#1d2330", "#e07b00"
RUNNING, WAITING = "#3a6fd8", "#8a93a6"
PREEMPT, REFUSED, STALL, DONE, VIOLATION = "#d62728", "#f58518", "#c00000", "#2e7d32", "#7b3fb5"
FONT = "font-family=\"DejaVu Sans,Verdana,Arial,sans-serif\""


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


def story(trace: StepTrace, bound: int | None) -> str:
    """One line that says what the picture shows, from the trace's own numbers."""
    usable = trace.usable_blocks
    peak = max((sum(r.held) for r in trace.rows), default=0)
    alone = max((r.running for r in trace.rows), default=0) <= 1  # the bound is per request
    if bound is not None and peak > bound and alone:
        step = next(r.step for r in trace.rows if sum(r.held) == peak)
        return (f"held {peak:,} blocks at step {step:,}, more than the startup bound ({bound:,}) "
                "the pool was sized by")
    if trace.completed:
        spare = usable - peak
        return (f"completed: at most {peak:,} of {usable:,} usable blocks held "
                f"({spare:,} to spare)")
    if bound is not None and bound > usable:
        return (f"the startup bound ({bound:,}) exceeds the usable blocks ({usable:,}): "
                "the check passed, the request can never be admitted")
    if trace.stall_reason == "head_of_line":
        last = trace.rows[-1] if trace.rows else None
        free = f" ({last.free_blocks:,} of {usable:,} blocks free)" if last is not None else ""
        return (f"nothing runs and the head of the queue is refused on the idle pool{free}: "
                "it waits forever, 0 tok/s")
    if trace.stall_reason == "no_progress" and trace.preemptions:
        return (f"{trace.preemptions:,} preemptions and no output token since: the request needs a block "
                "the pool lacks, preempts itself and re-prefills (livelock)")
    if trace.error:
        return f"the pool raised on a step the scheduler admitted: {trace.error}"[:120]
    return f"stalled ({trace.stall_reason}) with {peak:,} blocks held at most"


def _f(v: float) -> str:
    text = f"{v:.1f}"
    return text[:-2] if text.endswith(".0") else text


def nice_ticks(vmax: float, count: int = 5) -> list[int]:
    """Integer ticks 0, s, 2s, ... covering ``vmax`` (s = 1, 2 or 5 x 10^k)."""
    if vmax <= 0:
        return [0, 1]
    raw = vmax / count
    mag = 10 ** max(int(math.floor(math.log10(raw))), 0) if raw >= 1 else 1
    step = next((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), 10 * mag)
    top = int(math.ceil(vmax / step)) * step
    return list(range(0, top + 1, step))


def _text(x: float, y: float, s: str, *, size: int = 11, anchor: str = "start", fill: str = "#1d2330",
          weight: str = "normal", extra: str = "") -> str:
    w = f' font-weight="{weight}"' if weight != "normal" else ""
    return (f'<text x="{_f(x)}" y="{_f(y)}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{w}'
            f'{extra}>{escape(s)}</text>')


def _spread(labels: list[tuple[float, str, str]], gap: float, lo: float, hi: float) -> list[tuple[float, str, str]]:
    """Push label baselines apart (>= ``gap``), keeping them within ``[lo, hi]``."""
    out = sorted(labels, key=lambda t: t[0])
    for i in range(1, len(out)):
        if out[i][0] - out[i - 1][0] < gap:
            out[i] = (out[i - 1][0] + gap, out[i][1], out[i][2])
    if out and out[-1][0] > hi:
        shift = out[-1][0] - hi
        out = [(y - shift, s, c) for y, s, c in out]
    return [(max(y, lo), s, c) for y, s, c in out]


def _spans(trace: StepTrace) -> list[tuple[int, int]]:
    """``(from_step, to_step)`` each row covers: ``(previous row's step, its step]``."""
    out, prev = [], None
    for r in trace.rows:
        start = r.step - 1 if prev is None else prev
        out.append((start, r.step))
        prev = r.step
    return out


def _step_points(spans: Sequence[tuple[int, int]], values: Sequence[float], xs, ys) -> str:
    pts: list[str] = []
    for (a, b), v in zip(spans, values):
        y = _f(ys(v))
        pts.append(f"{_f(xs(a))},{y}")
        pts.append(f"{_f(xs(b))},{y}")
    return " ".join(pts)


def _band(spans: Sequence[tuple[int, int]], lower: Sequence[float], upper: Sequence[float], xs, ys) -> str:
    top = _step_points(spans, upper, xs, ys).split(" ")
    bottom = _step_points(spans, lower, xs, ys).split(" ")
    return " ".join(top + bottom[::-1])


def _panel(parts: list[str], name: str, *, top: float, height: float, plot_w: float, step0: int,
           step1: int, vmax: float, count: int = 5, grid: bool = True,
           headroom: bool = True) -> Callable[[float], float]:
    """Open one panel's ``<g>`` (its data attributes are what the tests read back) with its frame,
    y ticks and axis label; returns the value -> y function. ``headroom``: the blocks panels'
    top (the next tick, or half a tick above ``vmax``); else the last tick."""
    ticks = nice_ticks(vmax, count)
    if headroom:
        ymax = ticks[-1] if ticks[-1] > vmax else vmax + max(1, ticks[1] - ticks[0]) // 2
    else:
        ymax = max(ticks[-1], 1)
    bottom = top + height

    def y_of(v: float) -> float:
        return bottom - v / ymax * height

    parts.append(f'<g data-panel="{name}" data-x0="{LEFT}" data-x1="{LEFT + plot_w}" data-step0="{step0}" '
                 f'data-step1="{step1}" data-y0="{_f(bottom)}" data-y1="{_f(top)}" data-v1="{ymax}">')
    parts.append(f'<rect x="{LEFT}" y="{_f(top)}" width="{plot_w}" height="{height}" fill="#fbfcfd" '
                 'stroke="#dde1e8"/>')
    for tk in ticks:
        if tk > ymax:
            continue
        y = y_of(tk)
        if grid:
            parts.append(f'<line x1="{LEFT}" y1="{_f(y)}" x2="{LEFT + plot_w}" y2="{_f(y)}" stroke="#eef1f5"/>')
        parts.append(_text(LEFT - 6, y + 4, f"{tk:,}", size=10, anchor="end", fill="#5a6375"))
    parts.append(_text(14, top + height / 2, name, size=11, anchor="middle", fill="#5a6375",
                       extra=f' transform="rotate(-90 14 {_f(top + height / 2)})"'))
    return y_of


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
    min_free = min((r.free_blocks for r in rows), default=t.usable_blocks)
    facts = [f"N = {t.num_blocks:,} blocks ({t.usable_blocks:,} usable)"]
    if run.bound is not None:
        facts.append(f"startup bound {run.bound:,}/request")
    facts += [f"peak held {peak_held:,}", f"min free {min_free:,}",
              f"{t.preemptions:,} preemption" + ("" if t.preemptions == 1 else "s"),
              f"{t.refusals:,} admission" + ("" if t.refusals == 1 else "s") + " refused"]
    if t.stride > 1:
        facts.append(f"1 row per {t.stride} steps")
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
    for g, name in enumerate(t.groups):
        upper = [lo + (r.held[g] if g < len(r.held) else 0) for lo, r in zip(lower, rows)]
        color = GROUP_COLORS[g % len(GROUP_COLORS)]
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
        labels.append((ys(totals[-1]) + 4, f"held at end = {totals[-1]:,}", GROUP_COLORS[0]))
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


def _legend(y: float, groups: Sequence[str], violation: bool = False) -> tuple[list[str], int]:
    """The legend's elements (wrapped to the width) and how many rows it takes."""
    items: list[tuple[str, str]] = [(f'<rect x="0" y="-9" width="14" height="10" fill="{GROUP_COLORS[g % len(GROUP_COLORS)]}" '
                                     'fill-opacity="0.55"/>', f"held: group {g} ({name})")
                                    for g, name in enumerate(groups)]
    items += [(f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{FREE}" stroke-width="2"/>', "free blocks"),
              (f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{USABLE}" stroke-width="1.5"/>', "usable (N − 1)"),
              (f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{BOUND}" stroke-width="2" stroke-dasharray="5 3"/>',
               "startup bound"),
              (f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{RUNNING}" stroke-width="2"/>', "running"),
              (f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{WAITING}" stroke-width="2" stroke-dasharray="5 3"/>',
               "waiting"),
              (f'<polygon points="3,-9 11,-9 7,-1" fill="{PREEMPT}"/>', "preemption"),
              (f'<rect x="5" y="-10" width="3" height="9" fill="{REFUSED}"/>', "admission refused"),
              (f'<line x1="7" y1="-11" x2="7" y2="1" stroke="{STALL}" stroke-width="2.5"/>', "stall / error")]
    if violation:
        items.append((f'<line x1="7" y1="-11" x2="7" y2="1" stroke="{VIOLATION}" stroke-width="2" '
                      'stroke-dasharray="4 3"/>', "invariant violated"))
    out, x, rows = [], float(LEFT), 1
    for icon, label in items:
        width = 22 + 6.3 * len(label) + 14
        if x + width > WIDTH - 12:
            x, rows = float(LEFT), rows + 1
        out.append(f'<g transform="translate({_f(x)} {_f(y + 18 * (rows - 1))})">{icon}'
                   f'{_text(20, 0, label, size=11, fill="#3c4454")}</g>')
        x += width
    return out, rows


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
    groups: list[str] = []
    for run in runs:
        elems, used = _run_svg(run, y)
        body += elems
        y += used
        for g in run.trace.groups:
            if g not in groups:
                groups.append(g)
    legend, legend_rows = _legend(y + 8, groups, violation=any(run.mark is not None for run in runs))
    height = int(math.ceil(y + 8 + 18 * legend_rows + 6))
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img" {FONT}>'
            f"<title>{escape(title)}</title>"
            f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>')
    return head + "\n".join(body + legend) + "</svg>\n"


def _wrap(text: str, width: int, max_lines: int) -> list[str]:
    """Greedy word wrap; the last line ends in an ellipsis if text is left over."""
    lines: list[str] = []
    words = text.split()
    while words and len(lines) < max_lines:
        line = words.pop(0)
        while words and len(line) + 1 + len(words[0]) <= width:
            line += " " + words.pop(0)
        lines.append(line[:width])
    if words and lines:
        lines[-1] = lines[-1][: width - 1] + "…"
    return lines


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


# --- the overview picture of a reports directory ---------------------------------------

def render_overview(reports: Iterable[Mapping[str, Any]]) -> str:
    """Horizontal bars: failures per invariant, and per property, over ``reports``."""
    by_inv: dict[str, int] = {}
    by_prop: dict[str, int] = {}
    n = 0
    for r in reports:
        n += 1
        inv = str((r.get("violation") or {}).get("name") or "?")
        prop = str(r.get("property") or "?")
        by_inv[inv] = by_inv.get(inv, 0) + 1
        by_prop[prop] = by_prop.get(prop, 0) + 1
    sections = [("failures per invariant", by_inv), ("failures per property", by_prop)]
    label_w, bar_x = 380, 400
    bar_w = WIDTH - bar_x - 60
    vmax = max(list(by_inv.values()) + list(by_prop.values()) + [1])
    parts = [_text(16, 24, f"kvverify reports: {n} failure" + ("" if n == 1 else "s"), size=15, weight="bold")]
    y = 44.0
    for heading, counts in sections:
        parts.append(_text(16, y + 12, heading, size=13, weight="bold", fill="#3c4454"))
        y += 22
        if not counts:
            parts.append(_text(16, y + 12, "none", size=11, fill="#8a93a6"))
            y += 20
        for name, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            w = count / vmax * bar_w
            shown = name if len(name) <= 58 else name[:57] + "…"
            parts.append(_text(16 + label_w, y + 13, shown, size=11, anchor="end"))
            parts.append(f'<rect data-bar="{escape(heading)}" data-name="{escape(name)}" data-count="{count}" '
                         f'x="{bar_x}" y="{_f(y + 3)}" width="{_f(max(w, 1))}" height="13" fill="#4c78a8"/>')
            parts.append(_text(bar_x + max(w, 1) + 6, y + 13, str(count), size=11))
            y += 19
        y += 10
    height = int(math.ceil(y + 6))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img" {FONT}><title>failures per invariant and property</title>'
            f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>'
            + "\n".join(parts) + "</svg>\n")


# --- a report's timeline: re-run the failing workload with a recorder --------------------

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


# --- a state machine's run, rule by rule -------------------------------------------------

ALLOC, FREED, HIT, EVICT = "#4c78a8", "#2e9e44", "#b279a2", "#e07b00"
#: the rule-kind markers: (event, colour, legend label), drawn in this order, one row each
RULE_EVENTS = (("allocated", ALLOC, "allocate"), ("freed", FREED, "free"), ("hits", HIT, "prefix hit"),
               ("evicted", EVICT, "eviction"))


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
    for g in range(len(trace.groups)):
        upper = [lo + (r.held[g] if g < len(r.held) else 0) for lo, r in zip(lower, rows)]
        color = GROUP_COLORS[g % len(GROUP_COLORS)]
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
              (ys(totals[-1]) + 4, f"held at end = {totals[-1]:,}", GROUP_COLORS[0])]
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

    # --- legend
    items = [(f'<rect x="0" y="-9" width="14" height="10" fill="{GROUP_COLORS[g % len(GROUP_COLORS)]}" '
              'fill-opacity="0.55"/>', f"held: group {g} ({name})") for g, name in enumerate(trace.groups)]
    items += [(f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{FREE}" stroke-width="2"/>', "free blocks"),
              (f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{USABLE}" stroke-width="1.5"/>', "usable (N − 1)"),
              (f'<line x1="0" y1="-4" x2="14" y2="-4" stroke="{RUNNING}" stroke-width="2"/>', "live requests")]
    items += [(f'<circle cx="7" cy="-4" r="4" fill="{color}"/>', name) for _, color, name in RULE_EVENTS]
    items.append((f'<line x1="7" y1="-11" x2="7" y2="1" stroke="{STALL}" stroke-width="2.5"/>', "failing step"))
    ly, x, lrows = axis_y + 22, float(LEFT), 1
    for icon, text in items:
        width = 22 + 6.3 * len(text) + 14
        if x + width > WIDTH - 12:
            x, lrows = float(LEFT), lrows + 1
        parts.append(f'<g transform="translate({_f(x)} {_f(ly + 18 * (lrows - 1))})">{icon}'
                     f'{_text(20, 0, text, size=11, fill="#3c4454")}</g>')
        x += width
    height = int(math.ceil(ly + 18 * (lrows - 1) + 12))
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img" {FONT}>'
            f"<title>{escape(title)}</title>"
            f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>')
    return head + "\n".join(parts) + "</svg>\n"


def rule_timeline_json(trace: RuleTrace, *, title: str, subtitle: str = "", label: str = "") -> dict[str, Any]:
    """What a stateful report stores (``kind: stateful``; :func:`render_json` draws it again)."""
    return {"kind": "stateful", "title": title, "subtitle": subtitle, "label": label, "trace": trace.to_json()}
