"""Exact examples of ``KVCacheManager`` (docs/mutation.md), worked from vLLM 0.33.0's source.

``vllm/v1/core/kv_cache_manager.py`` (``__init__``, ``get_computed_blocks``,
``allocate_slots``, ``free``, ...): each expected block id, hit length and refusal below
is worked by hand from those functions (block ids: a fresh pool hands out ``1, 2, ...``
in order; ``cdiv(tokens, block_size)`` blocks per table). Plain pytest, no Hypothesis.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime_helpers import full, kv_config, swa  # noqa: E402

from kvverify.errors import ConfigError  # noqa: E402
from kvverify.reference.config import VllmConfig  # noqa: E402
from kvverify.reference.kv_cache_manager import KVCacheBlocks, KVCacheManager  # noqa: E402
from kvverify.reference.request import Request, RequestStatus  # noqa: E402


def make(num_blocks: int = 10, *specs, max_model_len: int = 64, block_size: int = 4,
         **kw) -> KVCacheManager:
    cfg = kv_config(num_blocks, *(specs or (full(block_size),)))
    return KVCacheManager(cfg, max_model_len, block_size, block_size, **kw)


def req(kvm: KVCacheManager, rid: str, tokens, max_tokens: int = 8) -> Request:
    return Request(rid, list(tokens), max_tokens, block_hasher=kvm.request_block_hasher)


def run(r: Request, computed: int) -> None:
    """What the scheduler does after a step: the tokens are computed, the request runs."""
    r.num_computed_tokens = computed
    r.status = RequestStatus.RUNNING


def ids(kvm: KVCacheManager, rid: str) -> tuple[list[int], ...]:
    return kvm.get_block_ids(rid)


def fill(kvm: KVCacheManager, rid: str, num_blocks: int) -> Request:
    """A running request holding ``num_blocks`` blocks (to leave a pool nearly full)."""
    r = req(kvm, rid, range(1000, 1000 + 4 * num_blocks))
    assert kvm.allocate_slots(r, 4 * num_blocks, has_scheduled_reqs=False) is not None
    run(r, 4 * num_blocks)
    return r


# --- construction --------------------------------------------------------------------


def test_construction_attributes() -> None:
    """``KVCacheManager.__init__``: the config it was built for, one empty tuple per
    group, ``int(watermark * num_blocks)``, the pool the coordinator owns; a request
    hasher only with caching on; defaults: caching on, watermark 0, retention 0."""
    cfg = kv_config(40, full(4), swa(8, 4))
    kvm = KVCacheManager(cfg, 64, 4, 4, watermark=0.19)
    assert kvm.kv_cache_config is cfg  # upstream reads it back (connector paths, per-group views)
    assert kvm.max_model_len == 64 and kvm.enable_caching is True
    assert kvm.num_kv_cache_groups == 2
    assert kvm.empty_kv_cache_blocks == KVCacheBlocks(((), ()))
    assert kvm.empty_kv_cache_blocks.get_block_ids() == ([], []) and kvm.empty_kv_cache_blocks.num_blocks == 0
    assert kvm.watermark_blocks == 7  # int(0.19 * 40) = int(7.6)
    assert kvm.block_pool is kvm.coordinator.block_pool and kvm.block_pool.num_gpu_blocks == 40
    assert kvm.coordinator.retention_interval == 0 and kvm.coordinator.enable_caching is True
    assert kvm.last_allocation is None
    r = req(kvm, "a", range(9))
    assert len(r.block_hashes) == 2  # the hasher works at hash_block_size 4
    assert kvm.get_num_free_blocks() == 39 and kvm.usage == 0.0
    off = KVCacheManager(kv_config(10, full(4)), 64, 4, 4, enable_caching=False)
    assert off.request_block_hasher is None and off.enable_caching is False
    assert off.block_pool.enable_caching is False and off.watermark_blocks == 0
    dense = KVCacheManager(kv_config(10, full(4)), 64, 4, 4, prefix_cache_retention_interval=None)
    assert dense.coordinator.retention_interval is None


@pytest.mark.parametrize("watermark", [-0.01, 1.0, 1.5, True, "0.1", None])
def test_watermark_out_of_range_is_refused(watermark) -> None:
    with pytest.raises(ConfigError) as err:
        make(watermark=watermark)
    assert err.value.field == "watermark" and err.value.value is watermark
    assert err.value.allowed == "must be in [0, 1)"


def test_watermark_range_ends() -> None:
    assert make(watermark=0).watermark_blocks == 0
    assert make(watermark=0.0).watermark_blocks == 0
    assert make(watermark=0.99).watermark_blocks == 9  # int(0.99 * 10)


def test_max_model_len_is_validated() -> None:
    for bad_watermark in (0.0, 1.5):  # checked first, before any other knob
        with pytest.raises(ConfigError) as err:
            make(max_model_len=0, watermark=bad_watermark)
        assert err.value.field == "max_model_len" and err.value.value == 0
    assert make(max_model_len=1).max_model_len == 1


def test_max_in_flight_tokens_defaults_to_max_model_len() -> None:
    """Unset ``max_in_flight_tokens`` falls back to ``max_model_len`` (the SWA admission cap
    ``cdiv(min(W - 1 + F, L), B) + 1`` is then ``cdiv(L, B) + 1``); a given value is used."""
    long = list(range(60))
    uncapped = make(40, swa(8, 4))
    assert uncapped.get_num_blocks_to_allocate_full(req(uncapped, "a", long)) == 15  # cdiv(60, 4)
    capped = make(40, swa(8, 4), max_in_flight_tokens=4)
    # cap: cdiv(min(7 + 4, 64), 4) + 1 = 4
    assert capped.get_num_blocks_to_allocate_full(req(capped, "a", long)) == 4


def test_from_config_passes_every_knob() -> None:
    """``from_config``: block sizes resolved, and each engine knob handed on."""
    vc = VllmConfig(block_size=4, max_model_len=48, max_num_batched_tokens=8,
                    enable_prefix_caching=True, watermark=0.1,
                    prefix_cache_retention_interval=8)
    kvm = KVCacheManager.from_config(kv_config(50, swa(8, 4)), vc)
    assert kvm.max_model_len == 48 and kvm.enable_caching and kvm.watermark_blocks == 5
    assert kvm.coordinator.scheduler_block_size == 4 and kvm.coordinator.hash_block_size == 4
    assert kvm.coordinator.retention_interval == 8
    # F = max_in_flight_tokens = 8: cap cdiv(min(7 + 8, 48), 4) + 1 = 5
    assert vc.max_in_flight_tokens == 8
    assert kvm.get_num_blocks_to_allocate_full(req(kvm, "a", range(40))) == 5
    off = KVCacheManager.from_config(kv_config(50, full(4)),
                                     VllmConfig(block_size=4, max_model_len=48,
                                                enable_prefix_caching=False))
    assert off.enable_caching is False and off.request_block_hasher is None
    dense = KVCacheManager.from_config(kv_config(50, full(4)),
                                       VllmConfig(block_size=4, max_model_len=48,
                                                  prefix_cache_retention_interval=None))
    assert dense.coordinator.retention_interval is None


# --- prefix lookups ------------------------------------------------------------------


def test_get_computed_blocks_caching_off() -> None:
    kvm = make(enable_caching=False)
    r = req(kvm, "a", range(12))
    got = kvm.get_computed_blocks(r)
    assert got == (kvm.empty_kv_cache_blocks, 0, 0) and got[0] is kvm.empty_kv_cache_blocks


def test_get_computed_blocks_unitary_hit_and_last_token() -> None:
    """One group: the hit is whole blocks, at most ``num_tokens - 1`` tokens (the last is
    recomputed for its logits); nothing lags, so the boundary is 0."""
    kvm = make(20)
    a = req(kvm, "a", range(12))
    assert kvm.get_computed_blocks(a) == (kvm.empty_kv_cache_blocks, 0, 0)
    assert kvm.allocate_slots(a, 12).get_block_ids() == ([1, 2, 3],)
    same = req(kvm, "b", range(12))
    blocks, hit, boundary = kvm.get_computed_blocks(same)
    assert blocks.get_block_ids() == ([1, 2],) and hit == 8 and boundary == 0
    longer = req(kvm, "c", range(13))
    blocks, hit, boundary = kvm.get_computed_blocks(longer)
    assert blocks.get_block_ids() == ([1, 2, 3],) and hit == 12 and boundary == 0
    other = req(kvm, "d", [5, *range(1, 12)])
    assert kvm.get_computed_blocks(other) == (kvm.empty_kv_cache_blocks, 0, 0)


def test_get_computed_blocks_hybrid_boundary() -> None:
    """Full attention + SWA: request ``a`` (16 tokens) caches every full-attention block but,
    under retention 0, only the SWA tail reaching its replay boundary 15 (aligned down
    to 12): SWA blocks 1 and 2. ``b`` shares the 16 tokens: full attention hits 16, SWA
    only 12, so the hit is 12 and the shared-prefix boundary is ``12 + 4 = 16``."""
    kvm = make(30, full(4), swa(8, 4))
    a = req(kvm, "a", range(16))
    assert kvm.allocate_slots(a, 16).get_block_ids() == ([1, 2, 3, 4], [5, 6, 7, 8])
    hashed = [[b.block_hash is not None for b in g] for g in kvm.get_blocks("a").blocks]
    assert hashed == [[True] * 4, [False, True, True, False]]
    b = req(kvm, "b", [*range(16), *range(100, 108)])
    blocks, hit, boundary = kvm.get_computed_blocks(b)
    assert blocks.get_block_ids() == ([1, 2, 3], [0, 6, 7])
    assert (hit, boundary) == (12, 16)
    # a prefix that both groups hit equally: no lag, boundary 0
    c = req(kvm, "c", range(13))
    blocks, hit, boundary = kvm.get_computed_blocks(c)
    assert (hit, boundary) == (12, 0) and blocks.get_block_ids() == ([1, 2, 3], [0, 6, 7])


# --- allocate_slots ------------------------------------------------------------------


def test_allocate_slots_refuses_bad_counts() -> None:
    kvm = make()
    r = req(kvm, "a", range(4))
    for field in ("num_new_tokens", "num_new_computed_tokens", "num_lookahead_tokens",
                  "num_encoder_tokens"):
        kw = {"num_new_tokens": 1, field: -1}
        with pytest.raises(ConfigError) as err:
            kvm.allocate_slots(r, **kw)
        assert err.value.field == field and err.value.value == -1
    with pytest.raises(ConfigError) as err:
        kvm.allocate_slots(r, 0)
    assert err.value.field == "num_new_tokens" and err.value.value == 0
    assert err.value.allowed == "must be > 0 when there are no computed tokens to adopt"
    assert kvm.get_num_free_blocks() == 9 and ids(kvm, "a") == ([],)


def test_allocate_slots_grows_the_table_and_caches_full_blocks() -> None:
    """A new request takes ``cdiv(n, 4)`` blocks; later steps take only the missing ones;
    blocks are cached up to ``min(computed + new, num_tokens)``; ``last_allocation`` is
    (predicted, pulled); no new block -> the shared empty ``KVCacheBlocks``."""
    kvm = make(10)
    r = req(kvm, "a", range(10))
    out = kvm.allocate_slots(r, 10)
    assert out.get_block_ids() == ([1, 2, 3],) and kvm.last_allocation == (3, 3)
    assert kvm.get_num_free_blocks() == 6 and kvm.num_held_blocks("a") == 3
    assert kvm.usage == pytest.approx(3 / 9)
    table = kvm.get_blocks("a").blocks[0]
    assert [b.block_hash for b in table] == [(r.block_hashes[0], 0), (r.block_hashes[1], 0), None]
    run(r, 10)
    same = kvm.allocate_slots(r, 1)
    assert same is kvm.empty_kv_cache_blocks and kvm.last_allocation == (0, 0)
    # three draft tokens beyond num_tokens: slots for 13, but nothing past 10 is cached
    out = kvm.allocate_slots(r, 3)
    assert out.get_block_ids() == ([4],) and ids(kvm, "a") == ([1, 2, 3, 4],)
    assert kvm.block_pool.num_cached_blocks == 2 and kvm.last_allocation == (1, 1)
    # the tokens arrive: computed 12 of 12 -> the third block is full and cached
    r.append_output_token_ids(7)
    r.append_output_token_ids(8)
    run(r, 11)
    assert kvm.allocate_slots(r, 1) is kvm.empty_kv_cache_blocks
    assert table[2].block_hash == (r.block_hashes[2], 0) and kvm.block_pool.num_cached_blocks == 3


def test_allocate_slots_lookahead_and_max_model_len() -> None:
    """Slots for ``computed + new + lookahead``, at most ``max_model_len``."""
    kvm = make(20)
    r = req(kvm, "a", range(5))
    assert kvm.allocate_slots(r, 5, num_lookahead_tokens=4).get_block_ids() == ([1, 2, 3],)
    short = make(20, max_model_len=12)
    s = req(short, "a", range(5))
    assert short.allocate_slots(s, 5, num_lookahead_tokens=40).get_block_ids() == ([1, 2, 3],)
    run(s, 5)
    assert short.allocate_slots(s, 1, num_lookahead_tokens=40) is short.empty_kv_cache_blocks


def test_allocate_slots_refuses_what_does_not_fit() -> None:
    """``need + watermark <= free`` or None, and a refused step allocates nothing."""
    kvm = make(10)
    fill(kvm, "x", 6)  # 3 free left
    r = req(kvm, "a", range(16))
    assert kvm.allocate_slots(r, 16) is None
    assert kvm.get_num_free_blocks() == 3 and ids(kvm, "a") == ([],)
    assert kvm.allocate_slots(r, 12).get_block_ids() == ([7, 8, 9],)
    assert kvm.get_num_free_blocks() == 0


def test_watermark_applies_to_waiting_and_preempted_only() -> None:
    """Upstream: the watermark is charged only to WAITING/PREEMPTED requests and only when
    some request is already scheduled (``has_scheduled_reqs``)."""
    kvm = make(10, watermark=0.2)  # int(0.2 * 10) = 2 blocks
    assert kvm.watermark_blocks == 2
    fill(kvm, "x", 4)  # 5 free left
    a = req(kvm, "a", range(16))  # needs 4
    assert kvm.allocate_slots(a, 16) is None  # 4 + 2 > 5
    a.status = RequestStatus.PREEMPTED
    assert kvm.allocate_slots(a, 16) is None
    a.status = RequestStatus.WAITING
    assert kvm.allocate_slots(a, 12).get_block_ids() == ([5, 6, 7],)  # 3 + 2 <= 5
    kvm.free(a)
    a.status = RequestStatus.RUNNING  # not charged
    assert kvm.allocate_slots(a, 16) is not None
    kvm.free(a)
    assert kvm.get_num_free_blocks() == 5
    a.status = RequestStatus.WAITING
    assert kvm.allocate_slots(a, 16, has_scheduled_reqs=False) is not None


def test_full_sequence_gate_with_the_swa_cap() -> None:
    """``full_sequence_must_fit``: the blocks of ``min(num_tokens, L)`` tokens, capped by
    SWA's ``cdiv(min(W - 1 + F, L), B) + 1`` (= 4 at W 8, B 4, F 4), plus the watermark,
    must fit before anything is done; the per-step check (here 2 blocks) is uncapped."""
    kvm = make(10, swa(8, 4), max_in_flight_tokens=4)
    fill(kvm, "x", 6)  # 3 free
    a = req(kvm, "a", range(40))
    assert kvm.get_num_blocks_to_allocate_full(a) == 4
    assert kvm.allocate_slots(a, 8, full_sequence_must_fit=True) is None
    assert kvm.get_num_free_blocks() == 3 and ids(kvm, "a") == ([],)
    assert kvm.allocate_slots(a, 8).get_block_ids() == ([7, 8],)
    b = make(11, swa(8, 4), max_in_flight_tokens=4)
    fill(b, "x", 6)  # 4 free: the gate's 4 fits exactly
    a = req(b, "a", range(40))
    assert b.allocate_slots(a, 8, full_sequence_must_fit=True).get_block_ids() == ([7, 8],)
    # the watermark is charged on the gate too
    w = make(12, swa(8, 4), max_in_flight_tokens=4, watermark=0.1)  # 1 block
    fill(w, "x", 6)  # 5 free
    a = req(w, "a", range(40))
    assert w.allocate_slots(a, 8, full_sequence_must_fit=True).get_block_ids() == ([7, 8],)
    w2 = make(11, swa(8, 4), max_in_flight_tokens=4, watermark=0.1)  # 1 block, 4 free
    fill(w2, "x", 6)
    a = req(w2, "a", range(40))
    assert w2.allocate_slots(a, 8, full_sequence_must_fit=True) is None
    assert w2.allocate_slots(a, 8, full_sequence_must_fit=True, has_scheduled_reqs=False) is not None


def test_full_sequence_gate_counts_the_blocks_a_running_request_holds() -> None:
    """The gate asks the coordinator about *this* request: a running request holding 2 of
    the 4 blocks of its 16 tokens needs only 2 more."""
    kvm = make(10)
    r = req(kvm, "a", range(16))
    assert kvm.allocate_slots(r, 8).get_block_ids() == ([1, 2],)
    run(r, 8)
    fill(kvm, "x", 5)  # 2 free
    assert kvm.get_num_blocks_to_allocate_full(r) == 2
    assert kvm.allocate_slots(r, 8, full_sequence_must_fit=True).get_block_ids() == ([8, 9],)


def test_full_sequence_gate_is_capped_at_max_model_len() -> None:
    """``full = min(num_tokens, max_model_len)``: a request longer than L is gated on L."""
    kvm = make(6, max_model_len=12)
    r = req(kvm, "a", range(30))
    assert kvm.get_num_blocks_to_allocate_full(r) == 3
    assert kvm.allocate_slots(r, 4, full_sequence_must_fit=True).get_block_ids() == ([1],)
    full_gate = make(6, max_model_len=24)
    r = req(full_gate, "a", range(30))
    assert full_gate.get_num_blocks_to_allocate_full(r) == 6
    assert full_gate.allocate_slots(r, 4, full_sequence_must_fit=True) is None


def test_sliding_window_frees_on_processed_tokens_minus_in_flight() -> None:
    """Blocks behind the window are freed on ``max(0, computed - num_in_flight_tokens)``
    (async scheduling: in-flight steps still read them). W 8, B 4, 16 computed:
    skipped ``16 - 7 = 9`` tokens -> 2 blocks; with 8 tokens in flight ``8 - 7 = 1`` -> 0;
    with more in flight than computed, 0 processed -> none. Freed blocks go to the head
    of the queue (right to left), so the step's new block is the last one freed."""
    for in_flight, table in ((0, [0, 0, 3, 4, 2]), (8, [1, 2, 3, 4, 5]), (20, [1, 2, 3, 4, 5]),
                             (4, [0, 2, 3, 4, 1])):
        kvm = make(20, swa(8, 4), enable_caching=False)
        r = req(kvm, "a", range(16))
        assert kvm.allocate_slots(r, 16).get_block_ids() == ([1, 2, 3, 4],)
        run(r, 16)
        r.num_in_flight_tokens = in_flight
        assert kvm.allocate_slots(r, 4).get_block_ids() == ([table[-1]],), in_flight
        assert ids(kvm, "a") == (table,), in_flight
        assert kvm.num_held_blocks("a") == sum(1 for b in table if b), in_flight


