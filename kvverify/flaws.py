"""The bug zoo: real historical vLLM defects, re-introduced as named switches.

Each flaw is off by default. Switching one on changes the reference at the place
upstream had the defect (``bug-zoo.md``); the suite must then catch it. Flaws are
held in a context variable, so a test, a CLI run or a Hypothesis example can turn one
on for exactly its own extent::

    with flaws.enabled("null_block_not_reserved"):
        plan = plan_kv_cache(...)
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Iterator

from kvverify.errors import ConfigError


@dataclass(frozen=True)
class Flaw:
    name: str
    upstream: str
    symptom: str
    defect: str
    caught_by: str


CATALOG: dict[str, Flaw] = {f.name: f for f in (
    Flaw("override_ignored_in_check", "#27181, fixed by #41069",
         "starts with a tiny override, then nothing longer than one block runs",
         "the startup check sizes capacity from raw available memory instead of "
         "num_gpu_blocks_override * bytes_per_block",
         "startup check => a full-length request completes on the runtime pool"),
    Flaw("null_block_not_reserved", "#35541 / #47272",
         "engine logs 1.00x concurrency, then 0 tok/s forever",
         "check passes when sum_g blocks_g(L) <= N instead of <= N - 1",
         "startup check => a full-length request completes; lemma check => usable >= needed"),
    Flaw("autofit_ignores_null_block", "#48724",
         "max_model_len=auto picks a length one block too long, which then hangs",
         "auto-fit searches against the full pool instead of pool - 1 block",
         "auto-fit result is servable and maximal"),
    Flaw("autofit_first_group_only", "#36030",
         "auto-fit too large on hybrid models",
         "auto-fit counts only the first KV cache group's blocks",
         "auto-fit result is servable"),
    Flaw("swa_admission_uncapped", "#39734, fixed by #40946",
         "Gemma-class hybrids: every request between real capacity and max_model_len deadlocks",
         "the full-sequence gate charges SWA/chunked groups cdiv(num_tokens, B) while startup "
         "sized them with the recycling cap",
         "a request that fits the startup bound is admitted on an empty pool"),
    Flaw("swa_cap_on_allocation", "#39866 -> #40027",
         "ValueError: Cannot get 1 free blocks from the pool mid-request",
         "the admission cap is also applied to the per-step allocation",
         "predictor == allocator; no exception from any admitted step"),
    Flaw("mamba_hash_fallback_by_block_size", "#51108",
         "engine fails to start: group block_size must be divisible by hash_block_size",
         "the Mamba fallback tests block_size != cache block size instead of "
         "mamba_cache_mode != 'align'",
         "hash_block_size divides every prefix-cacheable group's block size"),
    Flaw("mamba_align_zero_chunk", "#34445",
         "Mamba-align model hangs on the first long prompt",
         "when block_size > max_num_batched_tokens the aligned chunk rounds down to 0 tokens",
         "liveness: an admitted request makes progress every bounded number of steps"),
    Flaw("no_positive_validation", "#43496, #43521, #43842",
         "ZeroDivisionError / infinite loop on block_size=0, hash_block_size=0, override 0",
         "configuration values are not checked for positivity",
         "bad input gets a clear ValueError, never a crash, hang or wrong plan"),
    Flaw("evictable_hits_not_counted", "test_evictable_cached_blocks_not_double_allocated",
         "ValueError: Cannot get N free blocks right after an admission that said it fits",
         "get_num_blocks_to_allocate does not count prefix-cache hits sitting in the free queue",
         "predictor == allocator; admitted steps never raise"),
)}

_ACTIVE: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("kvverify_flaws",
                                                                          default=frozenset())


def check_name(name: str) -> str:
    if name not in CATALOG:
        raise ConfigError("flaw", name, f"unknown flaw; known: {', '.join(CATALOG)}")
    return name


def is_on(name: str) -> bool:
    """Whether flaw ``name`` is switched on in the current context."""
    return name in _ACTIVE.get()


def active() -> frozenset[str]:
    return _ACTIVE.get()


@contextlib.contextmanager
def enabled(*names: str) -> Iterator[None]:
    """Switch flaws on for the extent of a ``with`` block."""
    token = _ACTIVE.set(_ACTIVE.get() | frozenset(check_name(n) for n in names))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def set_global(names: list[str] | tuple[str, ...]) -> None:
    """Switch flaws on for the rest of this context (``pytest --flaw``, ``kvverify --flaw``)."""
    _ACTIVE.set(frozenset(check_name(n) for n in names))
