"""Recorded differential: the reference against upstream vLLM 0.33.0's outputs, offline.

``properties/data/vllm-0.33.0-golden.json.gz`` holds cases drawn deterministically from the
suite's own strategies together with what the real, pinned vLLM 0.33.0 answered on each
(``scripts/record_vllm_golden.py``; docs/recorded-differential.md). Every record is replayed
here on the REFERENCE only — no vLLM import — and must match exactly, field by field, in the
order :mod:`test_differential` compares them: the plan (:data:`PLAN_FIELDS`), the numbers in a
startup-check refusal, max concurrency, the block-size pair, empty-pool admission, the
coordinator verdict and cache-hit alignment, the public capacity helpers, and whole workloads
(steps, preemptions, per-request finish step, stall verdict, per-step trace).

The ``observe_*`` functions below are the one definition of what a record holds: the recorder
calls them on the vLLM target, this replay on the reference. A refusal is a refusal whatever
its class (as in the live differential); the class is kept as evidence.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvverify import engines, golden
from kvverify.errors import KVVerifyError
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec
from kvverify.reference.planner import StartupPlan
from kvverify.strategies import BlockSizeCase, StartupCase
from kvverify.targets.base import TargetUnsupported
from kvverify.targets.reference import ReferenceTarget
from test_differential import PLAN_FIELDS, diff_values

CORPUS = Path(__file__).parent / "data" / "vllm-0.33.0-golden.json.gz"
REFERENCE = ReferenceTarget()
#: The fewest records of each kind a corpus must hold (a truncated corpus fails).
MIN_RECORDS = {"startup": 700, "wide": 250, "block_sizes": 350, "capacity": 250, "workload": 350,
               "swa_workload": 150, "lookahead": 150, "mamba_workload": 150, "connector_workload": 200}
#: Records per test id, by kind (each id well under half a second on an idle core).
CHUNK = {"startup": 20, "wide": 20, "block_sizes": 50, "capacity": 50, "workload": 6, "swa_workload": 6,
         "lookahead": 20, "mamba_workload": 6, "connector_workload": 6}

# ------------------------------------------------------------------ observations
# (shared with scripts/record_vllm_golden.py: the recorder runs them on the vLLM target)


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", value)`` or ``("raises", class name)``; an input the target cannot express propagates."""
    try:
        return "ok", fn()
    except TargetUnsupported:
        raise
    except (KVVerifyError, AssertionError, NotImplementedError, ValueError) as e:
        return "raises", type(e).__name__


_CHECK_NUMBERS = (
    ("max_model_len", re.compile(r"max seq len \((-?\d+)\)")),
    ("needed", re.compile(r"\(?(\d+)(?: GiB KV cache is| bytes of KV cache are) needed")),
    ("available", re.compile(r"available KV cache memory \((-?\d+)(?: GiB| bytes)\)")),
    ("estimated_max_model_len", re.compile(r"estimated maximum model length is (\d+)")),
)


def check_numbers(message: str | None) -> dict[str, Any] | None:
    """The startup check's verdict and the numbers its message states (``None``: it passed).

    Upstream words its message in GiB; the recorder has ``format_gib`` print exact bytes, so
    the reference's byte counts compare exactly. A number the message does not state is absent.
    """
    if message is None:
        return None
    kind = ("no_memory" if message.startswith("No available memory for the cache blocks") else
            "auto_fit" if message.startswith("Cannot auto-fit max_model_len") else
            "too_small" if message.startswith("To serve at least one request") else "other")
    out: dict[str, Any] = {"kind": kind}
    for name, pattern in _CHECK_NUMBERS:
        m = pattern.search(message)
        if m:
            out[name] = int(m.group(1))
    return out


def _plan_fields(plan: StartupPlan) -> dict[str, Any]:
    out = {f"plan.{name}": read(plan) for name, read in PLAN_FIELDS}
    out["check"] = None if plan.starts else check_numbers(plan.error)
    return out


def observe_startup(target: Any, case: StartupCase, pick_tokens: Callable[[int], int]) -> dict[str, Any]:
    """Plan, check numbers, max concurrency, block-size pair, empty-pool admission of ``pick_tokens(L)``."""
    planned = outcome(lambda: target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory))
    if planned[0] != "ok":
        return {"plan": planned}
    plan: StartupPlan = planned[1]
    out: dict[str, Any] = {"plan": ("ok", None), **_plan_fields(plan)}
    if not plan.groups:
        return out
    out["max_concurrency"] = round(target.max_concurrency(plan), 9)
    out["block_sizes"] = outcome(lambda: target.resolve_block_sizes(plan.kv_cache_config, plan.vllm_config))
    length = plan.vllm_config.max_model_len
    if plan.num_blocks >= 1 and length >= 2:
        num_tokens = out["num_tokens"] = pick_tokens(length)
        out["admit_on_empty_pool"] = outcome(lambda: target.admit_on_empty_pool(plan, num_tokens))
    return out


