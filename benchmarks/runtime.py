"""Speed of the reference runtime: BlockPool ops/s and scheduler steps/s, 10^3 to 10^6 blocks.

Folded in from the earlier ``benchmarks/bench_runtime.py``. Fixed seeds and workloads, so
runs are comparable. Construction (``BlockPool(N)`` is O(N): one ``KVCacheBlock`` per id)
is timed apart from the operations, which must be O(1) per block: ns/op should stay flat
as N grows 1,000-fold.
"""

from __future__ import annotations

import random
import time
from typing import Any

from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec, run_workload
from kvverify.reference.grouping import KVCacheGroupSpec
from kvverify.reference.planner import KVCacheConfig
from kvverify.reference.pool import BlockPool, hash_block_tokens
from kvverify.reference.scheduler import Scheduler
from kvverify.reference.specs import FullAttentionSpec, SlidingWindowSpec

SIZES = (1_000, 10_000, 100_000, 1_000_000)


def bench_pool(num_blocks: int, num_ops: int = 300_000, seed: int = 0) -> dict:
    """Steady-state mix, caching on: 40% allocate (1-8 blocks, half of them hashed as
    ``cache_full_blocks`` does), 20% touch (a prefix hit on a cached block, free or held),
    40% free (a random holder, tail-first). The op plan is drawn before the clock starts."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    pool = BlockPool(num_blocks, enable_caching=True, hash_block_size=16)
    construct = time.perf_counter() - t0
    keys = [(hash_block_tokens(None, (i,)), 0) for i in range(4096)]
    plan = [(rng.random(), rng.randint(1, 8), rng.random(), rng.random()) for _ in range(num_ops)]
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
            if r2 < 0.5:
                for b in blocks:
                    key = keys[(i + b.block_id) & 4095]
                    b.block_hash = key
                    cache_map.setdefault(key, {})[b.block_id] = b
                    cached.append(b)
        elif r < 0.6 and cached:
            j = int(r3 * len(cached))
            b = cached[j]
            if b.block_hash is None:  # evicted since: forget it
                cached[j] = cached[-1]
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
    return {"num_blocks": num_blocks, "construct_s": round(construct, 4), "ops": ops, "counts": counts,
            "seconds": round(elapsed, 4), "ops_per_s": round(ops / elapsed), "ns_per_op": round(1e9 * elapsed / ops),
            "block_moves": blocks_moved, "block_moves_per_s": round(blocks_moved / elapsed),
            "ns_per_block_move": round(1e9 * elapsed / max(1, blocks_moved))}


def _config(num_blocks: int, *specs) -> KVCacheConfig:
    groups = tuple(KVCacheGroupSpec((f"l{i}",), s) for i, s in enumerate(specs))
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=(), kv_cache_groups=groups)


def workload(n: int, seed: int = 0, max_prompt: int = 1536, max_out: int = 256) -> list[WorkloadSpec]:
    """``n`` requests, a shared system prompt of 0-256 tokens (prefix hits), one every 2 steps."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        shared = rng.randint(0, 256)
        own = rng.randint(16, max_prompt - shared)
        prompt = tuple(range(shared)) + tuple(100_000 * (i + 1) + j for j in range(own))
        out.append(WorkloadSpec(f"r{i}", prompt, rng.randint(8, max_out), arrival_step=2 * i))
    return out


FULL = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128)
SWA = SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=128, sliding_window=512)
VC = VllmConfig(block_size=16, max_model_len=2048, max_num_batched_tokens=1024, max_num_seqs=32,
                enable_prefix_caching=True)


def bench_scheduler(name: str, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig,
                    reqs: list[WorkloadSpec]) -> dict:
    t0 = time.perf_counter()
    sched = Scheduler(vllm_config, kv_cache_config)
    construct = time.perf_counter() - t0
    start = time.perf_counter()
    result = run_workload(vllm_config, kv_cache_config, reqs, keep_trace=True, scheduler=sched)
    elapsed = time.perf_counter() - start
    tokens = sum(row[4] for row in result.trace)
    return {"name": name, "num_blocks": kv_cache_config.num_blocks, "requests": len(reqs),
            "construct_s": round(construct, 4), "steps": result.steps, "seconds": round(elapsed, 4),
            "steps_per_s": round(result.steps / elapsed), "tokens_per_s": round(tokens / elapsed),
            "us_per_step": round(1e6 * elapsed / max(1, result.steps), 1),
            "finished": len(result.finished), "preemptions": result.preemptions, "stalled": result.stalled}


