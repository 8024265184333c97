"""One voice in the timeline pictures: what the text says is what the drawing shows.

* every group drawn (``data-series="held:g"``) is in the legend under its kind, with its colour;
* the facts line and the story are written from the counts the rows give (admissions,
  preemptions, refusals, peak held): never "never admitted" beside admission markers;

on generated runs (plans at the startup boundary, lone requests and small workloads) and on the
two pictures the issue reported (Gemma 3's seven groups; the lookahead livelock of F4).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvverify import catalog
from kvverify.props import examples as ex
from kvverify.reference.config import VllmConfig
from kvverify.reference.workloads import full_length_request
from kvverify.reports.timeline import TimelineRun, group_kind, record_run, render_timeline, story, trace_facts
from kvverify.strategies import startup_cases, workloads
from kvverify.targets import get_target

T = get_target("reference")
NS = "{http://www.w3.org/2000/svg}"


def check_legend(svg: str, runs: list[TimelineRun]) -> None:
    root = ET.fromstring(svg)
    bands = {}
    for el in root.iter(f"{NS}polygon"):
        series = el.get("data-series") or ""
        if series.startswith("held:"):
            bands.setdefault(int(series.split(":")[1]), set()).add(el.get("fill"))
    legend: dict[int, tuple[str, str]] = {}  # group -> (kind, colour)
    for g in root.iter(f"{NS}g"):
        kind = g.get("data-kind")
        if kind is None:
            continue
        for swatch in g.iter(f"{NS}rect"):
            legend[int(swatch.get("data-group"))] = (kind, swatch.get("fill"))
    groups = {i: label for run in runs for i, label in enumerate(run.trace.groups)}
    for g, fills in bands.items():
        assert g in legend, f"group {g} ({groups[g]}) is drawn but not in the legend"
        kind, colour = legend[g]
        assert kind == group_kind(groups[g]), f"group {g} is in the legend under {kind}, not {groups[g]}"
        assert fills == {colour}, f"group {g} is drawn in {fills} but its legend swatch is {colour}"


def check_story(run: TimelineRun) -> None:
    f = trace_facts(run.trace)
    text = story(run.trace, run.bound)
    if "never admitted" in text or "can never be admitted" in text:
        assert f.admissions == 0, f"the story says never admitted, the rows show {f.admissions} admissions"
    for count, word in re.findall(r"([\d,]+) (admission|preemption)s?\b(?! refused)", text):
        expected = f.admissions if word == "admission" else f.preemptions
        assert int(count.replace(",", "")) == expected, f"story says {count} {word}s, the rows {expected}: {text}"
    if text.startswith("completed"):
        assert f.completed


def picture(runs: list[TimelineRun]) -> str:
    svg = render_timeline(runs, title="t", subtitle="s")
    check_legend(svg, runs)
    for run in runs:
        check_story(run)
        facts = re.search(r"(\d[\d,]*) admissions? · (\d[\d,]*) preemptions? · (\d[\d,]*) admissions? refused", svg)
        assert facts is not None
    return svg


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(case=startup_cases(allow_auto=False, max_len=128, workers=False), data=st.data())
def test_generated_pictures_speak_with_one_voice(case, data) -> None:
    plan = T.plan(case.vllm_config, case.kv_cache_specs)
    assume(plan.num_blocks >= 1 and plan.vllm_config.max_model_len >= 2)
    workload = data.draw(st.one_of(st.builds(lambda o: [full_length_request(plan.vllm_config.max_model_len, o)],
                                             st.integers(1, plan.vllm_config.max_model_len - 1)),
                                   workloads(plan.vllm_config.max_model_len)))
    trace, _ = record_run(T, plan, workload)
    picture([TimelineRun("run", trace, plan.blocks_needed_per_request)])


def test_gemma_3_27b_legend_lists_every_group_under_its_kind() -> None:
    layout = catalog.load_model("gemma-3-27b")
    built = catalog.build_model(layout, VllmConfig(max_model_len=4096, kv_cache_memory_bytes=8 << 30))
    plan = T.plan(built.vllm_config, [built.layer_specs])
    trace, _ = record_run(T, plan, [full_length_request(4096, 1)])
    assert len(trace.groups) == 7
    svg = picture([TimelineRun("gemma", trace, plan.blocks_needed_per_request)])
    root = ET.fromstring(svg)
    kinds = {g.get("data-kind"): g.get("data-groups") for g in root.iter(f"{NS}g") if g.get("data-kind")}
    assert set(kinds) == {"sliding_window", "full_attention"}
    assert sorted(int(i) for v in kinds.values() for i in v.split(",")) == list(range(7))


def test_lookahead_livelock_story_counts_its_admissions() -> None:
    """F4 (lookahead): 13 admissions and 13 preemptions — a livelock, not "never admitted"."""
    case = ex.F4_CASE
    plan = T.plan(case.vllm_config, case.kv_cache_specs)
    trace, result = record_run(T, plan, [full_length_request(plan.vllm_config.max_model_len, 1)])
    assert result.stall_reason == "no_progress"
    text = story(trace, plan.blocks_needed_per_request)
    assert "livelock" in text and "13 admissions and 13 preemptions" in text
    picture([TimelineRun("f4", trace, plan.blocks_needed_per_request)])
