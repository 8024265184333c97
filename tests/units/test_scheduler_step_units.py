"""Exact examples of one scheduler step (``Scheduler.schedule``; docs/mutation.md).

Worked by hand from upstream 0.33.0's ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``:
the running pass, the waiting pass, ``_mamba_block_aligned_split``), where the properties
check only a consequence (the workload finishes) and a mutant of the step's bookkeeping
slips through: the token budget across several admissions, the full-sequence gate of a
waiting request, the budget a victim already scheduled this step gives back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runtime_helpers import full, kv_config, mamba  # noqa: E402

from kvverify.reference.config import VllmConfig  # noqa: E402
from kvverify.reference.request import Request, RequestStatus  # noqa: E402
from kvverify.reference.scheduler import Scheduler, scheduling_policy_override  # noqa: E402


def _sched(num_blocks: int, *, policy: str = "fcfs", full_sequence_must_fit: bool = True,
           **kw) -> Scheduler:
    base = dict(block_size=4, max_model_len=64, max_num_batched_tokens=64)
    base.update(kw)
    with scheduling_policy_override(policy):
        return Scheduler(VllmConfig(**base), kv_config(num_blocks, full(4)),
                         full_sequence_must_fit=full_sequence_must_fit)


def _add(sched: Scheduler, rid: str, prompt: int, priority: int = 0) -> Request:
    r = Request(rid, [1000 * (ord(rid[0]) - 96) + j for j in range(prompt)], 20, priority=priority)
    sched.add_request(r)
    return r


def test_waiting_requests_share_the_token_budget() -> None:
    """Waiting pass: ``num_new = min(num_tokens - computed, token_budget)`` (chunked prefill) and
    ``token_budget -= num_new`` after each admission: budget 10, prompts 6, 6, 6 -> a gets 6,
    b the 4 left (a chunk), c nothing (budget 0 ends the loop); c stays waiting."""
    sched = _sched(40, max_num_batched_tokens=10)
    for rid in "abc":
        _add(sched, rid, 6)
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"a": 6, "b": 4}
    assert out.scheduled_new_reqs == ["a", "b"] and out.total_num_scheduled_tokens == 10
    assert [r.request_id for r in sched.waiting] == ["c"]
    assert [r.num_computed_tokens for r in sched.running] == [6, 4]
    sched.update_from_output(out)
    # step 2: a decodes 1 (its sampled token), b finishes its prompt (2), c takes 6 of the 7 left
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"a": 1, "b": 2, "c": 6}
    assert out.scheduled_running_reqs == ["a", "b"] and out.scheduled_new_reqs == ["c"]


def test_running_requests_share_the_token_budget() -> None:
    """Running pass: ``token_budget -= num_new`` per scheduled request; budget 5, two running
    prefills of 4 left each -> 4 and 1; the loop stops at budget 0 (no waiting pass)."""
    sched = _sched(40, max_num_batched_tokens=5)
    a, b = _add(sched, "a", 9), _add(sched, "b", 9)
    assert sched.schedule().num_scheduled_tokens == {"a": 5}
    assert sched.schedule().num_scheduled_tokens == {"a": 4, "b": 1}
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"b": 5}  # a computed 9 of 9 but samples in update only
    assert (a.num_computed_tokens, b.num_computed_tokens) == (9, 6)


def test_max_num_seqs_caps_admissions() -> None:
    """``len(self.running) >= max_num_running_reqs`` ends the waiting pass."""
    sched = _sched(40, max_num_seqs=2)
    for rid in "abc":
        _add(sched, rid, 3)
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"a": 3, "b": 3}
    assert len(sched.running) == 2 and [r.request_id for r in sched.waiting] == ["c"]


def test_waiting_request_must_fit_its_whole_prompt() -> None:
    """``allocate_slots(..., full_sequence_must_fit=scheduler_reserve_full_isl)`` (default True) for
    waiting requests: 3 usable blocks of 4 tokens, a 16-token prompt needs 4 -> refused, even
    though its first chunk (budget 4: one block) would fit; with the gate off it is admitted."""
    gated = _sched(4, max_num_batched_tokens=4)
    _add(gated, "a", 16)
    out = gated.schedule()
    assert out.num_scheduled_tokens == {} and len(gated.waiting) == 1 and not gated.running
    assert gated.kv_cache_manager.get_num_free_blocks() == 3
    ungated = _sched(4, max_num_batched_tokens=4, full_sequence_must_fit=False)
    _add(ungated, "a", 16)
    assert ungated.schedule().num_scheduled_tokens == {"a": 4}
    # a 12-token prompt (3 blocks) passes the gate on the same pool
    fits = _sched(4, max_num_batched_tokens=4)
    _add(fits, "a", 12)
    assert fits.schedule().num_scheduled_tokens == {"a": 4}


def _decoding(sched: Scheduler, prompts: dict[str, int]) -> None:
    """Put the waiting requests into ``running`` as decodes: each prompt computed and one
    token sampled (the next step schedules one token each)."""
    for rid, _ in prompts.items():
        r = next(r for r in sched.waiting if r.request_id == rid)
        sched.waiting.remove(r)
        sched.running.append(r)
        r.status = RequestStatus.RUNNING
        assert sched.kv_cache_manager.allocate_slots(r, r.num_tokens) is not None
        r.num_computed_tokens = r.num_tokens
        r.append_output_token_ids(7)


@pytest.mark.parametrize("policy", ["priority", "fcfs"])
def test_victim_already_scheduled_gives_back_its_budget(policy: str) -> None:
    """Running ``[a (priority 1), b (0), c (0)]``, decoding, 3 usable blocks all held (a: 3
    prompt tokens + 1, b: 4 + 1 -> its 5th token needs a 2nd block, c: 3 + 1); budget 2.

    priority: a is scheduled (budget 1); b's allocation fails; the victim is the largest
    ``(priority, arrival)``: a, already scheduled: it leaves ``scheduled_running_reqs`` and its
    token returns to the budget (``token_budget += restored``), b takes a's block, c the
    restored token. fcfs: the victim is the last running request, c."""
    sched = _sched(4, policy=policy, max_num_batched_tokens=2)
    a, b, c = _add(sched, "a", 3, priority=1), _add(sched, "b", 4), _add(sched, "c", 3)
    _decoding(sched, {"a": 3, "b": 4, "c": 3})
    assert [r.request_id for r in sched.running] == ["a", "b", "c"]
    assert sched.kv_cache_manager.get_num_free_blocks() == 0
    out = sched.schedule()
    if policy == "priority":
        assert out.num_scheduled_tokens == {"b": 1, "c": 1}
        assert out.scheduled_running_reqs == ["b", "c"] and out.preempted_reqs == ["a"]
        assert a.status is RequestStatus.PREEMPTED and a.num_computed_tokens == 0
        assert [r.request_id for r in sched.running] == ["b", "c"]
    else:
        assert out.num_scheduled_tokens == {"a": 1, "b": 1}
        assert out.scheduled_running_reqs == ["a", "b"] and out.preempted_reqs == ["c"]
        assert c.status is RequestStatus.PREEMPTED
    assert out.scheduled_new_reqs == [] and out.scheduled_resumed_reqs == []  # no waiting pass
    assert b.num_computed_tokens == 5


def _mamba_sched(budget: int) -> Scheduler:
    config = VllmConfig(block_size=4, max_model_len=64, max_num_batched_tokens=budget,
                        mamba_cache_mode="align", enable_prefix_caching=True)
    sched = Scheduler(config, kv_config(40, mamba(4, "align")))
    assert sched.need_mamba_block_aligned_split and sched.mamba_block_size == 4
    return sched


#: (budget, computed, prompt, tokens, num_new, local hits, shared_prefix_boundary) -> chunk;
#: block size 4. The expected chunks were computed by upstream 0.33.0's own
#: ``Scheduler._mamba_block_aligned_split`` on its default path (no EAGLE block drop, no
#: prefill checkpoint blocks, hash size = block size, no long-prefill threshold) and agree
#: with the hand-worked reasons.
_SPLITS = [
    (64, 0, 10, 10, 10, 0, 0, 8),   # whole prompt: stop at the last checkpoint (9 // 4 * 4)
    (64, 8, 10, 10, 2, 0, 0, 2),    # the tail after the checkpoint
    (64, 0, 10, 10, 6, 0, 0, 4),    # a non-final chunk ends on a block boundary
    (3, 0, 10, 10, 3, 0, 0, 3),     # block 4 > budget 3: advance sub-block (#34445)
    (3, 3, 10, 10, 3, 0, 0, 1),     # ... then stop at the next block boundary
    (64, 0, 10, 10, 3, 0, 0, 0),    # block <= budget and no whole block: nothing (0)
    (64, 2, 30, 30, 20, 0, 0, 2),   # mid-block start: stop at the next boundary (4)
    (64, 0, 5, 11, 11, 0, 0, 8),    # resumed, replaying outputs: prefill ends at 10
    (64, 10, 10, 11, 1, 0, 0, 1),   # decode: start >= prefill end, unchanged
    (64, 0, 10, 10, 6, 4, 0, 4),    # 4 local hits: start 4, stop at 8
    (64, 0, 20, 20, 20, 0, 6, 4),   # junction 6, block-floored to 4
    (64, 0, 20, 20, 20, 0, 3, 16),  # junction 3 floors to 0: ignored
    (64, 8, 20, 20, 12, 0, 8, 8),   # junction at the start: ignored
    (64, 0, 4, 4, 4, 0, 0, 4),      # one block prompt: checkpoint 0
    (64, 0, 5, 5, 5, 0, 0, 4),
    (2, 0, 10, 10, 2, 0, 0, 2),
    (64, 0, 1, 1, 1, 0, 0, 1),
    (4, 0, 10, 10, 3, 0, 0, 0),     # block == max budget (3 left this step): nothing
    (5, 0, 10, 10, 3, 0, 0, 0),
    (64, 0, 9, 9, 1, 8, 0, 1),      # 8 local hits: the last prompt token, unclipped
    (64, 4, 20, 20, 16, 0, 10, 4),  # junction 10 from start 4: floored to 8
]


@pytest.mark.parametrize(("budget", "computed", "prompt", "tokens", "num_new", "local", "junction",
                          "expected"), _SPLITS)
def test_mamba_block_aligned_split_exact(budget: int, computed: int, prompt: int, tokens: int,
                                         num_new: int, local: int, junction: int,
                                         expected: int) -> None:
    """``_mamba_block_aligned_split``, default path, exactly as upstream 0.33.0."""
    sched = _mamba_sched(budget)
    r = Request("r", list(range(prompt)), 64)
    for i in range(tokens - prompt):
        r.append_output_token_ids(9000 + i)
    r.num_computed_tokens = computed
    r.shared_prefix_boundary = junction
    assert sched._mamba_block_aligned_split(r, num_new, local) == expected


def test_mamba_split_in_a_step() -> None:
    """The split inside ``schedule``: a 10-token prompt, budget 64 -> 8 (the checkpoint) then 2;
    budget 6 -> 4, 4, 2; a 3-token budget below the block -> 3, 1, 3, 1, 2."""
    for budget, chunks in ((64, [8, 2]), (6, [4, 4, 2]), (3, [3, 1, 3, 1, 2])):
        sched = _mamba_sched(budget)
        sched.add_request(Request("r", list(range(10)), 5))
        got = [sched.step()[0].num_scheduled_tokens["r"] for _ in chunks]
        assert got == chunks, budget


def test_scheduler_passes_its_config_to_the_kv_cache_manager() -> None:
    """``Scheduler.__init__`` builds ``KVCacheManager`` from the config: caching switch,
    watermark (``int(0.25 * 40)`` = 10 blocks), retention interval, and the in-flight tokens
    that size the SWA admission cap (window 8, F = budget 4, block 4, L = 64:
    ``cdiv(min(8 - 1 + 4, 64), 4) + 1`` = 4 blocks; with F = L it would be 17)."""
    from runtime_helpers import swa

    config = VllmConfig(block_size=4, max_model_len=64, max_num_batched_tokens=4, watermark=0.25,
                        enable_prefix_caching=False, prefix_cache_retention_interval=None)
    sched = Scheduler(config, kv_config(40, swa(8, 4)))
    kvm = sched.kv_cache_manager
    assert sched.vllm_config is config
    assert (sched.block_size, sched.hash_block_size) == (4, 4)
    assert kvm.enable_caching is False and kvm.coordinator.enable_caching is False
    assert kvm.watermark_blocks == 10
    assert kvm.coordinator.retention_interval is None
    assert kvm.coordinator.single_type_managers[0].max_admission_blocks_per_request == 4
    cached = Scheduler(VllmConfig(block_size=4, max_model_len=64, max_num_batched_tokens=4),
                       kv_config(40, swa(8, 4)))
    assert cached.kv_cache_manager.enable_caching is True
    assert cached.kv_cache_manager.coordinator.retention_interval == 0
    assert cached.kv_cache_manager.watermark_blocks == 0


def test_default_scheduler_gates_the_full_prompt() -> None:
    """``scheduler_reserve_full_isl`` defaults to True: a scheduler built without the argument
    refuses a 16-token prompt on 3 usable blocks of 4."""
    sched = Scheduler(VllmConfig(block_size=4, max_model_len=64, max_num_batched_tokens=4),
                      kv_config(4, full(4)))
    assert sched.full_sequence_must_fit is True
    _add(sched, "a", 16)
    assert sched.schedule().num_scheduled_tokens == {}


def test_align_mode_without_mamba_layers_does_not_split() -> None:
    """``need_mamba_block_aligned_split = has_mamba_layers and mamba_cache_mode == "align"``: an
    attention-only model with ``align`` (prefix caching on) schedules a 10-token prompt whole."""
    config = VllmConfig(block_size=4, max_model_len=64, mamba_cache_mode="align")
    sched = Scheduler(config, kv_config(40, full(4)))
    assert not sched.need_mamba_block_aligned_split
    _add(sched, "a", 10)
    assert sched.schedule().num_scheduled_tokens == {"a": 10}
    # Mamba layers outside align mode (prefix caching off): no split either
    none_mode = Scheduler(VllmConfig(block_size=4, max_model_len=64, enable_prefix_caching=False),
                          kv_config(40, full(4), mamba(4, "none")))
    assert not none_mode.need_mamba_block_aligned_split
    _add(none_mode, "a", 10)
    assert none_mode.schedule().num_scheduled_tokens == {"a": 10}


def test_encoder_decoder_admission_allocates_the_cross_attention_blocks() -> None:
    """``allocate_slots(num_encoder_tokens=...)`` for an encoder-decoder model (a
    ``CrossAttentionSpec`` group): 9 encoder tokens take ``cdiv(9, 4)`` = 3 cross-attention
    blocks at admission, next to the decoder prompt's 1 block; 9 usable blocks -> 5 left."""
    from runtime_helpers import cross

    sched = Scheduler(VllmConfig(block_size=4, max_model_len=64, max_num_encoder_input_tokens=16,
                                 enable_prefix_caching=False),
                      kv_config(10, full(4), cross(4)))
    assert sched.is_encoder_decoder is True
    sched.add_request(Request("a", [1, 2, 3], 5, num_encoder_tokens=9))
    assert sched.schedule().num_scheduled_tokens == {"a": 3}
    assert sched.kv_cache_manager.get_num_free_blocks() == 5
    assert _sched(4).is_encoder_decoder is False


