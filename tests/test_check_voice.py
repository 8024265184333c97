"""``kvverify check`` speaks with one voice: exit code, headline, verdict, table, notes and
picture agree, on generated deployments (catalog models x lengths x block sources x flags).

The picture's counts and the table's come from one source: each run's trace, recorded while
the run ran, gives the picture; the run's record (steps, outcome, stall) gives the table — and
they must be the same run.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvverify import catalog
from kvverify.check import render_check_plot, run_check
from kvverify.check.table import print_check
from kvverify.check.verdict import run_facts
from kvverify.errors import ConfigError
from kvverify.reports.timeline import story, trace_facts
from kvverify.reference.steptrace import StepTrace

MODELS = catalog.list_models()


@st.composite
def deployments(draw) -> dict:
    name = draw(st.sampled_from(MODELS))
    kw: dict = {"max_model_len": draw(st.one_of(st.sampled_from([None, "auto"]), st.integers(2, 20_000),
                                                 st.sampled_from([10**6, 10**7])))}
    source = draw(st.sampled_from(("override", "memory", "profiled")))
    if source == "override":
        kw["num_gpu_blocks_override"] = draw(st.integers(1, 3000))
    elif source == "memory":
        kw["kv_cache_memory_bytes"] = draw(st.integers(1, 64)) << draw(st.sampled_from((20, 26, 30)))
    else:
        kw["gpu_memory_bytes"] = draw(st.sampled_from((24, 80, 141))) << 30
        kw["non_kv_cache_memory_bytes"] = draw(st.integers(0, 100)) << 30
    if draw(st.booleans()):
        kw["max_num_batched_tokens"] = draw(st.sampled_from((128, 512, 2048, 8192)))
    if draw(st.booleans()):
        kw["max_num_seqs"] = draw(st.integers(1, 1024))
    kw["enable_prefix_caching"] = draw(st.booleans())
    kw["enable_chunked_prefill"] = draw(st.booleans())
    kw["environ"] = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": draw(st.sampled_from(("0", "1")))}
    return {"model": name, **kw}


def check_one_voice(r: dict, console_text: str) -> None:
    head = r["headline"]
    assert r["verdict"].startswith(head + ":"), (head, r["verdict"])
    assert (r["exit_code"] == 0) == (head == "OK")
    assert (head == "OK") == (r["starts"] and r["servable"] is True)
    if head.startswith("REFUSED"):
        assert not r["starts"] and any(not c["passes"] for c in r["startup_checks"])
    if head in ("HANG", "UNDECIDED"):
        assert r["starts"]
    assert r["verdict"] in " ".join(console_text.split()) or r["verdict"][:60] in " ".join(console_text.split())
    splits = {run["split"] for run in r["servable_runs"]}
    for note in r["notes"]:
        for split in ("decode-heavy", "prompt-heavy"):
            if split in note:
                assert split in splits, f"a note speaks of the {split} run, which did not run: {note}"
    assert re.search(r"\b1 tokens\b|\b1 steps\b|\b1 blocks\b", console_text) is None
    assert "kv_cache_dtype" in r
    by_split = {t["split"]: t for t in r.get("trace") or []}
    for run in r["servable_runs"]:
        assert run_facts(run) in " ".join(console_text.split())
        trace = by_split.get(run["split"])
        if trace is None:
            continue
        t = StepTrace.from_json(trace)
        assert t.steps == run["steps"] and t.completed == (run["completed"] is True)
        assert t.stall_reason == run["stall"]
        f = trace_facts(t)
        assert f.preemptions == t.preemptions and f.refusals == t.refusals
        text = story(t, trace.get("bound"))
        assert text.startswith("completed") == (run["completed"] is True) or text.startswith("held ")


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(d=deployments())
def test_generated_checks_speak_with_one_voice(d: dict) -> None:
    from rich.console import Console

    layout = catalog.load_model(d.pop("model"))
    try:
        r = run_check(layout, record_trace=True, **d)
    except ConfigError:
        return  # bad input: exit 2, before any work (tests/test_cli_fuzz.py)
    console = Console(record=True, width=200, highlight=False)
    print_check(r, console)
    check_one_voice(r, console.export_text())
    if r.get("trace"):
        svg = render_check_plot(r, "SVG picture")
        assert r["verdict"].split(" ")[0] in svg


@pytest.mark.parametrize("model,kw,head", [
    ("llama-3.1-8b", {"kv_cache_memory_bytes": 1 << 20}, "REFUSED"),  # below one block: vLLM's refusal
    ("llama-3.1-8b", {"gpu_memory_bytes": 10 << 30, "non_kv_cache_memory_bytes": 20 << 30}, "REFUSED"),
    ("mistral-7b-v0.1", {"max_model_len": 65536, "kv_cache_memory_bytes": 20 << 30}, "REFUSED"),
    ("qwen3-next-80b-a3b", {"max_model_len": 262144, "gpu_memory_bytes": 80 << 30,
                            "non_kv_cache_memory_bytes": 65 << 30}, "REFUSED"),  # #49064
])
def test_refusals_name_what_the_user_gave(model: str, kw: dict, head: str) -> None:
    r = run_check(catalog.load_model(model), **kw)
    assert r["headline"] == head and r["exit_code"] == 1
    assert "num_gpu_blocks" not in r["verdict"] and "=-" not in r["verdict"]
