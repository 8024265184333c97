"""Worked hybrid examples, every number computed by hand in the comments."""

from __future__ import annotations

from kvverify.reference.config import VllmConfig
from kvverify.reference.planner import plan_kv_cache
from kvverify.reference.specs import FullAttentionSpec, MambaSpec, SlidingWindowSpec, UniformTypeKVCacheSpecs


def gemma_style(repeats: int) -> dict:
    """5 sliding : 1 full, 8 KV heads x 256 dims, bf16, W = 1024, B = 16."""
    specs = {}
    for i in range(6 * repeats):
        name = f"model.layers.{i}.self_attn"
        if i % 6 == 5:
            specs[name] = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=256)
        else:
            specs[name] = SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=256, sliding_window=1024)
    return specs


# page per layer = 16 tokens * 8 heads * (256 + 256) * 2 bytes = 131072
PAGE = 16 * 8 * (256 + 256) * 2


def test_gemma_style_groups_bytes_blocks_tensors() -> None:
    specs = gemma_style(2)  # 12 layers: 2 full, 10 sliding
    # buckets: full (2 layers), sliding (10); 10 >= 1.5 * 2 -> group_size = 2
    # groups in bucket order (layer 0 is sliding): sliding -> cdiv(10, 2) = 5 groups of 2,
    # interleaved (group i takes sliding[i::5]); then full -> 1 group of 2
    vc = VllmConfig(block_size=16, max_model_len=8192, max_num_batched_tokens=2048,
                    kv_cache_memory_bytes=1478 * 2 * PAGE)
    plan = plan_kv_cache(vc, [specs])
    assert len(plan.groups) == 6
    assert [len(g.layer_names) for g in plan.groups] == [2] * 6
    sliding_names = [n for n in specs if isinstance(specs[n], SlidingWindowSpec)]
    assert plan.groups[1].layer_names == tuple(sliding_names[1::5])  # interleaved split
    assert plan.groups[5].layer_names == ("model.layers.5.self_attn", "model.layers.11.self_attn")
    assert plan.bytes_per_block == 2 * PAGE == 262144
    # full: cdiv(8192, 16) = 512; sliding: cdiv(min(1024 - 1 + 2048, 8192), 16) + 1 = 192 + 1 = 193
    assert plan.blocks_per_group == (193, 193, 193, 193, 193, 512)
    assert plan.blocks_needed_per_request == 512 + 5 * 193 == 1477
    assert plan.num_blocks == 1478 and plan.starts
    # one tensor per group, each the whole backing: 2 layers * PAGE * 1478 bytes
    tensors = plan.kv_cache_config.kv_cache_tensors
    assert len(tensors) == 6
    assert all(t.size == 2 * PAGE * 1478 and t.layer_stride == PAGE * 1478 and t.block_stride == PAGE
               and t.offset == 0 and len(t.layers) == 2 for t in tensors)
    # one block fewer: 1477 blocks, 1476 usable < 1477 needed
    tight = plan_kv_cache(VllmConfig(block_size=16, max_model_len=8192, kv_cache_memory_bytes=1477 * 2 * PAGE),
                          [specs])
    assert tight.num_blocks == 1477 and not tight.starts


def test_gemma_style_one_repeat_has_six_single_layer_groups() -> None:
    plan = plan_kv_cache(VllmConfig(block_size=16, max_model_len=8192, num_gpu_blocks_override=2000),
                         [gemma_style(1)])
    # buckets full (1), sliding (5): group_size = 1 -> 1 + 5 groups of one layer
    assert len(plan.groups) == 6 and plan.bytes_per_block == PAGE


def test_disable_hybrid_promotes_sliding_to_full() -> None:
    vc = VllmConfig(block_size=16, max_model_len=8192, num_gpu_blocks_override=4000,
                    disable_hybrid_kv_cache_manager=True)
    plan = plan_kv_cache(vc, [gemma_style(2)])
    assert len(plan.groups) == 1 and isinstance(plan.groups[0].kv_cache_spec, FullAttentionSpec)
    assert plan.groups[0].kv_cache_spec.sliding_window == 1024
    # 12 layers in one group: 12 * PAGE per block; 512 blocks per request
    assert plan.bytes_per_block == 12 * PAGE and plan.blocks_per_group == (512,)