def test_add_request_refusals() -> None:
    """``add_request``: a prompt must leave room for one output token (``< max_model_len``),
    and only a fresh WAITING request with nothing computed is queued."""
    from kvverify.errors import ConfigError

    sched = _sched(40, max_model_len=16)
    with pytest.raises(ConfigError, match="prompt_token_ids"):
        _add(sched, "a", 16)
    _add(sched, "b", 15)  # the longest prompt that fits
    running = Request("c", [1, 2], 5)
    running.status = RequestStatus.RUNNING
    with pytest.raises(ConfigError, match="request"):
        sched.add_request(running)
    computed = Request("d", [1, 2], 5)
    computed.num_computed_tokens = 1
    with pytest.raises(ConfigError, match="request"):
        sched.add_request(computed)
    assert [r.request_id for r in sched.waiting] == ["b"]


def test_steps_are_numbered_from_one() -> None:
    """``SchedulerOutput.step``: the first ``schedule()`` is step 1; ``finished`` lists the
    finished ids in order."""
    sched = _sched(40)
    sched.add_request(Request("a", [1, 2, 3], 1))
    out, finished = sched.step()
    assert (out.step, sched.current_step, finished, sched.finished) == (1, 1, ["a"], ["a"])
    assert sched.schedule().step == 2


