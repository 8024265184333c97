"""Exact examples of the startup planner (``kvverify.reference.planner``; docs/mutation.md).

Worked by hand from upstream 0.33.0's ``kv_cache_planning.py`` (``_check_enough_kv_cache_memory``,
``estimate_max_model_len``'s binary search, ``_max_memory_usage_bytes_from_groups``) where the
properties only check a consequence (servable / maximal) and a mutant slips through.
"""

from __future__ import annotations

import pytest

from kvverify import fixes
from kvverify.errors import StartupCheckError
from kvverify.reference.config import VllmConfig
from kvverify.reference.grouping import KVCacheGroupSpec
from kvverify.reference.planner import (
    binary_search_max,
    check_enough_kv_cache_memory_for_groups,
    estimate_max_model_len_from_groups,
    group_blocks_per_request,
    max_memory_usage_bytes_from_groups,
)
from kvverify.reference.specs import FullAttentionSpec


def _full_group(block_size: int) -> KVCacheGroupSpec:
    # page = 2 (K, V) * block_size * 1 head * 64 * 2 bytes (bfloat16) = 256 * block_size
    return KVCacheGroupSpec(("layer.0",), FullAttentionSpec(block_size=block_size, num_kv_heads=1,
                                                            head_size=64))


@pytest.mark.parametrize(("limit", "upper", "expected"),
                         [(0, 10, 0), (1, 10, 1), (2, 10, 2), (7, 10, 7), (10, 10, 10), (99, 10, 10),
                          (1, 1, 1)])
def test_binary_search_max_exact(limit: int, upper: int, expected: int) -> None:
    """``estimate_max_model_len``'s search: the largest ``v`` in ``[1, upper]`` that fits, 0 if
    none; an answer of exactly 1 (``left = 1``) and of exactly ``upper`` are both reachable."""
    assert binary_search_max(lambda v: v <= limit, upper) == expected


def test_estimate_of_exactly_one_token() -> None:
    """Block size 1: ``L`` tokens need ``L`` pages; memory for one page -> estimate 1."""
    group = _full_group(1)
    page = group.kv_cache_spec.page_size_bytes
    config = VllmConfig(block_size=1, max_model_len=64)
    assert estimate_max_model_len_from_groups([group], config, page) == 1
    assert estimate_max_model_len_from_groups([group], config, page - 1) == 0
    assert estimate_max_model_len_from_groups([group], config, 5 * page) == 5


def test_no_memory_refusal_fields_exact() -> None:
    """``_check_enough_kv_cache_memory`` with ``available_memory <= 0`` (after the null block):
    refused before any need is computed; the structured fields are exact (need 0, estimate 0)."""
    group = _full_group(16)
    config = VllmConfig(block_size=16, max_model_len=100)
    for available in (0, -4096):
        with pytest.raises(StartupCheckError) as info:
            check_enough_kv_cache_memory_for_groups(available, [group], config)
        e = info.value
        assert (e.max_model_len, e.needed_bytes, e.available_bytes, e.estimated_max_model_len) == \
            (100, 0, available, 0)


def test_not_enough_memory_refusal_fields_exact() -> None:
    """The need is ``max_memory_usage_bytes`` (cdiv(100, 16) = 7 pages of 4096 bytes); the
    estimate is the search's answer on ``[1, max_model_len]``: 3 pages -> 48 tokens."""
    group = _full_group(16)
    page = group.kv_cache_spec.page_size_bytes
    assert page == 4096
    config = VllmConfig(block_size=16, max_model_len=100)
    needed = max_memory_usage_bytes_from_groups([group], config)
    assert needed == 7 * page
    for available, estimate in ((3 * page, 48), (3 * page + 1, 48), (page - 1, 0), (7 * page - 1, 96)):
        with pytest.raises(StartupCheckError) as info:
            check_enough_kv_cache_memory_for_groups(available, [group], config)
        e = info.value
        assert estimate == estimate_max_model_len_from_groups([group], config, available, upper=100)
        assert (e.max_model_len, e.needed_bytes, e.available_bytes, e.estimated_max_model_len) == \
            (100, needed, available, estimate)
        assert (f"estimated maximum model length is {estimate}." in str(e)) == (estimate > 0)
    check_enough_kv_cache_memory_for_groups(7 * page, [group], config)  # exactly enough: passes