def attention_mamba() -> dict:
    """2 attention layers + 6 Mamba layers, pages unified as upstream's hybrid config does.

    attention per-token page p1 = 4 heads * (64 + 64) * 2 bytes = 1024
    Mamba page = conv (3 x 512) bf16 = 3072 + ssm (8 x 64 x 16) fp32 = 32768 -> 35840
    attention block = 16 * cdiv(35840, 16 * 1024) = 48 -> page 48 * 1024 = 49152
    Mamba page padded to 49152; align mode, Mamba block size = attention block size.
    """
    specs = {}
    for i in range(8):
        name = f"model.layers.{i}"
        if i in (3, 7):
            specs[name] = FullAttentionSpec(block_size=48, num_kv_heads=4, head_size=64)
        else:
            specs[name] = MambaSpec(block_size=48, shapes=((3, 512), (8, 64, 16)), dtypes=("bfloat16", "float32"),
                                    page_size_padded=49152, mamba_cache_mode="align")
    return specs


def test_attention_mamba_hybrid() -> None:
    specs = attention_mamba()
    assert specs["model.layers.0"].real_page_size_bytes == 35840
    assert specs["model.layers.3"].page_size_bytes == 49152
    vc = VllmConfig(block_size=48, max_model_len=4096, mamba_cache_mode="align",
                    kv_cache_memory_bytes=93 * 2 * 49152)
    plan = plan_kv_cache(vc, [specs])
    # buckets (layer 0 is Mamba): mamba (6), attention (2): 6 >= 1.5 * 2 -> group_size 2 -> 3 + 1 groups
    assert [len(g.layer_names) for g in plan.groups] == [2, 2, 2, 2]
    assert plan.bytes_per_block == 2 * 49152 == 98304
    # attention cdiv(4096, 48) = 86; Mamba align: 2 + 0 + 0 = 2 per group
    assert plan.blocks_per_group == (2, 2, 2, 86) and plan.blocks_needed_per_request == 92
    assert plan.num_blocks == 93 and plan.starts
    assert len(plan.kv_cache_config.kv_cache_tensors) == 4
    assert all(t.size == 93 * 98304 for t in plan.kv_cache_config.kv_cache_tensors)
    tight = plan_kv_cache(VllmConfig(block_size=48, max_model_len=4096, mamba_cache_mode="align",
                                     kv_cache_memory_bytes=92 * 98304), [specs])
    assert not tight.starts


def test_mamba_none_mode_needs_one_block() -> None:
    spec = MambaSpec(block_size=4096, shapes=((3, 512),), dtypes=("bfloat16",))
    vc = VllmConfig(block_size=16, max_model_len=4096, num_gpu_blocks_override=2)
    plan = plan_kv_cache(vc, [{"m0": spec, "m1": spec}])
    assert plan.blocks_per_group == (1,) and plan.starts  # 1 + S with S = 0; N - 1 = 1


def test_uniform_type_group_different_head_sizes() -> None:
    specs = {"a": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128),
             "b": FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=64)}
    plan = plan_kv_cache(VllmConfig(block_size=16, max_model_len=1024, num_gpu_blocks_override=100), [specs])
    assert len(plan.groups) == 1 and isinstance(plan.groups[0].kv_cache_spec, UniformTypeKVCacheSpecs)
    # pages 65536 + 32768 in one block; two tensors (one per distinct spec), the second at offset 65536 * N
    assert plan.bytes_per_block == 65536 + 32768
    t0, t1 = plan.kv_cache_config.kv_cache_tensors
    assert (t0.offset, t1.offset) == (0, 65536 * 100) and t1.layer_stride == 32768 * 100


def test_attention_free_model_has_one_block() -> None:
    plan = plan_kv_cache(VllmConfig(block_size=16, max_model_len=1024, kv_cache_memory_bytes=10), [{}])
    assert plan.groups == () and plan.num_blocks == 1 and plan.starts