def test_waiting_request_adopts_its_prefix_cache_hit() -> None:
    """Waiting pass with prefix caching: ``get_computed_blocks`` (at most ``num_tokens - 1``
    tokens, whole blocks) -> ``allocate_slots(num_new, num_new_computed_tokens=hit,
    new_computed_blocks=...)``. a (10 tokens) finishes and leaves 2 cached full blocks; b
    shares its first 8 tokens (11 in all): 8 hit, 3 scheduled, 2 blocks adopted + 1 new."""
    sched = _sched(20)
    sched.add_request(Request("a", list(range(10)), 1))
    manager = sched.kv_cache_manager.coordinator.single_type_managers[0]
    out = sched.schedule()
    a_blocks = [blk.block_id for blk in manager.req_to_blocks["a"]]
    sched.update_from_output(out)
    assert sched.finished == ["a"] and sched.kv_cache_manager.get_num_free_blocks() == 19
    b = Request("b", list(range(8)) + [50, 51, 52], 4)
    sched.add_request(b)
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"b": 3} and out.scheduled_new_reqs == ["b"]
    assert b.num_computed_tokens == 11
    assert sched.kv_cache_manager.get_num_free_blocks() == 16
    b_blocks = [blk.block_id for blk in manager.req_to_blocks["b"]]
    assert b_blocks[:2] == a_blocks[:2]  # the two hits, adopted (not fresh blocks)
    # caching off: no hit, the whole prompt is scheduled
    cold = _sched(20, enable_prefix_caching=False)
    cold.add_request(Request("a", list(range(10)), 1))
    cold.step()
    cold.add_request(Request("b", list(range(8)) + [50, 51, 52], 4))
    assert cold.schedule().num_scheduled_tokens == {"b": 11}