def test_group_blocks_per_request_counts_lookahead_under_f3_fix() -> None:
    """Upstream sizes one request by ``L``. Under the proposed fix ``check_plans_computed_tokens``
    (finding F3) by the tokens whose KV is written, ``min(L, L - 1 + lookahead)``: L = 17,
    block 16 -> 2 blocks upstream; 1 block with the fix and no lookahead (16 tokens); 2 again
    with one lookahead token (17 tokens)."""
    group = _full_group(16)
    assert group_blocks_per_request(group, VllmConfig(block_size=16, max_model_len=17)) == 2
    assert group_blocks_per_request(
        group, VllmConfig(block_size=16, max_model_len=17, num_lookahead_tokens=1)) == 2
    with fixes.enabled("check_plans_computed_tokens"):
        assert group_blocks_per_request(group, VllmConfig(block_size=16, max_model_len=17)) == 1
        assert group_blocks_per_request(
            group, VllmConfig(block_size=16, max_model_len=17, num_lookahead_tokens=1)) == 2
        assert group_blocks_per_request(
            group, VllmConfig(block_size=16, max_model_len=17, num_lookahead_tokens=5)) == 2


def test_auto_fit_refusal_fields_exact() -> None:
    """``_auto_fit_max_model_len`` when not even one token fits any worker: refused with the
    smallest worker memory as ``available_bytes`` (need 0, estimate 0)."""
    from kvverify.reference.planner import _auto_fit_max_model_len

    group = _full_group(16)
    page = group.kv_cache_spec.page_size_bytes
    config = VllmConfig(block_size=16, max_model_len=100)
    with pytest.raises(StartupCheckError) as info:
        _auto_fit_max_model_len(config, [[group], [group]], [page - 1, page - 7])
    e = info.value
    assert (e.max_model_len, e.needed_bytes, e.available_bytes, e.estimated_max_model_len) == \
        (100, 0, page - 7, 0)
    # one page on every worker: 16 tokens; the smaller worker decides
    assert _auto_fit_max_model_len(config, [[group], [group]], [3 * page, page]) == 16


def test_public_check_no_memory_fields_exact() -> None:
    """Public ``check_enough_kv_cache_memory``: memory of one page is all null block -> refused
    with ``available_bytes`` 0 after the reservation, need 0 and estimate 0."""
    from kvverify.reference.planner import check_enough_kv_cache_memory

    group = _full_group(16)
    page = group.kv_cache_spec.page_size_bytes
    config = VllmConfig(block_size=16, max_model_len=100)
    with pytest.raises(StartupCheckError) as info:
        check_enough_kv_cache_memory(config, {"layer.0": group.kv_cache_spec}, page)
    e = info.value
    assert (e.max_model_len, e.needed_bytes, e.available_bytes, e.estimated_max_model_len) == (100, 0, 0, 0)


def test_per_layer_memory_usage_under_f3_fix() -> None:
    """``max_memory_usage_bytes`` summed per layer: L = 17, block 16 -> 2 pages per layer
    upstream; under ``check_plans_computed_tokens`` 16 written tokens -> 1 page."""
    from kvverify.reference.planner import per_layer_memory_usage_bytes

    spec = _full_group(16).kv_cache_spec
    specs = {"a": spec, "b": spec}
    config = VllmConfig(block_size=16, max_model_len=17)
    assert per_layer_memory_usage_bytes(specs, config) == 4 * 4096
    with fixes.enabled("check_plans_computed_tokens"):
        assert per_layer_memory_usage_bytes(specs, config) == 2 * 4096
        assert per_layer_memory_usage_bytes(
            specs, VllmConfig(block_size=16, max_model_len=17, num_lookahead_tokens=1)) == 4 * 4096


def test_engine_block_size_is_the_smallest_group_block_size() -> None:
    """``EngineCore._initialize_kv_caches``: ``cache_config.block_size`` becomes the smallest
    prefix-cacheable group block size (every kind modelled is prefix-cacheable); the config
    is returned unchanged when it already matches, and without groups."""
    from kvverify.reference.planner import _engine_block_size

    config = VllmConfig(block_size=16, max_model_len=100)
    groups = [_full_group(32), KVCacheGroupSpec(("layer.1",), FullAttentionSpec(
        block_size=64, num_kv_heads=1, head_size=64))]
    assert _engine_block_size(config, groups) == VllmConfig(block_size=32, max_model_len=100)
    assert _engine_block_size(config, [_full_group(16)]) is config
    assert _engine_block_size(config, []) is config


