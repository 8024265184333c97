"""Timeline pictures: the per-step trace, the SVG's numbers against it, reports, ``check --plot``.

Every SVG is parsed with an XML parser; the series are read back through the axis mapping
each panel states in its ``data-*`` attributes and compared with the trace's rows.
"""

from __future__ import annotations

import functools
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, settings

from kvverify import flaws, reports
from kvverify.cli import main
from kvverify.hypothesis_hooks import rebuild
from kvverify.props import startup
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec
from kvverify.reference.specs import ChunkedLocalAttentionSpec, FullAttentionSpec, SlidingWindowSpec
from kvverify.reference.workloads import full_length_request
from kvverify.reports.timeline import (
    TimelineRun,
    nice_ticks,
    record_run,
    render_json,
    render_rule_timeline,
    render_timeline,
    rule_timeline_json,
)
from kvverify.reference.steptrace import RuleTrace, StepRecorder, StepTrace
from kvverify.strategies import StartupCase
from kvverify.targets import get_target

T = get_target("reference")
NS = "{http://www.w3.org/2000/svg}"
SEED_SPECS = {"model.layers.0.self_attn": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)}
SEED_CONFIG = VllmConfig(block_size=16, max_model_len=512, num_gpu_blocks_override=32)
F2_SPECS = {"l0": ChunkedLocalAttentionSpec(block_size=32, num_kv_heads=1, head_size=8, attention_chunk_size=3)}
F2_CONFIG = VllmConfig(block_size=32, max_model_len=64, max_num_batched_tokens=8, num_gpu_blocks_override=2,
                       enable_prefix_caching=False)


def seed_trace() -> tuple[StepTrace, int]:
    with flaws.enabled("null_block_not_reserved"):
        plan = T.plan(SEED_CONFIG, [SEED_SPECS])
        trace, _ = record_run(T, plan, [full_length_request(512, 1)])
    return trace, plan.blocks_needed_per_request


def f2_trace(max_rows: int = 1024) -> tuple[StepTrace, int]:
    plan = T.plan(F2_CONFIG, [F2_SPECS])
    rec = StepRecorder(max_rows=max_rows)
    T.run_workload(plan, [full_length_request(64, 1)], recorder=rec)
    assert rec.result is not None
    return rec.result, plan.blocks_needed_per_request


def hybrid_trace(max_rows: int = 1024, outputs: int = 40) -> StepTrace:
    """Full + sliding window, prefix caching on, three requests sharing a prefix."""
    specs = {"full": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8),
             "swa": SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=8, sliding_window=32)}
    plan = T.plan(VllmConfig(block_size=16, max_model_len=256, max_num_batched_tokens=64,
                             num_gpu_blocks_override=40), [specs])
    assert plan.starts
    work = [WorkloadSpec(f"r{i}", tuple(range(70)) + (1000 + i,) * 9, outputs, arrival_step=3 * i)
            for i in range(3)]
    rec = StepRecorder(max_rows=max_rows)
    result = T.run_workload(plan, work, recorder=rec)
    assert result.completed and rec.result is not None
    return rec.result


# --- the trace ------------------------------------------------------------------------

def test_seed_hang_trace() -> None:
    trace, bound = seed_trace()
    assert (trace.num_blocks, trace.usable_blocks, bound) == (32, 31, 32)
    assert trace.stall_reason == "head_of_line" and trace.steps == 1 and not trace.completed
    (row,) = trace.rows
    assert (row.running, row.waiting, row.free_blocks, row.held, row.refused) == (0, 1, 31, (0,), 1)


def test_f2_livelock_trace() -> None:
    trace, bound = f2_trace()
    assert trace.stall_reason == "no_progress" and bound == 1 and trace.usable_blocks == 1
    assert trace.preemptions == sum(r.preempted for r in trace.rows) > 1
    assert [r.step for r in trace.rows] == list(range(1, trace.steps + 1))  # stride 1: every step
    # the request preempts itself: each preemption leaves it waiting with nothing held
    for r in trace.rows:
        if r.preempted:
            assert (r.running, r.waiting, sum(r.held)) == (0, 1, 0)


