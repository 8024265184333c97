"""SVG primitives of the timeline pictures: geometry, colours, text, panels, ticks.

Hand-written SVG, no plotting library: the bytes are a pure function of the data (no library
version, font cache, timestamp or random id), so an identical trace gives an identical file on
every machine. Coordinates are printed with one decimal; every panel carries its axis mapping
as ``data-*`` attributes, so tests read the numbers back out of the picture.
"""

from __future__ import annotations

import math
from html import escape
from typing import Callable, Sequence

from kvverify.reference.steptrace import StepTrace

WIDTH = 960
LEFT, RIGHT = 64, 196  # plot margins: the right one holds the line labels
BLOCKS_H, REQS_H = 210, 70
GROUP_COLORS = ("#4c78a8", "#72b7b2", "#b279a2", "#9d755d", "#eeca3b", "#54a24b", "#ff9da6", "#bab0ac")
FREE, USABLE, BOUND = "#2e9e44", "#1d2330", "#e07b00"
RUNNING, WAITING = "#3a6fd8", "#8a93a6"
PREEMPT, REFUSED, STALL, DONE, VIOLATION = "#d62728", "#f58518", "#c00000", "#2e7d32", "#7b3fb5"
FONT = "font-family=\"DejaVu Sans,Verdana,Arial,sans-serif\""


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
