"""Turn a lemma's concrete counterexample into a reference run.

Replays use the reference exactly as the properties do: real specs, ``VllmConfig``,
``plan_kv_cache``, and the per-type managers over a real ``BlockPool``. A lemma's
counterexample is only reported once its replay confirms the violation.
"""

from __future__ import annotations

from typing import Mapping

from kvverify.reference.config import VllmConfig
from kvverify.errors import KVVerifyError
from kvverify.reference.planner import StartupPlan, plan_kv_cache
from kvverify.reference import kinds
from kvverify.reference.specs import FullAttentionSpec, KVCacheSpec

#: Largest pool a replay builds (BlockPool construction is linear in its size).
MAX_REPLAY_BLOCKS = 2_000_000

#: (block size, head size, dtype) of one full-attention layer; page = B * 2 * head * dtype.
PAGE_CASES: tuple[tuple[int, int, str], ...] = (
    (1, 1, "int8"),        # page 2
    (16, 1, "int8"),       # page 32
    (16, 3, "int8"),       # page 96 (not a power of two)
    (16, 64, "bfloat16"),  # page 4096
    (544, 1, "int8"),      # page 1088
)


def attention_kwargs(block_size: int, head_size: int = 1, dtype: str = "int8") -> dict:
    return {"block_size": block_size, "num_kv_heads": 1, "head_size": head_size, "dtype": dtype}


def full_layer(block_size: int, head_size: int = 1, dtype: str = "int8") -> FullAttentionSpec:
    return FullAttentionSpec(**attention_kwargs(block_size, head_size, dtype))


def page_of(block_size: int, head_size: int = 1, dtype: str = "int8") -> int:
    return full_layer(block_size, head_size, dtype).page_size_bytes


def mix_specs(mix: str, block_size: int, window_or_chunk: int | None = None) -> dict[str, KVCacheSpec]:
    """Spec mixes the lemmas use: ``full`` or ``full+<label>`` of a recycling kind
    (``full+swa``, ``full+chunked``: the registry's held-block labels), one layer each, equal
    pages, so the planner makes one group per layer and bytes_per_block = page; the window
    (or chunk) is the kind's first window param."""
    specs: dict[str, KVCacheSpec] = {"layers.0.full": full_layer(block_size)}
    if mix == "full":
        return specs
    labels = {k.held.label: k for k in kinds.recycling_kinds() if k.held is not None}
    label = mix.removeprefix("full+")
    if not mix.startswith("full+") or label not in labels:
        raise ValueError(f"unknown mix {mix!r}")
    if window_or_chunk is None:
        raise ValueError(f"mix {mix!r} needs a window / chunk size")
    kind = labels[label]
    assert kind.held is not None
    window = {kind.held.params[0].field: int(window_or_chunk)}
    specs[f"layers.1.{label}"] = kind.spec_cls(**attention_kwargs(block_size),
                                               **kind.held.values(window))
    return specs


def source_kwargs(source: str, values: Mapping[str, int]) -> dict:
    """VllmConfig fields realising a block source with the counterexample's memory."""
    mem = values.get("memory", 0)
    if source == "explicit":
        return {"kv_cache_memory_bytes": mem}
    if source == "profiled":
        # profiled = int(gpu_memory_bytes * 1.0) - non_kv_cache_memory_bytes, exactly
        if mem >= 1:
            return {"gpu_memory_bytes": mem, "gpu_memory_utilization": 1.0}
        return {"gpu_memory_bytes": 1, "gpu_memory_utilization": 1.0,
                "non_kv_cache_memory_bytes": 1 - mem}
    if source == "override":
        kw: dict = {"num_gpu_blocks_override": values["override"]}
        if mem >= 1:
            kw["kv_cache_memory_bytes"] = mem
        return kw
    raise ValueError(f"unknown block source {source!r}")


def plan(config: VllmConfig, specs: Mapping[str, KVCacheSpec]) -> StartupPlan:
    return plan_kv_cache(config, [dict(specs)])


def plan_summary(p: StartupPlan) -> dict:
    return {"starts": p.starts, "max_model_len": p.vllm_config.max_model_len,
            "auto_fit_max_model_len": p.auto_fit_max_model_len, "num_blocks": p.num_blocks,
            "usable_blocks": p.usable_blocks, "blocks_per_group": list(p.blocks_per_group),
            "blocks_needed_per_request": p.blocks_needed_per_request,
            "bytes_per_block": p.bytes_per_block, "check_memory": list(p.check_memory),
            "error": (p.error or "")[:160] or None}


def too_big(num_blocks: int) -> bool:
    return num_blocks > MAX_REPLAY_BLOCKS


def run_steps(manager, request_id: str, schedule: list[int]) -> int:
    """Drive one request through ``schedule`` (tokens per step) on a manager.

    Each step does what ``allocate_slots`` does for one group: free the blocks that left
    the window (``remove_skipped_blocks`` at the computed count), then grow the table
    (``allocate_new_blocks``). Returns the real blocks held after the last step.
    """
    manager.add_local_computed_blocks(request_id, [], 0)
    computed = 0
    for tokens in schedule:
        manager.remove_skipped_blocks(request_id, computed)
        manager.allocate_new_blocks(request_id, computed + tokens)
        computed += tokens
    return manager.num_held_blocks(request_id)


def chunk_schedule(num_computed: int, max_step: int) -> list[int]:
    """Chunked prefill reaching ``num_computed`` tokens with steps of at most ``max_step``."""
    steps = []
    left = num_computed
    while left > 0:
        steps.append(min(left, max_step))
        left -= steps[-1]
    return steps


__all__ = ["KVVerifyError", "MAX_REPLAY_BLOCKS", "PAGE_CASES", "attention_kwargs", "chunk_schedule",
           "full_layer", "mix_specs", "page_of", "plan", "plan_summary", "run_steps",
           "source_kwargs", "too_big"]
