"""Speed of the reference runtime: BlockPool ops/s and scheduler steps/s.

Prints numbers, asserts nothing. Fixed seeds and workloads, so runs are comparable.
Run: ``python benchmarks/bench_runtime.py``.
"""

from __future__ import annotations

import random
import time

from kvverify.config import VllmConfig
from kvverify.driver import WorkloadSpec, run_workload
from kvverify.grouping import KVCacheGroupSpec
from kvverify.planner import KVCacheConfig
from kvverify.pool import BlockPool, hash_block_tokens
from kvverify.specs import FullAttentionSpec, SlidingWindowSpec


def bench_pool(num_blocks: int = 10_000, num_ops: int = 300_000, seed: int = 0) -> None:
    """Steady-state mix, caching on: 40% allocate(1-8 blocks, half of them hashed),
    20% touch (a prefix hit on a cached block, free or held), 40% free (tail-first)."""
    rng = random.Random(seed)
    pool = BlockPool(num_blocks, enable_caching=True, hash_block_size=16)
    keys = [(hash_block_tokens(None, (i,)), 0) for i in range(4096)]  # precomputed
    plan = [(rng.random(), rng.randint(1, 8), rng.random(), rng.random())
            for _ in range(num_ops)]
    held: list[list] = []
    cached: list = []
    blocks_moved = 0
    counts = {"allocate": 0, "touch": 0, "free": 0}
    cache_map = pool.cached_block_hash_to_block
    start = time.perf_counter()
    for i, (r, n, r2, r3) in enumerate(plan):
        if (r < 0.4 or not held) and pool.get_num_free_blocks() >= n:
            blocks = pool.get_new_blocks(n)
            held.append(blocks)
            blocks_moved += n
            counts["allocate"] += 1
            if r2 < 0.5:  # what cache_full_blocks does per block
                for b in blocks:
                    key = keys[(i + b.block_id) & 4095]
                    b.block_hash = key
                    cache_map.setdefault(key, {})[b.block_id] = b
                    cached.append(b)
        elif r < 0.6 and cached:
            b = cached[int(r3 * len(cached))]
            if b.block_hash is None:  # evicted since: forget it
                cached[int(r3 * len(cached))] = cached[-1]
                cached.pop()
                continue
            pool.touch([b])
            held.append([b])
            blocks_moved += 1
            counts["touch"] += 1
        elif held:
            j = int(r3 * len(held))
            held[j], held[-1] = held[-1], held[j]
            blocks = held.pop()
            pool.free_blocks(reversed(blocks))
            blocks_moved += len(blocks)
            counts["free"] += 1
    elapsed = time.perf_counter() - start
    ops = sum(counts.values())
    print(f"BlockPool: {ops / elapsed:,.0f} ops/s ({blocks_moved / elapsed:,.0f} block moves/s) "
          f"over {ops:,} ops {counts} on N={num_blocks:,} in {elapsed:.2f}s")


def _config(num_blocks: int, *specs) -> KVCacheConfig:
    groups = tuple(KVCacheGroupSpec((f"l{i}",), s) for i, s in enumerate(specs))
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=(), kv_cache_groups=groups)


def _workload(n: int, seed: int, max_prompt: int, max_out: int) -> list[WorkloadSpec]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        shared = rng.randint(0, 256)  # shared system-prompt prefix -> cache hits
        own = rng.randint(16, max_prompt - shared)
        prompt = tuple(range(shared)) + tuple(100_000 * (i + 1) + j for j in range(own))
        out.append(WorkloadSpec(f"r{i}", prompt, rng.randint(8, max_out), arrival_step=2 * i))
    return out


def bench_scheduler(name: str, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig,
                    workload: list[WorkloadSpec]) -> None:
    start = time.perf_counter()
    result = run_workload(vllm_config, kv_cache_config, workload, keep_trace=True)
    elapsed = time.perf_counter() - start
    tokens = sum(row[4] for row in result.trace)
    print(f"Scheduler[{name}]: {result.steps / elapsed:,.0f} steps/s, {tokens / elapsed:,.0f} "
          f"scheduled tokens/s ({result.steps:,} steps, {len(result.finished)}/{len(workload)} "
          f"finished, {result.preemptions} preemptions, stalled={result.stalled}) in "
          f"{elapsed:.2f}s")


def main() -> None:
    bench_pool()
    full = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)
    swa = SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=128, sliding_window=512)
    vc = VllmConfig(block_size=16, max_model_len=2048, max_num_batched_tokens=1024,
                    max_num_seqs=32, enable_prefix_caching=True)
    workload = _workload(128, 0, 1536, 256)
    bench_scheduler("full, caching, 128 reqs, N=1500", vc, _config(1500, full), workload)
    bench_scheduler("full, no caching, tight N=400", VllmConfig(
        **{**vc.__dict__, "enable_prefix_caching": False}), _config(400, full), workload)
    bench_scheduler("full+swa hybrid, caching, N=1500", vc, _config(1500, full, swa), workload)


if __name__ == "__main__":
    main()