def conserved(trace: StepTrace) -> bool:
    """null + free + held = N on every row (held during the step, free at the same moment)."""
    return all(sum(r.held) + r.free_blocks + 1 == trace.num_blocks for r in trace.rows)


def test_blocks_are_conserved_on_every_row() -> None:
    trace = hybrid_trace()
    assert len(trace.groups) == 2 and conserved(trace)
    assert max(r.running for r in trace.rows) >= 2 and sum(r.admitted for r in trace.rows) == 3


def last_step_held(recorder: StepRecorder) -> tuple[int, ...]:
    """Blocks held in the step a lone full-length request (32 blocks) finishes in."""
    plan = T.plan(VllmConfig(block_size=16, max_model_len=512, num_gpu_blocks_override=40), [SEED_SPECS])
    T.run_workload(plan, [full_length_request(512, 1)], recorder=recorder)
    assert recorder.result is not None and recorder.result.completed and conserved(recorder.result)
    assert recorder.result.rows[-1].running == 1
    return recorder.result.rows[-1].held


def test_the_held_blocks_of_a_finishing_step_are_drawn() -> None:
    """The request finishes (and frees) inside its last step; the picture still shows the 32
    blocks it computed with. A recorder that does not count the release draws 0 there."""

    class NoRelease(StepRecorder):
        def attach(self, sched):  # the mutation: no count of what finishing requests release
            self._start(sched)

    assert last_step_held(StepRecorder()) == (32,)
    assert last_step_held(NoRelease()) == (0,)


def test_recording_does_not_change_the_run() -> None:
    plan = T.plan(F2_CONFIG, [F2_SPECS])
    plain = T.run_workload(plan, [full_length_request(64, 1)])
    traced = T.run_workload(plan, [full_length_request(64, 1)], recorder=StepRecorder())
    assert plain == traced


def test_long_runs_are_decimated_and_keep_their_events() -> None:
    full, _ = f2_trace()
    small, _ = f2_trace(max_rows=8)
    assert len(small.rows) <= 9 and small.stride > 1 and small.rows[-1].step == small.steps == full.steps
    steps = [r.step for r in small.rows]
    assert steps == sorted(set(steps))
    assert sum(r.preempted for r in small.rows) == full.preemptions == small.preemptions
    assert sum(r.admitted for r in small.rows) == sum(r.admitted for r in full.rows)
    kept = {r.step: r for r in full.rows}
    for r in small.rows:  # a kept row's state is the full trace's state at that step
        f = kept[r.step]
        assert (r.running, r.waiting, r.free_blocks, r.held) == (f.running, f.waiting, f.free_blocks, f.held)
    decode = hybrid_trace(max_rows=8, outputs=120)
    assert conserved(decode) and decode.stride > 1


def test_trace_json_round_trip() -> None:
    trace = hybrid_trace()
    assert StepTrace.from_json(json.loads(json.dumps(trace.to_json()))) == trace
    with pytest.raises(ValueError, match="max_rows"):
        StepRecorder(max_rows=2)


# --- the SVG --------------------------------------------------------------------------

def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    assert int(root.get("width", "0")) > 0 and int(root.get("height", "0")) > 0
    text = svg.lower()
    assert "<script" not in text and "href=" not in text and "http" not in text.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    return root


