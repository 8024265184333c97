"""Bad input gets a clear ValueError naming the field and range — never a crash."""

from __future__ import annotations

import pytest

from kvverify.reference.config import VllmConfig
from kvverify.errors import ConfigError, KVVerifyError
from kvverify.reference.planner import plan_kv_cache
from kvverify.reference.kinds import spec_class
from kvverify.reference.specs import FullAttentionSpec, MambaSpec, SlidingWindowSpec


@pytest.mark.parametrize("field,value", [
    ("block_size", 0), ("block_size", -16), ("max_model_len", 0), ("max_model_len", -2),
    ("kv_cache_memory_bytes", 0), ("kv_cache_memory_bytes", -1), ("num_gpu_blocks_override", 0),
    ("num_gpu_blocks_override", -5), ("max_num_batched_tokens", 0), ("max_num_seqs", 0),
    ("gpu_memory_bytes", -1), ("prefix_match_unit", 0), ("max_concurrent_batches", 0),
    ("block_size", 2**60), ("max_model_len", 2**60), ("kv_cache_memory_bytes", 2**70),
    ("num_gpu_blocks_override", 2**60), ("block_size", 16.0), ("block_size", True),
    ("block_size", "16"),
])
def test_config_fields_are_validated(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field) as info:
        VllmConfig(**{field: value})
    assert isinstance(info.value, ValueError)
    assert info.value.field == field


@pytest.mark.parametrize("field,value", [
    ("gpu_memory_utilization", 0), ("gpu_memory_utilization", 1.5), ("watermark", -0.1),
    ("watermark", 1.0), ("mamba_cache_mode", "all"), ("enable_prefix_caching", "yes"),
])
def test_config_non_integer_fields(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        VllmConfig(**{field: value})


def test_auto_needs_a_bound() -> None:
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        VllmConfig(max_model_len=-1)


@pytest.mark.parametrize("kwargs,field", [
    (dict(block_size=0, num_kv_heads=1, head_size=8), "block_size"),
    (dict(block_size=16, num_kv_heads=0, head_size=8), "num_kv_heads"),
    (dict(block_size=16, num_kv_heads=1, head_size=-8), "head_size"),
    (dict(block_size=16, num_kv_heads=1, head_size=8, dtype="float12"), "dtype"),
    (dict(block_size=16, num_kv_heads=1, head_size=8, page_size_padded=10), "page_size_padded"),
    (dict(block_size=2**10, num_kv_heads=2**20, head_size=2**20), "page_size_bytes"),
])
def test_attention_spec_validation(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        FullAttentionSpec(**kwargs)


def test_sliding_window_validation() -> None:
    with pytest.raises(ConfigError, match="sliding_window"):
        SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=8, sliding_window=0)


@pytest.mark.parametrize("kwargs,field", [
    (dict(shapes=(), dtypes=()), "shapes"),
    (dict(shapes=((3, 0),), dtypes=("bfloat16",)), "shapes"),
    (dict(shapes=((3, 4),), dtypes=("bfloat16", "float32")), "dtypes"),
    (dict(shapes=((3, 4),), dtypes=("bogus",)), "dtypes"),
    (dict(shapes=((3, 4),), dtypes=("bfloat16",), mamba_cache_mode="x"), "mamba_cache_mode"),
    (dict(shapes=((3, 4),), dtypes=("bfloat16",), num_speculative_blocks=-1), "num_speculative_blocks"),
    (dict(shapes=((3, 4),), dtypes=("bfloat16",), page_size_padded=4), "page_size_padded"),
])
def test_mamba_spec_validation(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        MambaSpec(block_size=16, **kwargs)


def test_unknown_spec_kind() -> None:
    with pytest.raises(ConfigError, match="unknown spec kind"):
        spec_class("ring_attention")


def test_planner_without_a_memory_source() -> None:
    spec = {"a": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)}
    with pytest.raises(ConfigError, match="kv_cache_memory_bytes"):
        plan_kv_cache(VllmConfig(), [spec])
    with pytest.raises(ConfigError, match="available_memory"):
        plan_kv_cache(VllmConfig(), [spec], available_memory=[1, 2])
    with pytest.raises(ConfigError, match="available_memory"):
        plan_kv_cache(VllmConfig(), [spec], available_memory=[-1])


def test_tiny_memory_is_a_refusal_not_a_crash() -> None:
    spec = {"a": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)}
    plan = plan_kv_cache(VllmConfig(kv_cache_memory_bytes=1), [spec])
    assert plan.num_blocks == 0 and not plan.starts and "No available memory" in plan.error


def test_errors_are_value_errors() -> None:
    assert issubclass(ConfigError, KVVerifyError) and issubclass(KVVerifyError, ValueError)
