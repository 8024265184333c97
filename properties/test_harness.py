"""The allocation harness: what torch holds equals what the plan promised.

* Hypothesis generates small layer-spec mixes (full, sliding window, chunked local, MLA,
  Mamba, uniform-type pages; one or two pipeline workers), plans them with the reference
  planner, allocates every worker's plan on ``cpu`` and runs every harness check,
  poison test included: no violations, except that a plan with no blocks at all must be
  reported by ``harness.null_block``.
* Every catalog model is planned at real size and allocated on ``meta``.
* ``-m cuda``: real-size plans on a GPU, with ``memory_allocated`` / ``mem_get_info``
  compared against the plan; skipped, with the reason shown, when no GPU is visible.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the allocation harness needs torch: pip install -e '.[torch]'")

from hypothesis import HealthCheck, event, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvverify.hypothesis_hooks import given  # noqa: E402
from kvverify.reference.config import VllmConfig  # noqa: E402
from kvverify.errors import KVVerifyError  # noqa: E402
from kvverify.harness import MUTATIONS, run_harness, run_harness_plan  # noqa: E402
from kvverify.harness.checks import NULL_BLOCK, TYPED_VIEWS  # noqa: E402
from kvverify.harness.geometry import alignment_problems  # noqa: E402
from kvverify.reference.planner import plan_kv_cache  # noqa: E402
from kvverify.reference.specs import (  # noqa: E402
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

torch.set_num_threads(1)  # tiny tensors: threads only add overhead

EXAMPLES = max(10, settings.default.max_examples // 5)
DTYPES = ("bfloat16", "float16", "float32", "fp8")
MIXES = (("full",), ("full", "full_wide"), ("swa",), ("full", "swa"), ("full", "chunked"), ("mla",),
         ("mamba",), ("full", "mamba"), ("swa", "mamba"), ("full", "swa", "mamba"), ("mla", "mamba"))


@st.composite
def layer_spec_mixes(draw: st.DrawFn) -> tuple[VllmConfig, list[dict[str, KVCacheSpec]]]:
    """A tiny model (1-6 layers of one mix), an engine config and its worker split."""
    block_size = draw(st.sampled_from((1, 2, 4, 8)))
    dtype = draw(st.sampled_from(DTYPES))
    heads, dim = draw(st.integers(1, 2)), draw(st.integers(1, 8))
    mix = draw(st.sampled_from(MIXES))
    kinds = draw(st.lists(st.sampled_from(mix), min_size=1, max_size=6))
    event(f"mix {'+'.join(sorted(set(kinds)))}")
    window, chunk = draw(st.integers(1, 16)), draw(st.integers(1, 16))
    mamba = MambaSpec(block_size=block_size,
                      shapes=((draw(st.integers(1, 3)), draw(st.integers(1, 4))),
                              (draw(st.integers(1, 4)), draw(st.integers(1, 4)))),
                      dtypes=(draw(st.sampled_from(("bfloat16", "float32"))), "float32"))
    make = {
        "full": lambda: FullAttentionSpec(block_size=block_size, num_kv_heads=heads, head_size=dim, dtype=dtype),
        "full_wide": lambda: FullAttentionSpec(block_size=block_size, num_kv_heads=heads + 1, head_size=dim,
                                               dtype=dtype),
        "swa": lambda: SlidingWindowSpec(block_size=block_size, num_kv_heads=heads, head_size=dim, dtype=dtype,
                                         sliding_window=window),
        "chunked": lambda: ChunkedLocalAttentionSpec(block_size=block_size, num_kv_heads=heads, head_size=dim,
                                                     dtype=dtype, attention_chunk_size=chunk),
        "mla": lambda: MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=dim, dtype=dtype),
        "mamba": lambda: mamba,
    }
    specs = {f"model.layers.{i}.{k}": make[k]() for i, k in enumerate(kinds)}
    workers = [specs]
    if len(specs) >= 2 and draw(st.booleans()):
        cut = draw(st.integers(1, len(specs) - 1))
        names = list(specs)
        workers = [{n: specs[n] for n in names[:cut]}, {n: specs[n] for n in names[cut:]}]
        event("two pipeline workers")
    max_model_len = draw(st.integers(1, 64))
    base = dict(block_size=block_size, max_model_len=max_model_len,
                max_num_batched_tokens=draw(st.integers(1, 16)))
    if draw(st.booleans()):
        return VllmConfig(**base, num_gpu_blocks_override=draw(st.integers(1, 48))), workers
    # Memory for k blocks plus a remainder (k = 0 gives a plan with no blocks at all).
    try:
        probe = plan_kv_cache(VllmConfig(**base, num_gpu_blocks_override=1), workers)
    except KVVerifyError:
        return VllmConfig(**base, num_gpu_blocks_override=1), workers
    bpb = max(probe.bytes_per_block, 1)
    k = draw(st.integers(0, 48))
    extra = draw(st.integers(0, bpb - 1))
    return VllmConfig(**base, kv_cache_memory_bytes=max(1, k * bpb + extra)), workers


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer_spec_mixes(), st.integers(0, 2**16))
def test_generated_plans_allocate_as_planned_on_cpu(case: tuple[VllmConfig, list], seed: int) -> None:
    vc, workers = case
    try:
        plan = plan_kv_cache(vc, workers)
    except KVVerifyError as e:  # an unsupported mix is a clear error upstream too (e.g. MLA + padding)
        event(f"not plannable: {type(e).__name__}")
        return
    note(f"num_blocks={plan.num_blocks} groups={[g.layer_names for g in plan.groups]}")
    for w, report in enumerate(run_harness_plan(plan, "cpu", seed=seed)):
        note(report.summary())
        if plan.kv_cache_configs[w].num_blocks == 0 and plan.kv_cache_configs[w].kv_cache_groups:
            event("no blocks: null block must be reported")
            assert NULL_BLOCK in report.names()
            continue
        if alignment_problems(plan.kv_cache_configs[w]):
            # A state / page the dtype cannot view (e.g. bf16 conv state of odd size before an
            # fp32 SSM state): upstream's ``.view(dtype)`` raises; the harness must say so.
            event("misaligned typed view reported")
            assert report.names() == {TYPED_VIEWS}, report.summary()
            continue
        assert report.ok, report.summary()
        assert "harness.poison" in report.checks  # the data checks really ran on cpu


def _catalog():
    try:
        from kvverify import catalog
    except ImportError:
        return None
    return catalog


CATALOG = _catalog()
MODELS = CATALOG.list_models() if CATALOG is not None else []
REAL = VllmConfig(block_size=16, max_model_len=32768, kv_cache_memory_bytes=80 * 10**9)


def _real_size_plan(name: str, memory: int = 80 * 10**9):
    from dataclasses import replace
    layout = CATALOG.load_model(name)
    built = CATALOG.build_model(layout, replace(REAL, kv_cache_memory_bytes=memory))
    return plan_kv_cache(built.vllm_config, [built.layer_specs])


@pytest.mark.skipif(CATALOG is None, reason="kvverify.catalog is not available yet")
@pytest.mark.parametrize("name", MODELS)
def test_catalog_models_real_size_on_meta(name: str) -> None:
    plan = _real_size_plan(name)
    report = run_harness(plan.kv_cache_config, "meta")
    assert report.ok, report.summary()
    assert report.allocated_bytes == plan.bytes_per_block * plan.num_blocks
    assert "harness.poison" in report.skipped  # recorded, not silently dropped


@pytest.mark.skipif(CATALOG is None, reason="kvverify.catalog is not available yet")
@pytest.mark.parametrize("name", MODELS)
def test_catalog_models_mutations_caught_on_meta(name: str) -> None:
    cfg = _real_size_plan(name).kv_cache_config
    for mutation, (corrupt, check) in MUTATIONS.items():
        try:
            bad = corrupt(cfg)
        except KVVerifyError:  # e.g. groups_misaligned on a one-group model
            continue
        assert check in run_harness(bad, "meta").names(), mutation


# --- cuda ----------------------------------------------------------------------------------

NO_CUDA = f"no CUDA GPU visible to torch {torch.__version__} (cuda harness checks need one)"
CUDA_MODELS = [m for m in ("llama-3.1-8b", "gemma-3-27b", "deepseek-v3", "jamba-v0.1", "qwen3-next-80b-a3b")
               if m in MODELS]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.skipif(CATALOG is None, reason="kvverify.catalog is not available yet")
@pytest.mark.parametrize("name", CUDA_MODELS)
def test_catalog_models_real_size_on_cuda(name: str) -> None:
    """4 GiB of real-dimension KV cache: data checks, memory_allocated, mem_get_info at 0.9."""
    plan = _real_size_plan(name, memory=4 * 2**30)
    report = run_harness(plan.kv_cache_config, "cuda", gpu_memory_utilization=0.9, seed=1)
    assert report.ok, report.summary()
    assert report.measured_bytes is not None and report.measured_bytes >= report.expected_bytes
    assert "harness.cuda_mem_get_info" in report.checks and "harness.poison" in report.checks


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_small_plans_and_a_mutation_on_cuda() -> None:
    specs = {f"l{i}": (FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8) if i % 2 else
                       SlidingWindowSpec(block_size=4, num_kv_heads=2, head_size=8, sliding_window=8))
             for i in range(6)}
    plan = plan_kv_cache(VllmConfig(block_size=4, max_model_len=64, num_gpu_blocks_override=64), [specs])
    report = run_harness(plan.kv_cache_config, "cuda")
    assert report.ok, report.summary()
    corrupt, check = MUTATIONS["layers_share_in_group"]
    bad = run_harness(corrupt(plan.kv_cache_config), "cuda")
    assert {check, "harness.poison"} <= bad.names()
