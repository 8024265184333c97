"""Timeline pictures: a workload run, step by step, as a self-contained SVG.

One module, one idea: ``svg`` (primitives: geometry, colours, text, panels, ticks), ``legend``
(group colours by kind; every group drawn is in the legend under its kind), ``story`` (what the
picture says in words, from the counts it draws), ``runs`` (a workload's runs, stacked), ``rules``
(a state machine's program, rule by rule), ``capture`` (a report's timeline: re-run with a
recorder), ``overview`` (failures of a reports directory).

**Hand-written SVG, no plotting library**: the bytes are a pure function of the trace (reports
are content-addressed); the SVG has no ids, scripts or external references, so it can be written
as a file *and* inlined into the HTML report unchanged. Every panel carries its axis mapping as
``data-*`` attributes and every series its name (``data-series``), so tests read the numbers back
out of the picture and compare them with the trace.
"""

from kvverify.reports.timeline.capture import record_run, timeline_of_capture
from kvverify.reports.timeline.legend import group_colors, group_kind
from kvverify.reports.timeline.overview import render_overview
from kvverify.reports.timeline.rules import RULE_EVENTS, render_rule_timeline, rule_timeline_json
from kvverify.reports.timeline.runs import TimelineRun, render_json, render_timeline, svg_sha256, timeline_json
from kvverify.reports.timeline.story import TraceFacts, facts_line, rule_story, story, trace_facts
from kvverify.reports.timeline.svg import nice_ticks

__all__ = ["RULE_EVENTS", "TimelineRun", "TraceFacts", "facts_line", "group_colors", "group_kind", "nice_ticks",
           "record_run", "render_json", "render_overview", "render_rule_timeline", "render_timeline",
           "rule_story", "rule_timeline_json", "story", "svg_sha256", "timeline_json", "timeline_of_capture",
           "trace_facts"]
