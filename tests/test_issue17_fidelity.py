"""Hand-checked examples for the issue-17 fidelity items (vLLM 0.33.0 behaviour, worked by hand).

1. full-allocation fallback grouping (MLA next to SWA whose pages cannot be unified);
2. ``prefix_cache_retention_interval`` (sparse SWA / Mamba prefix-cache retention);
3. ``resolve_cache_hit_alignment_tokens`` (partial hash hits);
4. cross-attention (encoder-decoder) blocks, and finding F8;
5. the public ``check_enough_kv_cache_memory`` with ``max_model_len=-1``.
"""

from __future__ import annotations

import pytest

from kvverify import fixes
from kvverify.errors import ConfigError, StartupCheckError
from kvverify.reference.block_sizes import resolve_cache_hit_alignment_tokens
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec
from kvverify.reference.grouping import GroupingError, KVCacheGroupSpec, get_kv_cache_groups
from kvverify.reference.managers.coordinator import KVCacheCoordinator
from kvverify.reference.managers.mamba import MambaManager
from kvverify.reference.managers.sliding_window import SlidingWindowManager
from kvverify.reference.planner import KVCacheConfig, check_enough_kv_cache_memory
from kvverify.reference.pool import BlockPool
from kvverify.reference.specs import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from kvverify.targets.reference import ReferenceTarget

REF = ReferenceTarget()


# ------------------------------------------------------------------ 1. fallback grouping

def test_mla_next_to_swa_with_ununifiable_pages_falls_back_to_full_allocation() -> None:
    """MLA page 16*12*2 = 384 B does not divide the SWA page 16*(8+8)*2 = 512 B and MLA cannot be
    padded: upstream promotes the SWA layer to full attention and puts both layers in one
    UniformTypeKVCacheSpecs group; a request then holds cdiv(256, 16) = 16 blocks (not the window's)."""
    specs = {"mla": MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=12),
             "swa": SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=8, sliding_window=32)}
    config = VllmConfig(block_size=16, max_model_len=256, num_gpu_blocks_override=17)
    (group,) = get_kv_cache_groups(config, specs)
    assert group.layer_names == ("mla", "swa")
    assert isinstance(group.kv_cache_spec, UniformTypeKVCacheSpecs)
    inner = group.kv_cache_spec.specs
    assert type(inner["swa"]) is FullAttentionSpec and inner["swa"].sliding_window == 32
    assert group.kv_cache_spec.page_size_bytes == 384 + 512
    plan = REF.plan(config, [specs])
    assert plan.blocks_per_group == (16,) and plan.starts  # 16 blocks + the null block = 17
    assert not REF.plan(VllmConfig(block_size=16, max_model_len=256, num_gpu_blocks_override=16), [specs]).starts


@pytest.mark.parametrize("with_swa", [False, True])
def test_fallback_does_not_apply_with_chunked_local(with_swa: bool) -> None:
    """MLA next to chunked-local (no plain SWA; or SWA too, which upstream excludes): still refused.
    (MLA next to plain full attention of another page is one uniform-type group, no fallback needed.)"""
    specs = {"mla": MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=12),
             "chunked": ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=1, head_size=8,
                                                  attention_chunk_size=32)}
    if with_swa:
        specs["swa"] = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=8, sliding_window=32)
    with pytest.raises(GroupingError, match="cannot be padded"):
        get_kv_cache_groups(VllmConfig(block_size=16, max_model_len=256, num_gpu_blocks_override=17), specs)


# ------------------------------------------------------------------ 2. retention interval

def _swa_manager(window: int, block_size: int = 4) -> SlidingWindowManager:
    spec = SlidingWindowSpec(block_size=block_size, num_kv_heads=1, head_size=8, sliding_window=window)
    return SlidingWindowManager(spec, BlockPool(16, True, block_size), enable_caching=True, kv_cache_group_id=0,
                                scheduler_block_size=block_size)


def test_swa_reachable_block_mask() -> None:
    """W=9, B=4: a hit needs cdiv(8, 4) = 2 blocks. Retention 0 keeps only the 2 blocks ending at
    the replay boundary 17 // 4 * 4 = 16 (blocks 2, 3); dense keeps all (per segment 1 <= need)."""
    m = _swa_manager(9)
    assert m.reachable_block_mask(0, 6, 0, [17]) == [False, False, True, True, False, False]
    assert m.reachable_block_mask(0, 6, None, [17]) is None
    assert m.reachable_block_mask(0, 6, 8, [17]) is None  # 2 blocks per segment <= need
    # W=5 (need 1), interval 8 (2 blocks per segment): the last block of each segment (1, 3, 5)
    # + the one ending at the boundary 13 // 4 * 4 = 12 (block 2)
    assert _swa_manager(5).reachable_block_mask(0, 6, 8, [13]) == [False, True, True, True, False, True]
    assert _swa_manager(5).reachable_block_mask(4, 6, 0, [17]) == [False, False]  # boundary block 3 < 4


