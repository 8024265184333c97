"""The harness has teeth: each deliberately wrong plan is caught by its named check.

Correct plans pass on ``cpu`` and ``meta``; each mutation of ``kvverify.harness.mutations``
(one block short, a tensor too small, layers of one group overlaid, two groups overlaid
on different block ids, no blocks) is reported by the check it names; wrong *allocations*
(views swapped, specs the plan was not made for) and the CUDA memory comparisons are
exercised on cpu. The first tests need no torch: the byte geometry of a plan and the
optional-torch behaviour (clear error, CLI exit 2) are checked without it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvverify.reference.config import VllmConfig
from kvverify.errors import ConfigError
from kvverify.harness import geometry, mutations
from kvverify.harness.geometry import Region, find_forbidden_overlaps, pair_overlap, planned_regions
from kvverify.harness.mutations import MUTATIONS
from kvverify.reference.planner import KVCacheConfig, plan_kv_cache
from kvverify.reference.specs import FullAttentionSpec, MambaSpec, MLAAttentionSpec, SlidingWindowSpec

# --- plans --------------------------------------------------------------------------------


def _plan(specs: dict, blocks: int = 24, block_size: int = 4) -> KVCacheConfig:
    vc = VllmConfig(block_size=block_size, max_model_len=32, max_num_batched_tokens=8,
                    num_gpu_blocks_override=blocks)
    return plan_kv_cache(vc, [specs]).kv_cache_config


def full4() -> KVCacheConfig:
    return _plan({f"l{i}": FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8) for i in range(4)})


def gemma_like() -> KVCacheConfig:
    """5 sliding : 1 full, twice: 6 groups of 2 layers overlaid on one backing."""
    return _plan({f"l{i}": (FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=4) if i % 6 == 5 else
                            SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=4, sliding_window=8))
                  for i in range(12)})


def jamba_like() -> KVCacheConfig:
    """Attention every 4th layer, Mamba (bf16 conv + fp32 ssm states, padded page) between."""
    return _plan({f"l{i}": (FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8) if i % 4 == 3 else
                            MambaSpec(block_size=4, shapes=((3, 8), (4, 4)), dtypes=("bfloat16", "float32")))
                  for i in range(8)})


def mla3() -> KVCacheConfig:
    return _plan({f"l{i}": MLAAttentionSpec(block_size=4, num_kv_heads=1, head_size=12, dtype="fp8")
                  for i in range(3)})


def uniform_type() -> KVCacheConfig:
    """Full attention, different head counts: one group, one tensor per page size."""
    return _plan({"l0": FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8),
                  "l1": FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8)})


PLANS = {"full4": full4, "gemma_like": gemma_like, "jamba_like": jamba_like, "mla3": mla3,
         "uniform_type": uniform_type}


def _applicable(plan: str, mutation: str) -> bool:
    cfg = PLANS[plan]()
    try:
        MUTATIONS[mutation][0](cfg)
    except ConfigError:
        return False
    return True


CASES = [(p, m) for p in PLANS for m in MUTATIONS if _applicable(p, m)]


# --- without torch: the plan's byte geometry --------------------------------------------


@pytest.mark.parametrize("plan", PLANS)
def test_correct_plan_geometry_has_no_forbidden_overlap(plan: str) -> None:
    cfg = PLANS[plan]()
    found, total = find_forbidden_overlaps(planned_regions(cfg))
    assert (found, total) == ([], 0)
    assert all(geometry.tensor_extent(cfg, i) <= t.size for i, t in enumerate(cfg.kv_cache_tensors))
    assert geometry.expected_bytes(cfg) == max(t.size for t in cfg.kv_cache_tensors)


@pytest.mark.parametrize("plan,mutation", [(p, m) for p, m in CASES
                                            if MUTATIONS[m][1] == "harness.views_disjoint"])
def test_wrong_sharing_is_visible_in_the_plan_geometry(plan: str, mutation: str) -> None:
    found, total = find_forbidden_overlaps(planned_regions(MUTATIONS[mutation][0](PLANS[plan]())))
    assert found and total >= 1
    ov = found[0]
    assert ov.block_a != ov.block_b or ov.a.group == ov.b.group


def test_every_mutation_applies_to_some_plan() -> None:
    assert {m for _, m in CASES} == set(MUTATIONS)
    with pytest.raises(ConfigError, match="two groups"):
        mutations.groups_misaligned(full4())


def _brute(a: Region, b: Region) -> bool:
    """Forbidden overlap by enumerating every pair of pages."""
    for i in range(a.count):
        for j in range(b.count):
            lo1, hi1 = a.page(i)
            lo2, hi2 = b.page(j)
            if lo1 < hi2 and lo2 < hi1:
                if a is b and i == j:
                    continue
                if a is not b and i == j and a.layer != b.layer and a.group != b.group:
                    continue
                return True
    return False


regions = st.builds(Region, layer=st.sampled_from(["x", "y"]), part=st.just(0), group=st.integers(0, 1),
                    start=st.integers(0, 40), stride=st.integers(0, 12), length=st.integers(1, 12),
                    count=st.integers(1, 6))


@settings(max_examples=300, deadline=None)
@given(regions, regions, st.booleans())
def test_pair_overlap_agrees_with_brute_force(a: Region, b: Region, same: bool) -> None:
    """The closed form (equal strides) and the block walk (others) equal enumeration."""
    if same:
        b = a
    assert (pair_overlap(a, b) is not None) == _brute(a, b)
    ov = pair_overlap(a, b)
    if ov is not None:  # the witness really overlaps
        lo1, hi1 = ov.a.page(ov.block_a)
        lo2, hi2 = ov.b.page(ov.block_b)
        assert lo1 < hi2 and lo2 < hi1


_NO_TORCH = """
import sys
sys.modules["torch"] = None  # import torch now raises ImportError
import kvverify, kvverify.harness, kvverify.cli.harness
from kvverify.reference.config import VllmConfig
from kvverify.reference.planner import plan_kv_cache
from kvverify.reference.specs import FullAttentionSpec
from kvverify.harness import TorchUnavailableError, run_harness, torch_available
assert not torch_available()
cfg = plan_kv_cache(VllmConfig(block_size=4, max_model_len=8, num_gpu_blocks_override=4),
                    [{"l0": FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=4)}]).kv_cache_config
