"""The SGLang reference on hand-worked cases, each also measured on SGLang 0.5.23's real objects
(``kvverify/targets/sglang/probes.py``; the same numbers came back), and its pieces' contracts."""

from __future__ import annotations

import pytest

from kvverify.errors import ConfigError
from kvverify.sglang import fixes as sglang_fixes
from kvverify.sglang.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from kvverify.sglang.config import SglangConfig
from kvverify.sglang.driver import SglangRequestSpec, run_workload
from kvverify.sglang.pool import SglangStartupError, resolve_max_total_num_tokens
from kvverify.sglang.radix_cache import RadixCache
from kvverify.sglang.scheduler import Scheduler
from kvverify.targets.sglang_contract import DecodingReqSpec, SglangCapability, sglang_capability_methods
from kvverify.targets.sglang_reference import SglangReferenceTarget

REF = SglangReferenceTarget()


def test_pool_sizing_floors_to_pages_and_refuses_no_pool() -> None:
    assert REF.derive_pool(SglangConfig(page_size=4, available_bytes=1000, cell_size=7)).max_total_num_tokens == 140
    assert REF.derive_pool(SglangConfig(page_size=4, available_bytes=-5, cell_size=7)).error
    assert resolve_max_total_num_tokens(SglangConfig(page_size=16, available_bytes=1 << 20, cell_size=64,
                                                     max_total_tokens=1000)) == 992
    with pytest.raises(SglangStartupError):
        resolve_max_total_num_tokens(SglangConfig(page_size=16, max_total_num_tokens=64, chunked_prefill_size=8))


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="page_size"):
        SglangConfig(page_size=0, max_total_num_tokens=8)
    with pytest.raises(ConfigError, match="max_total_num_tokens"):
        SglangConfig()


def test_sg1_case_matches_sglang_0_5_23() -> None:
    """64-token pool, page 16, context 4096: an input of 50 passes validation, the clamp gives
    max_new 0, PrefillAdder refuses (0.5.23: max_req_input_len 58, NO_TOKEN, rem 64)."""
    probe = REF.probe_admission(SglangConfig(page_size=16, max_total_num_tokens=64), 50, 8)
    assert (probe.max_req_input_len, probe.max_new_tokens, probe.add_result, probe.rem_total_tokens) == \
        (58, 0, "no_token", 64)
    with sglang_fixes.enabled("sglang_input_bound_page_aware"):
        assert REF.probe_admission(SglangConfig(page_size=16, max_total_num_tokens=64), 50, 8).validation_error
    ok = REF.probe_admission(SglangConfig(page_size=4, max_total_num_tokens=64, context_len=40), 20, 1 << 30)
    assert (ok.max_req_input_len, ok.max_new_tokens, ok.add_result) == (34, 18, "admitted")


def test_retraction_matches_sglang_0_5_23() -> None:
    """Page 4, 28 tokens: three decoding requests need two new pages; 0.5.23 retracts d2 (least
    output, longest input) and keeps d0, d1 with 8 tokens free after the step."""
    p = REF.probe_retraction(SglangConfig(page_size=4, max_total_num_tokens=28),
                             [DecodingReqSpec(7, 2, 10), DecodingReqSpec(7, 1, 10), DecodingReqSpec(8, 1, 10)])
    assert (p.fits_before, p.retracted, p.kept, p.decode_allocated, p.available_after) == \
        (False, ("d2",), ("d0", "d1"), True, 8)
    alone = REF.probe_retraction(SglangConfig(page_size=4, max_total_num_tokens=16), [DecodingReqSpec(16, 1, 10)])
    assert [r for r, _ in alone.aborted] == ["d0"] and "Out of memory" in alone.aborted[0][1]
    assert alone.available_after == 16 and not alone.error


def test_allocators_reserve_page_zero_and_free_in_upstream_order() -> None:
    a = PagedTokenToKVPoolAllocator(16, 4)
    assert a.free_pages == [1, 2, 3, 4] and a.available_size() == 16
    got = a.alloc_pages(2)
    assert got == [1, 2] and a.alloc_pages(3) is None
    a.free_pages_back([2])
    assert a.free_pages[0] == 2  # paged: freed pages go to the front
    t = TokenToKVPoolAllocator(3)
    t.alloc_pages(1)
    t.free_pages_back([1])
    assert t.free_pages == [2, 3, 1]  # token allocator: to the back
    with pytest.raises(AssertionError):
        t.free_pages_back([1])  # double free


def test_radix_cache_matches_whole_pages_and_evicts_lru_unlocked() -> None:
    a = PagedTokenToKVPoolAllocator(32, 4)
    tree = RadixCache(a, 4)
    pages = a.alloc_pages(3)
    assert pages is not None
    assert tree.insert(list(range(10)), pages[:2]) == []  # 10 tokens: 2 whole pages cached
    a.free_pages_back(pages[2:])
    matched, node = tree.match_prefix(list(range(9)))
    assert matched == pages[:2] and tree.evictable_size() == 8
    tree.inc_lock_ref(node)
    assert tree.evict(8) == 0 and tree.protected_size() == 8
    tree.dec_lock_ref(node)
    assert tree.evict(4) == 4 and tree.evictable_size() == 4  # the leaf goes first


def test_driver_reports_sg1_as_head_of_line_and_completes_under_the_fix() -> None:
    cfg = SglangConfig(page_size=16, context_len=512, max_total_num_tokens=64)
    stuck = run_workload(Scheduler(cfg), [SglangRequestSpec(50, 8)])
    assert stuck.verdict == "head_of_line" and stuck.outcomes == {"r0": ("", 0)}
    with sglang_fixes.enabled("sglang_input_bound_page_aware"):
        done = run_workload(Scheduler(cfg), [SglangRequestSpec(50, 8)])
    assert done.ok and done.outcomes["r0"][0].startswith("abort: Input length")


def test_driver_completes_with_retractions_and_conserves_pages() -> None:
    cfg = SglangConfig(page_size=1, context_len=512, max_total_num_tokens=40, init_new_token_ratio=0.1)
    sched = Scheduler(cfg)
    result = run_workload(sched, [SglangRequestSpec(2, 20) for _ in range(4)])
    assert result.ok and result.retractions > 0
    assert all(reason == "length" for reason, _ in result.outcomes.values())
    held = sched.held_pages()
    assert sorted(held + sched.allocator.free_pages) == list(range(1, 41))


def test_reference_target_offers_every_sglang_capability_method() -> None:
    from kvverify.targets.conformance import missing_members
    from kvverify.targets.sglang_contract import SGLANG_CAPABILITY_PROTOCOLS, SglangTargetBase
    assert REF.sglang_capabilities == frozenset(SglangCapability)
    assert all(REF.lacks(cap) is None for cap in SglangCapability) and REF.version
    assert missing_members(REF, SglangTargetBase) == []
    for cap in SglangCapability:
        assert missing_members(REF, SGLANG_CAPABILITY_PROTOCOLS[cap]) == [], cap
    assert sglang_capability_methods(SglangCapability.RETRACTION) == ("probe_retraction",)


def test_conformance_catches_a_broken_target() -> None:
    """The conformance check fails a target whose retraction keeps the wrong request."""
    from kvverify.targets.sglang_conformance import check_sglang_target

    class Broken(SglangReferenceTarget):
        def probe_retraction(self, config, batch):  # type: ignore[no-untyped-def]
            p = super().probe_retraction(config, batch)
            return type(p)(**{**p.__dict__, "retracted": ("d0",)})

    assert check_sglang_target(REF) == []
    assert any("probe_retraction" in p for p in check_sglang_target(Broken()))
