"""Hand-worked examples of vLLM 0.33.0 behaviour that kill mutants (docs/mutation.md).

Each test pins one rule of upstream exactly (the expected values are worked from
upstream's source by hand, named in the docstring), where the properties only check
a consequence of it. The file is in the mutation test selection
(``pyproject.toml`` ``[tool.mutmut] pytest_add_cli_args_test_selection``).
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from kvverify import fixes, flaws
from kvverify.reference import arith
from kvverify.reference.block_sizes import (
    BlockSizeError,
    partial_hash_hits_enabled,
    resolve_cache_hit_alignment_tokens,
    validate_coordinator_block_sizes,
)
from kvverify.reference.config import VllmConfig
from kvverify.reference.grouping import (
    GroupingError,
    KVCacheGroupSpec,
    get_global_kv_cache_groups,
    get_kv_cache_groups,
    project_groups_to_worker,
    unify_kv_cache_spec_page_size,
)
from kvverify.reference.managers.registry import get_manager_class
from kvverify.reference.planner import KVCacheConfig
from kvverify.reference.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)


def _full(block_size: int = 16) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=block_size, num_kv_heads=2, head_size=8)


def _swa(block_size: int = 16, window: int = 64) -> SlidingWindowSpec:
    return SlidingWindowSpec(block_size=block_size, num_kv_heads=2, head_size=8, sliding_window=window)


def test_hybrid_group_size_rule() -> None:
    """``_get_kv_cache_groups_uniform_page_size``: group size = the largest bucket when it is
    below 1.5 x the smallest, else the smallest; bucket ``names`` splits into
    ``cdiv(len, group_size)`` groups ``names[i::num_groups]`` (interleaved)."""
    config = VllmConfig(block_size=16, max_model_len=256)
    # 3 full + 4 SWA: 4 < 4.5 -> group size 4: one group each.
    specs = {**{f"f{i}": _full() for i in range(3)}, **{f"s{i}": _swa() for i in range(4)}}
    groups = get_kv_cache_groups(config, specs)
    assert [g.layer_names for g in groups] == [("f0", "f1", "f2"), ("s0", "s1", "s2", "s3")]
    # 2 full + 3 SWA: 3 == 3.0 is not below 1.5 x 2 -> group size 2: SWA in 2 interleaved groups.
    specs = {**{f"f{i}": _full() for i in range(2)}, **{f"s{i}": _swa() for i in range(3)}}
    groups = get_kv_cache_groups(config, specs)
    assert [g.layer_names for g in groups] == [("f0", "f1"), ("s0", "s2"), ("s1",)]
    # 2 full + 6 SWA: group size 2, SWA in 3 groups [s0, s3], [s1, s4], [s2, s5].
    specs = {**{f"f{i}": _full() for i in range(2)}, **{f"s{i}": _swa() for i in range(6)}}
    groups = get_kv_cache_groups(config, specs)
    assert [g.layer_names for g in groups] == [("f0", "f1"), ("s0", "s3"), ("s1", "s4"), ("s2", "s5")]
    assert all(type(g.kv_cache_spec) is type(specs[g.layer_names[0]]) for g in groups)


def test_promoted_local_layers_take_the_full_attention_block_size() -> None:
    """``_promote_local_kv_cache_specs`` (``--disable-hybrid-kv-cache-manager``): a SWA layer
    becomes full attention with the block size of the full layers when they agree on one
    (else its own), and a padded page becomes ``max(padded, unpadded page at the new
    block size)``. Pages: ``B * 2 heads * (8 + 8) * 2 bytes = 64 B`` per token."""
    config = VllmConfig(block_size=16, max_model_len=256, disable_hybrid_kv_cache_manager=True)
    specs = {"f": _full(16), "s": _swa(32)}
    (group,) = get_kv_cache_groups(config, specs)
    assert group.kv_cache_spec == FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8,
                                                    sliding_window=64)
    # padded pages: 8-token SWA page 512 B padded to 1100 -> at B=16: max(1100, 1024) = 1100;
    # one padded to 600 -> max(600, 1024) = 1024.
    specs = {"f": _full(16),
             "a": SlidingWindowSpec(block_size=8, num_kv_heads=2, head_size=8, sliding_window=64,
                                    page_size_padded=1100),
             "b": SlidingWindowSpec(block_size=8, num_kv_heads=2, head_size=8, sliding_window=64,
                                    page_size_padded=600)}
    (group,) = get_kv_cache_groups(config, specs)
    assert isinstance(group.kv_cache_spec, UniformTypeKVCacheSpecs)
    inner = group.kv_cache_spec.specs
    assert [(inner[n].block_size, getattr(inner[n], "page_size_padded")) for n in "fab"] == [
        (16, None), (16, 1100), (16, 1024)]
    # two full block sizes: no common one (the SWA layer keeps its own): never one type, refused.
    with pytest.raises(GroupingError):
        get_kv_cache_groups(config, {"f": _full(16), "g": _full(32), "s": _swa(8)})


def test_promotion_needs_full_attention_and_keeps_other_layers() -> None:
    """``_promote_local_kv_cache_specs`` promotes only when the model has full-attention
    *and* local layers, and rewrites only the local ones: without full attention, SWA
    layers of two windows stay two types and are refused (upstream raises ``ValueError``);
    an MLA layer next to them stays MLA (its page is one latent vector per token)."""
    config = VllmConfig(block_size=16, max_model_len=256, disable_hybrid_kv_cache_manager=True)
    with pytest.raises(GroupingError):
        get_kv_cache_groups(config, {"a": _swa(window=64), "b": _swa(window=128)})
    mla = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=12)
    (group,) = get_kv_cache_groups(config, {"f": _full(), "m": mla, "s": _swa()})
    assert isinstance(group.kv_cache_spec, UniformTypeKVCacheSpecs)
    inner = group.kv_cache_spec.specs
    assert inner["m"] == mla and type(inner["m"]) is MLAAttentionSpec
    assert inner["f"] == _full() and type(inner["s"]) is FullAttentionSpec


def test_promotion_keeps_every_field_of_the_local_spec() -> None:
    """Upstream promotes with ``replace_as(spec, FullAttentionSpec, drop=("extra_retained_tokens",),
    block_size=..., page_size_padded=...)``: every other field of the SWA / chunked-local spec
    (heads, head sizes, dtype, the window or chunk size) is carried over unchanged; specs that
    cannot be made one type are refused with upstream's message."""
    config = VllmConfig(block_size=16, max_model_len=256, disable_hybrid_kv_cache_manager=True)
    local = [SlidingWindowSpec(block_size=16, num_kv_heads=4, head_size=8, head_size_v=16,
                               dtype="float32", sliding_window=48, extra_retained_tokens=3),
             ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=4, head_size=8, head_size_v=16,
                                       dtype="float32", attention_chunk_size=64)]
    for spec in local:
        (group,) = get_kv_cache_groups(config, {"f": _full(), "l": spec})
        assert isinstance(group.kv_cache_spec, UniformTypeKVCacheSpecs)
        promoted = group.kv_cache_spec.specs["l"]
        assert type(promoted) is FullAttentionSpec
        for f in fields(spec):
            if f.name not in ("block_size", "page_size_padded", "extra_retained_tokens"):
                assert getattr(promoted, f.name) == getattr(spec, f.name), f.name
    with pytest.raises(GroupingError) as refused:
        get_kv_cache_groups(config, {"a": _swa(window=64), "b": _swa(window=128)})
    assert str(refused.value) == "Failed to promote local KV cache specs to one unified type."


