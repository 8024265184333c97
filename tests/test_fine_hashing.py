"""The fine-grained prefix-caching generators reach what they are for (issue 27, item 4).

``fine_hash_cases`` (``kvverify/strategies.py``) must draw the layouts upstream's fine-grained
partial hits exist for — a Mamba ``align`` layer next to attention, prefix caching on, a
``prefix_match_unit`` below the prefix-cacheable groups' block sizes that divides them (what
``resolve_kv_cache_block_sizes`` accepts) — and ``workloads(turns=True)`` must send prompts that
continue an earlier request's whole prompt, so that hits end where that prompt ended (inside a
block as often as not: the partial-tail-block cache and its copy-on-write).
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from kvverify.reference.block_sizes import resolve_cache_hit_alignment_tokens, resolve_kv_cache_block_sizes
from kvverify.reference.grouping import get_global_kv_cache_groups
from kvverify.reference.planner import KVCacheConfig
from kvverify.strategies import StartupCase, fine_hash_cases, startup_cases, workloads

QUICK = settings(max_examples=40, derandomize=True, database=None, deadline=None,
                 suppress_health_check=list(HealthCheck))


@QUICK
@given(case=fine_hash_cases())
def test_fine_hash_cases_hash_finer_than_the_block(case: StartupCase) -> None:
    cfg = case.vllm_config
    groups = get_global_kv_cache_groups(cfg, list(case.kv_cache_specs))
    sizes = [g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable]
    assert cfg.enable_prefix_caching and cfg.mamba_cache_mode == "align" and "mamba" in case.layer_kinds
    assert len(groups) > 1 and cfg.prefix_match_unit is not None
    assert cfg.prefix_match_unit < math.gcd(*sizes) and all(s % cfg.prefix_match_unit == 0 for s in sizes)
    hashed, scheduler, _ = _hit_alignment(case)  # upstream accepts the unit
    assert hashed == cfg.prefix_match_unit < scheduler


def _hit_alignment(case: StartupCase) -> tuple[int, int, int]:
    """(hash block size, scheduler block size, the tokens prefix-cache hits align to)."""
    groups = get_global_kv_cache_groups(case.vllm_config, list(case.kv_cache_specs))
    plan = KVCacheConfig(num_blocks=8, kv_cache_tensors=(), kv_cache_groups=tuple(groups))
    scheduler, hashed = resolve_kv_cache_block_sizes(plan, case.vllm_config)
    return hashed, scheduler, resolve_cache_hit_alignment_tokens(plan, case.vllm_config, scheduler, hashed)


def test_fine_hash_cases_turn_partial_hits_on() -> None:
    """Hits land on the hash unit, inside a block (``partial_hash_hits_enabled``), unless a group
    without fine-grained lookups (sliding window, chunked local) turns them off: both are drawn."""
    for partial in (True, False):
        found = find(fine_hash_cases(), lambda c: (_hit_alignment(c)[2] == _hit_alignment(c)[0]) is partial,
                     settings=settings(database=None, max_examples=300, suppress_health_check=list(HealthCheck)))
        assert (_hit_alignment(found)[2] == found.vllm_config.prefix_match_unit) is partial


def test_the_knob_is_off_by_default_and_needs_caching_and_two_groups() -> None:
    """Without the knob no unit is drawn (the other properties' draws are unchanged), nor with
    it where upstream refuses one (one group) or ignores it (caching off)."""
    @QUICK
    @given(case=startup_cases(allow_auto=False, max_len=256), on=startup_cases(
        allow_auto=False, max_len=256, prefix_match_unit=True))
    def check(case: StartupCase, on: StartupCase) -> None:
        assert case.vllm_config.prefix_match_unit is None
        if on.vllm_config.prefix_match_unit is not None:
            groups = get_global_kv_cache_groups(on.vllm_config, list(on.kv_cache_specs))
            assert on.vllm_config.enable_prefix_caching and len(groups) > 1
    check()


def _continues(workload: list[Any]) -> bool:
    """Some prompt starts with a whole earlier prompt that has tokens of its own (not only the
    shared prefix) and goes on past it."""
    prompts = [w.prompt_token_ids for w in workload]
    return any(len(b) > len(a) and b[:len(a)] == a and max(a) >= 10_000
               for i, a in enumerate(prompts) for b in prompts[i + 1:])


def test_turns_continue_earlier_prompts_within_the_length() -> None:
    found = find(workloads(64, turns=True), _continues, settings=settings(database=None, max_examples=500))
    assert _continues(found)
    assert not _continues(find(workloads(64), lambda w: len(w) >= 2, settings=settings(database=None)))

    @QUICK
    @given(data=st.data())
    def fits(data: Any) -> None:
        for w in data.draw(workloads(64, turns=True)):
            assert 1 <= len(w.prompt_token_ids) and len(w.prompt_token_ids) + w.max_tokens <= 64
    fits()