def test_lookahead_slots_are_allocated_in_both_passes() -> None:
    """``allocate_slots(num_lookahead_tokens=...)``: slots for ``min(computed + new + lookahead,
    L)`` tokens. Lookahead 2, block 4, a 4-token prompt: admission takes 2 blocks (6 slots);
    decodes at 5, 6, 7 computed tokens need 8, 9 -> the 3rd block at the 3rd decode."""
    sched = _sched(20, num_lookahead_tokens=2)
    sched.add_request(Request("a", [1, 2, 3, 4], 10))
    free = []
    for _ in range(4):
        sched.step()
        free.append(sched.kv_cache_manager.get_num_free_blocks())
    assert free == [17, 17, 17, 16]
    plain = _sched(20)
    plain.add_request(Request("a", [1, 2, 3, 4], 10))
    free = []
    for _ in range(4):
        plain.step()
        free.append(plain.kv_cache_manager.get_num_free_blocks())
    assert free == [18, 17, 17, 17]


def test_watermark_is_charged_only_next_to_running_requests() -> None:
    """``allocate_slots(has_scheduled_reqs=bool(self.running))``: watermark ``int(0.25 * 9)`` = 2
    blocks of 8 usable. a (28 tokens, 7 blocks) is admitted alone although 7 + 2 > 8; b
    (4 tokens, 1 block) then needs 1 + 2 > the 1 left, next to a: refused."""
    sched = _sched(9, watermark=0.25)
    _add(sched, "a", 28)
    _add(sched, "b", 4)
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"a": 28}
    assert [r.request_id for r in sched.waiting] == ["b"]
    assert sched.kv_cache_manager.get_num_free_blocks() == 1
    # without a watermark b fits the block left
    loose = _sched(9)
    _add(loose, "a", 28)
    _add(loose, "b", 4)
    assert loose.schedule().num_scheduled_tokens == {"a": 28, "b": 4}