def panel(root: ET.Element, name: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{NS}g") if g.get("data-panel") == name]


def mapping(g: ET.Element):
    x0, x1 = float(g.get("data-x0")), float(g.get("data-x1"))
    s0, s1 = float(g.get("data-step0")), float(g.get("data-step1"))
    y0, y1, v1 = float(g.get("data-y0")), float(g.get("data-y1")), float(g.get("data-v1"))
    return (lambda px: s0 + (px - x0) / (x1 - x0) * (s1 - s0)), (lambda py: (y0 - py) / (y0 - y1) * v1), \
        (lambda v: y0 - v / v1 * (y0 - y1))


def series(g: ET.Element, name: str, tag: str = "polyline") -> list[tuple[float, float]]:
    (el,) = [e for e in g.iter(f"{NS}{tag}") if e.get("data-series") == name]
    return [tuple(float(c) for c in p.split(",")) for p in el.get("points", "").split()]


def check_numbers(svg: str, runs: list[TimelineRun]) -> None:
    """Every series of every panel, read back from the picture, equals the trace."""
    root = parse(svg)
    blocks, requests = panel(root, "blocks"), panel(root, "requests")
    assert len(blocks) == len(requests) == len(runs)
    for run, gb, gr in zip(runs, blocks, requests):
        t = run.trace
        step_of, value_of, y_of = mapping(gb)
        tol = 0.06 * float(gb.get("data-v1")) / 100 + 0.05  # one decimal of a pixel
        free = series(gb, "free_blocks")
        assert len(free) == 2 * len(t.rows)
        for i, r in enumerate(t.rows):
            (xa, ya), (xb, yb) = free[2 * i], free[2 * i + 1]
            assert ya == yb and abs(value_of(ya) - r.free_blocks) <= tol
            assert abs(step_of(xb) - r.step) <= 0.05 * max(1, t.steps / 100)
        # the stacked held bands: the top edge of the last group = total held
        top = series(gb, f"held:{len(t.groups) - 1}", "polygon")[: 2 * len(t.rows)]
        for i, r in enumerate(t.rows):
            assert abs(value_of(top[2 * i][1]) - sum(r.held)) <= tol
        (usable,) = [e for e in gb.iter(f"{NS}line") if e.get("data-series") == "usable"]
        assert abs(value_of(float(usable.get("y1"))) - t.usable_blocks) <= tol
        bounds = [e for e in gb.iter(f"{NS}line") if e.get("data-series") == "bound"]
        if run.bound is None:
            assert not bounds
        else:
            assert abs(value_of(float(bounds[0].get("y1"))) - run.bound) <= tol
        preempts = [e for e in gb.iter() if e.get("data-event") == "preempted"]
        assert sum(int(e.get("data-count")) for e in preempts) == t.preemptions
        assert sorted(int(e.get("data-step")) for e in preempts) == [r.step for r in t.rows if r.preempted]
        refused = [e for e in gb.iter() if e.get("data-event") == "refused"]
        assert sum(int(e.get("data-count")) for e in refused) == t.refusals
        _, rvalue_of, _ = mapping(gr)
        for name in ("running", "waiting"):
            pts = series(gr, name)
            assert [round(rvalue_of(y), 3) for _, y in pts[::2]] == [getattr(r, name) for r in t.rows]
        stall = [e for e in root.iter() if e.get("data-event") == "stall"]
        if t.completed:
            assert not [e for e in stall if e in list(gb.iter()) + list(gr.iter())]
    texts = " ".join("".join(e.itertext()) for e in root.iter(f"{NS}text"))
    for run in runs:
        assert f"usable N − 1 = {run.trace.usable_blocks:,}" in texts
        if run.bound is not None:
            assert f"startup bound = {run.bound:,}" in texts
        if run.trace.stall_reason:
            assert f"stall declared: {run.trace.stall_reason}" in texts


def test_seed_hang_picture() -> None:
    trace, bound = seed_trace()
    runs = [TimelineRun("seed hang", trace, bound)]
    svg = render_timeline(runs, title="seed hang")
    check_numbers(svg, runs)
    assert "the startup bound (32) exceeds the usable blocks (31)" in svg
    stall = [e for e in parse(svg).iter() if e.get("data-event") == "stall"]
    assert [e.get("data-step") for e in stall] == ["1"]


def test_f2_and_hybrid_pictures() -> None:
    trace, bound = f2_trace()
    runs = [TimelineRun("F2", trace, bound), TimelineRun("hybrid", hybrid_trace(), None),
            TimelineRun("decimated", hybrid_trace(max_rows=8, outputs=120), 20)]
    svg = render_timeline(runs, title="three runs", subtitle="sub")
    check_numbers(svg, runs)
    assert "preempts itself and re-prefills (livelock)" in svg and "completed:" in svg


def test_pictures_are_deterministic() -> None:
    trace, bound = f2_trace()
    run = TimelineRun("F2", trace, bound)
    a = render_timeline([run], title="t")
    b = render_timeline([TimelineRun.from_json(json.loads(json.dumps(run.to_json())))], title="t")
    assert a == b
    assert render_json({"title": "t", "runs": [run.to_json()]}) == a
    with pytest.raises(ValueError, match="runs"):
        render_timeline([], title="t")


def test_nice_ticks() -> None:
    assert nice_ticks(32) == [0, 10, 20, 30, 40]
    assert nice_ticks(1) == [0, 1]
    assert nice_ticks(0) == [0, 1]
    assert nice_ticks(131071, 8)[-1] >= 131071


# --- reports --------------------------------------------------------------------------

SEED_CASE = StartupCase(SEED_CONFIG, (SEED_SPECS,), "override", None, 32, 32)


def write_seed_report(where: Path) -> Path:
    prop = startup.test_startup_check_passes_implies_servable
    inner = prop.hypothesis.inner_test
    body = example(case=SEED_CASE, outputs=1)(functools.wraps(inner, updated=())(  # a fresh body: the
        lambda *a, **k: inner(*a, **k)))                                           # property's own list stays
    test = rebuild(prop, inner=body, settings=settings(
        max_examples=1, derandomize=True, database=None, deadline=None, print_blob=False,
        phases=[Phase.explicit], suppress_health_check=list(HealthCheck)))
    with reports.instrument([test]) as sink, flaws.enabled("null_block_not_reserved"):
        with pytest.raises(AssertionError) as info:
            test(target=T)
    capture = sink.for_exception(info.value)
    assert capture is not None
    return reports.report_failure(capture, found_by="test", directory=where)


def test_report_has_its_timeline(tmp_path: Path) -> None:
    path = write_seed_report(tmp_path)
    report = json.loads(path.read_text())
    svg_path = tmp_path / f"{report['id']}.svg"
    assert svg_path.is_file()
    svg = svg_path.read_text()
    import hashlib
    assert hashlib.sha256(svg.encode()).hexdigest() == report["timeline"]["sha256"]
    (run,) = [TimelineRun.from_json(r) for r in report["timeline"]["runs"]]
    assert run.bound == 32 and run.trace.stall_reason == "head_of_line"
    check_numbers(svg, [run])
    assert f"]({svg_path.name})" in path.with_suffix(".md").read_text()
    # same failure, same bytes: a second report run rewrites identical files
    again = write_seed_report(tmp_path)
    assert again == path and svg_path.read_text() == svg
    # the index embeds the same picture and draws the overview
    assert main(["report", "--dir", str(tmp_path), "--json"]) == 0
    page = (tmp_path / "index.html").read_text()
    assert svg.strip() in page
    overview = (tmp_path / "overview.svg").read_text()
    bars = [e for e in parse(overview).iter() if e.get("data-bar")]
    assert {(e.get("data-name"), e.get("data-count")) for e in bars} == {
        ("startup.too_loose", "1"), ("test_startup_check_passes_implies_servable", "1")}
    assert "](overview.svg)" in (tmp_path / "index.md").read_text()
    # a copy of the reports without their pictures (an artifact) gets them back
    svg_path.unlink()
    reports.render_index(tmp_path)
    assert svg_path.read_text() == svg


def test_report_still_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_seed_report(tmp_path)
    assert main(["replay", str(path)]) == 1  # still failing: reproduced


# --- kvverify check --plot / --json --trace ------------------------------------------

def run_check_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:
    plot = tmp_path / "check.svg"
    code = main(["check", *args, "--plot", str(plot), "--json", "--trace"])
    data = json.loads(capsys.readouterr().out)
    return code, data, plot.read_text()


def test_check_plot_seed_hang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data, svg = run_check_cli(tmp_path, capsys, "--model", "llama-3.1-8b", "--max-model-len", "512",
                                    "--num-gpu-blocks-override", "32", "--flaw", "null_block_not_reserved")
    assert code == 1 and data["verdict"].startswith("HANG")
    (t,) = data["trace"]
    assert t["split"] == "prompt-heavy" and t["bound"] == 32 and t["stall_reason"] == "head_of_line"
    check_numbers(svg, [TimelineRun("x", StepTrace.from_json(t), t["bound"])])
    assert "HANG" in svg


def test_check_plot_passing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data, svg = run_check_cli(tmp_path, capsys, "--model", "llama-3.1-8b", "--max-model-len", "512",
                                    "--num-gpu-blocks-override", "36")
    assert code == 0
    traces = [StepTrace.from_json(t) for t in data["trace"]]
    assert [t["split"] for t in data["trace"]] == ["prompt-heavy", "decode-heavy"]
    assert all(t.completed and max(sum(r.held) for r in t.rows) == 32 for t in traces)
    check_numbers(svg, [TimelineRun("x", t, 32) for t in traces])
    assert "(3 to spare)" in svg
    # --json without --trace: no trace field (and no cost)
    assert main(["check", "--model", "llama-3.1-8b", "--max-model-len", "512", "--num-gpu-blocks-override",
                 "36", "--json"]) == 0
    assert "trace" not in json.loads(capsys.readouterr().out)


def test_check_plot_f2_livelock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama4_text", "num_hidden_layers": 1,
                               "layer_types": ["chunked_attention"], "attention_chunk_size": 3,
                               "num_key_value_heads": 1, "head_dim": 8, "max_position_embeddings": 64}))
    code, data, svg = run_check_cli(tmp_path, capsys, "--config-json", str(cfg), "--block-size", "32",
                                    "--max-model-len", "64", "--max-num-batched-tokens", "8",
                                    "--num-gpu-blocks-override", "2", "--no-enable-prefix-caching")
    assert code == 1 and data["starts"] and not data["servable"]
    (t,) = data["trace"]
    assert t["stall_reason"] == "no_progress" and t["preemptions"] > 1
    check_numbers(svg, [TimelineRun("x", StepTrace.from_json(t), t["bound"])])