try:
    run_harness(cfg, "cpu")
except TorchUnavailableError as e:
    assert isinstance(e, ImportError) and isinstance(e, ValueError)
    print("RAISED", e)
rc = kvverify.cli.harness.main(["harness", "--layers", "1", "--kv-heads", "1", "--head-dim", "4",
                                "--device", "cpu"])
print("RC", rc)
"""


def test_without_torch_import_works_and_the_harness_says_how_to_install_it() -> None:
    res = subprocess.run([sys.executable, "-c", _NO_TORCH], capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr
    assert "RAISED the allocation harness needs torch" in res.stdout
    assert "pip install" in res.stdout and "RC 2" in res.stdout
    assert "needs torch" in res.stderr  # the CLI's message


# --- with torch ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    mod = pytest.importorskip("torch", reason="the allocation harness needs torch: pip install -e '.[torch]'")
    mod.set_num_threads(1)
    return mod


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("plan", PLANS)
def test_correct_plan_passes(torch, plan: str, device: str) -> None:
    from kvverify.harness import run_harness
    report = run_harness(PLANS[plan](), device, seed=7)
    assert report.ok, report.summary()
    if device == "cpu":
        assert {"harness.poison", "harness.block_addressable", "harness.planned_aliasing"} <= set(report.checks)
        assert "harness.poison" not in report.skipped
    else:
        assert "harness.poison" in report.skipped and "meta" in report.skipped["harness.poison"]
    for name in ("harness.cuda_memory_allocated", "harness.cuda_mem_get_info"):
        assert "not cuda" in report.skipped[name]
    json.dumps(report.to_dict())


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("plan,mutation", CASES)
def test_wrong_plan_is_caught_by_the_named_check(torch, plan: str, mutation: str, device: str) -> None:
    from kvverify.harness import run_harness
    corrupt, check = MUTATIONS[mutation]
    report = run_harness(corrupt(PLANS[plan]()), device, seed=3)
    assert check in report.names(), report.summary()
    v = next(v for v in report.violations if v.name == check)
    assert v.reason and v.evidence  # a one-line reason and the numbers


def test_each_mutation_named_in_the_issue(torch) -> None:
    """One block short, a tensor too small, two groups wrongly sharing — on the hybrid plan."""
    from kvverify.harness import run_harness
    cfg = gemma_like()
    short = run_harness(mutations.one_block_short(cfg), "cpu")
    assert {"harness.num_blocks", "harness.total_bytes"} <= short.names()
    v = next(v for v in short.violations if v.name == "harness.num_blocks")
    assert v.evidence["planned"] == cfg.num_blocks and v.evidence["view_blocks"][0] < cfg.num_blocks
    small = run_harness(mutations.tensor_too_small(cfg, 2), "cpu")
    assert {"harness.tensor_size", "harness.single_backing"} <= small.names()
    assert next(v for v in small.violations if v.name == "harness.tensor_size").evidence["tensor"] == 2
    shifted = run_harness(mutations.groups_misaligned(cfg), "cpu")
    assert {"harness.views_disjoint", "harness.poison"} <= shifted.names()
    v = next(v for v in shifted.violations if v.name == "harness.views_disjoint")
    assert v.evidence["group_a"] != v.evidence["group_b"] and v.evidence["block_a"] != v.evidence["block_b"]
    same = run_harness(mutations.layers_share_in_group(cfg), "cpu")
    v = next(v for v in same.violations if v.name == "harness.views_disjoint")
    assert v.evidence["group_a"] == v.evidence["group_b"]
    assert "harness.poison" in same.names()  # the data agree with the geometry


def test_swapped_views_are_caught_by_planned_aliasing_and_poison(torch) -> None:
    """A wrong *allocation* of a right plan: two layers' views exchanged."""
    from kvverify.harness import allocate_kv_cache, check_planned_aliasing, check_poison
    cfg = gemma_like()
    alloc = allocate_kv_cache(cfg, "cpu")
    a, b = cfg.kv_cache_groups[0].layer_names
    la, lb = alloc.layers[a], alloc.layers[b]
    la.views, lb.views = lb.views, la.views
    la.pages, lb.pages = lb.pages, la.pages
    names = {v.name for v in check_planned_aliasing(alloc)}
    assert names == {"harness.planned_aliasing"}
    poison = check_poison(alloc, seed=1)  # the write through a's view lands on b's planned page
    assert poison and {v.name for v in poison} <= {"harness.poison", "harness.planned_aliasing"}
    assert any("outside" in v.reason and v.evidence["layer"] in (a, b) for v in poison)