def test_attention_free_uniform_and_single_layer_models() -> None:
    """``get_kv_cache_groups``: no layers -> no groups (also with the hybrid manager disabled);
    one layer, or layers that all merge -> one group of all layers in order; layers of one
    type and block size with different pages -> one ``UniformTypeKVCacheSpecs`` group."""
    for disable in (False, True):
        config = VllmConfig(block_size=16, max_model_len=256, disable_hybrid_kv_cache_manager=disable)
        assert get_kv_cache_groups(config, {}) == []
        assert get_kv_cache_groups(config, {"a": _swa()}) == [KVCacheGroupSpec(("a",), _swa())]
        specs = {"b": _full(), "a": _full()}
        assert get_kv_cache_groups(config, specs) == [KVCacheGroupSpec(("b", "a"), _full())]
        # one type, one block size, different pages: one UniformTypeKVCacheSpecs group
        big = FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=8)
        assert get_kv_cache_groups(config, {"b": _full(), "a": big}) == [KVCacheGroupSpec(
            ("b", "a"), UniformTypeKVCacheSpecs(block_size=16, kv_cache_specs=(("b", _full()), ("a", big))))]


def test_full_layers_differing_only_in_window_share_a_bucket() -> None:
    """``_get_kv_cache_groups_uniform_page_size`` merges the buckets of full-attention specs that
    differ only in ``sliding_window`` (``FullAttentionSpec.merge`` reconciles them): 1 + 1 full
    layers and 2 SWA layers make group size 2 and two groups, not three."""
    config = VllmConfig(block_size=16, max_model_len=256)
    windowed = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, sliding_window=64)
    specs = {"f0": _full(), "f1": windowed, "s0": _swa(), "s1": _swa()}
    groups = get_kv_cache_groups(config, specs)
    assert [g.layer_names for g in groups] == [("f0", "f1"), ("s0", "s1")]
    assert groups[0].kv_cache_spec == windowed and groups[1].kv_cache_spec == _swa()