def test_docs_pictures_are_small_and_referenced() -> None:
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    for name in ("seed-hang", "f2-livelock", "check-passes"):
        png = root / "docs" / "timelines" / f"{name}.png"
        assert png.stat().st_size < 200_000 and f"(docs/timelines/{name}.png)" in readme


def test_an_after_step_violation_is_marked(tmp_path: Path) -> None:
    """F2's minimal case: the caps check (run after every step) fails at a step; the report's
    picture re-runs the workload and marks that step."""
    from kvverify.props import examples as ex
    from kvverify.props.runtime import check_caps_on_workload
    from kvverify.reports.capture import Capture, RecordingTarget

    case = ex.F2_CASE
    plan = T.plan(case.vllm_config, case.kv_cache_specs)
    rec = RecordingTarget(T)
    with pytest.raises(AssertionError) as info:
        check_caps_on_workload(rec, plan, ex.F2_WORKLOAD)
    capture = Capture(function=check_caps_on_workload, kwargs={}, exc=info.value, flaws=(), fixes=(),
                      target_name="reference", workloads=rec.workloads, runs=rec.runs)
    report = reports.build_report(capture, found_by="test", directory=tmp_path)
    v = report["violation"]
    assert v["name"] == "caps.held_exceeds_cap" and isinstance(v["evidence"]["step"], int)
    (run,) = [TimelineRun.from_json(r) for r in report["timeline"]["runs"]]
    assert run.mark == (v["evidence"]["step"], "violated: caps.held_exceeds_cap")
    row = next(r for r in run.trace.rows if r.step == v["evidence"]["step"])
    assert sum(row.held) == v["evidence"]["held"] > v["evidence"]["cap"]  # the picture shows the excess
    svg = render_json(report["timeline"])
    marks = [e for e in parse(svg).iter() if e.get("data-event") == "violation"]
    assert [e.get("data-step") for e in marks] == [str(v["evidence"]["step"])]
    check_numbers(svg, [run])