def observe_block_sizes(target: Any, case: BlockSizeCase) -> dict[str, Any]:
    """Block-size pair (or a refusal), coordinator verdict, cache-hit alignment."""
    cfg, vc = case.kv_cache_config, case.vllm_config
    out: dict[str, Any] = {"block_sizes": outcome(lambda: target.resolve_block_sizes(cfg, vc))}
    if out["block_sizes"][0] == "ok":
        scheduler, hash_size = out["block_sizes"][1]
        out["coordinator_accepts"] = target.coordinator_accepts(cfg, vc, scheduler, hash_size) is None
        out["cache_hit_alignment_tokens"] = outcome(
            lambda: target.resolve_cache_hit_alignment_tokens(cfg, vc, scheduler, hash_size))
    return out


def observe_capacity(target: Any, config: VllmConfig, specs: dict[str, Any], memory: int) -> dict[str, Any]:
    """The public ``check_enough_kv_cache_memory`` (verdict + numbers) and ``estimate_max_model_len``."""
    check = outcome(lambda: target.check_enough_kv_cache_memory(config, specs, memory))
    return {"check_enough_kv_cache_memory": ("ok", check_numbers(check[1])) if check[0] == "ok" else check,
            "estimate_max_model_len": outcome(lambda: target.estimate_max_model_len(config, specs, memory))}


def observe_workload(target: Any, case: StartupCase,
                     pick_workload: Callable[[int], Sequence[WorkloadSpec]]) -> dict[str, Any] | None:
    """The plan, then ``pick_workload(L)`` run to the end: steps, preemptions, finish steps, trace.
    ``None`` where the live differential skips (no groups, fewer than 2 blocks, ``L < 2``)."""
    planned = outcome(lambda: target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory))
    if planned[0] != "ok":
        return {"plan": planned}
    plan: StartupPlan = planned[1]
    if not plan.groups or plan.num_blocks < 2 or plan.vllm_config.max_model_len < 2:
        return None
    out: dict[str, Any] = {"plan": ("ok", None), **_plan_fields(plan)}
    work = out["workload"] = tuple(pick_workload(plan.vllm_config.max_model_len))
    finish: dict[str, int] = {}

    def on_step(sched: Any, step: int) -> None:
        for rid in sched.finished:
            finish.setdefault(rid, step)

    ran = outcome(lambda: target.run_workload(plan, work, on_step=on_step))
    if ran[0] != "ok":
        out["run_workload"] = ran
        return out
    result = ran[1]
    finish = dict(sorted(finish.items()))
    out["run_workload"] = ("ok", None)
    out.update({"steps": result.steps, "preemptions": result.preemptions, "finish_step": finish,
                "stall_reason": result.stall_reason, "error": result.error, "finished": result.finished,
                "trace": result.trace})
    return out


def observe_connector_workload(target: Any, case: StartupCase,
                               pick: Callable[[int, int], tuple[Sequence[WorkloadSpec], Any]]) -> dict[str, Any] | None:
    """The plan, then ``pick(L, B)`` (a workload and its connector script, ``None`` with the
    connector off) through the connector scheduler: the run as :func:`observe_workload` records
    it, and every call the connector saw (``get_num_new_matched_tokens`` answers,
    ``update_state_after_alloc`` counts, ``request_finished`` verdicts), in order."""
    planned = outcome(lambda: target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory))
    if planned[0] != "ok":
        return {"plan": planned}
    plan: StartupPlan = planned[1]
    if not plan.starts or not plan.groups or plan.num_blocks < 2 or plan.vllm_config.max_model_len < 2:
        return None
    out: dict[str, Any] = {"plan": ("ok", None), **_plan_fields(plan)}
    work, script = pick(plan.vllm_config.max_model_len, plan.vllm_config.block_size)
    out["workload"], out["script"] = tuple(work), script
    sched = target.connector_scheduler(plan, script)
    finish: dict[str, int] = {}

    def on_step(s: Any, step: int) -> None:
        for rid in s.finished:
            finish.setdefault(rid, step)

    ran = outcome(lambda: target.run_connector_workload(plan, out["workload"], script, scheduler=sched,
                                                        on_step=on_step))
    state = sched.connector_state
    out["connector_calls"] = tuple(state.calls) if state is not None else ()
    if ran[0] != "ok":
        out["run_workload"] = ran
        return out
    result = ran[1]
    out["run_workload"] = ("ok", None)
    out.update({"steps": result.steps, "preemptions": result.preemptions, "finish_step": dict(sorted(finish.items())),
                "stall_reason": result.stall_reason, "error": result.error, "finished": result.finished,
                "trace": result.trace})
    return out