def test_adopting_prefix_hits() -> None:
    """``new_computed_blocks`` are touched (a free hit leaves the free queue and is
    counted in the prediction), prepended to the table, and only the rest is allocated;
    ``num_new_tokens`` may be 0 when there are hit tokens to adopt."""
    kvm = make(10)
    a = req(kvm, "a", range(13))
    assert kvm.allocate_slots(a, 13).get_block_ids() == ([1, 2, 3, 4],)
    kvm.free(a)  # tail first: hashed 3, 2, 1 to the tail, unhashed 4 to the head
    assert kvm.block_pool.free_block_ids() == [4, 5, 6, 7, 8, 9, 3, 2, 1]
    b = req(kvm, "b", range(14))
    blocks, hit, _ = kvm.get_computed_blocks(b)
    assert blocks.get_block_ids() == ([1, 2, 3],) and hit == 12
    out = kvm.allocate_slots(b, 2, hit, blocks)
    assert out.get_block_ids() == ([4],) and ids(kvm, "b") == ([1, 2, 3, 4],)
    assert kvm.last_allocation == (4, 4)  # 1 new + 3 evictable hits taken from the queue
    assert [blk.ref_cnt for blk in kvm.get_blocks("b").blocks[0]] == [1, 1, 1, 1]
    c = req(kvm, "c", range(12))
    blocks, hit, _ = kvm.get_computed_blocks(c)
    assert hit == 8
    # all of c's 8 hit tokens adopted, no new token of its own this step
    out = kvm.allocate_slots(c, 0, hit, blocks)
    assert out is kvm.empty_kv_cache_blocks and ids(kvm, "c") == ([1, 2],)
    assert kvm.last_allocation == (0, 0)
    assert [blk.ref_cnt for blk in kvm.get_blocks("b").blocks[0]] == [2, 2, 1, 1]


