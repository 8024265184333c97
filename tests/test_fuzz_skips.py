"""`kvverify fuzz`: a property the target cannot run is *skipped* with its reason — in the
summary, the JSON and the exit code (0) — never a failure or a counterexample report; and
the database-bound options refuse what cannot work."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from kvverify.cli import main
from kvverify.cli import fuzz as F
from kvverify.errors import ConfigError
from kvverify.hypothesis_hooks import given

ROOT = Path(__file__).resolve().parents[1]
REASON = "the reference target cannot express this (a test's skip)"


@given(n=st.integers(0, 5))
def _skipping_property(target, n: int) -> None:
    pytest.skip(REASON)


@given(n=st.integers(0, 5))
def _failing_property(target, n: int) -> None:
    assert n < 3, "planted failure"


class _SkippingMachine(RuleBasedStateMachine):
    @rule()
    def step(self) -> None:
        import unittest
        raise unittest.SkipTest("this machine needs a capability the target lacks")


def _props() -> list[F.FuzzProperty]:
    return [F.FuzzProperty("test_skipping", _skipping_property, "given", __name__),
            F.FuzzProperty("test_failing", _failing_property, "given", __name__),
            F.FuzzProperty("SkippingMachine", _SkippingMachine, "stateful", __name__)]


def test_a_skipped_property_is_skipped_not_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(F, "discover_properties", lambda suite=None: _props())
    code = main(["fuzz", "--seconds", "5", "--no-progress", "--json", "-k", "test_skipping", "-k", "Skipping",
                 "--reports-dir", str(tmp_path / "reports")])
    out = capsys.readouterr().out
    summary = json.loads(out)  # stdout is the JSON alone
    assert code == 0, "a skip must not fail the run"
    assert summary["failures"] == 0 and summary["skipped"] == 2 and summary["reports"] == []
    by_name = {p["name"]: p for p in summary["properties"]}
    assert by_name["test_skipping"]["status"] == "skipped" and by_name["test_skipping"]["detail"] == REASON
    assert by_name["SkippingMachine"]["status"] == "skipped"
    assert "needs a capability" in by_name["SkippingMachine"]["detail"]
    assert not (tmp_path / "reports").exists() or not list((tmp_path / "reports").glob("*.json"))

    # the table says so too, and a real failure beside the skips still fails the run
    code = main(["fuzz", "--seconds", "5", "--no-progress", "--reports-dir", str(tmp_path / "reports")])
    text = capsys.readouterr().out
    assert code == 1 and "skipped" in text and "1 failing" in text and "2 skipped" in text
    assert len(list((tmp_path / "reports").glob("test_failing-*.json"))) == 1
    assert not list((tmp_path / "reports").glob("test_skipping-*"))


def test_skip_reason_reads_groups_and_ignores_failures() -> None:
    import unittest
    assert F.skip_reason(unittest.SkipTest("why")) == "why"
    assert F.skip_reason(AssertionError("no")) is None
    group = BaseExceptionGroup("g", [unittest.SkipTest("a"), unittest.SkipTest("a")])
    assert F.skip_reason(group) == "a"
    assert F.skip_reason(BaseExceptionGroup("g", [unittest.SkipTest("a"), AssertionError()])) is None


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed in this venv")
def test_vllm_target_skips_encoder_decoder_properties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pin's decoder-only adapter skips three encoder-decoder properties: skipped, exit 0
    (it was "failures: 3", exit 1 and three reports whose only content was the skip)."""
    monkeypatch.chdir(tmp_path)
    summary = F.run_fuzz(8, target="vllm", patterns=["encoder_decoder"], suite=ROOT / "properties", live=False,
                         reports_dir=tmp_path / "reports")
    skipped = {p.name: p.detail for p in summary.properties if p.status == "skipped"}
    assert summary.failures == 0 and not summary.reports
    assert {"test_encoder_decoder_startup_passes_implies_servable", "test_encoder_decoder_refusal_is_necessary",
            "test_encoder_decoder_predictor_equals_allocator"} <= set(skipped)
    assert all("decoder-only" in why for why in skipped.values())


def test_database_options_refuse_what_cannot_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="seed"):
        F.run_fuzz(1, profile="nightly", seed=3, live=False)
    with pytest.raises(ConfigError, match="owned-keys"):
        F.run_fuzz(1, profile="ci", owned_keys=tmp_path / "o.json", live=False)
    (tmp_path / "a-dir").mkdir()
    with pytest.raises(ConfigError, match="regular file"):
        F.run_fuzz(1, profile="nightly", owned_keys=tmp_path / "a-dir", live=False)
    monkeypatch.delenv("HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY", raising=False)
    with pytest.raises(ConfigError, match="HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY"):
        F.run_fuzz(1, profile="dev", coverage_json=tmp_path / "c.json", live=False)
    assert main(["fuzz", "--profile", "nightly", "--seed", "1", "--seconds", "1", "--no-progress"]) == 2