# ------------------------------------------------------------------------ replay

@dataclass(frozen=True)
class Record:
    index: int
    kind: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]


def load_records(path: Path = CORPUS) -> tuple[dict[str, Any], list[Record]]:
    corpus = golden.read_corpus(path)
    records = [Record(i, r["kind"], golden.decode(r["inputs"], f"record {i} inputs"),
                      golden.decode(r["outputs"], f"record {i} outputs"))
               for i, r in enumerate(corpus["records"])]
    return corpus, records


def replay(record: Record) -> dict[str, Any] | None:
    """What the reference observes on the record's inputs."""
    inp, out = record.inputs, record.outputs
    if record.kind in ("startup", "wide", "lookahead"):
        return observe_startup(REFERENCE, inp["case"], lambda _length: out.get("num_tokens", 1))
    if record.kind == "block_sizes":
        return observe_block_sizes(REFERENCE, inp["case"])
    if record.kind == "capacity":
        return observe_capacity(REFERENCE, inp["config"], inp["specs"], inp["memory"])
    if record.kind in ("workload", "swa_workload", "mamba_workload"):
        return observe_workload(REFERENCE, inp["case"], lambda _length: out.get("workload", ()))
    if record.kind == "connector_workload":
        return observe_connector_workload(REFERENCE, inp["case"],
                                          lambda _length, _block: (out.get("workload", ()), out.get("script")))
    raise golden.GoldenFormatError(f"record {record.index}: unknown kind {record.kind!r}; {golden.RERECORD}")


_ABSENT = "<not observed>"


def compare(record: Record, observed: dict[str, Any] | None) -> str | None:
    """The first field on which the reference differs from the recording, as a message (or None)."""
    where = f"record {record.index} ({record.kind})"
    if observed is None:
        return f"{where}: the reference's plan is not runnable (no groups, < 2 blocks or L < 2); vLLM's was"
    expected = record.outputs
    for name in [*expected, *(k for k in observed if k not in expected)]:
        a, b = observed.get(name, _ABSENT), expected.get(name, _ABSENT)
        context: dict[str, Any] = {}
        if name == "trace" and a != b and isinstance(a, tuple) and isinstance(b, tuple):
            first = next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), min(len(a), len(b)))
            a, b, context = a[first:first + 3], b[first:first + 3], {"first_differing_step": first}
        violations = diff_values(name, a, b, **context)
        if violations:
            v = violations[0]
            extra = {k: x for k, x in v.evidence.items() if k not in ("reference", "vllm")}
            return (f"{where}: reference and vLLM 0.33.0 disagree on {name}: "
                    f"reference={v.evidence.get('reference')!r} vllm={v.evidence.get('vllm')!r}"
                    f"{f' {extra}' if extra else ''} (its inputs: load_records()[1][{record.index}].inputs)")
    return None


@functools.cache
def corpus_and_records() -> tuple[dict[str, Any], list[Record]]:
    """The default corpus, decoded once per process."""
    return load_records(CORPUS)


def _chunks() -> list[Any]:
    try:
        _, records = corpus_and_records()
    except (FileNotFoundError, golden.GoldenFormatError):
        return []  # test_corpus_format_and_coverage says why
    by_kind: dict[str, list[int]] = {}
    for r in records:
        by_kind.setdefault(r.kind, []).append(r.index)
    params = []
    for kind, indices in by_kind.items():
        size = CHUNK.get(kind, 10)
        for start in range(0, len(indices), size):
            part = tuple(indices[start:start + size])
            params.append(pytest.param(part, id=f"{kind}-{start // size:03d}"))
    return params


def first_disagreement(indices: Sequence[int]) -> str | None:
    records = corpus_and_records()[1]
    for i in indices:
        message = compare(records[i], replay(records[i]))
        if message:
            return message
    return None


#: Recorded cases on which the reference and vLLM 0.33.0 disagree (fidelity findings), by
#: record index, with the reason they stay out of the verdict (docs/recorded-differential.md).
KNOWN_DISAGREEMENTS: dict[int, str] = {}


@pytest.mark.parametrize("indices", _chunks())
def test_reference_matches_recorded_vllm(indices: tuple[int, ...]) -> None:
    """Every recorded case: the reference's outputs equal vLLM 0.33.0's, exactly."""
    message = first_disagreement([i for i in indices if i not in KNOWN_DISAGREEMENTS])
    assert message is None, message


