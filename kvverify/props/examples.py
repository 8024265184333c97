"""Explicit examples every deterministic run replays: the findings' minimal cases.

Each is the shrunk counterexample a property found on the faithful reference; keeping
it explicit makes the strict known failures independent of what random search reaches.
"""

from __future__ import annotations

from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec
from kvverify.reference.specs import ChunkedLocalAttentionSpec, FullAttentionSpec, MambaSpec, SlidingWindowSpec
from kvverify.strategies import StartupCase

_FULL = FullAttentionSpec(block_size=1, num_kv_heads=1, head_size=8)

#: F3: B=1, L=2, N=2. The check needs cdiv(2, 1) = 2 blocks > 1 usable, yet a generate
#: request (1 prompt token + 1 output) writes KV for 1 token and completes.
F3_CASE = StartupCase(VllmConfig(block_size=1, max_model_len=2, num_gpu_blocks_override=2,
                                 kv_cache_memory_bytes=1),
                      ({"model.layers.0": _FULL},), "override", None, 2, 2)

#: F9: pure Mamba in ``align`` mode, B=16, L=2, N=2. The check needs 2 + S + P = 2 pages > 1
#: usable, yet the request's one computed token stays in one state block and it completes.
F9_CASE = StartupCase(VllmConfig(block_size=16, max_model_len=2, num_gpu_blocks_override=2,
                                 kv_cache_memory_bytes=1, enable_prefix_caching=True,
                                 mamba_cache_mode="align"),
                      ({"model.layers.0": MambaSpec(block_size=16, shapes=((1, 4), (1,)),
                                                    dtypes=("bfloat16", "float32"),
                                                    mamba_cache_mode="align")},),
                      "override", None, 2, 2)

#: F1: B=16, L=32, N=2 = blocks per request: reported concurrency 2 / 2 = 1.00x, but only
#: 1 block is usable, so not even one request can be served.
F1_CASE = StartupCase(VllmConfig(block_size=16, max_model_len=32, num_gpu_blocks_override=2,
                                 kv_cache_memory_bytes=1),
                      ({"model.layers.0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)},),
                      "override", None, 2, 2)

#: F4: sliding window W=2, B=2, M=2, 3 lookahead slots, L=7, N=4 (the startup size: cap 3 +
#: null): a prefill step asks for M + 3 slots past a window that may start mid-block (4 blocks),
#: so the request preempts itself forever. (The chunked C=16, B=32 case once here was F2's.)
F4_CASE = StartupCase(VllmConfig(block_size=2, max_model_len=7, max_num_batched_tokens=2,
                                 num_lookahead_tokens=3, num_gpu_blocks_override=4,
                                 kv_cache_memory_bytes=1, enable_prefix_caching=False),
                      ({"model.layers.0": SlidingWindowSpec(block_size=2, num_kv_heads=1, head_size=8,
                                                             sliding_window=2)},),
                      "override", None, 4, 3)


#: F2: chunked local C=1, B=16, M=3, L=19, N=3 (cap 1 block + 1 + null): a 17-token prompt in
#: chunks of 3 straddles a block boundary mid-chunk and holds 2 blocks against a cap of 1.
#: Ample profiled memory: the override alone sizes the pool, also on a release whose check
#: reads the profiled memory (<= 0.20, #27181); with 1 byte it never started there.
F2_CASE = StartupCase(VllmConfig(block_size=16, max_model_len=19, max_num_batched_tokens=3,
                                 num_gpu_blocks_override=3, kv_cache_memory_bytes=1 << 20,
                                 enable_prefix_caching=False),
                      ({"model.layers.0": ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=1, head_size=8,
                                                                     attention_chunk_size=1)},),
                      "override", None, 3, 2)
F2_WORKLOAD = (WorkloadSpec("r0", tuple(range(10_000, 10_017)), 2),)