def test_free_and_reset_prefix_cache() -> None:
    """``free`` returns every block (tail first); ``reset_prefix_cache`` only once all are free."""
    kvm = make(6)
    a = req(kvm, "a", range(9))
    kvm.allocate_slots(a, 9)
    assert kvm.reset_prefix_cache() is False
    kvm.free(a)
    assert ids(kvm, "a") == ([],) and kvm.num_held_blocks("a") == 0
    assert kvm.block_pool.free_block_ids() == [3, 4, 5, 2, 1]
    assert kvm.reset_prefix_cache() is True
    assert kvm.get_computed_blocks(req(kvm, "b", range(9)))[1] == 0


def test_remove_skipped_blocks_and_new_step() -> None:
    kvm = make(10, swa(8, 4), enable_caching=False)
    r = req(kvm, "a", range(16))
    kvm.allocate_slots(r, 16)
    kvm.remove_skipped_blocks("a", 12)  # 12 - 7 = 5 skipped tokens -> 1 block
    assert ids(kvm, "a") == ([0, 2, 3, 4],) and kvm.num_held_blocks("a") == 3
    kvm.remove_skipped_blocks("other", 16)
    kvm.new_step_starts()
    assert ids(kvm, "a") == ([0, 2, 3, 4],)


def test_sliding_window_of_one_token_in_flight() -> None:
    """W 1, B 1 (every computed token leaves the window): with the whole computed prefix
    still in flight, ``max(0, 4 - 4) = 0`` tokens are processed and nothing is freed."""
    kvm = KVCacheManager(kv_config(20, swa(1, 1)), 64, 1, 1, enable_caching=False)
    r = req(kvm, "a", range(4))
    assert kvm.allocate_slots(r, 4).get_block_ids() == ([1, 2, 3, 4],)
    run(r, 4)
    r.num_in_flight_tokens = 4
    assert kvm.allocate_slots(r, 1).get_block_ids() == ([5],)
    assert ids(kvm, "a") == ([1, 2, 3, 4, 5],)
    # settled: 5 processed tokens leave the window; slots 5..1 are freed right to left
    # to the head of the queue, so block 5 is handed out again first
    r.num_in_flight_tokens = 0
    run(r, 5)
    assert kvm.allocate_slots(r, 1).get_block_ids() == ([5],)
    assert ids(kvm, "a") == ([0, 0, 0, 0, 0, 5],)


