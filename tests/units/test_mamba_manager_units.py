"""Exact examples of ``MambaManager`` (docs/mutation.md, issue 15).

Worked from vLLM 0.33.0's ``MambaManager`` (``single_type_kv_cache_manager.py``), no
prefill checkpoints, no partial hits (the parts the reference models); the step traces
were also replayed on the pinned 0.33.0 manager (same tables, free counts and predictions).
Pools: ``BlockPool(16, caching, 4)``, block 0 is the null block.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime_helpers import full, mamba  # noqa: E402

from kvverify.errors import KVVerifyError  # noqa: E402
from kvverify.reference.managers.mamba import MambaManager  # noqa: E402
from kvverify.reference.pool import BlockPool  # noqa: E402

from manager_helpers import H  # noqa: E402
from manager_helpers import cached  # noqa: E402
from manager_helpers import ids as _ids  # noqa: E402
from manager_helpers import req as _req  # noqa: E402


def _mk(spec_blocks: int = 0, mode: str = "align", caching: bool = True, sbs: int = 4,
        n: int = 16) -> tuple[MambaManager, BlockPool]:
    pool = BlockPool(n, caching, 4)
    m = MambaManager(mamba(4, mode, spec_blocks), pool, enable_caching=caching, kv_cache_group_id=0,
                     scheduler_block_size=sbs)
    return m, pool


def _cached(pool: BlockPool, hashes, gid: int = 0):
    """Blocks cached under ``hashes`` (block size 4) and freed: ref 0, evictable."""
    return cached(pool, hashes, 4, gid)


def test_mamba_init() -> None:
    """``MambaManager.__init__``: prefix caching needs ``align``; a Mamba spec only."""
    m, _ = _mk(2)
    assert m.mamba_cache_mode == "align" and m.align and m.num_speculative_blocks == 2
    assert m.cached_blocks_this_step == set() and m.last_state_block_idx == {}
    assert m._num_retired_blocks == {} and m._allocated_block_reqs == set()
    n, _ = _mk(0, "none", caching=False)
    assert n.mamba_cache_mode == "none" and not n.align
    with pytest.raises(KVVerifyError, match=r"^Mamba prefix caching requires "
                                            r"mamba_cache_mode='align' \(got 'none'\)$"):
        _mk(0, "none", caching=True)
    with pytest.raises(KVVerifyError, match=r"^MambaManager needs a MambaSpec, got FullAttentionSpec$"):
        MambaManager(full(4), BlockPool(8, True, 4), enable_caching=True, kv_cache_group_id=0,
                     scheduler_block_size=4)
    assert m.get_num_skipped_tokens(10) == 9 and m.get_num_skipped_tokens(0) == -1


def test_mamba_align_trace_one_state_block_per_step() -> None:
    """Align mode, no speculative blocks: per step ``(prediction, new ids, table after
    allocate, table after remove_skipped_blocks, last_state_block_idx, retired)``."""
    m, pool = _mk(0)
    m.add_local_computed_blocks("r", [], 0)
    rows = []
    for n in (3, 4, 5, 8, 9, 17, 18):
        g = m.get_num_blocks_to_allocate("r", n, [], 0, n)
        new = _ids(m.allocate_new_blocks("r", n, n))
        after_alloc = _ids(m.get_blocks("r"))
        m.remove_skipped_blocks("r", n)
        rows.append((n, g, new, after_alloc, _ids(m.get_blocks("r")), pool.get_num_free_blocks(),
                     dict(m.last_state_block_idx), dict(m._num_retired_blocks)))
    assert rows == [
        (3, 1, [1], [1], [1], 14, {}, {}),
        (4, 0, [], [1], [1], 14, {}, {}),
        (5, 1, [2], [1, 2], [0, 2], 14, {"r": 0}, {"r": 1}),
        (8, 0, [], [0, 2], [0, 2], 14, {"r": 0}, {"r": 1}),
        (9, 1, [1], [0, 2, 1], [0, 0, 1], 14, {"r": 1}, {"r": 2}),
        (17, 1, [2], [0, 0, 1, 0, 2], [0, 0, 0, 0, 2], 14, {"r": 2}, {"r": 4}),
        (18, 0, [], [0, 0, 0, 0, 2], [0, 0, 0, 0, 2], 14, {"r": 2}, {"r": 4}),
    ]
    m.free("r")
    assert m.get_blocks("r") == [] and pool.get_num_free_blocks() == 15
    assert "r" not in m.last_state_block_idx and "r" not in m._num_retired_blocks
    assert "r" not in m._allocated_block_reqs


def test_mamba_align_trace_with_speculative_block() -> None:
    """Align mode, ``S = 1``: the first allocation takes ``1 + S``; a jump of more than a
    block relocates the scratch block to the end (null left behind)."""
    m, pool = _mk(1)
    assert m.get_num_blocks_to_allocate("r", 10, [], 0, 10) == 2
    m.add_local_computed_blocks("r", [], 0)
    assert _ids(m.allocate_new_blocks("r", 10, 10)) == [1, 2]
    assert _ids(m.get_blocks("r")) == [0, 0, 1, 2] and "r" in m._allocated_block_reqs
    m.remove_skipped_blocks("r", 10)
    assert _ids(m.get_blocks("r")) == [0, 0, 1, 2] and pool.get_num_free_blocks() == 13
    assert m._num_retired_blocks == {"r": 2}
    assert m.get_num_blocks_to_allocate("r", 20, [], 10, 20) == 1
    assert _ids(m.allocate_new_blocks("r", 20, 20)) == [3]
    assert _ids(m.get_blocks("r")) == [0, 0, 1, 0, 2, 3] and m.last_state_block_idx == {"r": 2}
    m.remove_skipped_blocks("r", 20)
    assert _ids(m.get_blocks("r")) == [0, 0, 0, 0, 2, 3] and pool.get_num_free_blocks() == 13
    assert m._num_retired_blocks == {"r": 4}
    assert m.get_num_blocks_to_allocate("r", 21, [], 20, 21) == 1
    assert _ids(m.allocate_new_blocks("r", 21, 21)) == [1]
    assert _ids(m.get_blocks("r")) == [0, 0, 0, 0, 2, 3, 1] and m.last_state_block_idx == {"r": 4}
    m.remove_skipped_blocks("r", 21)
    assert _ids(m.get_blocks("r")) == [0, 0, 0, 0, 0, 3, 1] and pool.get_num_free_blocks() == 13
    assert m.get_num_blocks_to_allocate("r", 25, [], 21, 25) == 1
    assert _ids(m.allocate_new_blocks("r", 25, 25)) == [2]
    assert _ids(m.get_blocks("r")) == [0, 0, 0, 0, 0, 3, 1, 2] and m.last_state_block_idx == {"r": 5}
    m.remove_skipped_blocks("r", 25)
    assert _ids(m.get_blocks("r")) == [0, 0, 0, 0, 0, 0, 1, 2] and pool.get_num_free_blocks() == 13
    # over-allocated (draft tokens rejected): upstream returns the negative count as is
    assert m.get_num_blocks_to_allocate("r", 4, [], 25, 4) == -6


def test_mamba_align_prediction_uses_main_model_tokens_and_counts_all_evictable_hits() -> None:
    """``num_tokens_main_model`` replaces ``num_tokens`` (lookahead slots hold no state);
    ``R = cdiv(n, B) + S``; new = ``R - hits - held``, capped at ``1 + S`` (first
    allocation) or 1; plus every evictable hit (ref 0, not null), none skipped."""
    m, pool = _mk(2)
    e1, e2 = _cached(pool, H[:2])
    busy = pool.get_new_blocks(1)[0]
    # main model 4 tokens: R = 1 + 2 = 3, minus 2 hits = 1 new; 2 evictable
    assert m.get_num_blocks_to_allocate("r", 20, [e1, e2], 0, 4) == 1 + 2
    # num_tokens (no main-model count): R = 5 + 2 = 7 - 2 = 5 -> capped at 1 + 2
    assert m.get_num_blocks_to_allocate("r", 20, [e1, e2], 0) == 3 + 2
    assert m.get_num_blocks_to_allocate("r", 20, [e1, busy, pool.null_block], 0, 20) == 3 + 1
    # held slots count too: 3 held -> R 7 - 3 = 4, capped at 3 (not yet allocated)
    m.req_to_blocks["q"] = pool.get_new_blocks(3)
    assert m.get_num_blocks_to_allocate("q", 20, [], 0, 20) == 3
    m._allocated_block_reqs.add("q")
    assert m.get_num_blocks_to_allocate("q", 20, [], 0, 20) == 1
    assert m.get_num_blocks_to_allocate("q", 4, [], 0, 4) == 0


def test_mamba_state_cached_this_step_is_not_a_hit_yet() -> None:
    """A hit whose last block was cached this step forces "does not fit"
    (``num_gpu_blocks + 1``) until ``new_step_starts``."""
    m, pool = _mk(0)
    m.add_local_computed_blocks("w", [], 0)
    m.req_to_blocks["w"] = pool.get_new_blocks(3)
    m.cache_blocks(_req("w", H[:3]), 12)
    w = m.get_blocks("w")
    assert m.cached_blocks_this_step == {(H[0], 0), (H[1], 0), (H[2], 0)}
    assert m.get_num_blocks_to_allocate("r", 16, [w[0], w[1]], 0, 16) == 16 + 1
    assert m.get_num_blocks_to_allocate("r", 16, [pool.null_block], 0, 16) == 1
    assert m.get_num_blocks_to_allocate("r", 16, [], 0, 16) == 1
    m.new_step_starts()
    assert m.cached_blocks_this_step == set()
    assert m.get_num_blocks_to_allocate("r", 16, [w[0], w[1]], 0, 16) == 1
    # a later call only records the newly cached blocks
    m.req_to_blocks["w"].append(pool.get_new_blocks(1)[0])
    m.cache_blocks(_req("w", H[:4]), 16)
    assert m.cached_blocks_this_step == {(H[3], 0)}


def test_mamba_cache_blocks_sparse_retention_records_only_hashed_states() -> None:
    """Retention 0: only the state ending on the replay boundary (``15 -> 12``: block 2)
    is hashed and remembered; null slots are skipped."""
    m, pool = _mk(0)
    m.add_local_computed_blocks("r", [], 0)
    blocks = pool.get_new_blocks(4)
    m.req_to_blocks["r"] = [pool.null_block] + blocks[1:]
    m.cache_blocks(_req("r", H[:4], num_prompt=16), 16, 0, replay_boundaries=(15,))
    assert [b.block_hash for b in m.get_blocks("r")] == [None, None, (H[2], 0), None]
    assert m.cached_blocks_this_step == {(H[2], 0)} and m.num_cached_block["r"] == 4
    dense, pool2 = _mk(0)
    dense.req_to_blocks["d"] = [pool2.null_block] + pool2.get_new_blocks(2)
    dense.cache_blocks(_req("d", H[:3]), 12)
    assert dense.cached_blocks_this_step == {(H[1], 0), (H[2], 0)}
    # a request unknown to num_cached_block records from block 0
    dense.req_to_blocks["e"] = pool2.get_new_blocks(2)
    dense.cache_blocks(_req("e", H[4:6]), 8)
    assert {(H[4], 0), (H[5], 0)} <= dense.cached_blocks_this_step
    dense.new_step_starts()
    # no full block yet: nothing cached, nothing recorded (an already-hashed slot 0 stays out)
    dense.req_to_blocks["x"] = [dense.get_blocks("e")[0]]
    dense.cache_blocks(_req("x", H[4:5]), 2)
    assert dense.cached_blocks_this_step == set() and "x" not in dense.num_cached_block


def test_mamba_reachable_block_mask() -> None:
    """Upstream ``MambaManager.reachable_block_mask`` (B=4, alignment 8): None = dense;
    ``k > 0``: the state ending each ``k``-token segment; boundaries: the state block
    ending on the aligned boundary."""
    m, _ = _mk(0, sbs=8)
    T, F = True, False
    assert m.reachable_block_mask(0, 8) is None
    assert m.reachable_block_mask(0, 8, None, [27]) is None
    assert m.reachable_block_mask(0, 8, 0, [27]) == [F, F, F, F, F, T, F, F]
    assert m.reachable_block_mask(0, 8, 0, [27, 9, 3]) == [F, T, F, F, F, T, F, F]
    assert m.reachable_block_mask(6, 8, 0, [27]) == [F, F]
    assert m.reachable_block_mask(5, 8, 0, [27]) == [T, F, F]
    assert m.reachable_block_mask(0, 5, 0, [27]) == [F] * 5
    assert m.reachable_block_mask(0, 8, 16, []) == [F, F, F, T, F, F, F, T]
    assert m.reachable_block_mask(5, 12, 16, []) == [F, F, T, F, F, F, T]
    assert m.reachable_block_mask(4, 8, 16, []) == [F, F, F, T]
    assert m.reachable_block_mask(3, 8, 16, []) == [T, F, F, F, T]
    assert m.reachable_block_mask(0, 8, 8, [27]) == [F, T, F, T, F, T, F, T]
    assert m.reachable_block_mask(0, 8, 4, [27]) is None


def test_mamba_hit_is_the_last_aligned_cached_state() -> None:
    """Upstream ``MambaManager.find_longest_cache_hit`` (coarse): right to left, the first
    cached block whose end is aligned wins; earlier slots are null."""
    pool = BlockPool(16, True, 4)
    a, b, c, d = _cached(pool, [H[0], H[1], H[2], H[3]])
    find = MambaManager.find_longest_cache_hit
    null = pool.null_block
    spec = mamba(4, "align")
    assert find(H[:6], 24, [0], pool, spec, 4) == (([null] * 3 + [d],), 16)
    assert find(H[:6], 15, [0], pool, spec, 4) == (([null, null, c],), 12)
    assert find(H[:6], 15, [0], pool, spec, 8) == (([null, b],), 8)
    assert find(H[:6], 24, [0], pool, spec, 12) == (([null, null, c],), 12)
    assert find(H[4:8], 16, [0], pool, spec, 4) == (([],), 0)
    assert find(H[:6], 3, [0], pool, spec, 4) == (([],), 0)
    a1 = _cached(pool, [H[0]], gid=1)[0]
    assert find(H[:6], 24, [0, 1], pool, spec, 4) == (([a], [a1]), 4)


def test_mamba_none_mode_holds_one_plus_speculative_blocks_and_recycles() -> None:
    """Mode ``none``: ``S`` extra blocks of tokens, the base rules otherwise
    (replayed on 0.33.0: 3 blocks, then slots 0 and 1 freed tail-first)."""
    m, pool = _mk(1, "none", caching=False)
    assert m.get_num_blocks_to_allocate("q", 5, [], 0, 5) == 3
    assert m.get_num_blocks_to_allocate("q", 5, [], 0) == 3
    assert _ids(m.allocate_new_blocks("q", 5, 5)) == [1, 2, 3]
    m.remove_skipped_blocks("q", 9)
    assert _ids(m.get_blocks("q")) == [0, 0, 3] and pool.free_block_ids()[:5] == [2, 1, 4, 5, 6]
    assert m.last_state_block_idx == {} and m._num_retired_blocks == {}
    m.req_to_blocks["q"][0] = first = pool.get_new_blocks(1)[0]
    m._remove_blocks_in_range("q", 0, 3)  # base rule: stops at the null slot 1
    assert m.get_blocks("q") == [first, pool.null_block, pool.null_block]
    assert m._num_retired_blocks == {}


def test_mamba_align_remove_skips_interior_nulls_and_resumes_after_retired() -> None:
    """Align ``_remove_blocks_in_range``: null gaps are stepped over (not a stop), the scan
    starts at the retired mark, and the mark advances to ``last``."""
    m, pool = _mk(0)
    b1, b2, b3, b4 = pool.get_new_blocks(4)
    null = pool.null_block
    m.req_to_blocks["r"] = [b1, b4, null, b2, b3]
    m._remove_blocks_in_range("r", 0, 4)
    assert m.req_to_blocks["r"] == [null, null, null, null, b3] and m._num_retired_blocks == {"r": 4}
    assert pool.free_block_ids()[:3] == [2, 4, 1]
    b1 = pool.get_new_blocks(1)[0]
    m.req_to_blocks["r"] = [b1, null, null, b3]
    m._num_retired_blocks["r"] = 2
    m._remove_blocks_in_range("r", 0, 4)  # starts at the mark 2: slot 0 stays
    assert m.req_to_blocks["r"] == [b1, null, null, null] and m._num_retired_blocks == {"r": 4}
    m._remove_blocks_in_range("r", 0, 9)  # nothing past the table
    assert m._num_retired_blocks == {"r": 4}
    m._remove_blocks_in_range("nobody", 0, 2)
    assert "nobody" not in m._num_retired_blocks


def test_mamba_fresh_request_and_main_model_tokens_in_allocation() -> None:
    """``allocate_new_blocks`` without an earlier adoption creates the table; align mode
    sizes it by ``num_tokens_main_model`` (``R = cdiv(4, 4) + 1 = 2``), or by
    ``num_tokens`` when no main-model count is given."""
    m, pool = _mk(1)
    assert _ids(m.allocate_new_blocks("r", 20, 4)) == [1, 2] and _ids(m.get_blocks("r")) == [1, 2]
    assert _ids(m.allocate_new_blocks("s", 8)) == [3, 4] and _ids(m.get_blocks("s")) == [0, 3, 4]


def test_mamba_hit_covering_the_request_marks_it_allocated() -> None:
    """A new request whose hit already covers ``R`` takes nothing but counts as allocated
    (later steps are capped at one block, not ``1 + S``); a hit of length ``k`` makes
    ``k - 1`` the last state block."""
    m, pool = _mk(1)
    h = _cached(pool, H[:3])
    m.add_local_computed_blocks("r", h, 12)  # skipped 11 tokens = 2 blocks
    assert m.get_blocks("r") == [pool.null_block, pool.null_block, h[2]] and h[2].ref_cnt == 1
    assert m.allocate_new_blocks("r", 8, 8) == [] and "r" in m._allocated_block_reqs
    assert m.get_num_blocks_to_allocate("r", 20, [], 12, 20) == 1
    m2, pool2 = _mk(0)
    h2 = _cached(pool2, H[:3])
    m2.add_local_computed_blocks("q", h2, 12)
    assert _ids(m2.allocate_new_blocks("q", 13, 13)) == [4] and m2.last_state_block_idx == {"q": 2}
    m2.add_local_computed_blocks("p", h2[:1], 4)
    assert m2.get_blocks("p") == [h2[0]]
    assert _ids(m2.allocate_new_blocks("p", 9, 9)) == [5] and m2.last_state_block_idx["p"] == 0
    assert _ids(m2.get_blocks("p")) == [1, 0, 5]


def test_mamba_lagging_remove_keeps_the_previous_state() -> None:
    """``remove_skipped_blocks`` frees the state of two steps ago only when it lies below
    ``cdiv(p, B) - 1``: a call lagging behind the allocation (``p = 10`` after the step to
    20 tokens: async scheduling's in-flight tokens) keeps the state block at index 2."""
    m, pool = _mk(1)
    m.add_local_computed_blocks("r", [], 0)
    m.allocate_new_blocks("r", 10, 10)
    m.remove_skipped_blocks("r", 10)
    m.allocate_new_blocks("r", 20, 20)
    assert m.last_state_block_idx == {"r": 2} and _ids(m.get_blocks("r")) == [0, 0, 1, 0, 2, 3]
    m.remove_skipped_blocks("r", 10)
    assert _ids(m.get_blocks("r")) == [0, 0, 1, 0, 2, 3] and pool.get_num_free_blocks() == 12


def test_mamba_none_mode_running_request_and_speculative_tokens() -> None:
    """Mode ``none`` goes through the base rules with ``S * B`` extra tokens: a running
    request pays ``max(R - held, 0)``; ``S = 2`` adds 8 tokens."""
    m, pool = _mk(1, "none", caching=False)
    m.add_local_computed_blocks("q", [], 0)
    m.allocate_new_blocks("q", 5, 5)
    assert m.get_num_blocks_to_allocate("q", 9, [], 5, 9) == 4 - 3
    m2, _ = _mk(2, "none", caching=False)
    assert m2.get_num_blocks_to_allocate("r", 5, [], 0, 5) == 4
    assert _ids(m2.allocate_new_blocks("r", 5, 5)) == [1, 2, 3, 4]
    m2.free("never-seen")
    m.free("q")
    assert m.get_blocks("q") == [] and pool.get_num_free_blocks() == 15


def test_mamba_hit_scan_stops_at_block_zero() -> None:
    """The scan covers blocks ``max_length // B - 1`` down to 0 only (a cached block past
    ``max_length`` is no hit)."""
    pool = BlockPool(16, True, 4)
    _cached(pool, [H[3]])
    assert MambaManager.find_longest_cache_hit(H[:4], 8, [0], pool, mamba(4, "align"), 4) == (([],), 0)


def test_mamba_hit_from_this_step_checked_on_the_last_hit_block() -> None:
    """Only the last hit block decides (upstream ``new_computed_blocks[-1]``)."""
    m, pool = _mk(0)
    old = _cached(pool, H[:2])
    m.req_to_blocks["w"] = pool.get_new_blocks(1)
    m.num_cached_block["w"] = 0
    m.cache_blocks(_req("w", [H[5]]), 4)
    new = m.get_blocks("w")[0]
    assert m.get_num_blocks_to_allocate("r", 16, [old[0], old[1], new], 0, 16) == 16 + 1
    assert m.get_num_blocks_to_allocate("r", 16, [new, old[0], old[1]], 0, 16) == 4 - 3 + 2
