"""Recorded differential for the length derivation and the trap rules: kvverify against what the
real vLLM 0.33.0 answered, offline (no vLLM import).

``properties/data/vllm-0.33.0-lengths.json.gz`` (``scripts/record_vllm_lengths.py``) holds every
catalog model's lengths and generated ``config.json`` files (``length_configs()``) with vLLM's
``max_model_len`` outcome, and generated trap cases (``test_traps.trap_cases()``) with vLLM's
rule outcome; each is replayed here through ``test_differential_lengths.kvverify_outcome`` and
``test_traps.kvverify_trap`` and must match exactly (the same length, the same refusal kind).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from kvverify import golden
from test_differential_lengths import kvverify_outcome
from test_traps import kvverify_trap

CORPUS = Path(__file__).parent / "data" / "vllm-0.33.0-lengths.json.gz"
#: the fewest records of each kind a corpus must hold (a truncated corpus fails)
MIN_RECORDS = {"length": 1500, "trap": 500}
CHUNK = 100


@functools.lru_cache(maxsize=1)
def records() -> list[dict[str, Any]]:
    if not CORPUS.exists():
        pytest.fail(f"{CORPUS} is missing: record it with scripts/record_vllm_lengths.py")
    return [golden.decode(r, f"record {i}") for i, r in enumerate(golden.read_corpus(CORPUS)["records"])]


def replay(record: dict[str, Any]) -> tuple[Any, Any]:
    if record["kind"] == "length":
        mine = kvverify_outcome(record["config"], record["requested"], record["allow_long"])
        theirs = tuple(record["vllm"])
        return (mine[0], mine[1] if mine[0] == "max_model_len" else None), \
            (theirs[0], theirs[1] if theirs[0] == "max_model_len" else None)
    return kvverify_trap(record["case"]), record["vllm"]


def test_the_corpus_is_complete() -> None:
    counts = {k: sum(1 for r in records() if r["kind"] == k) for k in MIN_RECORDS}
    assert all(counts[k] >= n for k, n in MIN_RECORDS.items()), counts
    assert {r["source"] for r in records() if r["source"].startswith("catalog:")} >= {
        f"catalog:{n}" for n in __import__("kvverify.catalog", fromlist=["list_models"]).list_models()}


@pytest.mark.parametrize("chunk", range(0, 2600, CHUNK))
def test_recorded_answers_match(chunk: int) -> None:
    batch = records()[chunk:chunk + CHUNK]
    for i, record in enumerate(batch):
        mine, theirs = replay(record)
        assert mine == theirs, f"record {chunk + i} ({record['source']}): kvverify {mine}, vLLM 0.33.0 {theirs}"