def test_unify_page_size_exact() -> None:
    """``unify_kv_cache_spec_page_size``: equal pages are returned as they are; a smaller page
    dividing the largest multiplies its block size by the ratio; a Mamba page and a non-MLA
    attention page that does not divide it are padded to the largest; an MLA page that does not
    divide it is refused, naming the layer and both pages. Pages per token: ``heads * 16 * 2``."""
    same: dict[str, KVCacheSpec] = {"a": _full(), "b": _swa()}
    assert unify_kv_cache_spec_page_size(same) == same
    big = FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=8)            # 2048 B
    odd = FullAttentionSpec(block_size=16, num_kv_heads=3, head_size=8)            # 1536 B
    mamba = MambaSpec(block_size=256, shapes=((10, 10),), dtypes=("float32",))    # 400 B
    specs = {"big": big, "small": _swa(), "odd": odd, "mamba": mamba}
    unified = unify_kv_cache_spec_page_size(specs)
    assert list(unified) == list(specs)
    assert unified["big"] == big
    assert unified["small"] == SlidingWindowSpec(block_size=32, num_kv_heads=2, head_size=8, sliding_window=64)
    assert unified["odd"] == FullAttentionSpec(block_size=16, num_kv_heads=3, head_size=8, page_size_padded=2048)
    assert unified["mamba"] == MambaSpec(block_size=256, shapes=((10, 10),), dtypes=("float32",),
                                         page_size_padded=2048)
    # a dividing MLA page grows its block size: 16 * 1 * 16 * 2 = 512 B -> B = 64
    mla = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=16)
    assert unify_kv_cache_spec_page_size({"big": big, "mla": mla})["mla"].block_size == 64
    mla = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=12)            # 384 B
    with pytest.raises(GroupingError) as refused:
        unify_kv_cache_spec_page_size({"big": big, "mla": mla})
    assert "mla" in str(refused.value) and "384" in str(refused.value) and "2048" in str(refused.value)


def test_project_groups_to_worker_exact() -> None:
    """``_project_kv_cache_groups_to_worker``: a group whose layers all live on the worker is
    kept as it is; otherwise it keeps the worker's layers in group order, a
    ``UniformTypeKVCacheSpecs`` spec narrowed to them (same block size), any other spec as is;
    a group with none of the worker's layers stays, empty."""
    big = FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=8)
    uniform = UniformTypeKVCacheSpecs(block_size=16, kv_cache_specs=(("u0", _full()), ("u1", big), ("u2", _full())))
    groups = [KVCacheGroupSpec(("f0", "f1"), _full()), KVCacheGroupSpec(("u0", "u1", "u2"), uniform),
              KVCacheGroupSpec(("s0", "s1"), _swa())]
    worker = {"f0": _full(), "f1": _full(), "u2": _full(), "u1": big, "s1": _swa()}
    projected = project_groups_to_worker(groups, worker)
    assert projected[0] is groups[0]
    assert projected[1] == KVCacheGroupSpec(("u1", "u2"), UniformTypeKVCacheSpecs(
        block_size=16, kv_cache_specs=(("u1", big), ("u2", _full()))))
    assert projected[2] == KVCacheGroupSpec(("s1",), _swa())
    empty = project_groups_to_worker(groups, {"f0": _full(), "f1": _full()})
    assert empty[1] == KVCacheGroupSpec((), uniform) and empty[2] == KVCacheGroupSpec((), _swa())


