"""The engine modules ``kvverify mutate`` mutates: one registry (name -> file, functions).

Paths are relative to the installed ``vllm`` package's parent (``vllm/v1/core/...``). A module
may restrict mutation to some functions (``functions``) and, inside some of them, to the lines
that match a pattern (``line_filters``): the scheduler is 3,800 lines, most of them encoder,
connector, grammar and output bookkeeping; only its KV paths are mutated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kvverify.errors import ConfigError, KVVerifyError


@dataclass(frozen=True)
class EngineModule:
    """One mutated engine file: ``functions`` (None: every function and method) and, per
    function, a regex its mutated line must match (``line_filters``)."""

    name: str
    path: str
    description: str
    functions: frozenset[str] | None = None
    line_filters: dict[str, str] = field(default_factory=dict)

    def accepts(self, function: str, line_text: str) -> bool:
        """Whether a mutation on ``line_text`` inside ``function`` (its top-level name, a method's
        bare name) is in scope."""
        if self.functions is not None and function not in self.functions:
            return False
        pattern = self.line_filters.get(function)
        return pattern is None or re.search(pattern, line_text) is not None


#: the scheduler's KV lines inside ``schedule``: allocation, preemption, the token counts they use
_SCHEDULE_KV = (r"kv_cache_manager|allocate_slots|new_blocks|preempt|num_new_tokens|"
                r"num_computed_tokens|num_lookahead|blocks")

MODULES: dict[str, EngineModule] = {m.name: m for m in (
    EngineModule("planner", "vllm/v1/core/kv_cache_utils.py",
                 "startup planning: groups, block counts, the startup check, auto-fit, block hashes"),
    EngineModule("pool", "vllm/v1/core/block_pool.py", "BlockPool: null block, free queue, prefix cache"),
    EngineModule("managers", "vllm/v1/core/single_type_kv_cache_manager.py",
                 "the per-type managers (full, sliding window, chunked local, Mamba, cross attention)"),
    EngineModule("coordinator", "vllm/v1/core/kv_cache_coordinator.py",
                 "the KV-cache coordinators (unitary, hybrid, no prefix cache)"),
    EngineModule("kv_cache_manager", "vllm/v1/core/kv_cache_manager.py",
                 "KVCacheManager: allocate_slots, get_computed_blocks, free"),
    EngineModule("scheduler", "vllm/v1/core/sched/scheduler.py",
                 "the scheduler's KV paths: schedule's allocation and preemption lines, freeing, lookahead",
                 functions=frozenset({
                     "schedule", "_preempt_request", "_free_blocks", "_free_request", "_free_request_blocks",
                     "_reserve_prefill_lookahead", "_get_local_prefix_cache_hit", "_mamba_block_aligned_split",
                     "_request_remaining_blocks", "_inflight_prefill_reserved_blocks", "finish_requests",
                     "_request_blocks_can_be_freed"}),
                 line_filters={"schedule": _SCHEDULE_KV}),
)}


def _by_path(name: str) -> EngineModule | None:
    """The module whose file ``name`` is: ``vllm/v1/core/block_pool.py`` or any path ending in it
    (``site-packages/vllm/v1/core/block_pool.py``, ``./vllm/v1/core/block_pool.py``), or its bare
    file name (``block_pool.py``, ``sched/scheduler.py``) — how a contributor names the file touched."""
    norm = name.replace("\\", "/").lstrip("./")
    for m in MODULES.values():
        if norm == m.path or norm.endswith("/" + m.path) or m.path.endswith("/" + norm):
            return m
    return None


def select(names: list[str] | tuple[str, ...]) -> list[EngineModule]:
    """The modules asked for (all when ``names`` is empty), each by its name (``pool``) or its
    file (``vllm/v1/core/block_pool.py``); an unknown one is a ConfigError listing both."""
    if not names:
        return list(MODULES.values())
    out: list[EngineModule] = []
    for n in names:
        module = MODULES.get(n) or _by_path(n)
        if module is None:
            known = ", ".join(f"{m.name} ({m.path})" for m in MODULES.values())
            raise ConfigError("module", n, f"unknown engine module; known: {known}")
        if module not in out:
            out.append(module)
    return out


def locate(module: EngineModule, source: Path) -> Path:
    """The module's file in the installed vLLM whose package directory is ``source``; a release
    without it is a clear error naming the file."""
    path = source.parent / module.path
    if not path.is_file():
        raise KVVerifyError(f"module {module.name!r}: this vLLM ({source}) has no {module.path}; "
                            f"`kvverify mutate` needs a v1 engine with that file")
    return path


__all__ = ["EngineModule", "MODULES", "locate", "select"]