def test_full_gate_helper_on_a_one_token_window() -> None:
    """``get_num_blocks_to_allocate_full`` of a fresh request counts its own computed tokens
    (0) and no hit by default: W 1, B 1 -> all 8 blocks (one computed token would skip one)."""
    kvm = KVCacheManager(kv_config(20, swa(1, 1)), 64, 1, 1, enable_caching=False)
    assert kvm.get_num_blocks_to_allocate_full(req(kvm, "a", range(8))) == 8


def test_cross_attention_encoder_tokens() -> None:
    """Cross attention holds ``cdiv(num_encoder_tokens, B)`` blocks from the first step, on
    the gate, the prediction and the allocation alike; 0 encoder tokens -> none."""
    from runtime_helpers import cross
    kvm = KVCacheManager(kv_config(20, full(4), cross(4)), 64, 4, 4, enable_caching=False)
    r = req(kvm, "a", range(5))
    assert kvm.get_num_blocks_to_allocate_full(r) == 2
    assert kvm.get_num_blocks_to_allocate_full(r, num_encoder_tokens=9) == 5
    out = kvm.allocate_slots(r, 5, num_encoder_tokens=9, full_sequence_must_fit=True)
    assert out.get_block_ids() == ([1, 2], [3, 4, 5]) and kvm.last_allocation == (5, 5)
    plain = req(kvm, "b", range(5))
    assert kvm.allocate_slots(plain, 5).get_block_ids() == ([6, 7], [])
    assert kvm.last_allocation == (2, 2)
    # the gate charges the encoder blocks: 2 + 3 > 4 free
    tight = KVCacheManager(kv_config(5, full(4), cross(4)), 64, 4, 4, enable_caching=False)
    t = req(tight, "a", range(5))
    assert tight.allocate_slots(t, 4, num_encoder_tokens=9, full_sequence_must_fit=True) is None
    assert tight.allocate_slots(t, 4, num_encoder_tokens=4, full_sequence_must_fit=True) is not None


