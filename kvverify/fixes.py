"""Proposed fixes for findings: named options on the reference, off by default.

The reference mirrors upstream, warts included. When a property fails on it because
upstream behaves that way, the finding is kept as a strict known failure and the fix
is offered here; under the fix the property passes (tests show both).
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Iterator

from kvverify.errors import ConfigError


@dataclass(frozen=True)
class Fix:
    name: str
    finding: str
    change: str


CATALOG: dict[str, Fix] = {f.name: f for f in (
    Fix("concurrency_counts_usable_blocks", "F1-concurrency-counts-null-block",
        "get_max_concurrency_for_kv_cache_config divides the usable blocks (N - 1) instead of N, "
        "so 1.00x is never reported for a pool that cannot serve one full request"),
    Fix("check_plans_computed_tokens", "F3-check-reserves-never-computed-token",
        "the startup check and auto-fit size a request by the tokens whose KV is ever written "
        "(L - 1 + num_lookahead_tokens for generate runners) instead of L"),
    Fix("caps_count_lookahead", "F4-admission-caps-ignore-lookahead",
        "max_in_flight_tokens (and so the SWA / chunked-local admission caps and startup bound) "
        "includes num_lookahead_tokens, the extra slots every step reserves"),
    Fix("chunked_local_cap_plus_one", "F2-chunked-local-cap-misaligned-chunk",
        "ChunkedLocalAttentionSpec.max_admission_blocks_per_request adds one block when the chunk "
        "size is not a multiple of the block size (a chunk may start mid-block)"),
    Fix("swa_cap_exact", "F5-swa-admission-cap-slack",
        "SlidingWindowSpec.max_admission_blocks_per_request returns the exact worst case "
        "min(cdiv(W - 1 + E + F + B - 1, B), cdiv(L, B)) instead of cdiv(min(W - 1 + E + F, L), B) + 1, "
        "whose +1 no step ever needs when L <= W - 1 + E + F or W - 1 + E + F = 1 (mod B)"),
)}

_ACTIVE: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("kvverify_fixes",
                                                                          default=frozenset())


def is_on(name: str) -> bool:
    return name in _ACTIVE.get()


@contextlib.contextmanager
def enabled(*names: str) -> Iterator[None]:
    for n in names:
        if n not in CATALOG:
            raise ConfigError("fix", n, f"unknown fix; known: {', '.join(CATALOG)}")
    token = _ACTIVE.set(_ACTIVE.get() | frozenset(names))
    try:
        yield
    finally:
        _ACTIVE.reset(token)
