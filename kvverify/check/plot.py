"""The check's picture: each run as a timeline, its note the table's own run line.

Each run's picture is drawn from its trace, and its one-line story
(:func:`kvverify.reports.timeline.story`) from the same trace; the table's run line comes from the
run's result, which the trace was recorded from: ``tests/test_check_voice.py`` checks on generated
cases that the two say the same (steps, outcome, stall, counts). The subtitle is the verdict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from kvverify.errors import ConfigError

#: ``--plot FILE``: the suffix decides what is written
PLOT_FORMATS = {".svg": "SVG picture", ".json": "timeline data, JSON"}


def timeline_runs(result: Mapping[str, Any]) -> list[Any]:
    """One :class:`~kvverify.reports.timeline.TimelineRun` per traced run."""
    from kvverify.reports.timeline import TimelineRun
    from kvverify.reference.steptrace import StepTrace

    by_split = {r["split"]: r for r in result["servable_runs"]}
    runs = []
    for t in result.get("trace") or []:
        run = by_split[t["split"]]
        label = (f"{run['split']} run: {run['prompt_tokens']:,} prompt + {run['output_tokens']:,} output "
                 f"token{'s' if run['output_tokens'] != 1 else ''}")
        runs.append(TimelineRun(label, StepTrace.from_json(t), t.get("bound")))
    return runs


def render_check_plot(result: Mapping[str, Any], fmt: str) -> str:
    """The picture (``fmt`` ``SVG picture``) or its data (``timeline data, JSON``)."""
    from kvverify.reports.timeline import render_timeline, timeline_json

    runs = timeline_runs(result)
    if not runs:
        raise ConfigError("plot", None, "no run to draw: " + ("; ".join(result["notes"]) or "the check ran none"))
    flaws = f" (flaw {', '.join(result['flaws'])})" if result.get("flaws") else ""
    title = (f"kvverify check — {result['model']}{flaws}: max_model_len {result['max_model_len']:,}, "
             f"B = {result['block_size']}, {result['num_blocks']:,} blocks")
    subtitle = str(result.get("verdict") or "")
    if fmt == PLOT_FORMATS[".json"]:
        return json.dumps(timeline_json(runs, title=title, subtitle=subtitle), indent=2) + "\n"
    return render_timeline(runs, title=title, subtitle=subtitle)


def write_check_plot(result: Mapping[str, Any], path: str | Path, fmt: str = PLOT_FORMATS[".svg"]) -> Path:
    """Render and write safely (:func:`kvverify.safefiles.write_text`)."""
    from kvverify.safefiles import write_text

    return write_text(path, render_check_plot(result, fmt), what="--plot")
