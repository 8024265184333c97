"""The lemma machinery itself: three-valued results, strict findings, replay checks, CLI output."""

from __future__ import annotations

import io
import json

import pytest
import z3

from kvverify.reference import arith
from kvverify.errors import ConfigError
from kvverify.lemmas import BY_NAME, FINDINGS, LEMMAS, Case, Finding, Lemma, ReplayOutcome, Var, prove
from kvverify.cli.lemmas import exit_code, results_json, results_table, run_lemmas


def _lemma(claim, replay=None, expected="proved", finding=None, variables=(Var("x", 0, 100),)):
    return Lemma(name="t", topic="test", statement="s", domain="x in [0, 100]",
                 cases=lambda: [Case("only", {}, variables, domain=lambda v: [], claim=claim,
                                     shrink=("x",))],
                 replay=replay, expected=expected, finding=finding)


def test_proved():
    r = prove(_lemma(lambda v: arith.cdiv(v["x"], 4) * 4 >= v["x"]))
    assert (r.result, r.ok, r.cases) == ("proved", True, 1)


def test_counterexample_is_shrunk_and_replayed():
    seen = {}

    def replay(case, values):
        seen.update(values)
        return ReplayOutcome(values["x"] > 10, "x too big")

    r = prove(_lemma(lambda v: v["x"] <= 10, replay=replay))
    assert r.result == "counterexample" and not r.ok
    assert r.counterexample["values"] == {"x": 11} == seen  # shrunk to the boundary
    assert r.replay_confirmed and r.status == "COUNTEREXAMPLE"


def test_unconfirmed_replay_is_a_lemma_error_not_a_counterexample():
    r = prove(_lemma(lambda v: v["x"] <= 10, replay=lambda c, v: ReplayOutcome(False, "no")))
    assert r.result == "unknown" and not r.ok
    assert "lemma error" in r.reason and r.replay_confirmed is False


def test_int_backend_disagreement_is_a_lemma_error():
    # a claim that is false on z3 terms but true on ints: the int re-evaluation refuses it
    def claim(v):
        return z3.BoolVal(False) if isinstance(v["x"], z3.ExprRef) else True

    r = prove(_lemma(claim))
    assert r.result == "unknown" and "int backend" in r.reason


def test_unknown_is_a_failure():
    r = prove(BY_NAME["swa_held_within_cap"], rlimit=50)
    assert r.result == "unknown" and not r.ok and r.status == "UNKNOWN"
    assert "rlimit" in r.reason


def test_builder_error_is_unknown():
    def claim(v):
        raise RuntimeError("boom")

    r = prove(_lemma(claim))
    assert r.result == "unknown" and "boom" in r.reason


def test_known_finding_is_strict():
    finding = Finding("FX", "t", "u", "c", fix="concurrency_counts_usable_blocks")
    reproduced = prove(_lemma(lambda v: v["x"] <= 10, expected="counterexample", finding=finding))
    assert reproduced.ok and reproduced.known_finding and reproduced.status == "known finding"
    gone = prove(_lemma(lambda v: v["x"] <= 100, expected="counterexample", finding=finding))
    assert gone.result == "proved" and not gone.ok
    assert gone.status.startswith("STRICT")


def test_fix_requires_a_finding():
    with pytest.raises(ValueError):
        prove(_lemma(lambda v: True), fix=True)


def test_registry():
    assert len(BY_NAME) == len(LEMMAS)
    assert {f.id for f in FINDINGS.values()} >= {"F1-concurrency-counts-null-block",
                                                  "F2-chunked-local-cap-misaligned-chunk"}
    for lemma in LEMMAS:
        assert lemma.domain and lemma.statement and lemma.expected in ("proved", "counterexample")


def test_cli_support_outputs():
    results = run_lemmas(names=["null_block_explicit", "concurrency_reports_servable"])
    assert exit_code(results) == 0  # proved + known finding
    data = json.loads(results_json(results))
    assert [d["name"] for d in data] == ["null_block_explicit", "concurrency_reports_servable"]
    for d in data:
        assert {"name", "domain", "result", "seconds", "expected", "finding"} <= set(d)
        assert d["result"] in ("proved", "counterexample", "unknown")
    assert data[1]["finding"] == "F1-concurrency-counts-null-block"
    from rich.console import Console
    buf = io.StringIO()
    Console(file=buf, width=160).print(results_table(results))
    text = buf.getvalue()
    assert "null_block_explicit" in text and "known finding" in text


def test_cli_support_flaw_exit_code_and_errors():
    results = run_lemmas("null_block_not_reserved", names=["null_block_explicit"])
    assert results[0].result == "counterexample" and exit_code(results) == 1
    with pytest.raises(ConfigError):
        run_lemmas("no_such_flaw")
    with pytest.raises(ConfigError):
        run_lemmas(names=["no_such_lemma"])


def test_fixes_mode_proves_findings():
    results = run_lemmas(names=["concurrency_reports_servable"], fixes=True)
    assert results[0].result == "proved" and results[0].ok
