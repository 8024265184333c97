"""The check's servability runs: one ``max_model_len`` request alone on the runtime pool.

Two splits: *prompt-heavy* (1 output token: chunked prefill and the admission gate over the
whole length) and *decode-heavy* (1 prompt token, every other token decoded). On the reference
without a flaw they run by events (:func:`kvverify.eventrun.run_alone`: the driver's result and
picture at any length); where the event-based run declines (a step would outgrow the pool, a
flaw, a kind it does not model) or on another target, they run step by step through the
target's scheduler, which is bounded: :data:`STEPWISE_MAX_TOKENS` tokens at most, a pool of at
most :data:`MAX_RUN_BLOCKS` blocks, and a decode-heavy split of at most :data:`FULL_DECODE_LIMIT`
decoded tokens (beyond it, :data:`DECODE_CAP` output tokens; the output says so).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from kvverify import eventrun

if TYPE_CHECKING:
    from kvverify.reference.planner import StartupPlan
    from kvverify.targets.base import Target

#: above this many blocks, a step-by-step run uses a pool of this many (a request alone never
#: touches more than its own blocks; building millions of free-list entries only costs time)
MAX_RUN_BLOCKS = 2_000_000
#: a step-by-step run materialises the request's tokens: at most this many
STEPWISE_MAX_TOKENS = 1 << 22
#: a step-by-step decode-heavy split decodes every token up to this length (~20 us per step),
#: and only :data:`DECODE_CAP` output tokens beyond it
FULL_DECODE_LIMIT = 262_144
DECODE_CAP = 4_096
SECONDS_PER_STEP = 20e-6

SPLITS = ("prompt-heavy", "decode-heavy")


@dataclasses.dataclass(frozen=True)
class Runs:
    """What the runs found: per split a JSON-able record, the overall verdict, and notes."""

    servable: bool | None  # None: a run was not simulated
    runs: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]


def servability(tgt: Target, plan: StartupPlan, *, events: bool, record_trace: bool = False) -> Runs:
    """Run the two splits (the second only if the first completes). ``events``: the event-based
    run may be used (the reference without a flaw: the caller knows its target)."""
    length = plan.vllm_config.max_model_len
    if length < 2:
        return Runs(False, (), (f"no request fits max_model_len {length:,}: a request needs at least one prompt "
                                "token and one output token (max_model_len >= 2)",))
    notes: list[str] = []
    runs: list[dict[str, Any]] = []
    for label, outputs in (("prompt-heavy", 1), ("decode-heavy", length - 1)):
        if label == "decode-heavy" and outputs == 1:
            break  # max_model_len 2: both splits are the same request
        run = _run_split(tgt, plan, label, length, outputs, events, record_trace, notes)
        runs.append(run)
        if run["completed"] is not True:
            break  # one failing (or undecided) split settles it
    outcomes = [r["completed"] for r in runs]
    servable = False if False in outcomes else (None if None in outcomes else True)
    return Runs(servable, tuple(runs), tuple(dict.fromkeys(notes)))


def _run_split(tgt: Target, plan: StartupPlan, label: str, length: int, outputs: int, events: bool,
               record_trace: bool, notes: list[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    declined = None
    if events:
        try:
            result, trace = eventrun.run_alone(plan.vllm_config, plan.kv_cache_config, length - outputs, outputs,
                                               record=record_trace)
            return _record(label, length - outputs, outputs, result, trace, t0, "events")
        except eventrun.Preempts as e:
            declined = e
        except eventrun.Unsupported:
            declined = None
    if length > STEPWISE_MAX_TOKENS:
        # only reached through a decline: the callers refuse other step-by-step runs this long
        why = str(declined) if declined is not None else "the event-based run does not model this case"
        notes.append(f"the {label} run was not simulated step by step: {why}; step-by-step runs go up to "
                     f"max_model_len {STEPWISE_MAX_TOKENS:,}")
        return {"split": label, "prompt_tokens": length - outputs, "output_tokens": outputs,
                "completed": None, "steps": declined.step if declined is not None else 0,
                "stall": "preempted_alone" if declined is not None else "not_simulated", "error": None,
                "running": 1 if declined is not None else 0, "waiting": 0,
                "seconds": round(time.perf_counter() - t0, 3), "how": "not simulated"}
    return _stepwise(tgt, plan, label, length, outputs, record_trace, notes, t0)


def _stepwise(tgt: Target, plan: StartupPlan, label: str, length: int, outputs: int, record_trace: bool,
              notes: list[str], t0: float) -> dict[str, Any]:
    from kvverify.reference.planner import get_kv_cache_config_from_groups
    from kvverify.reference.workloads import full_length_request
    from kvverify.reference.steptrace import StepRecorder

    run_plan = plan
    if plan.num_blocks > MAX_RUN_BLOCKS and plan.blocks_needed_per_request + 1 < MAX_RUN_BLOCKS:
        smaller = get_kv_cache_config_from_groups(plan.kv_cache_config.kv_cache_groups, MAX_RUN_BLOCKS)
        run_plan = dataclasses.replace(plan, kv_cache_configs=(smaller,) * len(plan.kv_cache_configs))
        notes.append(f"the step-by-step runs used a pool of {MAX_RUN_BLOCKS:,} blocks instead of "
                     f"{plan.num_blocks:,} (a request alone holds at most {plan.blocks_needed_per_request:,})")
    if label == "decode-heavy" and length > FULL_DECODE_LIMIT:
        outputs = DECODE_CAP
        notes.append(f"the step-by-step decode-heavy split was capped at {DECODE_CAP:,} output tokens (a "
                     f"{length - 1:,}-token decode would take ~{(length - 1) * SECONDS_PER_STEP:.0f} s)")
    recorder = StepRecorder() if record_trace else None
    result = tgt.run_workload(run_plan, [full_length_request(length, outputs)], keep_trace=False, recorder=recorder)
    trace = recorder.result if recorder is not None else None
    return _record(label, length - outputs, outputs, result, trace, t0, "step by step")


def _record(label: str, prompt: int, outputs: int, result: Any, trace: Any, t0: float, how: str) -> dict[str, Any]:
    run = {"split": label, "prompt_tokens": prompt, "output_tokens": outputs, "completed": result.completed,
           "steps": result.steps, "stall": result.stall_reason, "error": result.error,
           "running": result.running, "waiting": result.waiting,
           "seconds": round(time.perf_counter() - t0, 3), "how": how}
    if trace is not None:
        run["trace"] = trace.to_json()
    return run