def test_auto_fit_counts_every_group_unless_the_flaw_is_on() -> None:
    """``_auto_fit_max_model_len`` sums every group's blocks (PR #36030); flaw
    ``autofit_first_group_only`` (#36030's bug) counts the first only. Full + SWA (window 32,
    block 16, budget 2048 so ``cdiv(L, 16) + 1`` SWA blocks), 4 pages per worker:
    ``2 cdiv(L, 16) + 1 <= 4`` -> L = 16; the first group alone: ``cdiv(L, 16) <= 4`` -> 64."""
    from kvverify import flaws
    from kvverify.reference.planner import _auto_fit_max_model_len
    from kvverify.reference.specs import SlidingWindowSpec

    full_g = _full_group(16)
    swa_g = KVCacheGroupSpec(("layer.1",), SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=64,
                                                             sliding_window=32))
    config = VllmConfig(block_size=16, max_model_len=100)
    memory = 4 * full_g.kv_cache_spec.page_size_bytes
    assert _auto_fit_max_model_len(config, [[full_g, swa_g]], [memory]) == 16
    with flaws.enabled("autofit_first_group_only"):
        assert _auto_fit_max_model_len(config, [[full_g, swa_g]], [memory]) == 64


def test_bytes_per_block_exact() -> None:
    """``_get_kv_cache_bytes_per_block``: the largest group's sum of its layers' pages (a
    uniform-type group: each layer's own page); 0 without groups."""
    from kvverify.reference.planner import bytes_per_block
    from kvverify.reference.specs import UniformTypeKVCacheSpecs

    small, big = _full_group(16).kv_cache_spec, FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64)
    uniform = KVCacheGroupSpec(("a", "b"), UniformTypeKVCacheSpecs(
        block_size=16, kv_cache_specs=(("a", small), ("b", big))))
    assert bytes_per_block([]) == 0
    assert bytes_per_block([uniform]) == 4096 + 8192
    assert bytes_per_block([_full_group(16), uniform]) == 12288
    assert bytes_per_block([KVCacheGroupSpec(("x", "y"), small)]) == 8192


def test_blocks_per_request_counts_every_group_outside_the_memory_helper() -> None:
    """``blocks_per_request``: the runtime's count sums every group even with flaw
    ``autofit_first_group_only`` on (the flaw is in ``_max_memory_usage_bytes_from_groups``
    only): full + full, L = 100, block 16 -> 7 + 7."""
    from kvverify import flaws
    from kvverify.reference.planner import blocks_per_request

    groups = [_full_group(16), KVCacheGroupSpec(("layer.1",), _full_group(16).kv_cache_spec)]
    config = VllmConfig(block_size=16, max_model_len=100)
    with flaws.enabled("autofit_first_group_only"):
        assert blocks_per_request(groups, config) == 14
        assert blocks_per_request(groups, config, in_memory_helper=True) == 7


def _hybrid_specs() -> dict:
    """3 full + 2 SWA layers of one page: buckets 3 and 2 -> group size 2 (3 >= 1.5 x 2), so
    the full layers fill 2 groups ([f0, f2], [f1] padded) and the SWA layers 1."""
    from kvverify.reference.specs import SlidingWindowSpec

    f = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64)
    s = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=64, sliding_window=32)
    return {"f0": f, "f1": f, "f2": f, "s0": s, "s1": s}