def best_of(repeat: int, fn, *args) -> dict:
    """The fastest of ``repeat`` identical runs (the least disturbed by other load)."""
    return min((fn(*args) for _ in range(repeat)), key=lambda r: r["seconds"])


def run(quick: bool = False) -> dict:
    sizes = SIZES[:2] if quick else SIZES
    num_ops = 30_000 if quick else 300_000
    repeat = 1 if quick else 3
    pool = [best_of(repeat, bench_pool, n, num_ops) for n in sizes]
    n_req = 32 if quick else 128
    reqs = workload(n_req)
    no_cache = VllmConfig(**{**VC.__dict__, "enable_prefix_caching": False})
    sched = [
        best_of(repeat, bench_scheduler, f"full, caching, {n_req} reqs", VC, _config(1500, FULL), reqs),
        best_of(repeat, bench_scheduler, f"full, no caching, tight, {n_req} reqs", no_cache, _config(400, FULL), reqs),
        best_of(repeat, bench_scheduler, f"full+swa hybrid, caching, {n_req} reqs", VC, _config(1500, FULL, SWA),
                reqs),
    ]
    scaling = [best_of(repeat, bench_scheduler, f"full, caching, {n_req} reqs", VC, _config(n, FULL), reqs)
               for n in sizes]
    return {"repeat": repeat, "pool": pool, "scheduler": sched, "scheduler_scaling": scaling,
            "pool_ns_per_op_ratio_max_min": round(max(p["ns_per_op"] for p in pool)
                                                  / max(1, min(p["ns_per_op"] for p in pool)), 2),
            "pool_ns_per_block_move_ratio_max_min": round(max(p["ns_per_block_move"] for p in pool)
                                                          / max(1, min(p["ns_per_block_move"] for p in pool)), 2),
            "scheduler_us_per_step_ratio_max_min": _same_schedule_ratio(scaling)}


def _same_schedule_ratio(rows: list[dict]) -> float:
    """us/step max/min over the rows that ran the same schedule as the largest pool (a pool
    small enough to preempt runs more, smaller steps, so its us/step is not comparable)."""
    same = [r for r in rows if r["steps"] == rows[-1]["steps"] and r["preemptions"] == rows[-1]["preemptions"]]
    return round(max(r["us_per_step"] for r in same) / max(1e-9, min(r["us_per_step"] for r in same)), 2)


def tables(data: dict) -> list[Any]:
    from rich.table import Table

    t = Table(title=f"BlockPool: allocate/touch/free mix (caching on), construction timed apart, "
                    f"best of {data.get('repeat', 1)}")
    for col in ("N blocks", "construct s", "ops", "ops/s", "ns/op", "block moves/s", "ns/block move"):
        t.add_column(col, justify="right")
    for p in data["pool"]:
        t.add_row(f"{p['num_blocks']:,}", f"{p['construct_s']:.3f}", f"{p['ops']:,}", f"{p['ops_per_s']:,}",
                  f"{p['ns_per_op']:,}", f"{p['block_moves_per_s']:,}", f"{p['ns_per_block_move']:,}")
    t.caption = (f"max/min over N: {data['pool_ns_per_block_move_ratio_max_min']}x per block moved, "
                 f"{data['pool_ns_per_op_ratio_max_min']}x per op (a small pool is full more often, so its "
                 f"allocations fail and its ops move fewer blocks); flat = O(1) per block")
    s = Table(title=f"Scheduler: fixed workloads (steps/s), and the same workload as N grows, "
                    f"best of {data.get('repeat', 1)}")
    for col in ("workload", "N blocks", "construct s", "steps", "steps/s", "us/step", "tokens/s", "finished",
                "preempt"):
        s.add_column(col, justify="left" if col == "workload" else "right")
    for r in data["scheduler"] + data["scheduler_scaling"]:
        s.add_row(r["name"], f"{r['num_blocks']:,}", f"{r['construct_s']:.3f}", f"{r['steps']:,}",
                  f"{r['steps_per_s']:,}", f"{r['us_per_step']:,}", f"{r['tokens_per_s']:,}",
                  f"{r['finished']}/{r['requests']}", str(r["preemptions"]))
    s.caption = (f"us/step max/min over the scaling rows with the same schedule: "
                 f"{data['scheduler_us_per_step_ratio_max_min']}x (flat = no per-step cost grows with N)")
    return [t, s]


def main() -> None:
    from rich.console import Console

    console = Console()
    for t in tables(run()):
        console.print(t)


if __name__ == "__main__":
    main()