def test_mamba_waiting_request_without_a_whole_block_waits() -> None:
    """Waiting pass, Mamba ``align``: a chunk the split rounds to 0 ends the pass (``break``).
    Budget 7, block 4: a (4 tokens) takes 4; b gets ``min(10, 3)`` = 3 -> 0 (block 4 <= 7)."""
    sched = _mamba_sched(7)
    sched.add_request(Request("a", [1, 2, 3, 4], 3))
    sched.add_request(Request("b", list(range(100, 110)), 3))
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"a": 4}
    assert [r.request_id for r in sched.waiting] == ["b"]
    assert sched.requests["a"].num_computed_tokens == 4


def test_fcfs_request_that_preempts_itself_ends_the_step() -> None:
    """FCFS: the only running request cannot grow (2 usable blocks, it holds both and its 9th
    token needs a 3rd): it is its own victim, the running pass breaks, and no waiting request
    is tried in a step with a preemption."""
    sched = _sched(3)
    x = _add(sched, "x", 8)
    _decoding(sched, {"x": 8})
    _add(sched, "w", 2)
    out = sched.schedule()
    assert out.num_scheduled_tokens == {} and out.preempted_reqs == ["x"]
    assert [r.request_id for r in sched.waiting] == ["x", "w"] and not sched.running
    assert x.num_computed_tokens == 0 and sched.kv_cache_manager.get_num_free_blocks() == 2
    out = sched.schedule()  # x resumes: its 9 tokens (3 blocks) no longer fit 2: head-of-line
    assert out.num_scheduled_tokens == {}


