"""The event-run equality property (``properties/test_eventrun.py``) earns its place: planted
mistakes in the event model are caught, while the faithful model passes; and the model's
registry is complete (every recycling kind has a shape, or the run declines it by name).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import kvverify.eventrun.held as held
import kvverify.eventrun.runner as runner
import kvverify.eventrun.search as search
from kvverify import eventrun
from kvverify.reference import kinds
from kvverify.reference.specs import ChunkedLocalAttentionSpec, SlidingWindowSpec

QUICK = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                 suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])


def caught() -> str:
    from test_eventrun import MAMBA_ALIGN_CYCLES, SWA_PEAK_MIDSTRETCH, check_event_run_equals_driver, lone_requests

    @QUICK
    @given(run=lone_requests())
    @example(run=SWA_PEAK_MIDSTRETCH)
    @example(run=MAMBA_ALIGN_CYCLES)
    def prop(run) -> None:
        check_event_run_equals_driver(*run)

    with pytest.raises(AssertionError) as info:
        prop()
    return str(info.value)


@pytest.fixture(autouse=True)
def _suite_on_path(monkeypatch) -> None:
    import sys
    from pathlib import Path
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "properties"))
    sys.modules.pop("test_eventrun", None)


def test_catches_a_swa_shape_without_its_period(monkeypatch) -> None:
    """The SWA shape claims period 1 (constant once the window is full): the peak search looks
    at one step of a stretch and misses the step where the window's blocks peak. (A later
    ``steady_from`` or a longer period would be equivalent: the search then looks at more steps.)"""
    real = held._RECYCLING_SHAPES["sliding_window"]
    monkeypatch.setitem(held._RECYCLING_SHAPES, "sliding_window", lambda v, b: (real(v, b)[0], 1))
    assert "differs" in caught() or "preemption" in caught()


def test_catches_a_decode_stretch_one_step_short(monkeypatch) -> None:
    """A decode stretch that stops one step early loses a step of the run."""
    original = runner._Run.rec_stretch

    def short(self, first, c0, k, m, *, last_of_run):
        return original(self, first, c0, k, max(m - 1, 1), last_of_run=last_of_run)

    monkeypatch.setattr(runner._Run, "rec_stretch", short)
    assert "trace differs" in caught()


def test_catches_a_peak_search_that_only_looks_at_the_last_step(monkeypatch) -> None:
    """Periodic groups peak mid-stretch: judging a stretch by its last step misses preemptions."""
    def last_only(models, c0, k, m, *, lookahead, max_model_len):
        return sum(g.held(c0 + (m - 1) * k, k) for g in models)

    monkeypatch.setattr(runner, "stretch_peak", last_only)
    assert "differs" in caught() or "preempt" in caught()


def test_catches_held_blocks_that_ignore_the_lookahead(monkeypatch) -> None:
    real = held.group_model

    def no_lookahead(group_spec, *, lookahead, max_model_len):
        return real(group_spec, lookahead=0, max_model_len=max_model_len)

    monkeypatch.setattr(runner, "group_model", no_lookahead)
    assert "differs" in caught() or "disagree" in caught() or "preemption" in caught()


def test_catches_a_cycle_jump_past_the_last_checkpoint(monkeypatch) -> None:
    """Skipping one repeat of the Mamba-align chunk pattern too many runs over the checkpoint
    where the split ends a chunk early."""
    original = runner._Run._jump_cycles

    def overshoot(self, history, step, c, k, n, sched):
        got = original(self, history, step, c, k, n, sched)
        if got is None:
            return None
        (_, c0, _), (s1, c1, _) = history[0], history[-1]
        return got[0] + (s1 - history[0][0]), got[1] + (c1 - c0)

    monkeypatch.setattr(runner._Run, "_jump_cycles", overshoot)
    assert "differs" in caught()


def test_every_recycling_kind_has_a_shape() -> None:
    """A new recycling kind must get a shape here (else the check runs it step by step, by name)."""
    assert {k.name for k in kinds.recycling_kinds()} <= eventrun.modelled_recycling_kinds()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(block=st.sampled_from([1, 2, 3, 4, 16, 544]), window=st.integers(1, 700), extra=st.integers(0, 8),
       chunk=st.integers(1, 700), k=st.integers(1, 40), la=st.integers(0, 8), c=st.integers(0, 3000))
def test_shapes_are_what_the_held_functions_do(block, window, extra, chunk, k, la, c) -> None:
    """The stated shapes hold: non-decreasing before ``steady_from``, periodic after (unclamped)."""
    length = 10**9
    for spec in (SlidingWindowSpec(block_size=block, num_kv_heads=1, head_size=1, sliding_window=window,
                                   extra_retained_tokens=extra),
                 ChunkedLocalAttentionSpec(block_size=block, num_kv_heads=1, head_size=1, attention_chunk_size=chunk)):
        g = held.group_model(spec, lookahead=la, max_model_len=length)
        if c + 1 < g.steady_from:
            assert g.held(c, k) <= g.held(c + 1, k)
        if c >= g.steady_from:
            assert g.held(c + g.period, k) == g.held(c, k)


def test_a_huge_common_period_declines_instead_of_running_away() -> None:
    spec = ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=1, head_size=1, attention_chunk_size=999_983)
    g = held.group_model(spec, lookahead=0, max_model_len=10**9)
    with pytest.raises(eventrun.Unsupported):
        search.stretch_peak([g], 0, 1, 10**8, lookahead=0, max_model_len=10**9)