def test_global_groups_merge_workers_and_tag_swa() -> None:
    """``get_global_kv_cache_groups``: the workers' specs are merged by layer name (first seen
    first; the same layer with different specs is refused, naming it); every SWA layer gets
    ``extra_retained_tokens = max(0, num_prefill_lookahead_tokens - 1)``."""
    workers = [{"f0": _full(), "s0": _swa()}, {"s0": _swa(), "f1": _full(), "s1": _swa()}]
    for lookahead, extra in ((0, 0), (1, 0), (4, 3)):
        config = VllmConfig(block_size=16, max_model_len=256, num_prefill_lookahead_tokens=lookahead)
        groups = get_global_kv_cache_groups(config, workers)
        tagged = SlidingWindowSpec(block_size=16, num_kv_heads=2, head_size=8, sliding_window=64,
                                   extra_retained_tokens=extra)
        assert groups == [KVCacheGroupSpec(("f0", "f1"), _full()), KVCacheGroupSpec(("s0", "s1"), tagged)]
    config = VllmConfig(block_size=16, max_model_len=256)
    with pytest.raises(GroupingError, match="'s0'"):
        get_global_kv_cache_groups(config, [{"s0": _swa()}, {"s0": _swa(window=32)}])


# ------------------------------------------------------------------ arith: every formula, exactly
# Each formula of kvverify.reference.arith restated in plain Python from upstream 0.33.0
# (kv_cache_interface.py, single_type_kv_cache_manager.py, kv_cache_planning.py,
# kv_cache_manager.py) and compared on a grid of small values, with each flaw / proposed fix
# that changes it switched on and off. The lemmas prove properties *of* these formulas; this
# pins the formulas themselves.

def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_N = range(0, 14)
_B = range(1, 6)


def test_arith_block_and_byte_counts_exact() -> None:
    for n in _N:
        for b in _B:
            assert arith.full_attention_blocks(n, b) == _cdiv(n, b)
            assert arith.cross_attention_blocks(n, b) == _cdiv(n, b)
            assert arith.pages_for_bytes(n, b) == _cdiv(n, b)
            assert arith.skipped_blocks(n, b) == n // b
            assert arith.num_blocks_from_memory(n, b) == n // b
            assert arith.override_memory(n, b) == n * b
            assert arith.check_memory(n, b) == n - b
            assert arith.needed_memory(b, n) == b * n
            assert arith.kv_cache_tensor_bytes(b, n) == b * n
            assert arith.new_blocks_for_running(n, b) == max(n - b, 0)
            assert arith.chunked_local_skipped_tokens(n, b) == n // b * b
            assert arith.capped_blocks(n, b, True) == min(n, b)
            assert arith.capped_blocks(n, b, False) == n
            assert arith.allocation_fits(n, b, 7) is (n + b <= 7)
            assert arith.startup_check_passes(n - 3, b - 1) is (n - 3 > 0 and b - 1 <= n - 3)
            for s in range(-2, 9):
                assert arith.blocks_held_after_step(n, s, b) == _cdiv(n, b) - max(s, 0) // b
        assert arith.mamba_skipped_tokens(n) == n - 1
        assert arith.usable_blocks(n) == n - 1
        assert arith.watermark_blocks(0.25, n) == int(0.25 * n)
        for t in range(0, 8):
            assert arith.servable_alone(n, t) is (t <= n - 1)
            for k in range(0, 4):
                assert arith.servable_concurrently(n, t, k) is (k * t <= n - 1)
    for u in _B:
        for sizes in ([], [4], [4, 6], [6, 12, 3]):
            assert arith.prefix_match_unit_valid(u, sizes) is all(s % u == 0 for s in sizes)


