"""The model catalog (``kvverify/models/``), HF ``config.json`` ingestion and the catalog strategy.

Every page size and block count below is computed by hand in the comments, then checked
against the layer specs and the planner. Notation: ``B`` block size, ``L`` max_model_len,
``F`` max in-flight tokens (= max_num_batched_tokens = 2048 here), ``W`` window,
``C`` chunk, bf16 = 2 bytes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given

from kvverify import flaws
from kvverify.reference.block_sizes import resolve_kv_cache_block_sizes, validate_coordinator_block_sizes
from kvverify.catalog import (
    CatalogError,
    MambaLayout,
    ModelLayout,
    build_layer_specs,
    build_model,
    layout_from_dict,
    list_models,
    load_model,
    load_model_file,
    read_hf_config,
)
from kvverify.catalog_strategies import catalog_cases, catalog_configs
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec, run_workload
from kvverify.errors import ConfigError
from kvverify.reference.planner import plan_kv_cache
from kvverify.reference.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

CATALOG = [
    "deepseek-v3", "falcon-mamba-7b", "gemma-2-9b", "gemma-3-12b", "gemma-3-27b", "gpt-oss-120b",
    "gpt-oss-20b", "jamba-v0.1", "llama-3.1-70b", "llama-3.1-8b", "llama-4-scout-17b-16e",
    "mistral-7b-v0.1", "qwen3-next-80b-a3b",
]


def test_catalog_lists_the_13_models_and_each_loads() -> None:
    assert list_models() == CATALOG
    for name in CATALOG:
        layout = load_model(name)
        assert layout.name == name
        assert layout.source
        # a catalog file round-trips through its dict form
        assert layout_from_dict(layout.to_dict()) == layout


def test_illustrative_numbers_are_marked() -> None:
    # models.md marks the Qwen3-Next GDN sizes (~): the file must say so.
    qwen = load_model("qwen3-next-80b-a3b")
    assert "mamba.num_value_heads" in qwen.illustrative and "(~)" in qwen.notes
    assert all(not load_model(n).illustrative for n in CATALOG if n != "qwen3-next-80b-a3b")


# --- hand-computed page sizes and per-request block needs ---------------------------------
#
# Each row: model, L, expected attention block size (after hybrid alignment), page bytes
# per layer by spec type, bytes_per_block (largest group's sum of pages), and the planner's
# blocks per group at L (in group order) -- all written out by hand.

HAND = [
    # llama-3.1-8b, B=16: page = 2 * 16 * 8 heads * 128 dims * 2 B = 65536;
    # one group of 32 layers: 32 * 65536 = 2097152; L=8192: cdiv(8192, 16) = 512
    ("llama-3.1-8b", 8192, 16, {"FullAttentionSpec": 65536}, 2097152, (512,)),
    # llama-3.1-70b: same page 65536; 80 layers: 80 * 65536 = 5242880; 512 blocks
    ("llama-3.1-70b", 8192, 16, {"FullAttentionSpec": 65536}, 5242880, (512,)),
    # mistral-7b-v0.1, all SWA W=4096: page 65536; 32 * 65536 = 2097152;
    # L=32768: cdiv(min(4096 - 1 + 2048, 32768), 16) + 1 = cdiv(6143, 16) + 1 = 384 + 1 = 385
    ("mistral-7b-v0.1", 32768, 16, {"SlidingWindowSpec": 65536}, 2097152, (385,)),
    # gemma-2-9b: page = 2 * 16 * 8 * 256 * 2 = 131072; 21 sliding + 21 full, 21 < 1.5 * 21
    # -> group_size 21, 2 groups; bpb = 21 * 131072 = 2752512;
    # L=8192: sliding cdiv(min(4095 + 2048, 8192), 16) + 1 = 384 + 1 = 385; full 512
    ("gemma-2-9b", 8192, 16, {"SlidingWindowSpec": 131072, "FullAttentionSpec": 131072},
     2752512, (385, 512)),
    # gemma-3-12b: page 131072; 40 sliding + 8 full -> group_size 8: 5 sliding groups + 1 full;
    # bpb = 8 * 131072 = 1048576; L=131072: sliding cdiv(min(1023 + 2048, L), 16) + 1
    # = cdiv(3071, 16) + 1 = 192 + 1 = 193 each; full cdiv(131072, 16) = 8192
    ("gemma-3-12b", 131072, 16, {"SlidingWindowSpec": 131072, "FullAttentionSpec": 131072},
     1048576, (193,) * 5 + (8192,)),
    # gemma-3-27b: page = 2 * 16 * 16 * 128 * 2 = 131072; 62 layers: full at i % 6 == 5 ->
    # 10 full, 52 sliding; group_size 10; sliding -> cdiv(52, 10) = 6 groups (9,9,9,9,8,8);
    # bpb = 10 * 131072 = 1310720; L=131072: 6 * 193 sliding, 8192 full
    ("gemma-3-27b", 131072, 16, {"SlidingWindowSpec": 131072, "FullAttentionSpec": 131072},
     1310720, (193,) * 6 + (8192,)),
    # gpt-oss-20b: page = 2 * 16 * 8 * 64 * 2 = 32768; 12 sliding + 12 full, 2 groups of 12;
    # bpb = 12 * 32768 = 393216; L=131072: sliding cdiv(min(127 + 2048, L), 16) + 1
    # = cdiv(2175, 16) + 1 = 136 + 1 = 137; full 8192
    ("gpt-oss-20b", 131072, 16, {"SlidingWindowSpec": 32768, "FullAttentionSpec": 32768},
     393216, (137, 8192)),
    # gpt-oss-120b: 18 + 18 layers: bpb = 18 * 32768 = 589824; same blocks
    ("gpt-oss-120b", 131072, 16, {"SlidingWindowSpec": 32768, "FullAttentionSpec": 32768},
     589824, (137, 8192)),
    # llama-4-scout: page 65536; 36 chunked + 12 full -> group_size 12: 3 chunked + 1 full;
    # bpb = 12 * 65536 = 786432; L=131072: chunked cdiv(min(8192 + 2048, L), 16) = 640; full 8192
    ("llama-4-scout-17b-16e", 131072, 16,
     {"ChunkedLocalAttentionSpec": 65536, "FullAttentionSpec": 65536}, 786432, (640, 640, 640, 8192)),
    # deepseek-v3, MLA: page = 16 * 1 * (512 + 64) * 2 = 18432; 61 * 18432 = 1124352;
    # L=163840: cdiv(163840, 16) = 10240
    ("deepseek-v3", 163840, 16, {"MLAAttentionSpec": 18432}, 1124352, (10240,)),
    # qwen3-next: p1 = 2 * 2 heads * 256 * 2 = 2048 B/token. GDN conv (4 - 1, 2*16*128 + 32*128)
    # = (3, 8192) -> 49152 B; SSM (32, 128, 128) -> 1048576 B; page 1097728.
    # attn block = 16 * cdiv(1097728, 16 * 2048) = 16 * cdiv(1097728, 32768) = 16 * 34 = 544;
    # attention page 544 * 2048 = 1114112, GDN padded to it. 36 GDN + 12 full -> group_size 12,
    # 3 GDN groups + 1 full; bpb = 12 * 1114112 = 13369344.
    # L=262144 (mode none): GDN 1 block each; full cdiv(262144, 544) = 482 (544 * 481 = 261664)
    ("qwen3-next-80b-a3b", 262144, 544, {"MambaSpec": 1114112, "FullAttentionSpec": 1114112},
     13369344, (1, 1, 1, 482)),
    # jamba-v0.1: p1 = 2 * 8 * 128 * 2 = 4096; Mamba conv (3, 8192) -> 49152, SSM (8192, 16)
    # -> 262144; page 311296. attn block = 16 * cdiv(311296, 65536) = 16 * 5 = 80; page
    # 80 * 4096 = 327680 (Mamba padded). 28 Mamba + 4 attention -> group_size 4: 7 Mamba groups
    # + 1 full; bpb = 4 * 327680 = 1310720. L=262144: Mamba 1 each; full cdiv(262144, 80) = 3277
    ("jamba-v0.1", 262144, 80, {"MambaSpec": 327680, "FullAttentionSpec": 327680},
     1310720, (1,) * 7 + (3277,)),
    # falcon-mamba-7b: page 311296 (as Jamba's Mamba layers, no padding: not hybrid);
    # 64 layers, one group: 64 * 311296 = 19922944; mode none: 1 block per request
    ("falcon-mamba-7b", 4096, 16, {"MambaSpec": 311296}, 19922944, (1,)),
]


@pytest.mark.parametrize("name, length, block, pages, bpb, blocks", HAND, ids=[h[0] for h in HAND])
def test_hand_computed_pages_and_blocks(name: str, length: int, block: int, pages: dict,
                                        bpb: int, blocks: tuple) -> None:
    assert sorted(h[0] for h in HAND) == CATALOG
    config, specs = build_model(load_model(name), VllmConfig(block_size=16, max_model_len=length))
    assert config.block_size == block
    assert {type(s).__name__: s.page_size_bytes for s in specs.values()} == pages
    need = sum(blocks)
    plan = plan_kv_cache(replace(config, num_gpu_blocks_override=need + 1), [specs])
    assert plan.bytes_per_block == bpb
    assert plan.blocks_per_group == blocks
    assert plan.starts  # need + 1 blocks: exactly enough with the null block
    assert not plan_kv_cache(replace(config, num_gpu_blocks_override=need), [specs]).starts


def test_layer_names_and_spec_fields() -> None:
    specs = build_layer_specs(load_model("gemma-3-12b"), VllmConfig(block_size=32, max_model_len=4096))
    assert list(specs)[:2] == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    assert isinstance(specs["model.layers.5.self_attn"], FullAttentionSpec)
    sw = specs["model.layers.0.self_attn"]
    assert isinstance(sw, SlidingWindowSpec) and sw.sliding_window == 1024 and sw.block_size == 32
    jamba = build_layer_specs(load_model("jamba-v0.1"), VllmConfig(max_model_len=4096))
    assert isinstance(jamba["model.layers.4.self_attn"], FullAttentionSpec)
    assert isinstance(jamba["model.layers.0.mamba"], MambaSpec)
    qwen = build_layer_specs(load_model("qwen3-next-80b-a3b"), VllmConfig(max_model_len=4096))
    assert isinstance(qwen["model.layers.0.linear_attn"], MambaSpec)
    scout = build_layer_specs(load_model("llama-4-scout-17b-16e"), VllmConfig(max_model_len=4096))
    assert isinstance(scout["model.layers.0.self_attn"], ChunkedLocalAttentionSpec)
    assert isinstance(scout["model.layers.3.self_attn"], FullAttentionSpec)
    ds = build_layer_specs(load_model("deepseek-v3"), VllmConfig(max_model_len=4096))
    assert all(isinstance(s, MLAAttentionSpec) and s.head_size == 576 for s in ds.values())


def test_fp8_kv_cache_halves_attention_pages() -> None:
    # llama-3.1-8b fp8: 2 * 16 * 8 * 128 * 1 = 32768
    specs = build_layer_specs(load_model("llama-3.1-8b"), VllmConfig(), kv_cache_dtype="fp8")
    assert {s.page_size_bytes for s in specs.values()} == {32768}
    # qwen3-next fp8: p1 = 2 * 2 * 256 * 1 = 1024; GDN state stays bf16 (1097728 B);
    # attn block = 16 * cdiv(1097728, 16 * 1024) = 16 * 67 = 1072 (16384 * 67 = 1097728 exactly),
    # page 1072 * 1024 = 1097728 == the GDN page: no padding needed
    config, specs = build_model(load_model("qwen3-next-80b-a3b"), VllmConfig(max_model_len=4096),
                                kv_cache_dtype="fp8")
    assert config.block_size == 1072
    mamba = specs["model.layers.0.linear_attn"]
    assert isinstance(mamba, MambaSpec) and mamba.page_size_padded is None
    assert mamba.page_size_bytes == specs["model.layers.3.self_attn"].page_size_bytes == 1097728


def test_speculative_blocks_and_align_mode() -> None:
    # qwen3-next, 2 speculative tokens: GDN conv (3 + 2, 8192) -> 81920 B; page 81920 + 1048576
    # = 1130496; attn block = 16 * cdiv(1130496, 32768) = 16 * 35 = 560 (34.5 rounds up);
    # page 560 * 2048 = 1146880. Mode none: each GDN group holds 1 + S = 3 blocks;
    # L=4096: full cdiv(4096, 560) = 8 (560 * 7 = 3920). Total 3 * 3 + 8 = 17.
    config, specs = build_model(load_model("qwen3-next-80b-a3b"),
                                VllmConfig(max_model_len=4096, num_lookahead_tokens=2))
    assert config.block_size == 560
    mamba = specs["model.layers.0.linear_attn"]
    assert isinstance(mamba, MambaSpec)
    assert mamba.shapes == ((5, 8192), (32, 128, 128)) and mamba.num_speculative_blocks == 2
    assert mamba.page_size_bytes == 1146880 and mamba.block_size == 4096  # mode none: L
    plan = plan_kv_cache(replace(config, num_gpu_blocks_override=18), [specs])
    assert plan.blocks_per_group == (3, 3, 3, 8) and plan.starts
    # Jamba in align mode: Mamba block size = attention block size 80; 2 + S + P blocks:
    # S = 1 (conv state of Mamba-1 does not grow), P = 1 -> 4; L = 4096: full cdiv(4096, 80) = 52
    config, specs = build_model(load_model("jamba-v0.1"),
                                VllmConfig(max_model_len=4096, mamba_cache_mode="align"),
                                num_speculative_tokens=1, num_prefill_checkpoint_blocks=1)
    mamba = specs["model.layers.0.mamba"]
    assert isinstance(mamba, MambaSpec) and mamba.block_size == 80 == config.block_size
    assert mamba.shapes == ((3, 8192), (8192, 16))
    plan = plan_kv_cache(replace(config, num_gpu_blocks_override=1000), [specs])
    assert plan.blocks_per_group == (4,) * 7 + (52,)
    # Jamba at B = 128: k = max(16, 128) = 128; 128 * cdiv(311296, 128 * 4096) = 128 -> unchanged;
    # attention page 128 * 4096 = 524288, Mamba padded from 311296 to it
    config, specs = build_model(load_model("jamba-v0.1"), VllmConfig(block_size=128, max_model_len=4096))
    assert config.block_size == 128
    assert specs["model.layers.0.mamba"].page_size_bytes == 524288


def test_truncation_keeps_the_pattern() -> None:
    gemma = load_model("gemma-3-27b")
    assert gemma.period == 6
    assert gemma.truncated(2).layer_kinds == ("sliding",) * 5 + ("full",) + ("sliding",) * 5 + ("full",)
    jamba = load_model("jamba-v0.1").truncated(1)
    assert jamba.kind_counts() == {"mamba": 7, "full": 1}
    assert load_model("llama-3.1-8b").truncated(3).num_layers == 3
    assert load_model("gpt-oss-20b").truncated(100).num_layers == 24


# --- the planner and the guarantees across memory budgets -----------------------------------


def _guarantee_3(plan, enable_caching: bool) -> None:
    scheduler, hash_size = resolve_kv_cache_block_sizes(plan.kv_cache_config, plan.vllm_config)
    validate_coordinator_block_sizes(plan.kv_cache_config, scheduler, hash_size, enable_caching)


@pytest.mark.parametrize("name", CATALOG)
def test_planner_sweep_over_memory_budgets(name: str) -> None:
    """starts iff sum_g blocks_g(L) <= N - 1, for every block-count source; auto-fit servable and
    maximal; hash/scheduler block sizes consistent; a max-length request then completes."""
    layout = load_model(name)
    for prefix_caching in (True, False):
        if layout.has_mamba and not layout.has_attention and not prefix_caching:
            continue  # pure Mamba, mode none: see test_pure_mamba_mode_none_block_sizes
        mode = "align" if (layout.has_mamba and prefix_caching) else "none"
        base = VllmConfig(block_size=16, max_model_len=1, enable_prefix_caching=prefix_caching,
                          mamba_cache_mode=mode, max_num_batched_tokens=1024)
        block = build_model(layout, base).vllm_config.block_size
        for length in (3 * block, 5 * block + 1):
            config, specs = build_model(layout, replace(base, max_model_len=length))
            probe = plan_kv_cache(replace(config, num_gpu_blocks_override=1), [specs])
            need, bpb = probe.blocks_needed_per_request, probe.bytes_per_block
            for n in (1, need - 1, need, need + 1, need + 2, 3 * need):
                if n < 1:
                    continue
                for source in ({"kv_cache_memory_bytes": n * bpb},
                               {"kv_cache_memory_bytes": n * bpb + bpb - 1},
                               {"num_gpu_blocks_override": n},
                               {"gpu_memory_bytes": 2 * (n * bpb + 7), "gpu_memory_utilization": 0.5,
                                "non_kv_cache_memory_bytes": 7}):
                    plan = plan_kv_cache(replace(config, **source), [specs])
                    assert plan.kv_cache_config.num_blocks == n, (source, n)
                    assert plan.starts == (need <= n - 1), (source, n, need)
                    for t in plan.kv_cache_config.kv_cache_tensors:
                        assert t.size == n * bpb
                    if plan.starts:
                        _guarantee_3(plan, prefix_caching)
                # auto-fit: the chosen length is servable and maximal
                auto = replace(config, max_model_len=-1, max_position_embeddings=length,
                               kv_cache_memory_bytes=n * bpb)
                plan = plan_kv_cache(auto, [specs])
                if plan.starts:
                    fitted = plan.vllm_config.max_model_len
                    assert plan.blocks_needed_per_request <= n - 1
                    if fitted < length:
                        bigger = plan_kv_cache(replace(config, max_model_len=fitted + 1,
                                                       num_gpu_blocks_override=n), [specs])
                        assert not bigger.starts
                else:
                    assert need > n - 1
            # the smallest pool that starts serves one full-length request to completion
            plan = plan_kv_cache(replace(config, num_gpu_blocks_override=need + 1), [specs])
            assert plan.starts
            result = run_workload(plan.vllm_config, plan.kv_cache_config,
                                  [WorkloadSpec("full", tuple(range(length - 1)), 1)])
            assert result.completed, result


def test_pure_mamba_mode_none_block_sizes() -> None:
    """Not a finding (confirmed on vLLM 0.33.0): the engine sets ``cache_config.block_size``
    to the smallest prefix-cacheable group block size (here max_model_len) before resolving
    block sizes, so the single Mamba group is accepted."""
    config, specs = build_model(load_model("falcon-mamba-7b"),
                                VllmConfig(max_model_len=4096, enable_prefix_caching=False))
    plan = plan_kv_cache(replace(config, num_gpu_blocks_override=2), [specs])
    assert plan.starts and plan.vllm_config.block_size == 4096
    _guarantee_3(plan, enable_caching=False)


@given(catalog_cases())
def test_catalog_strategy_planner_agrees(case) -> None:
    plan = plan_kv_cache(case.vllm_config, [case.layer_specs])
    assert plan.kv_cache_config.num_blocks == case.num_blocks
    assert plan.bytes_per_block == case.bytes_per_block
    if case.vllm_config.auto_max_model_len:
        assert plan.starts == (plan.blocks_needed_per_request <= case.num_blocks - 1
                               and plan.vllm_config.max_model_len >= 1)
    else:
        assert plan.starts == (case.blocks_needed <= case.num_blocks - 1)


@given(catalog_configs(max_pattern_repeats=1))
def test_catalog_configs_yields_pairs(pair) -> None:
    config, specs = pair
    assert isinstance(config, VllmConfig) and specs
    assert config.block_size in (16, 32, 64, 128) or any(isinstance(s, MambaSpec) for s in specs.values())


# --- the Gemma-class long-context case (#39734) ----------------------------------------------

# Gemma-style 5:1 hybrid (gemma-3-12b's layout: 48 layers, 8 KV heads x 256, W = 1024, bf16),
# served at max_model_len 262,144 with B = 16 and max_num_batched_tokens 2048.
# Groups: 5 sliding + 1 full, 8 layers each; bytes_per_block = 8 * 131072 = 1048576.
# Pool: N = 28740 blocks. The old log line "GPU KV cache size" reported
# N // num_groups * B = 28740 // 6 * 16 = 4790 * 16 = 76,640 tokens.
# Startup (capped): full cdiv(262144, 16) = 16384 + 5 * 193 = 17349 <= N - 1 = 28739 -> starts.
# Gate without the cap (#39734): 6 groups * cdiv(n, 16) -- at n = 262143, 6 * 16384 = 98304 >
# 28739: never admissible, on an empty pool, although startup promised it. The largest
# admissible prompt uncapped is 28739 // 6 = 4789 blocks -> 76,624 tokens.
GEMMA_BLOCKS = 28740


def _gemma_plan():
    config, specs = build_model(load_model("gemma-3-12b"),
                                VllmConfig(block_size=16, max_model_len=262144,
                                           kv_cache_memory_bytes=GEMMA_BLOCKS * 1048576))
    return plan_kv_cache(config, [specs])


def test_gemma_class_startup_passes_with_swa_cap() -> None:
    plan = _gemma_plan()
    assert plan.bytes_per_block == 1048576
    assert plan.kv_cache_config.num_blocks == GEMMA_BLOCKS
    assert GEMMA_BLOCKS // len(plan.groups) * 16 == 76640
    assert plan.blocks_per_group == (193,) * 5 + (16384,)
    assert plan.blocks_needed_per_request == 17349 <= GEMMA_BLOCKS - 1
    assert plan.starts


@pytest.mark.parametrize("prompt", [262143, 100000, 76625])
def test_gemma_class_deadlock_with_uncapped_swa_admission(prompt: int) -> None:
    plan = _gemma_plan()
    spec = [WorkloadSpec("long", tuple(range(prompt)), 1)]
    ok = run_workload(plan.vllm_config, plan.kv_cache_config, spec)
    assert ok.completed and ok.finished == ("long",)
    with flaws.enabled("swa_admission_uncapped"):
        stuck = run_workload(plan.vllm_config, plan.kv_cache_config, spec)
    # the #39734 shape: running 0, waiting 1, nothing scheduled, on an empty pool
    assert stuck.stalled and stuck.stall_reason == "head_of_line"
    assert (stuck.running, stuck.waiting) == (0, 1) and stuck.free_blocks == GEMMA_BLOCKS - 1


def test_gemma_class_short_request_admitted_even_uncapped() -> None:
    plan = _gemma_plan()
    with flaws.enabled("swa_admission_uncapped"):  # 6 * cdiv(76624, 16) = 28734 <= 28739
        result = run_workload(plan.vllm_config, plan.kv_cache_config,
                              [WorkloadSpec("short", tuple(range(76624)), 1)])
    assert result.completed


# --- Hugging Face config.json ----------------------------------------------------------------

HF_CONFIGS = {
    "llama-3.1-8b": {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "num_hidden_layers": 32,
                     "max_position_embeddings": 131072, "torch_dtype": "bfloat16"},
    "llama-3.1-70b": {"model_type": "llama", "hidden_size": 8192, "num_attention_heads": 64,
                      "num_key_value_heads": 8, "num_hidden_layers": 80,
                      "max_position_embeddings": 131072, "torch_dtype": "bfloat16"},
    "mistral-7b-v0.1": {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "num_hidden_layers": 32, "sliding_window": 4096,
                        "max_position_embeddings": 32768, "torch_dtype": "bfloat16"},
    "gemma-2-9b": {"model_type": "gemma2", "head_dim": 256, "hidden_size": 3584,
                   "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 42,
                   "sliding_window": 4096, "max_position_embeddings": 8192, "torch_dtype": "float32"},
    "gemma-3-12b": {"model_type": "gemma3", "torch_dtype": "bfloat16", "text_config": {
        "model_type": "gemma3_text", "head_dim": 256, "hidden_size": 3840, "num_attention_heads": 16,
        "num_key_value_heads": 8, "num_hidden_layers": 48, "sliding_window": 1024,
        "sliding_window_pattern": 6, "max_position_embeddings": 131072}},
    "gemma-3-27b": {"model_type": "gemma3", "torch_dtype": "bfloat16", "text_config": {
        "model_type": "gemma3_text", "head_dim": 128, "hidden_size": 5376, "num_attention_heads": 32,
        "num_key_value_heads": 16, "num_hidden_layers": 62, "sliding_window": 1024,
        "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                        for i in range(62)],
        "max_position_embeddings": 131072}},
    "gpt-oss-20b": {"model_type": "gpt_oss", "head_dim": 64, "hidden_size": 2880,
                    "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 24,
                    "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12,
                    "max_position_embeddings": 131072, "torch_dtype": "bfloat16"},
    "gpt-oss-120b": {"model_type": "gpt_oss", "head_dim": 64, "hidden_size": 2880,
                     "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 36,
                     "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18,
                     "max_position_embeddings": 131072, "torch_dtype": "bfloat16"},
    "llama-4-scout-17b-16e": {"model_type": "llama4", "torch_dtype": "bfloat16", "text_config": {
        "model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128,
        "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 8,
        "num_hidden_layers": 48, "no_rope_layers": [1, 1, 1, 0] * 12,
        "max_position_embeddings": 10485760}},
    "deepseek-v3": {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
                    "num_key_value_heads": 128, "num_hidden_layers": 61, "kv_lora_rank": 512,
                    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                    "max_position_embeddings": 163840, "torch_dtype": "bfloat16"},
    "qwen3-next-80b-a3b": {"model_type": "qwen3_next", "hidden_size": 2048, "num_attention_heads": 16,
                           "num_key_value_heads": 2, "head_dim": 256, "num_hidden_layers": 48,
                           "full_attention_interval": 4, "linear_num_key_heads": 16,
                           "linear_num_value_heads": 32, "linear_key_head_dim": 128,
                           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
                           "max_position_embeddings": 262144, "torch_dtype": "bfloat16"},
    "jamba-v0.1": {"model_type": "jamba", "hidden_size": 4096, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "num_hidden_layers": 32, "attn_layer_period": 8,
                   "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
                   "max_position_embeddings": 262144, "torch_dtype": "bfloat16"},
    "falcon-mamba-7b": {"model_type": "falcon_mamba", "hidden_size": 4096, "num_hidden_layers": 64,
                        "state_size": 16, "conv_kernel": 4, "expand": 2, "intermediate_size": 8192,
                        "torch_dtype": "bfloat16"},
}

_COMPARED = ("layer_kinds", "dtype", "num_kv_heads", "head_dim", "sliding_window",
             "attention_chunk_size", "kv_lora_rank", "qk_rope_head_dim", "mamba",
             "max_position_embeddings")


@pytest.mark.parametrize("name", CATALOG)
def test_hf_config_reads_like_the_catalog(name: str) -> None:
    layout = read_hf_config(HF_CONFIGS[name], name=name)
    catalog = load_model(name)
    for f in _COMPARED:
        assert getattr(layout, f) == getattr(catalog, f), f


def test_hf_config_from_path_and_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**HF_CONFIGS["llama-3.1-8b"],
                                                      "_name_or_path": "meta-llama/Llama-3.1-8B"}))
    by_dir = read_hf_config(tmp_path)
    by_file = read_hf_config(tmp_path / "config.json")
    assert by_dir == by_file and by_dir.name == "Llama-3.1-8B" and by_dir.num_layers == 32


def test_hf_config_variants() -> None:
    # head_dim missing -> hidden_size / num_attention_heads; kv heads missing -> attention heads
    layout = read_hf_config({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4})
    assert (layout.num_kv_heads, layout.head_dim, layout.dtype) == (4, 16, "bfloat16")
    # Qwen2-style: a window that is switched off
    layout = read_hf_config({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                             "sliding_window": 32, "use_sliding_window": False})
    assert layout.layer_kinds == ("full", "full")
    # Llama 4 without no_rope_layers: default interval 4
    layout = read_hf_config({"model_type": "llama4_text", "num_hidden_layers": 8, "head_dim": 8,
                             "num_key_value_heads": 1, "attention_chunk_size": 64})
    assert layout.layer_kinds == ("chunked",) * 3 + ("full",) + ("chunked",) * 3 + ("full",)
    # Mamba-2 fields
    layout = read_hf_config({"model_type": "mamba2", "num_hidden_layers": 2, "hidden_size": 64,
                             "expand": 2, "state_size": 16, "conv_kernel": 4, "n_groups": 1,
                             "num_heads": 4, "head_dim": 32})
    assert layout.mamba == MambaLayout(type="mamba2", d_inner=128, d_state=16, d_conv=4, n_groups=1,
                                       num_heads=4, head_dim=32)
    assert layout.mamba.state_shapes(1) == ((4, 128 + 2 * 16), (4, 32, 16))


# --- malformed model files and configs: clear errors naming the field ------------------------


def _valid() -> dict:
    return load_model("jamba-v0.1").to_dict()


@pytest.mark.parametrize("mutate, error, match", [
    (lambda d: d.pop("num_layers"), ConfigError, "num_layers"),
    (lambda d: d.update(num_layers="32"), ConfigError, "num_layers"),
    (lambda d: d.update(num_layers=-4), ConfigError, "num_layers"),
    (lambda d: d.update(num_kv_heads=0), ConfigError, "num_kv_heads"),
    (lambda d: d.update(head_dim=12.5), ConfigError, "head_dim"),
    (lambda d: d.pop("num_kv_heads"), ConfigError, "num_kv_heads"),
    (lambda d: d.update(dtype="float12"), ConfigError, "dtype"),
    (lambda d: d.update(layers={"pattern": ["mamba", "attn_sink"]}), ConfigError, r"layers\.pattern\[1\]"),
    (lambda d: d.update(layers={"layer_types": ["full"] * 3}), ConfigError, "layers.layer_types"),
    (lambda d: d.update(layers=["full"]), ConfigError, "layers"),
    (lambda d: d.update(layers={"pattern": []}), ConfigError, "layers.pattern"),
    (lambda d: d.update(sliding_windw=4096), ConfigError, "sliding_windw"),
    (lambda d: d.pop("mamba"), ConfigError, "mamba"),
    (lambda d: d["mamba"].pop("d_state"), ConfigError, "mamba.d_state"),
    (lambda d: d["mamba"].update(d_conv=1), ConfigError, "mamba.d_conv"),
    (lambda d: d["mamba"].update(type="mamba3"), ConfigError, "mamba.type"),
    (lambda d: d["mamba"].update(num_heads=8), ConfigError, "mamba.num_heads"),
    (lambda d: d.update(layers={"pattern": ["sliding"]}), ConfigError, "sliding_window"),
    (lambda d: d.update(layers={"pattern": ["chunked"]}), ConfigError, "attention_chunk_size"),
    (lambda d: d.update(layers={"pattern": ["mla", "full"]}), ConfigError, "layer_kinds"),
    (lambda d: d.update(max_position_embeddings=0), ConfigError, "max_position_embeddings"),
    (lambda d: d.update(name="../etc"), ConfigError, "name"),
    (lambda d: d.update(schema_version=2), ConfigError, "schema_version"),
])
def test_malformed_model_dicts(mutate, error, match) -> None:
    data = _valid()
    mutate(data)
    with pytest.raises(error, match=match):
        layout_from_dict(data, "bad.json")


def test_malformed_model_files(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        load_model_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "num_layers": 3,')
    with pytest.raises(CatalogError, match="malformed JSON"):
        load_model_file(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        load_model_file(bad)
    data = _valid()
    data["num_layers"] = -1
    bad.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"num_layers.*in .*bad\.json"):
        load_model_file(bad)
    good = tmp_path / "mine.json"
    good.write_text(json.dumps(_valid()))
    assert load_model_file(good) == load_model("jamba-v0.1")
    with pytest.raises(ConfigError, match="model"):
        load_model("llama-9")


@pytest.mark.parametrize("config, match", [
    ({"hidden_size": 64, "num_attention_heads": 4}, "num_hidden_layers"),
    ({"num_hidden_layers": 0, "hidden_size": 64, "num_attention_heads": 4}, "num_hidden_layers"),
    ({"num_hidden_layers": 2, "hidden_size": 64}, "num_attention_heads"),
    ({"num_hidden_layers": 2, "hidden_size": 66, "num_attention_heads": 4}, "hidden_size"),
    ({"num_hidden_layers": 2, "head_dim": -8, "num_key_value_heads": 1}, "head_dim"),
    ({"num_hidden_layers": 2, "head_dim": 8, "num_key_value_heads": 1, "torch_dtype": "int4"},
     "torch_dtype"),
    ({"num_hidden_layers": 2, "head_dim": 8, "num_key_value_heads": 1,
      "layer_types": ["full_attention", "rotary_magic"]}, r"layer_types\[1\]"),
    ({"num_hidden_layers": 2, "head_dim": 8, "num_key_value_heads": 1,
      "layer_types": ["full_attention"]}, "layer_types"),
    ({"num_hidden_layers": 2, "head_dim": 8, "num_key_value_heads": 1,
      "layer_types": ["sliding_attention"] * 2}, "sliding_window"),
    ({"num_hidden_layers": 2, "kv_lora_rank": 512}, "qk_rope_head_dim"),
    ({"num_hidden_layers": 2, "head_dim": 8, "num_key_value_heads": 1, "sliding_window": 0},
     "sliding_window"),
    ({"num_hidden_layers": 2, "head_dim": 8, "num_key_value_heads": 1, "sliding_window": 16,
      "sliding_window_pattern": "every-6th"}, "sliding_window_pattern"),
    ({"num_hidden_layers": 2, "head_dim": 8, "num_key_value_heads": 1, "attention_chunk_size": 64,
      "no_rope_layers": [1]}, "no_rope_layers"),
    ({"num_hidden_layers": 8, "head_dim": 8, "num_key_value_heads": 1, "attn_layer_period": 4,
      "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
      "hidden_size": 64}, "attn_layer_offset"),
    ({"num_hidden_layers": 8, "head_dim": 8, "num_key_value_heads": 1, "attn_layer_period": 4,
      "attn_layer_offset": 1, "mamba_d_conv": 4, "mamba_expand": 2, "hidden_size": 64},
     "mamba_d_state"),
    ({"num_hidden_layers": 8, "head_dim": 8, "num_key_value_heads": 1, "attn_layer_period": 4,
      "attn_layer_offset": 1, "mamba_d_state": 16, "mamba_d_conv": 4}, "mamba_expand"),
    ({"num_hidden_layers": 4, "head_dim": 8, "num_key_value_heads": 1, "full_attention_interval": 2,
      "linear_num_key_heads": 2}, "linear_num_value_heads"),
    ({"num_hidden_layers": 2, "text_config": [1]}, "text_config"),
])
def test_malformed_hf_configs(config: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        read_hf_config(config)


def test_malformed_hf_files(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        read_hf_config(tmp_path)  # a directory without config.json
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CatalogError, match="malformed JSON"):
        read_hf_config(tmp_path)


def test_build_options_are_validated() -> None:
    layout = load_model("jamba-v0.1")
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        build_layer_specs(layout, VllmConfig(), kv_cache_dtype="fp4x")
    with pytest.raises(ConfigError, match="num_speculative_tokens"):
        build_layer_specs(layout, VllmConfig(), num_speculative_tokens=-1)
    with pytest.raises(ConfigError, match="num_prefill_checkpoint_blocks"):
        build_layer_specs(layout, VllmConfig(), num_prefill_checkpoint_blocks=2)
    with pytest.raises(ConfigError, match="layout"):
        build_layer_specs("jamba-v0.1", VllmConfig())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="repeats"):
        layout.truncated(0)
    with pytest.raises(ConfigError, match=r"layer_kinds\[0\]"):
        ModelLayout(name="x", layer_kinds=("dense",))