def test_mamba_align_state_ignores_lookahead_slots() -> None:
    """Mamba ``align`` keeps state for the main-model tokens only: a step of 1 token with 8
    lookahead slots grows full attention to ``cdiv(14, 4) = 4`` blocks (2 new) but needs
    no new Mamba block (``cdiv(6, 4) = 2`` slots already held), so it fits in 2 free blocks."""
    from runtime_helpers import mamba
    kvm = KVCacheManager(kv_config(6, full(4), mamba(4, "align")), 64, 4, 4)
    r = req(kvm, "a", range(5))
    # (the Mamba group's *returned* list is left unpinned: upstream returns the null padding
    # with the new block, ``[0, 3]``, the reference only ``[3]``; the tables agree)
    assert kvm.allocate_slots(r, 5).get_block_ids()[0] == [1, 2]
    assert ids(kvm, "a") == ([1, 2], [0, 3]) and kvm.get_num_free_blocks() == 2
    run(r, 5)
    out = kvm.allocate_slots(r, 1, num_lookahead_tokens=8)
    assert out is not None and out.get_block_ids() == ([4, 5], [])
    assert ids(kvm, "a") == ([1, 2, 4, 5], [0, 3]) and kvm.last_allocation == (2, 2)


def test_hybrid_hit_adoption_pads_the_window() -> None:
    """Adopting a hybrid hit (full [1, 2, 3], SWA [null, 6, 7] at 12 tokens): SWA skips
    ``12 - 7 = 5`` tokens = 1 block, so its table starts with a null slot; both groups then
    grow to ``cdiv(24, 4) = 6`` blocks."""
    kvm = make(30, full(4), swa(8, 4))
    a = req(kvm, "a", range(16))
    kvm.allocate_slots(a, 16)
    b = req(kvm, "b", [*range(16), *range(100, 108)])
    blocks, hit, _ = kvm.get_computed_blocks(b)
    assert hit == 12
    out = kvm.allocate_slots(b, 12, hit, blocks)
    assert out.get_block_ids() == ([9, 10, 11], [12, 13, 14])
    assert ids(kvm, "b") == ([1, 2, 3, 9, 10, 11], [0, 6, 7, 12, 13, 14])
    assert kvm.last_allocation == (6, 6) and kvm.num_held_blocks("b") == 11
