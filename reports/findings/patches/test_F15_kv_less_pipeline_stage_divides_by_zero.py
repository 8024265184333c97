# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression test for F15: a pipeline stage that holds no KV cache layer, next to
one that does, makes get_kv_cache_configs raise ZeroDivisionError.

get_pp_indices accepts a VLLM_PP_LAYER_PARTITION entry of 0 and, without it, leaves
the last stage empty when num_hidden_layers < pp_size (1 layer, pp 2: [1, 0]).
_project_kv_cache_groups_to_worker gives such a worker every group with an empty
layer list, so the `if not groups` guards never fire and the worker's bytes per
block (0) is divided by.

Belongs in tests/v1/core/test_kv_cache_utils.py. Runs offline on CPU
(VLLM_TARGET_DEVICE=cpu): a stand-in replaces ModelConfig (the planner reads
only the fields set below).
"""

from types import SimpleNamespace

import pytest
import torch

from vllm.config import CacheConfig, SchedulerConfig, VllmConfig
from vllm.distributed.utils import get_pp_indices
from vllm.v1.attention.backends.utils import (
    get_supported_kv_cache_layouts,
    resolve_kv_cache_layout,
)
from vllm.v1.core.kv_cache_planning import (
    get_global_kv_cache_groups,
    get_kv_cache_configs,
)
from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.kv_cache_interface import FullAttentionSpec

BLOCK_SIZE = 16


def make_vllm_config(max_model_len: int, num_gpu_blocks_override: int | None = None) -> VllmConfig:
    vllm_config = VllmConfig(
        cache_config=CacheConfig(
            block_size=BLOCK_SIZE, num_gpu_blocks_override=num_gpu_blocks_override
        ),
        scheduler_config=SchedulerConfig(
            max_model_len=256 if max_model_len == -1 else max_model_len,
            is_encoder_decoder=False,
            max_num_batched_tokens=2048,
            max_num_seqs=128,
        ),
    )
    vllm_config.model_config = SimpleNamespace(
        max_model_len=256 if max_model_len == -1 else max_model_len,
        original_max_model_len=max_model_len,
        runner_type="generate",
        supports_kv_cache_grouping=False,
        uses_mrope=False,
        is_encoder_decoder=False,
        is_diffusion=False,
        supports_multimodal_inputs=False,
        multimodal_config=None,
    )
    register_all_kvcache_specs(vllm_config)
    layouts = [layout.name for layout in get_supported_kv_cache_layouts([])]
    resolve_kv_cache_layout(vllm_config, [layouts])
    return vllm_config


def attention() -> FullAttentionSpec:
    return FullAttentionSpec(
        block_size=BLOCK_SIZE, num_kv_heads=2, head_size=64, dtype=torch.float16
    )


PAGE = attention().page_size_bytes


def stage_specs(num_hidden_layers: int, pp_size: int) -> list[dict]:
    """Each pipeline stage's KV cache specs, as get_pp_indices splits the layers."""
    specs = []
    for rank in range(pp_size):
        start, end = get_pp_indices(num_hidden_layers, rank, pp_size)
        specs.append(
            {f"model.layers.{i}.self_attn.attn": attention() for i in range(start, end)}
        )
    return specs


# (num_hidden_layers, pp_size, VLLM_PP_LAYER_PARTITION)
SPLITS = [
    (1, 2, None),  # fewer layers than stages: [1, 0]
    (2, 2, "2,0"),
    (2, 2, "0,2"),  # the first stage (the scheduler's config) has no KV cache
    (3, 3, "1,0,2"),
]


@pytest.mark.parametrize("num_hidden_layers,pp_size,partition", SPLITS)
@pytest.mark.parametrize(
    "max_model_len,override", [(64, None), (64, 40), (-1, None)], ids=["memory", "override", "auto-fit"]
)
def test_stage_without_kv_cache_layers_is_planned(
    monkeypatch, num_hidden_layers, pp_size, partition, max_model_len, override
):
    if partition is None:
        monkeypatch.delenv("VLLM_PP_LAYER_PARTITION", raising=False)
    else:
        monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", partition)
    specs = stage_specs(num_hidden_layers, pp_size)
    assert any(not s for s in specs) and any(specs)
    vllm_config = make_vllm_config(max_model_len, override)
    groups = get_global_kv_cache_groups(vllm_config, specs)
    num_pages = 100
    memory = [num_pages * PAGE * max(1, len(s)) for s in specs]

    configs = get_kv_cache_configs(vllm_config, specs, memory, groups)

    # every worker plans the KV workers' block count, not the KV-less worker's 1
    expected = override if override is not None else num_pages
    assert [c.num_blocks for c in configs] == [expected] * pp_size
    for spec, config in zip(specs, configs):
        assert len(config.kv_cache_groups) == len(groups)
        if not spec:
            assert config.kv_cache_tensors == []
            assert all(not g.layer_names for g in config.kv_cache_groups)
    scheduler_config = generate_scheduler_kv_cache_config(configs)
    assert len(scheduler_config.kv_cache_groups) == len(groups)
    assert scheduler_config.num_blocks == expected


def test_stage_without_kv_cache_layers_does_not_pass_a_pool_of_only_the_null_block():
    """The check passes on the KV worker; the pool then must hold what it checked."""
    specs = [{"model.layers.0.self_attn.attn": attention()}, {}]
    vllm_config = make_vllm_config(64)
    groups = get_global_kv_cache_groups(vllm_config, specs)
    # exactly one request of 64 tokens: 4 blocks plus the null block
    configs = get_kv_cache_configs(vllm_config, specs, [5 * PAGE, 5 * PAGE], groups)
    assert [c.num_blocks for c in configs] == [5, 5]


def test_stage_without_kv_cache_layers_still_gets_the_check():
    """A KV worker without room for one request is refused with the check's message."""
    specs = [{"model.layers.0.self_attn.attn": attention()}, {}]
    vllm_config = make_vllm_config(64)
    groups = get_global_kv_cache_groups(vllm_config, specs)
    with pytest.raises(ValueError, match="KV cache"):
        get_kv_cache_configs(vllm_config, specs, [4 * PAGE, 100 * PAGE], groups)