def test_arith_caps_and_skipped_tokens_exact() -> None:
    """``SlidingWindowSpec`` / ``ChunkedLocalAttentionSpec.max_admission_blocks_per_request``,
    ``VllmConfig.max_in_flight_tokens``, the managers' ``get_num_skipped_tokens``, the Mamba
    startup bound, each with the fixes that change them (F2, F4, F5)."""
    for c, m, la in ((1, 8, 0), (2, 8, 3), (3, 5, 1)):
        assert arith.max_in_flight_tokens(c, m, la) == c * m
        with fixes.enabled("caps_count_lookahead"):
            assert arith.max_in_flight_tokens(c, m, la) == c * m + la
            assert arith.max_in_flight_tokens(c, m) == c * m
    for w in (1, 3, 8):
        for e in (0, 2):
            for f in (1, 4, 9):
                for length in (1, 7, 30):
                    for b in (1, 2, 4, 5):
                        assert (arith.sliding_window_admission_blocks(w, e, f, length, b)
                                == _cdiv(min(w - 1 + e + f, length), b) + 1)
                        with fixes.enabled("swa_cap_exact"):
                            assert (arith.sliding_window_admission_blocks(w, e, f, length, b)
                                    == min(_cdiv(w - 1 + e + f + b - 1, b), _cdiv(length, b)))
                        cl = arith.chunked_local_admission_blocks(w, f, length, b)
                        assert cl == _cdiv(min(w + f, length), b)
                        with fixes.enabled("chunked_local_cap_plus_one"):
                            assert (arith.chunked_local_admission_blocks(w, f, length, b)
                                    == cl + (0 if w % b == 0 else 1))
        for n in range(0, 20):
            for e in (0, 2):
                assert arith.sliding_window_skipped_tokens(n, w, e) == max(0, n - w + 1 - e)
            assert arith.sliding_window_skipped_tokens(n, w) == max(0, n - w + 1)
    for s in (0, 1, 3):
        for p in (0, 1):
            assert arith.mamba_max_blocks(True, s, p) == 2 + s + p
            assert arith.mamba_max_blocks(False, s, p) == 1 + s


def test_arith_mamba_blocks_held_exact() -> None:
    """``MambaManager`` held blocks: mode ``none`` holds ``cdiv(n + B*S, B)`` slots less the
    ``floor((c - 1) / B)`` recycled ones; ``align`` at most the previous and the running state
    (one on the first step) plus the ``S`` speculative blocks."""
    for b in (1, 2, 4):
        for s in (0, 2):
            for c in range(0, 12):
                for n in range(c, c + 6):
                    kept = max(c - 1, 0) // b
                    assert (arith.mamba_blocks_held(False, n, c, b, s)
                            == _cdiv(n + b * s, b) - kept)
                    assert (arith.mamba_blocks_held(True, n, c, b, s)
                            == min(_cdiv(n, b) - kept, 2 if c > 0 else 1) + s)