def test_view_into_a_neighbour_is_caught_by_poison(torch) -> None:
    """A layer whose view is shifted by one block writes into its next block's page."""
    from kvverify.harness import allocate_kv_cache, check_planned_aliasing, check_poison
    cfg = full4()
    alloc = allocate_kv_cache(cfg, "cpu")
    la = alloc.layers["l0"]
    stride = la.planned_stride
    raw = alloc.backing.view(torch.uint8)
    shifted = torch.as_strided(raw, (cfg.num_blocks, stride), (stride // 2, 1), storage_offset=0)
    la.pages = shifted
    la.views = (shifted.view(torch.bfloat16).view(cfg.num_blocks, 2, 4, 2, 8),)
    assert "harness.planned_aliasing" in {v.name for v in check_planned_aliasing(alloc)}
    poison = check_poison(alloc, seed=2)
    assert poison and all(v.name == "harness.poison" for v in poison)
    assert any(v.evidence.get("changed_layer") == "l0" for v in poison)


def test_specs_the_plan_was_not_made_for(torch) -> None:
    """Allocating against bigger pages than planned: pages overrun their neighbours."""
    from kvverify.harness import run_harness
    cfg = full4()
    wide = {f"l{i}": FullAttentionSpec(block_size=4, num_kv_heads=3, head_size=8) for i in range(4)}
    report = run_harness(cfg, "cpu", layer_specs=wide)
    assert {"harness.views_disjoint", "harness.total_bytes", "harness.tensor_size"} <= report.names()


def test_misaligned_state_is_reported_not_raised(torch) -> None:
    """bf16 conv state of 2 bytes before an fp32 state: upstream's .view(dtype) would raise."""
    from kvverify.harness import run_harness
    cfg = _plan({"m": MambaSpec(block_size=4, shapes=((1, 1), (1, 1)), dtypes=("bfloat16", "float32"))}, blocks=4)
    assert geometry.alignment_problems(cfg) == [{"layer": "m", "part": 1, "offset": 2, "block_stride": 6,
                                                 "itemsize": 4}]
    report = run_harness(cfg, "cpu")
    assert report.names() == {"harness.typed_views"}
    assert "divisible" in report.violations[0].evidence["error"]


def test_typed_view_shapes(torch) -> None:
    from kvverify.harness import allocate_kv_cache
    alloc = allocate_kv_cache(jamba_like(), "meta")
    n = alloc.config.num_blocks
    attn = alloc.layers["l3"].views
    assert [tuple(v.shape) for v in attn] == [(n, 2, 4, 2, 8)] and attn[0].dtype == torch.bfloat16
    mamba = alloc.layers["l0"].views
    assert [(tuple(v.shape), v.dtype) for v in mamba] == [((n, 3, 8), torch.bfloat16), ((n, 4, 4), torch.float32)]
    mla = allocate_kv_cache(mla3(), "meta").layers["l0"].views
    assert tuple(mla[0].shape) == (mla3().num_blocks, 4, 1, 12) and mla[0].dtype == torch.float8_e4m3fn
    assert alloc.kv_caches()["l3"] is attn[0] and alloc.kv_caches()["l0"] == mamba


def test_one_backing_of_exactly_the_planned_size(torch) -> None:
    """Like upstream's allocate_kv_cache: one raw int8 buffer, every view inside it."""
    from kvverify.harness import allocate_kv_cache
    cfg = gemma_like()
    alloc = allocate_kv_cache(cfg, "cpu")
    assert alloc.backing.dtype == torch.int8 and alloc.backing.numel() == cfg.kv_cache_tensors[0].size
    base = alloc.backing.untyped_storage().data_ptr()
    assert {v.untyped_storage().data_ptr() for la in alloc.layers.values() for v in la.views} == {base}
    # layer i of every group aliases the same bytes; layers 0 and 1 of a group do not
    g0, g1 = cfg.kv_cache_groups[0].layer_names, cfg.kv_cache_groups[1].layer_names
    assert alloc.layers[g0[0]].views[0].data_ptr() == alloc.layers[g1[0]].views[0].data_ptr()
    assert alloc.layers[g0[0]].views[0].data_ptr() != alloc.layers[g0[1]].views[0].data_ptr()


def test_cuda_memory_comparisons_on_cpu(torch) -> None:
    """The cuda-only comparisons, fed the numbers a GPU would report."""
    from kvverify.harness import allocate_kv_cache, check_cuda_memory
    cfg = full4()
    alloc = allocate_kv_cache(cfg, "cpu")
    planned = geometry.expected_bytes(cfg)
    gib = 2**30
    alloc.measured_bytes, alloc.memory_allocated_before = planned + 512 - planned % 512, 0
    alloc.mem_get_info = (70 * gib, 80 * gib)
    assert check_cuda_memory(alloc, gpu_memory_utilization=0.9) == []
    alloc.measured_bytes = planned - 1  # the allocator handed out less than the plan
    alloc.mem_get_info = (10 * gib, 80 * gib)  # 70 GiB in use: 0.9 * 80 - 70 = 2 GiB budget
    names = {v.name for v in check_cuda_memory(alloc, gpu_memory_utilization=0.9)}
    assert names == {"harness.cuda_memory_allocated"}
    alloc.mem_get_info = (8 * gib + planned // 2, 80 * gib)  # budget below the plan
    v = [v for v in check_cuda_memory(alloc, gpu_memory_utilization=0.1) if v.name == "harness.cuda_mem_get_info"]
    assert v and v[0].evidence["budget"] < planned


def test_devices_and_limits(torch) -> None:
    from kvverify.harness import HarnessError, run_harness
    cfg = full4()
    with pytest.raises(ConfigError, match="device"):
        run_harness(cfg, "tpu")
    if not torch.cuda.is_available():
        with pytest.raises(HarnessError, match="no CUDA GPU"):
            run_harness(cfg, "cuda")
    with pytest.raises(HarnessError, match="meta"):
        run_harness(cfg, "cpu", max_cpu_bytes=16)
    empty = KVCacheConfig(num_blocks=1, kv_cache_tensors=(), kv_cache_groups=())
    assert run_harness(empty, "cpu").ok


def test_pipeline_workers_each_checked(torch) -> None:
    from kvverify.harness import run_harness_plan
    specs = {f"l{i}": FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=4) for i in range(4)}
    plan = plan_kv_cache(VllmConfig(block_size=4, max_model_len=16, kv_cache_memory_bytes=4096),
                         [{k: specs[k] for k in ("l0", "l1")}, {k: specs[k] for k in ("l2", "l3")}])
    reports = run_harness_plan(plan, "cpu")
    assert len(reports) == 2 and all(r.ok for r in reports)


def test_poison_is_deterministic_per_seed(torch) -> None:
    from kvverify.harness import allocate_kv_cache, check_poison
    cfg = jamba_like()
    a, b = allocate_kv_cache(cfg, "cpu"), allocate_kv_cache(cfg, "cpu")
    assert check_poison(a, seed=5) == check_poison(b, seed=5) == []
    assert torch.equal(a.backing, b.backing)
    c = allocate_kv_cache(cfg, "cpu")
    check_poison(c, seed=6)
    assert not torch.equal(a.backing, c.backing)


# --- the CLI ------------------------------------------------------------------------------


def test_cli_synthetic_model_on_cpu_json(torch, capsys: pytest.CaptureFixture[str]) -> None:
    from kvverify.cli.harness import main
    rc = main(["harness", "--layers", "3", "--kv-heads", "2", "--head-dim", "8", "--block-size", "4",
               "--device", "cpu", "--num-blocks", "12", "--max-model-len", "16", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["ok"] and out["plan"]["num_blocks"] == 12
    worker = out["workers"][0]
    assert worker["views"]["model.layers.0.self_attn"] == [[[12, 2, 4, 2, 8], "bfloat16"]]
    assert "harness.poison" in worker["checks"]


def test_cli_catalog_model_on_meta(torch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("kvverify.catalog", reason="kvverify.catalog is not available yet")
    from kvverify.cli.harness import main
    rc = main(["harness", "--model", "gemma-3-27b", "--device", "meta", "--kv-cache-memory-bytes",
               str(80 * 10**9), "--max-model-len", "32768"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "OK" in out and "skipped harness.poison" in out
    assert main(["harness", "--model", "no-such-model", "--device", "meta"]) == 2
    assert main(["harness", "--device", "meta"]) == 2  # no model given


def test_poison_without_a_snapshot_uses_word_sums(torch, monkeypatch: pytest.MonkeyPatch) -> None:
    """The full-budget (cuda) branch: no second copy of the backing, chunked word sums instead."""
    from kvverify.harness import poison, run_harness
    monkeypatch.setattr(poison, "SNAPSHOT_BYTES", 0)
    monkeypatch.setattr(poison, "CHUNK_BYTES", 1000)  # a multiple of 8: chunks stay word-aligned
    assert run_harness(jamba_like(), "cpu").ok
    bad = run_harness(mutations.layers_share_in_group(jamba_like()), "cpu")
    assert any(v.name == "harness.poison" for v in bad.violations)
    swapped = mutations.groups_misaligned(gemma_like())
    assert "harness.poison" in run_harness(swapped, "cpu").names()
