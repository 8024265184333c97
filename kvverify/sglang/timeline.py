"""An SGLang workload run drawn step by step (SVG): free and cached tokens against the pool,
running / waiting requests, retractions, and the verdict (a stall is marked where it was seen).

``kvverify check --engine sglang --plot FILE.svg`` writes it; self-contained, no dependency.
"""

from __future__ import annotations

import html
import os
import tempfile
from pathlib import Path

from kvverify.sglang.driver import SglangWorkloadResult

W, H, PAD = 760, 300, 46


def render_svg(result: SglangWorkloadResult, title: str) -> str:
    trace = result.trace
    n = max(len(trace), 1)
    pool = max([int(t["pool"]) for t in trace] + [1])
    reqs = max([int(t["running"]) + int(t["waiting"]) for t in trace] + [1])

    def x(i: int) -> float:
        return PAD + (W - 2 * PAD) * (i / max(n - 1, 1))

    def y_tok(v: int) -> float:
        return H - PAD - (H - 2 * PAD) * (v / pool)

    def y_req(v: int) -> float:
        return H - PAD - (H - 2 * PAD) * (v / reqs)

    def poly(values: list[float], colour: str, dash: str = "") -> str:
        pts = " ".join(f"{x(i):.1f},{v:.1f}" for i, v in enumerate(values))
        return f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" {dash} points="{pts}"/>'

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
             f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<text x="{PAD}" y="18" font-size="13">{html.escape(title)}</text>',
             f'<line x1="{PAD}" y1="{y_tok(pool):.1f}" x2="{W - PAD}" y2="{y_tok(pool):.1f}" stroke="#999" '
             f'stroke-dasharray="4 3"/><text x="{W - PAD + 3}" y="{y_tok(pool) + 4:.1f}">pool {pool}</text>']
    if trace:
        parts.append(poly([y_tok(int(t["free"])) for t in trace], "#2b7bb9"))
        parts.append(poly([y_tok(int(t["cached"])) for t in trace], "#8c6bb1", 'stroke-dasharray="2 2"'))
        parts.append(poly([y_req(int(t["running"])) for t in trace], "#1a9850"))
        parts.append(poly([y_req(int(t["waiting"])) for t in trace], "#d73027"))
        for i, t in enumerate(trace):
            if int(t["retracted"]) or int(t["aborted"]):
                colour = "#000" if int(t["aborted"]) else "#fdae61"
                parts.append(f'<line x1="{x(i):.1f}" y1="{PAD}" x2="{x(i):.1f}" y2="{H - PAD}" stroke="{colour}"/>')
    legend = [("#2b7bb9", "free tokens"), ("#8c6bb1", "cached (radix)"), ("#1a9850", "running"),
              ("#d73027", "waiting"), ("#fdae61", "retraction"), ("#000", "abort")]
    for k, (c, label) in enumerate(legend):
        parts.append(f'<rect x="{PAD + k * 110}" y="{H - 22}" width="10" height="10" fill="{c}"/>'
                     f'<text x="{PAD + 14 + k * 110}" y="{H - 13}">{label}</text>')
    verdict = result.verdict + (f": {result.detail or result.error}" if not result.ok else "")
    parts.append(f'<text x="{PAD}" y="34" fill="{"#1a9850" if result.ok else "#d73027"}">'
                 f'{html.escape(verdict[:120])} after {result.steps} steps</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_svg(result: SglangWorkloadResult, title: str, path: str | Path) -> Path:
    """Atomically write the picture (never through a symlink or onto a non-regular file)."""
    target = Path(path)
    if target.is_symlink() or (target.exists() and not target.is_file()):
        from kvverify.errors import ConfigError
        raise ConfigError("plot", str(path), "must be a regular file path (not a symlink or a directory)")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(render_svg(result, title))
    os.replace(tmp, target)
    return target