def test_arith_planning_exact() -> None:
    """``get_kv_cache_configs`` memory (override, null block), the check, ``min_written_tokens``,
    the concurrency report, the hybrid block size, ``R`` of ``get_num_blocks_to_allocate``, and
    the flaws / fixes that change them."""
    for mem, bpb in ((100, 7), (64, 8), (5, 5)):
        for override in (None, 0, 3, 20):
            avail = mem if override is None else override * bpb
            assert arith.startup_available_memory(mem, bpb, override) == avail
            assert arith.startup_check_memory(mem, bpb, override) == avail - bpb
            assert arith.auto_fit_search_memory(mem, bpb, override) == avail - bpb
            assert arith.runtime_num_blocks(mem, bpb, override) == (mem // bpb if override is None else override)
            with flaws.enabled("override_ignored_in_check"):
                assert arith.startup_available_memory(mem, bpb, override) == mem
            with flaws.enabled("null_block_not_reserved"):
                assert arith.startup_check_memory(mem, bpb, override) == avail
            with flaws.enabled("autofit_ignores_null_block"):
                assert arith.auto_fit_search_memory(mem, bpb, override) == avail
        assert arith.startup_available_memory(mem, bpb) == mem
        assert arith.startup_check_memory(mem, bpb) == mem - bpb
        assert arith.auto_fit_search_memory(mem, bpb) == mem - bpb
        assert arith.runtime_num_blocks(mem, bpb) == mem // bpb
    for blocks in ([], [3], [3, 4, 5]):
        assert arith.total_blocks_per_request(blocks) == sum(blocks)
        assert arith.total_blocks_per_request(blocks, in_memory_helper=True) == sum(blocks)
        with flaws.enabled("autofit_first_group_only"):
            assert arith.total_blocks_per_request(blocks, in_memory_helper=True) == sum(blocks[:1])
            assert arith.total_blocks_per_request(blocks) == sum(blocks)
    for length in range(1, 9):
        for la in range(0, 4):
            written = max(1, min(length, length - 1 + la))
            assert arith.min_written_tokens(length, la) == written
            assert arith.planned_request_tokens(length, la) == length
            with fixes.enabled("check_plans_computed_tokens"):
                assert arith.planned_request_tokens(length, la) == written
                assert arith.planned_request_tokens(length) == max(1, length - 1)
    for n in range(0, 10):
        for t in range(1, 6):
            assert arith.concurrency_blocks(n) == n
            assert arith.reported_concurrency_at_least_one(n, t) is (n >= t)
            for k in range(0, 4):
                assert arith.reported_concurrency_at_least(n, t, k) is (n >= k * t)
            with fixes.enabled("concurrency_counts_usable_blocks"):
                assert arith.concurrency_blocks(n) == n - 1
                assert arith.reported_concurrency_at_least_one(n, t) is (n - 1 >= t)
                assert arith.reported_concurrency_at_least(n, t, 2) is (n - 1 >= 2 * t)
    for mamba_page in (1, 100, 1000, 4096):
        for p1 in (1, 8, 24):
            for k in (1, 16, 32):
                for cur in (1, 16, 528):
                    for backend in (1, 64):
                        attn = backend * _cdiv(k * _cdiv(mamba_page, k * p1), backend)
                        assert arith.hybrid_attention_block_size(mamba_page, p1, k, cur, backend) == max(cur, attn)
                    assert (arith.hybrid_attention_block_size(mamba_page, p1, k, cur)
                            == max(cur, k * _cdiv(mamba_page, k * p1)))
    for n in range(0, 12):
        for b in (1, 4):
            r = _cdiv(n, b)
            for cap in (None, 0, 1, 2):
                for gate in (False, True):
                    want = r if cap is None or not gate else min(r, cap)
                    assert arith.admission_required_blocks(n, b, cap, gate) == want
                    with flaws.enabled("swa_cap_on_allocation"):
                        assert arith.admission_required_blocks(n, b, cap, gate) == (r if cap is None else min(r, cap))
                    with flaws.enabled("swa_admission_uncapped"):
                        assert arith.admission_required_blocks(n, b, cap, gate) == r


# ------------------------------------------------------------------ block_sizes: partial hash hits

def test_partial_hash_hits_enabled_exact() -> None:
    """``kv_cache_utils.partial_hash_hits_enabled`` (dcp 1): needs an ``align`` Mamba layer whose
    block is strictly larger than ``hash_block_size``; given the manager classes, every other
    prefix-cacheable group must support fine-grained lookups or have the hash block size.
    ``resolve_cache_hit_alignment_tokens``: the scheduler block size with caching off or one
    group, else the hash block size exactly when partial hits are enabled."""
    full = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)
    swa = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=8, sliding_window=32)
    align = MambaSpec(block_size=16, shapes=((4, 4),), dtypes=("float32",), mamba_cache_mode="align")
    plain = MambaSpec(block_size=16, shapes=((4, 4),), dtypes=("float32",))

    def groups(*specs: object) -> list[KVCacheGroupSpec]:
        return [KVCacheGroupSpec((f"g{i}",), s) for i, s in enumerate(specs)]  # type: ignore[arg-type]

    for hash_size, want in ((1, True), (8, True), (16, False), (32, False)):
        assert partial_hash_hits_enabled(groups(align), hash_size) is want
        assert partial_hash_hits_enabled(groups(full, align), hash_size) is want
    assert partial_hash_hits_enabled(groups(full), 1) is False          # no Mamba
    assert partial_hash_hits_enabled(groups(full, plain), 1) is False   # Mamba not in align mode
    classes = [get_manager_class(s) for s in (full, swa, align)]
    assert partial_hash_hits_enabled(groups(full, align), 1, classes[::2]) is True
    assert partial_hash_hits_enabled(groups(full, swa, align), 1, classes) is False
    swa1 = SlidingWindowSpec(block_size=1, num_kv_heads=1, head_size=8, sliding_window=32)
    assert partial_hash_hits_enabled(groups(full, swa1, align), 1, classes) is True  # block == hash

    config = VllmConfig(block_size=16, mamba_cache_mode="align", prefix_match_unit=1, num_gpu_blocks_override=8)

    def plan(*specs: object) -> KVCacheConfig:
        return KVCacheConfig(num_blocks=8, kv_cache_tensors=(), kv_cache_groups=tuple(groups(*specs)))

    assert resolve_cache_hit_alignment_tokens(plan(align), config, 16, 1) == 16    # one group
    assert resolve_cache_hit_alignment_tokens(plan(full, align), config, 16, 1) == 1
    assert resolve_cache_hit_alignment_tokens(plan(full, full), config, 16, 1) == 16
    assert resolve_cache_hit_alignment_tokens(plan(swa, align), config, 16, 1) == 16  # SWA: no fine-grained lookup


