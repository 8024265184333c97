"""The seed examples of reference-facts.md / models.md, reproduced exactly."""

from __future__ import annotations

import pytest

from kvverify.reference.block_sizes import BlockSizeError, resolve_kv_cache_block_sizes
from kvverify.reference.config import VllmConfig
from kvverify.errors import StartupCheckError
from kvverify.reference.grouping import KVCacheGroupSpec
from kvverify.reference.planner import (
    KVCacheConfig,
    check_enough_kv_cache_memory_for_groups,
    get_kv_cache_configs,
    get_max_concurrency_for_kv_cache_config,
    plan_kv_cache,
)
from kvverify.reference.specs import FullAttentionSpec, MambaSpec

B = 16
L = 512
# Two layers, 1 KV head x 8 dims, fp16: page = 16 tokens * 1 * (8 + 8) * 2 B = 512 B per layer,
# one group of both layers -> 1024 bytes per block.
SPECS = {f"model.layers.{i}.self_attn": FullAttentionSpec(block_size=B, num_kv_heads=1, head_size=8,
                                                          dtype="float16") for i in range(2)}
BYTES_PER_BLOCK = 2 * 16 * 1 * (8 + 8) * 2


def config(**kw) -> VllmConfig:
    return VllmConfig(block_size=B, max_model_len=L, **kw)


def test_bytes_per_block_is_hand_computed() -> None:
    plan = plan_kv_cache(config(num_gpu_blocks_override=40), [SPECS])
    assert plan.bytes_per_block == BYTES_PER_BLOCK == 1024
    assert plan.blocks_per_group == (32,)  # cdiv(512, 16)


@pytest.mark.parametrize("source", ["override", "memory"])
def test_32_blocks_rejected_33_pass(source: str) -> None:
    def plan(n: int):
        if source == "override":
            return plan_kv_cache(config(num_gpu_blocks_override=n), [SPECS])
        return plan_kv_cache(config(kv_cache_memory_bytes=n * BYTES_PER_BLOCK), [SPECS])

    p32, p33 = plan(32), plan(33)
    assert p32.num_blocks == 32 and not p32.starts
    assert "max seq len (512)" in p32.error and "estimated maximum model length is 496" in p32.error
    assert p33.num_blocks == 33 and p33.starts and p33.error is None


def test_profiled_memory_source() -> None:
    # 0.5 utilisation of 2 * 33 blocks of memory leaves exactly 33 blocks.
    p = plan_kv_cache(config(gpu_memory_bytes=66 * BYTES_PER_BLOCK, gpu_memory_utilization=0.5), [SPECS])
    assert p.num_blocks == 33 and p.starts
    p = plan_kv_cache(config(gpu_memory_bytes=64 * BYTES_PER_BLOCK, gpu_memory_utilization=0.5), [SPECS])
    assert p.num_blocks == 32 and not p.starts


def test_public_check_rejects_exact_boundary() -> None:
    plan = plan_kv_cache(config(num_gpu_blocks_override=33), [SPECS])
    groups = plan.groups
    # 32 usable blocks of memory is exactly the need: passes; one byte less fails.
    check_enough_kv_cache_memory_for_groups(32 * BYTES_PER_BLOCK, groups, plan.vllm_config)
    with pytest.raises(StartupCheckError, match="max seq len"):
        check_enough_kv_cache_memory_for_groups(32 * BYTES_PER_BLOCK - 1, groups, plan.vllm_config)
    with pytest.raises(StartupCheckError):
        get_kv_cache_configs(config(num_gpu_blocks_override=32), [SPECS])
    assert get_kv_cache_configs(config(num_gpu_blocks_override=33), [SPECS]).starts


def test_auto_fit_64_blocks_gives_1008() -> None:
    p = plan_kv_cache(VllmConfig(block_size=B, max_model_len=-1, max_position_embeddings=4096,
                                 kv_cache_memory_bytes=64 * BYTES_PER_BLOCK), [SPECS])
    assert p.starts and p.vllm_config.max_model_len == 63 * 16 == 1008
    assert p.auto_fit_max_model_len == 1008


def test_auto_fit_only_lowers() -> None:
    p = plan_kv_cache(VllmConfig(block_size=B, max_model_len=-1, max_position_embeddings=256,
                                 kv_cache_memory_bytes=64 * BYTES_PER_BLOCK), [SPECS])
    assert p.vllm_config.max_model_len == 256


def test_auto_fit_refuses_when_nothing_fits() -> None:
    p = plan_kv_cache(VllmConfig(block_size=B, max_model_len=-1, max_position_embeddings=256,
                                 num_gpu_blocks_override=1), [SPECS])
    assert not p.starts and "auto-fit" in p.error