def test_mamba_reachable_block_mask() -> None:
    """Mamba align, B=4: the single state block ending on 16 (index 3); interval 12 also keeps
    each segment's last state (indices 2, 5); dense: None."""
    spec = MambaSpec(block_size=4, shapes=((4, 4),), dtypes=("float32",), mamba_cache_mode="align")
    m = MambaManager(spec, BlockPool(16, True, 4), enable_caching=True, kv_cache_group_id=0, scheduler_block_size=4)
    assert m.reachable_block_mask(0, 6, 0, [17]) == [False, False, False, True, False, False]
    assert m.reachable_block_mask(0, 6, 12, [17]) == [False, False, True, True, False, True]
    assert m.reachable_block_mask(0, 6, None, [17]) is None


def test_sparse_retention_changes_the_schedule() -> None:
    """Pure SWA (W=4, B=4, L=8, 4 blocks): r0 = 0..3, r1 = 0..3 + one token, both at step 0.
    Dense: r1 hits r0's block 0 -> step 1 schedules 4 + 1 = 5 tokens. Retention 0: r0 keeps only the
    tail ending at its replay boundary 3 // 4 * 4 = 0 (nothing) -> no hit, 4 + 5 = 9 tokens."""
    spec = {"s": SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8, sliding_window=4)}
    work = [WorkloadSpec("r0", (0, 1, 2, 3), 1), WorkloadSpec("r1", (0, 1, 2, 3, 20000), 1)]
    scheduled = {}
    for retention in (0, None):
        config = VllmConfig(block_size=4, max_model_len=8, num_gpu_blocks_override=4,
                            prefix_cache_retention_interval=retention)
        result = REF.run_workload(REF.plan(config, [spec]), work)
        assert result.completed
        scheduled[retention] = result.trace[0][4]
    assert scheduled == {0: 9, None: 5}


def test_retention_interval_validation() -> None:
    with pytest.raises(ConfigError, match="prefix_cache_retention_interval"):
        VllmConfig(prefix_cache_retention_interval=-1)
    full = KVCacheConfig(num_blocks=8, kv_cache_tensors=(), kv_cache_groups=(
        KVCacheGroupSpec(("f",), FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8)),))
    swa = KVCacheConfig(num_blocks=8, kv_cache_tensors=(), kv_cache_groups=(
        KVCacheGroupSpec(("s",), SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=8, sliding_window=8)),))
    for cfg, interval in ((full, 0), (full, None), (swa, 8), (swa, None)):
        KVCacheCoordinator(cfg, 64, 64, True, 4, 4, retention_interval=interval)
    with pytest.raises(ConfigError, match="no sliding-window or Mamba"):
        KVCacheCoordinator(full, 64, 64, True, 4, 4, retention_interval=8)
    with pytest.raises(ConfigError, match="multiple of scheduler_block_size"):
        KVCacheCoordinator(swa, 64, 64, True, 4, 4, retention_interval=6)


# ----------------------------------------------------------- 3. cache-hit alignment

def _groups(*specs) -> KVCacheConfig:
    return KVCacheConfig(num_blocks=8, kv_cache_tensors=(),
                         kv_cache_groups=tuple(KVCacheGroupSpec((f"g{i}",), s) for i, s in enumerate(specs)))


def test_resolve_cache_hit_alignment_tokens() -> None:
    """Full(16) + Mamba align(16), hash 1: Mamba's block 16 > 1 and full attention supports
    fine-grained lookups -> hits land on 1 token. An SWA group (block 16 != hash 1, no
    fine-grained lookup) turns it off -> 16; so do caching off and a single group."""
    full = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)
    mamba = MambaSpec(block_size=16, shapes=((4, 4),), dtypes=("float32",), mamba_cache_mode="align")
    swa = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=8, sliding_window=32)
    on = VllmConfig(block_size=16, mamba_cache_mode="align", prefix_match_unit=1, num_gpu_blocks_override=8)
    assert resolve_cache_hit_alignment_tokens(_groups(full, mamba), on, 16, 1) == 1
    assert resolve_cache_hit_alignment_tokens(_groups(full, mamba), on, 16, 16) == 16  # block == hash
    assert resolve_cache_hit_alignment_tokens(_groups(swa, mamba), on, 16, 1) == 16
    off = VllmConfig(block_size=16, enable_prefix_caching=False, num_gpu_blocks_override=8)
    assert resolve_cache_hit_alignment_tokens(_groups(full, mamba), off, 16, 1) == 16
    assert resolve_cache_hit_alignment_tokens(_groups(full), on, 16, 1) == 16