def test_public_check_compares_per_layer_or_grouped_need() -> None:
    """Public ``check_enough_kv_cache_memory`` (finding F6): upstream compares the per-layer sum
    (7 + 7 + 7 full pages + 2 x 8 SWA pages = 37 pages at L = 100) while the engine plans
    padded groups (2 pages per block x (7 + 7 + 8) = 44 pages); under the proposed fix
    ``capacity_helpers_plan_like_engine`` the grouped need and its estimate are reported.
    Memory of 14 pages, 12 after the null block (2 pages): per layer ``5 cdiv(L, 16) + 2``
    pages fit L = 32, grouped ``6 cdiv(L, 16) + 2`` only L = 16."""
    from kvverify.reference.grouping import get_kv_cache_groups
    from kvverify.reference.planner import (
        check_enough_kv_cache_memory,
        estimate_max_model_len,
        per_layer_memory_usage_bytes,
    )

    specs = _hybrid_specs()
    config = VllmConfig(block_size=16, max_model_len=100)
    page = 4096
    groups = get_kv_cache_groups(config, specs)
    assert [len(g.layer_names) for g in groups] == [2, 1, 2]
    available, check = 14 * page, 12 * page
    per_layer = per_layer_memory_usage_bytes(specs, config)
    grouped = max_memory_usage_bytes_from_groups(groups, config)
    assert (per_layer, grouped) == (37 * page, 44 * page)
    with pytest.raises(StartupCheckError) as info:
        check_enough_kv_cache_memory(config, specs, available)
    e = info.value
    assert (e.needed_bytes, e.available_bytes) == (per_layer, check)
    assert e.estimated_max_model_len == estimate_max_model_len(config, specs, check)
    with fixes.enabled("capacity_helpers_plan_like_engine"):
        with pytest.raises(StartupCheckError) as info:
            check_enough_kv_cache_memory(config, specs, available)
        e = info.value
        assert (e.needed_bytes, e.available_bytes) == (grouped, check)
        assert e.estimated_max_model_len == estimate_max_model_len_from_groups(groups, config, check)
        # 16 pages, 14 after the null block: the grouped estimate over all 14 is 32 (the fixed
        # public estimate_max_model_len would reserve the null block again: 12 -> 16)
        with pytest.raises(StartupCheckError) as info:
            check_enough_kv_cache_memory(config, specs, 16 * page)
        assert info.value.estimated_max_model_len == 32
        assert estimate_max_model_len(config, specs, 14 * page) == 16
    assert (estimate_max_model_len(config, specs, check),
            estimate_max_model_len_from_groups(groups, config, check)) == (32, 16)


def test_group_helpers_exact() -> None:
    """``layer_specs`` (layer -> the spec it is planned with, per layer of a uniform-type
    group); the need of no groups is 0; concurrency without blocks per request is infinite;
    the length search defaults to ``planning_max_model_len``."""
    from kvverify.reference.planner import (
        KVCacheConfig,
        get_max_concurrency_for_kv_cache_config,
        layer_specs,
    )
    from kvverify.reference.specs import UniformTypeKVCacheSpecs

    small, big = _full_group(16).kv_cache_spec, FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64)
    uniform = KVCacheGroupSpec(("a", "b"), UniformTypeKVCacheSpecs(
        block_size=16, kv_cache_specs=(("a", small), ("b", big))))
    assert layer_specs([uniform, _full_group(16)]) == {"a": small, "b": big, "layer.0": small}
    config = VllmConfig(block_size=16, max_model_len=100)
    assert max_memory_usage_bytes_from_groups([], config) == 0
    empty = KVCacheConfig(num_blocks=1, kv_cache_tensors=(), kv_cache_groups=())
    assert get_max_concurrency_for_kv_cache_config(config, empty) == float("inf")
    page = _full_group(16).kv_cache_spec.page_size_bytes
    assert estimate_max_model_len_from_groups([_full_group(16)], config, 100 * page) == 100


def test_group_need_counts_the_first_group_only_under_the_flaw() -> None:
    """``max_memory_usage_bytes_from_groups`` counts every group; flaw
    ``autofit_first_group_only`` counts the first group's blocks only, for auto-fit's search
    and the startup check alike, as upstream's one helper did before #36030 (full + SWA: 15
    pages at L = 100, 7 under the flaw; 4 pages fit L = 16, L = 64 under the flaw). The
    check then passes a length the runtime pool cannot hold (``blocks_per_request``: 15)."""
    from kvverify.reference.planner import blocks_per_request, check_enough_kv_cache_memory_for_groups
    from kvverify import flaws
    from kvverify.reference.specs import SlidingWindowSpec

    full_g = _full_group(16)
    swa_g = KVCacheGroupSpec(("layer.1",), SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=64,
                                                             sliding_window=32))
    config = VllmConfig(block_size=16, max_model_len=100)
    page = full_g.kv_cache_spec.page_size_bytes
    assert max_memory_usage_bytes_from_groups([full_g, swa_g], config) == 15 * page
    assert estimate_max_model_len_from_groups([full_g, swa_g], config, 4 * page) == 16
    with pytest.raises(StartupCheckError):
        check_enough_kv_cache_memory_for_groups(7 * page, [full_g, swa_g], config)
    with flaws.enabled("autofit_first_group_only"):
        assert max_memory_usage_bytes_from_groups([full_g, swa_g], config) == 7 * page
        assert estimate_max_model_len_from_groups([full_g, swa_g], config, 4 * page) == 64
        check_enough_kv_cache_memory_for_groups(7 * page, [full_g, swa_g], config)  # passes: too loose
        assert blocks_per_request([full_g, swa_g], config) == 15