def test_corpus_format_and_coverage() -> None:
    """The corpus is this format's, recorded from 0.33.0, and holds enough of every kind."""
    corpus, records = corpus_and_records()
    assert corpus["format_version"] == golden.FORMAT_VERSION
    assert corpus["vllm_version"] == "0.33.0"
    assert corpus["kvverify_commit"] and corpus["strategies"]
    counts = Counter(r.kind for r in records)
    short = {k: (counts[k], n) for k, n in MIN_RECORDS.items() if counts[k] < n}
    assert not short, f"corpus truncated? (kind: (found, minimum)) {short}; {golden.RERECORD}"
    refusals = sum(1 for r in records if r.kind == "startup" and r.outputs.get("check"))
    assert refusals >= 30, f"only {refusals} startup-check refusals recorded"
    # the planner-corpus class closed by issue 29 (item 7): hybrids whose scheduler block is a
    # multiple of the hash block, where partial hash hits make upstream align hits to the hash
    # block size; the replay (test_reference_matches_recorded_vllm) must match each of them
    hash_aligned = [r for r in records if r.kind == "block_sizes" and r.outputs["block_sizes"][0] == "ok"
                    and r.outputs["cache_hit_alignment_tokens"][1] == r.outputs["block_sizes"][1][1]
                    != r.outputs["block_sizes"][1][0]]
    assert len(hash_aligned) >= 20, f"only {len(hash_aligned)} hash-aligned cache-hit records; {golden.RERECORD}"


# ---------------------------------------------------------- it can fail (bug zoo)

#: Zoo flaws that change mirrored behaviour on the recorded cases: the replay must catch each.
#: The others give their reason in the catalogue (``Flaw.not_in_recorded``, docs/recorded-differential.md).
#: Every engine's flaws (kvverify.engines): an SGLang flaw's reason is that the corpus is vLLM's.
CATALOG = engines.flaw_catalog()
RECORDED_CATCHES = [f.name for f in CATALOG.values() if not f.not_in_recorded]


@pytest.mark.parametrize("flaw", RECORDED_CATCHES)
def test_recorded_differential_catches_flaw(flaw: str) -> None:
    """With the flaw switched on, some record disagrees with upstream (the replay can fail)."""
    records = corpus_and_records()[1]
    with engines.enabled(flaws=[flaw]):
        try:
            message = first_disagreement(range(len(records)))
        except Exception as e:  # noqa: BLE001 - a replay that crashes fails the replay test too
            message = f"{type(e).__name__}: {e}"
    assert message is not None, f"{flaw}: no recorded case disagrees with vLLM 0.33.0"


@pytest.mark.parametrize("flaw", [f.name for f in CATALOG.values() if f.not_in_recorded])
def test_flaws_the_corpus_cannot_see_are_not_seen(flaw: str) -> None:
    """The catalogue's ``not_in_recorded`` reason holds: with the flaw on, every record still agrees."""
    records = corpus_and_records()[1]
    with engines.enabled(flaws=[flaw]):
        message = first_disagreement([i for i in range(len(records)) if i not in KNOWN_DISAGREEMENTS])
    assert message is None, f"{flaw}: the recorded differential sees it now; drop its `not_in_recorded`: {message}"


# ------------------------------------------------------------------------- codec

def test_codec_round_trips_a_record_exactly() -> None:
    """Tuples stay tuples, dict keys keep type and order, dataclasses come back equal."""
    records = corpus_and_records()[1]
    for kind in MIN_RECORDS:
        r = next(r for r in records if r.kind == kind)
        again = golden.decode(golden.encode(r.inputs))
        assert again == r.inputs and type(again["case"] if "case" in again else again["config"]) is type(
            r.inputs["case"] if "case" in r.inputs else r.inputs["config"])
    value = {1: (2, [3, (4,)]), "a": None}
    assert golden.decode(golden.encode(value)) == value
    assert isinstance(golden.decode(golden.encode(value))[1], tuple)


def test_codec_names_unknown_types_and_vanished_fields() -> None:
    with pytest.raises(golden.GoldenFormatError, match="cannot encode a .*Counter"):
        golden.encode(Counter())
    with pytest.raises(golden.GoldenFormatError, match="unknown type 'Evil'.*re-record"):
        golden.decode({"$c": "Evil", "f": {}})
    config = golden.encode(VllmConfig())
    config["f"]["gone_field"] = 1
    with pytest.raises(golden.GoldenFormatError, match="VllmConfig has no field gone_field.*re-record"):
        golden.decode(config, "record 7 inputs")
