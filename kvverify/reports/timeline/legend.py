"""Group colours and the legend: every group drawn is in the legend, under its kind.

A group's label is ``"<kind> B=<block size>"`` (:func:`kvverify.reference.steptrace.group_labels`). Each
kind has its own hue and each group of a kind its own shade, so groups of one kind read as one
family in the picture; the legend has one entry per kind (``data-kind``) listing its groups
(``data-groups``) with a swatch of each group's colour (``data-group`` / ``fill``), the same
colour its band is drawn in (``tests/test_timeline_voice.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import NamedTuple

from kvverify.reports.timeline.svg import LEFT, WIDTH, _f, _text

#: per kind: shades from dark to light (a kind's n-th group takes shade n, cycling)
KIND_SHADES = {
    "full_attention": ("#2f5f9e", "#4c78a8", "#6d93c4", "#9ab4d8"),
    "mla": ("#1f4e79", "#3a6b99", "#5d8ab7", "#86a9cf"),
    "sliding_window": ("#3d8c85", "#72b7b2", "#98cdc9", "#bfe0dd"),
    "chunked_local": ("#7b4f8a", "#b279a2", "#c99bbd", "#dfc0d7"),
    "mamba": ("#7a5a44", "#9d755d", "#bd9a83", "#d8bfae"),
    "cross_attention": ("#a6861a", "#eeca3b", "#f3d977", "#f8e8b0"),
}
OTHER_SHADES = ("#54a24b", "#7fbf77", "#ff9da6", "#bab0ac")


def group_kind(label: str) -> str:
    """The kind of a group label (its first word)."""
    return label.split(" ", 1)[0] if label else "?"


def group_colors(groups: Sequence[str]) -> list[str]:
    """One colour per group: the kind's hue, the group's shade within its kind."""
    seen: dict[str, int] = {}
    out = []
    for label in groups:
        kind = group_kind(label)
        shades = KIND_SHADES.get(kind, OTHER_SHADES)
        out.append(shades[seen.get(kind, 0) % len(shades)])
        seen[kind] = seen.get(kind, 0) + 1
    return out


def _group_list(indices: Sequence[int]) -> str:
    """``0``, ``0, 1``, ``0–5``: a compact list of group numbers."""
    if len(indices) > 2 and list(indices) == list(range(indices[0], indices[-1] + 1)):
        return f"{indices[0]}–{indices[-1]}"
    return ", ".join(str(i) for i in indices)


class LegendItem(NamedTuple):
    """One legend entry: its icon (SVG, drawn from x = 0), the icon's width, its text."""

    icon: str
    text: str
    width: float = 14


def group_items(groups: Sequence[str]) -> list[LegendItem]:
    """One entry per group label (kind and block size), in order of first appearance, with a
    swatch of each of its groups' colours."""
    colors = group_colors(groups)
    by_label: dict[str, list[int]] = {}
    for g, label in enumerate(groups):
        by_label.setdefault(label, []).append(g)
    items = []
    for label, indices in by_label.items():
        swatches = "".join(f'<rect data-group="{g}" x="{7 * i}" y="-9" width="6" height="10" fill="{colors[g]}" '
                           f'fill-opacity="0.55"/>' for i, g in enumerate(indices))
        text = f"held: {label}, group{'s' if len(indices) > 1 else ''} {_group_list(indices)}"
        icon = (f'<g data-kind="{escape(group_kind(label))}" data-label="{escape(label)}" '
                f'data-groups="{",".join(map(str, indices))}">{swatches}</g>')
        items.append(LegendItem(icon, text, max(14.0, 7.0 * len(indices))))
    return items


def layout_items(items: Sequence[LegendItem], y: float) -> tuple[list[str], int]:
    """Place legend items left to right, wrapping at the picture's width; returns them and the rows."""
    out, x, rows = [], float(LEFT), 1
    for item in items:
        width = item.width + 8 + 6.3 * len(item.text) + 14
        if x + width > WIDTH - 12 and x > LEFT:
            x, rows = float(LEFT), rows + 1
        out.append(f'<g transform="translate({_f(x)} {_f(y + 18 * (rows - 1))})">{item.icon}'
                   f'{_text(item.width + 6, 0, item.text, size=11, fill="#3c4454")}</g>')
        x += width
    return out, rows
