"""Per-step scheduler bounds (upstream ``Scheduler.schedule``'s own limits).

After every step of a workload:

* the step scheduled at most ``max_num_batched_tokens`` tokens (``token_budget`` starts at
  ``max_num_scheduled_tokens`` and every scheduled request subtracts its tokens; a preempted
  victim already scheduled gives its tokens back);
* at most ``max_num_seqs`` requests are running (``max_num_running_reqs``);
* every unfinished request has ``0 <= num_computed_tokens <= num_tokens <= max_model_len``:
  the scheduler never computes a token that does not exist, and never schedules past
  ``max_model_len`` (``num_new_tokens <= max_model_len - num_computed_tokens - 1``); a
  waiting request has computed nothing (new, or preempted: ``_preempt_request`` resets
  ``num_computed_tokens`` to 0); one in ``kv_holding_waiting`` (a connector load) at most its tokens.

The properties otherwise see only consequences (the workload finishes, the pool stays
sound), which a budget miscount can pass (mutation survivors ``schedule`` 76 / 77: the
running pass's ``token_budget -= num_new`` turned into ``=`` / ``+=``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvverify.invariants.base import Violation


def check_step_requests(sched: Any, max_num_seqs: int, step: int,
                        num_speculative_tokens: int = 0) -> list[Violation]:
    """The running count and each unfinished request's token counts after step ``step``
    (a running request may count ``num_speculative_tokens`` unverified draft slots of a padded
    step whose output is still in flight)."""
    found: list[Violation] = []
    running = list(sched.running)
    if len(running) > max_num_seqs:
        found.append(Violation("scheduling.max_num_seqs", "more requests running than max_num_seqs",
                               {"step": step, "running": len(running), "max_num_seqs": max_num_seqs}))
    max_model_len = sched.max_model_len
    waiting = list(sched.waiting)
    # requests holding KV blocks while they wait (a landed or in-flight connector load) have
    # computed tokens, at most their tokens
    holding = list(sched.kv_holding_waiting)
    for request in running + waiting + holding:
        computed, tokens = request.num_computed_tokens, request.num_tokens
        top = 0 if request in waiting else tokens + (num_speculative_tokens if request in running else 0)
        if not (0 <= computed <= top and tokens <= max_model_len):
            found.append(Violation(
                "scheduling.token_counts",
                "a request computed more tokens than it has (a waiting one any: new, or preempted "
                "and reset), or runs past max_model_len",
                {"step": step, "request": request.request_id, "waiting": request in waiting,
                 "num_computed_tokens": computed, "num_tokens": tokens,
                 "max_model_len": max_model_len}))
            break
    return found


def check_step_budgets(trace: Sequence[tuple[int, int, int, int, int]],
                       max_num_batched_tokens: int) -> list[Violation]:
    """Every step of a driver trace (``(step, running, waiting, free, scheduled)``) scheduled at
    most ``max_num_batched_tokens`` tokens."""
    for step, _running, _waiting, _free, scheduled in trace:
        if scheduled > max_num_batched_tokens:
            return [Violation("scheduling.token_budget",
                              "a step scheduled more tokens than max_num_batched_tokens",
                              {"step": step, "scheduled_tokens": scheduled,
                               "max_num_batched_tokens": max_num_batched_tokens})]
    return []