def test_reported_concurrency_uses_n_not_usable() -> None:
    # Upstream reports 32 / 32 = 1.00x for a pool that cannot serve one request (finding).
    p = plan_kv_cache(config(num_gpu_blocks_override=32), [SPECS])
    assert get_max_concurrency_for_kv_cache_config(p.vllm_config, p.kv_cache_config) == 1.0
    assert not p.starts


def test_several_workers_take_min_blocks() -> None:
    p = plan_kv_cache(config(), [SPECS, SPECS], available_memory=[40 * 1024, 35 * 1024])
    assert [c.num_blocks for c in p.kv_cache_configs] == [35, 35]
    assert all(t.size == 35 * 1024 for c in p.kv_cache_configs for t in c.kv_cache_tensors)


def test_pipeline_parallel_projects_layers() -> None:
    w0 = {"model.layers.0.self_attn": SPECS["model.layers.0.self_attn"]}
    w1 = {"model.layers.1.self_attn": SPECS["model.layers.1.self_attn"]}
    p = plan_kv_cache(config(), [w0, w1], available_memory=[33 * 512, 40 * 512])
    # Each worker holds one layer: 512 bytes per block; min(33, 40) = 33 blocks.
    assert [c.num_blocks for c in p.kv_cache_configs] == [33, 33]
    assert p.starts


def _mamba_hybrid_config(sizes: list[int]) -> KVCacheConfig:
    groups = [KVCacheGroupSpec((f"attn{i}",), FullAttentionSpec(block_size=s, num_kv_heads=1, head_size=8))
              for i, s in enumerate(sizes[:-1])]
    groups.append(KVCacheGroupSpec(("mamba",), MambaSpec(block_size=sizes[-1], shapes=((4, 4),),
                                                         dtypes=("float32",), mamba_cache_mode="align")))
    return KVCacheConfig(num_blocks=10, kv_cache_tensors=(), kv_cache_groups=tuple(groups))


def test_aligned_mamba_hybrid_hash_is_gcd() -> None:
    kc = _mamba_hybrid_config([544, 544, 544, 544, 181])
    vc = VllmConfig(block_size=544, max_model_len=4096, mamba_cache_mode="align")
    assert resolve_kv_cache_block_sizes(kc, vc) == (98464, 1)


def test_invalid_prefix_match_unit_names_it_and_sizes() -> None:
    kc = _mamba_hybrid_config([544, 544, 544, 544, 181])
    vc = VllmConfig(block_size=544, max_model_len=4096, mamba_cache_mode="align", prefix_match_unit=16)
    with pytest.raises(BlockSizeError, match=r"prefix_match_unit=16.*544, 544, 544, 544, 181"):
        resolve_kv_cache_block_sizes(kc, vc)


def test_block_sizes_without_hashing_and_single_group() -> None:
    kc = _mamba_hybrid_config([32, 16])
    vc = VllmConfig(block_size=16, max_model_len=4096, mamba_cache_mode="align", enable_prefix_caching=False)
    assert resolve_kv_cache_block_sizes(kc, vc) == (32, 32)
    single = KVCacheConfig(1, (), (KVCacheGroupSpec(("a",), FullAttentionSpec(block_size=16, num_kv_heads=1,
                                                                               head_size=8)),))
    assert resolve_kv_cache_block_sizes(single, VllmConfig(block_size=16)) == (16, 16)
    with pytest.raises(BlockSizeError, match="prefix_match_unit=8"):
        resolve_kv_cache_block_sizes(single, VllmConfig(block_size=16, prefix_match_unit=8))


def test_non_align_mamba_falls_back_to_scheduler_size() -> None:
    groups = _mamba_hybrid_config([64, 32]).kv_cache_groups
    none_mamba = KVCacheGroupSpec(("mamba",), MambaSpec(block_size=32, shapes=((4, 4),), dtypes=("float32",)))
    kc = KVCacheConfig(10, (), (groups[0], none_mamba))
    assert resolve_kv_cache_block_sizes(kc, VllmConfig(block_size=64)) == (64, 64)


def test_public_helpers_mirror_upstream_including_f6() -> None:
    """Upstream's public check reserves the null block; its public estimate does not (F6)."""
    from kvverify.reference.planner import check_enough_kv_cache_memory, estimate_max_model_len
    config = VllmConfig(block_size=B, max_model_len=L)
    check_enough_kv_cache_memory(config, SPECS, 33 * BYTES_PER_BLOCK)
    with pytest.raises(StartupCheckError, match="estimated maximum model length is 496"):
        check_enough_kv_cache_memory(config, SPECS, 32 * BYTES_PER_BLOCK)
    # the estimate for 32 blocks of memory is 512 (no null block) — which the check refuses
    assert estimate_max_model_len(config, SPECS, 32 * BYTES_PER_BLOCK) == 512
