"""The overview picture of a reports directory: failures per invariant and per property."""

from __future__ import annotations

import math
from html import escape
from typing import Any, Iterable, Mapping

from kvverify.reports.timeline.svg import FONT, WIDTH, _f, _text

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