def test_priority_request_that_preempts_itself_is_not_rescheduled() -> None:
    """Priority: running ``[x (priority 2), y (0)]``, x cannot grow and is its own victim; the
    pass goes on with y, scheduled once (``victim_index < req_index`` only moves the index for
    earlier victims)."""
    sched = _sched(4, policy="priority", max_model_len=32)
    _add(sched, "x", 4, priority=2)
    _add(sched, "y", 7)
    sched.waiting = type(sched.waiting)(sorted(sched.waiting, key=lambda r: -r.priority))
    _decoding(sched, {"x": 4, "y": 7})
    assert [r.request_id for r in sched.running] == ["x", "y"]
    out = sched.schedule()
    assert out.scheduled_running_reqs == ["y"] and out.num_scheduled_tokens == {"y": 1}
    assert out.preempted_reqs == ["x"]


def test_resumed_request_is_reported_as_resumed() -> None:
    """A preempted request admitted again is in ``scheduled_resumed_reqs``, a fresh one in
    ``scheduled_new_reqs``. r (5 prompt tokens + 1 output) left its full first block cached
    when preempted: 4 tokens hit, 2 scheduled."""
    sched = _sched(20)
    r = _add(sched, "r", 5)
    _decoding(sched, {"r": 5})
    sched._preempt_request(sched.running.pop())
    _add(sched, "n", 3)
    out = sched.schedule()
    assert out.scheduled_resumed_reqs == ["r"] and out.scheduled_new_reqs == ["n"]
    assert out.num_scheduled_tokens == {"r": 2, "n": 3} and r.status is RequestStatus.RUNNING


