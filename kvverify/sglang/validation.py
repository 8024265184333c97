"""Input validation at arrival: ``validate_input_length`` and ``init_req_max_new_tokens``.

``TpModelWorker.get_worker_info`` derives ``max_req_len = min(context_len - 1, kv_capacity - 1)``
and ``max_req_input_len = max_req_len - 5``; ``managers/utils.validate_input_length`` refuses an
input of ``max_req_input_len`` tokens or more; ``Scheduler.init_req_max_new_tokens`` then clamps
``max_new_tokens`` to the length bound and to the empty-pool budget
(``max_new_tokens_for_memory``). A request both accept is *admitted* in the sense of
guarantee 1: it must be schedulable on an empty pool (finding SG1: not always).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvverify.sglang import arith
from kvverify.sglang.config import SglangConfig


@dataclass(frozen=True)
class Limits:
    """What the scheduler learns from the worker at startup (``get_worker_info``)."""

    max_total_num_tokens: int
    max_req_len: int
    max_req_input_len: int


def worker_limits(config: SglangConfig, max_total_num_tokens: int) -> Limits:
    """``get_worker_info``'s bounds for a pool of ``max_total_num_tokens`` (one worker, no DCP)."""
    req_len = int(arith.max_req_len(config.context_len, max_total_num_tokens))
    input_len = int(arith.max_req_input_len(config.context_len, max_total_num_tokens, config.page_size))
    return Limits(max_total_num_tokens, req_len, input_len)


def validate_input_length(input_len: int, max_req_input_len: int) -> str | None:
    """``None`` if accepted, else upstream's error message (no auto-truncation)."""
    if arith.input_accepted(input_len, max_req_input_len):
        return None
    return (f"Input length ({input_len} tokens) exceeds the maximum allowed length "
            f"({max_req_input_len} tokens). Use a shorter input or enable --allow-auto-truncate.")


def init_req_max_new_tokens(config: SglangConfig, limits: Limits, input_len: int, requested: int) -> int:
    """``max_new_tokens`` after the scheduler's clamps (never negative)."""
    return int(arith.clamped_max_new_tokens(requested, input_len, limits.max_req_len,
                                            limits.max_total_num_tokens, config.page_size))