def test_f7_fix_refuses_misaligned_chunked_local_at_startup() -> None:
    """Finding F7's proposed fix (``reports/findings/patches/F7-...diff``): with prefix caching
    on, the coordinator refuses at startup a prefix-cacheable chunked-local group (also inside
    a ``UniformTypeKVCacheSpecs`` group) whose block size differs from the cache-hit alignment:
    the hash block size when partial hash hits are enabled (every group's manager class
    consulted), else the scheduler block size. The refusal names the layers, the block size and
    the alignment. Off (the faithful reference) or with caching off, nothing is refused here."""
    def chunked(block_size: int, heads: int = 1) -> ChunkedLocalAttentionSpec:
        return ChunkedLocalAttentionSpec(block_size=block_size, num_kv_heads=heads, head_size=8,
                                         attention_chunk_size=64)

    full16, full32 = _full(16), _full(32)
    align = MambaSpec(block_size=16, shapes=((4, 4),), dtypes=("float32",), mamba_cache_mode="align")

    def plan(*specs: object) -> KVCacheConfig:
        return KVCacheConfig(num_blocks=8, kv_cache_tensors=(), kv_cache_groups=tuple(
            KVCacheGroupSpec((f"g{i}", f"h{i}"), s) for i, s in enumerate(specs)))  # type: ignore[arg-type]

    uniform = UniformTypeKVCacheSpecs(block_size=16, kv_cache_specs=(("u0", chunked(16)), ("u1", chunked(16, 2))))
    refused = [(plan(full32, chunked(16)), 32, 16), (plan(full32, uniform), 32, 16)]
    accepted = [(plan(full16, chunked(32)), 32, 16),
                # partial hits off (the chunked manager has no fine-grained lookup, 16 != 1): 16
                (plan(full16, align, chunked(16)), 16, 1),
                # partial hits on (the chunked block is the hash block): 1
                (plan(full16, align, chunked(1)), 16, 1), (plan(full16, full32), 32, 16)]
    with fixes.enabled("chunked_local_alignment_checked_at_startup"):
        for config, scheduler, hash_size in refused:
            with pytest.raises(BlockSizeError) as error:
                validate_coordinator_block_sizes(config, scheduler, hash_size, True)
            message = str(error.value)
            assert "['g1', 'h1']" in message and "block_size=16" in message and "aligned to 32" in message
            validate_coordinator_block_sizes(config, scheduler, hash_size, False)
        for config, scheduler, hash_size in accepted:
            validate_coordinator_block_sizes(config, scheduler, hash_size, True)
    for config, scheduler, hash_size in refused:
        validate_coordinator_block_sizes(config, scheduler, hash_size, True)