def test_request_finishes_at_max_model_len() -> None:
    """``update_from_output``: a request finishes when ``num_tokens >= max_model_len`` even with
    ``max_tokens`` left (status ``FINISHED_LENGTH_CAPPED``), and leaves ``running``; each
    step samples exactly the requests that computed all their tokens. L = 16, prompt 10,
    max_tokens 20: prefill (step 1) then 5 decodes -> finished at step 6 with 16 tokens."""
    sched = _sched(20, max_model_len=16)
    r = Request("a", list(range(10)), 20)
    sched.add_request(r)
    _add(sched, "z", 3)
    sampled, done_at = [], None
    for step in range(1, 9):
        out, finished = sched.step()
        sampled.append(sorted(out.sampled_reqs))
        if "a" in finished:
            done_at = step
            break
    assert done_at == 6 and r.num_tokens == 16 and r.status is RequestStatus.FINISHED_LENGTH_CAPPED
    assert sampled == [["a", "z"]] * 6
    assert [q.request_id for q in sched.running] == ["z"] and "a" in sched.finished


def test_mamba_split_counts_the_prefix_cache_hit() -> None:
    """Waiting pass, Mamba ``align`` with a hit: the split starts after the local hit
    (``_mamba_block_aligned_split(request, num_new, num_new_local_computed_tokens)``). a's
    10 tokens run as 8 (the checkpoint) + 2; b shares 8 tokens (11 in all): 8 hit, start 8,
    end 11 = the prefill end, checkpoint 8 not inside -> 3 tokens (from 0 it would be a
    3-token chunk below a block: 0, nothing scheduled)."""
    config = VllmConfig(block_size=4, max_model_len=64, mamba_cache_mode="align")
    sched = Scheduler(config, kv_config(40, full(4), mamba(4, "align")))
    sched.add_request(Request("a", list(range(10)), 1))
    assert [sched.step()[0].num_scheduled_tokens for _ in range(2)] == [{"a": 8}, {"a": 2}]
    b = Request("b", list(range(8)) + [50, 51, 52], 3)
    sched.add_request(b)
    assert sched.schedule().num_scheduled_tokens == {"b": 3} and b.num_computed_tokens == 11


def test_mamba_running_request_without_a_whole_block_is_skipped() -> None:
    """Running pass, Mamba ``align``, block 2, budget 5: x (12-token prompt, 2 computed) gets
    ``min(10, 5)`` = 5 -> clipped to the boundary 6: 4 tokens; y (6-token prompt, 2 computed)
    at index 1 gets the 1 token left -> 0 (block 2 <= 5): skipped (``req_index += 1``,
    upstream's ``continue``), and the pass ends there."""
    config = VllmConfig(block_size=2, max_model_len=32, max_num_batched_tokens=5,
                        mamba_cache_mode="align")
    sched = Scheduler(config, kv_config(40, full(2), mamba(2, "align")))
    x = Request("x", list(range(12)), 4)
    y = Request("y", list(range(100, 106)), 4)
    for r in (x, y):
        sched.add_request(r)
        sched.waiting.remove(r)
        sched.running.append(r)
        r.status = RequestStatus.RUNNING
        assert sched.kv_cache_manager.allocate_slots(r, 2) is not None
        r.num_computed_tokens = 2
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"x": 4} and out.scheduled_running_reqs == ["x"]
    assert (x.num_computed_tokens, y.num_computed_tokens) == (6, 2)