def test_a_broken_timeline_does_not_break_the_index(tmp_path: Path) -> None:
    path = write_seed_report(tmp_path)
    data = json.loads(path.read_text())
    data["timeline"] = {"title": "t", "runs": [{"label": "x"}]}  # no trace
    path.write_text(json.dumps(data))
    (tmp_path / f"{data['id']}.svg").unlink()
    reports.render_index(tmp_path)
    assert "cannot be drawn" in (tmp_path / "index.html").read_text()


def test_docs_pictures_match_the_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/timelines/*.svg are what `kvverify check --plot` draws today (else: regenerate them and
    their PNGs with the commands in docs/timelines.md)."""
    docs = Path(__file__).resolve().parent.parent / "docs" / "timelines"
    runs = {"seed-hang": ["--model", "llama-3.1-8b", "--max-model-len", "512", "--num-gpu-blocks-override", "32",
                          "--flaw", "null_block_not_reserved"],
            "f2-livelock": ["--config-json", str(docs / "f2-chunked-local-config.json"), "--block-size", "32",
                            "--max-model-len", "64", "--max-num-batched-tokens", "8",
                            "--num-gpu-blocks-override", "2", "--no-enable-prefix-caching"]}
    for name, args in runs.items():
        out = tmp_path / f"{name}.svg"
        assert main(["check", *args, "--plot", str(out), "--json"]) == 1
        capsys.readouterr()
        assert out.read_text() == (docs / f"{name}.svg").read_text(), f"docs/timelines/{name}.svg is stale"


# --- state machines: the pool machine, rule by rule -------------------------------------

def hand_run(monkeypatch: pytest.MonkeyPatch):
    """``PoolMachine`` driven by hand with recording on: full attention, prefix caching on,
    N = 8: a request, its decode, its free (cached), a prefix hit, an allocation that evicts,
    frees and a prefix-cache reset."""
    import kvverify.props.pool_machine as pm
    from kvverify.reference.specs import KVCacheSpec

    monkeypatch.setattr(pm, "note", lambda *a: None)  # Hypothesis's note/target need a test context
    monkeypatch.setattr(pm, "hyp_target", lambda *a, **k: None)
    specs: dict[str, KVCacheSpec] = {"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)}
    case = StartupCase(VllmConfig(block_size=16, max_model_len=256, num_gpu_blocks_override=8), (specs,),
                       "override", None, 8, 8)

    class Recording(pm.PoolMachine):
        record_steps = True

    m = Recording()

    def checked(result=None):
        m.pool_invariants()
        m.block_hashes_follow_the_chain()
        return result

    checked(m.setup(case=case))
    r1 = checked(m.add_request(prompt_len=50, shared=50))
    checked(m.append_tokens(req=r1, n=16))
    checked(m.free(req=r1))
    r2 = checked(m.add_request(prompt_len=40, shared=40))
    r3 = checked(m.add_request(prompt_len=60, shared=0))
    checked(m.free(req=r2))
    checked(m.free(req=r3))
    checked(m.reset_prefix_cache())
    m.teardown()
    return m


def test_pool_machine_records_rule_by_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    m = hand_run(monkeypatch)
    trace = m.steps.result(False)
    assert trace.groups == ("full_attention B=16",) and trace.usable_blocks == 7 and trace.failed_step is None
    got = [(r.step, r.rule, r.live, r.free_blocks, r.held, r.allocated, r.freed, r.hits, r.evicted)
           for r in trace.rows]
    assert got == [
        (0, "setup", 0, 7, (0,), 0, 0, 0, 0),
        (1, "add_request", 1, 3, (4,), 4, 0, 0, 0),      # 50 tokens: 4 blocks, 3 of them full (cached)
        (2, "append_tokens", 1, 2, (5,), 1, 0, 0, 0),
        (3, "free", 0, 7, (0,), 0, 5, 0, 0),
        (4, "add_request", 1, 4, (3,), 1, 0, 2, 0),      # 2 blocks of the shared prefix hit
        (5, "add_request", 2, 0, (7,), 4, 0, 0, 2),      # takes the free queue's front: 2 cached evicted
        (6, "free", 1, 3, (4,), 0, 3, 0, 0),
        (7, "free", 0, 7, (0,), 0, 4, 0, 0),
        (8, "reset_prefix_cache", 0, 7, (0,), 0, 0, 0, 5),
    ]
    assert all(sum(r.held) + r.free_blocks + 1 == trace.num_blocks for r in trace.rows)
    assert m.kvm.block_pool.free_block_ids() == m.free_queue.queue  # the model agreed throughout
    assert RuleTrace.from_json(json.loads(json.dumps(trace.to_json()))) == trace


def check_rule_numbers(svg: str, trace: RuleTrace) -> None:
    """Every series and marker of a rule-by-rule picture, read back, equals the trace."""
    root = parse(svg)
    (gb,), (gr,) = panel(root, "blocks"), panel(root, "requests")
    step_of, value_of, _ = mapping(gb)
    tol = 0.06 * float(gb.get("data-v1")) / 100 + 0.05
    free = series(gb, "free_blocks")
    assert len(free) == 2 * len(trace.rows)
    top = series(gb, f"held:{len(trace.groups) - 1}", "polygon")[: 2 * len(trace.rows)]
    for i, r in enumerate(trace.rows):
        (xa, ya), (xb, yb) = free[2 * i], free[2 * i + 1]
        assert ya == yb and abs(value_of(ya) - r.free_blocks) <= tol
        assert abs(step_of(xa) - r.step) <= 0.05 and abs(step_of(xb) - (r.step + 1)) <= 0.05
        assert abs(value_of(top[2 * i][1]) - sum(r.held)) <= tol
    (usable,) = [e for e in gb.iter(f"{NS}line") if e.get("data-series") == "usable"]
    assert abs(value_of(float(usable.get("y1"))) - trace.usable_blocks) <= tol
    for event in ("allocated", "freed", "hits", "evicted"):
        marks = {int(e.get("data-step")): int(e.get("data-count")) for e in gb.iter()
                 if e.get("data-event") == event}
        assert marks == {r.step: getattr(r, event) for r in trace.rows if getattr(r, event)}, event
    _, live_of, _ = mapping(gr)
    assert [round(live_of(y), 3) for _, y in series(gr, "live")[::2]] == [r.live for r in trace.rows]
    failed = [e for e in root.iter() if e.get("data-event") == "failed"]
    assert [int(e.get("data-step")) for e in failed] == ([] if trace.failed_step is None else [trace.failed_step])
    texts = " ".join("".join(e.itertext()) for e in root.iter(f"{NS}text"))
    assert f"usable N − 1 = {trace.usable_blocks:,}" in texts


def test_rule_picture_numbers_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    m = hand_run(monkeypatch)
    for trace in (m.steps.result(False), m.steps.result(True, "pool.free_queue_order")):
        svg = render_rule_timeline(trace, title="t", subtitle="s")
        check_rule_numbers(svg, trace)
        data = rule_timeline_json(trace, title="t", subtitle="s")
        assert render_json(json.loads(json.dumps(data))) == svg  # identical input, identical bytes
    assert "failed in step 8 (reset_prefix_cache) with 0 held + 7 free of 7 usable" in svg
    with pytest.raises(ValueError, match="rows"):
        render_rule_timeline(RuleTrace((), 4, ()), title="t")


def pool_machine_failure() -> BaseException:
    """``PoolMachine`` under a zoo flaw (evictable prefix hits not counted) fails."""
    from hypothesis.stateful import run_state_machine_as_test

    from kvverify.props.pool_machine import PoolMachine

    fast = settings(max_examples=500, derandomize=True, database=None, deadline=None, print_blob=True,
                    phases=[Phase.generate], suppress_health_check=list(HealthCheck),
                    report_multiple_bugs=False, stateful_step_count=12)
    with flaws.enabled("evictable_hits_not_counted"):
        with pytest.raises(AssertionError) as info:
            run_state_machine_as_test(PoolMachine, settings=fast)
    return info.value


def pool_machine_report(exc: BaseException, where: Path) -> Path:
    """What the pytest hook writes for a failed state machine (``report_stateful``)."""
    from kvverify.props.pool_machine import PoolMachine

    with flaws.enabled("evictable_hits_not_counted"):
        (path,) = reports.report_stateful(PoolMachine, exc, directory=where, found_by="test",
                                          flaw_names=["evictable_hits_not_counted"])
    return path


def test_pool_machine_failure_report_has_its_timeline(tmp_path: Path) -> None:
    import hashlib

    exc = pool_machine_failure()
    path = pool_machine_report(exc, tmp_path)
    report = json.loads(path.read_text())
    name = report["violation"]["name"]  # the flaw's two symptoms; which one the search meets first varies
    assert report["kind"] == "stateful" and name in ("allocation.predictor_vs_allocator", "AssertionError")
    svg_path = tmp_path / f"{report['id']}.svg"
    svg = svg_path.read_text()
    assert hashlib.sha256(svg.encode()).hexdigest() == report["timeline"]["sha256"]
    trace = RuleTrace.from_json(report["timeline"]["trace"])
    # one row per rule of the falsifying program (setup first); it fails in the last one
    rules = [s.split("state.", 1)[1].split("(", 1)[0] for s in report["example"]["steps"] if "state." in s]
    assert [r.rule for r in trace.rows] == [r for r in rules if r not in (
        "pool_invariants", "block_hashes_follow_the_chain", "teardown")]
    assert trace.failed_step == trace.rows[-1].step and trace.failure == name
    check_rule_numbers(svg, trace)
    assert f"]({svg_path.name})" in path.with_suffix(".md").read_text()
    assert main(["report", "--dir", str(tmp_path), "--json"]) == 0
    assert svg.strip() in (tmp_path / "index.html").read_text()
    again = pool_machine_report(exc, tmp_path)  # same failure: the same files, byte for byte
    assert again == path and svg_path.read_text() == svg
    assert main(["replay", str(path)]) == 1  # the report still replays (its flaw switched on)


def test_a_program_that_no_longer_fails_gets_no_picture(tmp_path: Path) -> None:
    """The report is written without its flaw: the replay passes, so no timeline is drawn
    (the reason is kept under ``run``) and the report itself is still written."""
    from kvverify.props.pool_machine import PoolMachine

    (path,) = reports.report_stateful(PoolMachine, pool_machine_failure(), directory=tmp_path, found_by="test")
    report = json.loads(path.read_text())
    assert report["timeline"] is None and "did not fail again" in report["run"]["timeline_error"]
    assert not list(tmp_path.glob("*.svg")) and "svg" not in path.with_suffix(".md").read_text()