# ------------------------------------------------------- 4. cross attention, finding F8

_ENC_DEC = {"self_attn": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8),
            "encoder_attn": CrossAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)}
_WORK = [WorkloadSpec("r", tuple(range(10)), 2, num_encoder_tokens=20)]


def _enc_dec_config(caching: bool) -> VllmConfig:
    return VllmConfig(block_size=16, max_model_len=64, max_num_encoder_input_tokens=32,
                      num_gpu_blocks_override=16, enable_prefix_caching=caching)


def test_cross_attention_holds_encoder_blocks() -> None:
    """Startup bound: cdiv(64, 16) = 4 decoder blocks + cdiv(32, 16) = 2 encoder blocks. At runtime
    the request holds cdiv(20, 16) = 2 cross-attention blocks from its first step to its last."""
    plan = REF.plan(_enc_dec_config(False), [_ENC_DEC])
    assert plan.starts and plan.blocks_per_group == (4, 2)
    held = []

    def on_step(sched, step) -> None:
        cross = sched.kv_cache_manager.coordinator.single_type_managers[1]
        if "r" in cross.req_to_blocks:
            held.append(cross.num_held_blocks("r"))

    assert REF.run_workload(plan, _WORK, on_step=on_step).completed
    assert held and set(held) == {2}


def test_f8_prefix_caching_on_encoder_decoder_raises_then_fix_refuses() -> None:
    """F8: with caching on the plan starts, the first lookup raises as upstream's; under the fix
    the engine refuses enable_prefix_caching when it is built."""
    plan = REF.plan(_enc_dec_config(True), [_ENC_DEC])
    assert plan.starts
    with pytest.raises(NotImplementedError, match="CrossAttentionManager does not support caching"):
        REF.run_workload(plan, _WORK)
    with fixes.enabled("encoder_decoder_prefix_caching_refused"):
        with pytest.raises(ConfigError, match="enable_prefix_caching"):
            REF.run_workload(plan, _WORK)


# ------------------------------------------------- 5. public check, max_model_len=-1

def test_public_check_resolves_auto_length() -> None:
    """One layer, 512 B per block. max_model_len=-1, max_position_embeddings=32: the check plans
    cdiv(32, 16) = 2 blocks = 1024 B after the null block's 512 B: 1536 B pass, 1535 B do not
    (estimate: cdiv(L, 16) * 512 <= 1023 -> L = 16). Before issue 17 it planned cdiv(-1, 16) = 0."""
    spec = {"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)}
    config = VllmConfig(block_size=16, max_model_len=-1, max_position_embeddings=32, kv_cache_memory_bytes=1)
    check_enough_kv_cache_memory(config, spec, 1536)
    with pytest.raises(StartupCheckError, match=r"max seq len \(32\).*estimated maximum model length is 16"):
        check_enough_kv_cache_memory(config, spec, 1535)
    with pytest.raises(StartupCheckError):  # the shrunk differential example: 513 B, max_position_embeddings=2
        check_enough_kv_cache_memory(VllmConfig(block_size=16, max_model_len=-1, max_position_embeddings=2,
                                                kv_cache_memory_bytes=513), spec, 513)


def test_encoder_decoder_property_catches_a_check_that_ignores_encoder_blocks(monkeypatch) -> None:
    """Planted mutation: the startup bound forgets the cross-attention blocks, so an engine
    sized at the boundary starts yet never admits a request carrying encoder tokens."""
    from hypothesis import HealthCheck, Phase, settings

    from kvverify.hypothesis_hooks import rebuild
    from kvverify.props.encoder_decoder import test_encoder_decoder_workload_completes as prop

    monkeypatch.setattr(CrossAttentionSpec, "max_memory_usage_bytes", lambda self, vllm_config: 0)
    quick = settings(max_examples=150, derandomize=True, database=None, deadline=None,
                     suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    with pytest.raises(AssertionError, match="admission"):
        rebuild(prop, settings=quick)(target=REF)
