"""Every bug-zoo flaw's regression case: a minimal boundary input, fixed, and its check.

One function per flaw, named by :attr:`kvverify.flaws.Flaw.regression`. Each builds a
minimal case at the boundary the catching property shrinks to (``kvverify zoo``), worked
by hand in its comment, and runs the check that property runs, on the reference: no
violation on the faithful reference, at least one with the flaw on
(``tests/test_zoo_regressions.py`` runs each both ways, so every deterministic gate replays
them whatever random search reaches).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvverify.errors import ConfigError
from kvverify.invariants.admission import check_admitted_on_empty_pool, check_workload_completes
from kvverify.invariants.base import Violation
from kvverify.invariants.block_sizes import check_block_sizes
from kvverify.invariants.startup import check_auto_fit, check_startup_vs_runtime
from kvverify.props.runtime import allocation_violations
from kvverify.props.validation import _pipeline
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec
from kvverify.reference.grouping import KVCacheGroupSpec
from kvverify.reference.planner import KVCacheConfig
from kvverify.reference.connector import ConnectorScript, RequestScript
from kvverify.reference.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from kvverify.strategies import StartupCase
from kvverify.targets import get_target
from kvverify.targets.base import Target


def _reference() -> Target:
    return get_target("reference")


def full(b: int = 16) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=b, num_kv_heads=1, head_size=8, dtype="float16")


def swa(w: int, b: int = 16) -> SlidingWindowSpec:
    return SlidingWindowSpec(block_size=b, num_kv_heads=1, head_size=8, dtype="float16", sliding_window=w)


def _startup(config: VllmConfig, specs: dict[str, KVCacheSpec]) -> list[Violation]:
    """``test_startup_check_passes_implies_servable``'s check: passes => a full-length request completes."""
    t = _reference()
    return check_startup_vs_runtime(t, t.plan(config, [specs]), 1, check_strictness=False)


def _auto_fit(config: VllmConfig, specs: dict[str, KVCacheSpec]) -> list[Violation]:
    """``test_auto_fit_is_servable_and_maximal``'s check."""
    t = _reference()
    return check_auto_fit(t, t.plan(config, [specs]), [specs])


def _allocations(config: VllmConfig, specs: dict[str, KVCacheSpec],
                 workload: Sequence[WorkloadSpec]) -> list[Violation]:
    """``test_predictor_equals_allocator``'s check: predictor == allocator, no admitted step raises."""
    t = _reference()
    return allocation_violations(t, t.plan(config, [specs]), workload)


def override_ignored_in_check() -> list[Violation]:
    # a 1-block override (0 usable) beside ample raw memory: the flawed check sizes the pool
    # from the memory, passes, and the 2-token request never gets its block
    return _startup(VllmConfig(block_size=16, max_model_len=2, num_gpu_blocks_override=1,
                               kv_cache_memory_bytes=2**20), {"l0": full()})


def null_block_not_reserved() -> list[Violation]:
    # profiled memory for exactly 1 block (512 B pages, half of 1 KiB): 1 block needed, 0 usable
    return _startup(VllmConfig(block_size=16, max_model_len=2, gpu_memory_bytes=2 * 512,
                               gpu_memory_utilization=0.5), {"l0": full()})


def autofit_ignores_null_block() -> list[Violation]:
    # 64 KiB for two 512 B layers = 64 blocks, 63 usable: auto-fit must pick 63 * 16 = 1008
    return _auto_fit(VllmConfig(block_size=16, max_model_len=-1, max_position_embeddings=4096,
                                kv_cache_memory_bytes=64 * 1024), {f"layer.{i}": full() for i in range(2)})


def autofit_first_group_only() -> list[Violation]:
    # full + SWA on a 3-block override (2 usable): auto-fit and the check both count the full
    # group alone (one helper upstream), agree on L = 32 (2 blocks), and the request holds 2 + 2
    return _auto_fit(VllmConfig(block_size=16, max_model_len=-1, max_position_embeddings=64,
                                num_gpu_blocks_override=3, kv_cache_memory_bytes=1),
                     {"l0": full(), "l1": swa(16)})


def swa_admission_uncapped() -> list[Violation]:
    # cap = cdiv(min(16 - 1 + 8, 96), 16) + 1 = 3 blocks; startup passes with 4 blocks;
    # uncapped, a 95-token prompt is charged cdiv(95, 16) = 6 > 3 free: refused forever.
    t = _reference()
    config = VllmConfig(block_size=16, max_model_len=96, max_num_batched_tokens=8, num_gpu_blocks_override=4)
    return check_admitted_on_empty_pool(t, t.plan(config, [{"l0": swa(16)}]), 95)


def swa_cap_on_allocation() -> list[Violation]:
    # window 1, B = 8, M = 8: the cap cdiv(min(0 + 8, 24), 8) + 1 = 2 clamps the third
    # prefill chunk's prediction to 0 while the allocator still pulls a block
    config = VllmConfig(block_size=8, max_model_len=24, max_num_batched_tokens=8, num_gpu_blocks_override=3,
                        enable_prefix_caching=False)
    return _allocations(config, {"l0": swa(1, 8)}, [WorkloadSpec("r0", tuple(range(17)), 1)])


def mamba_hash_fallback_by_block_size() -> list[Violation]:
    # attention B = 16 beside a Mamba group of 544 in align mode: the hash size must stay 16
    groups = (KVCacheGroupSpec(("attn",), full(16)),
              KVCacheGroupSpec(("mamba",), MambaSpec(block_size=544, shapes=((4, 4),), dtypes=("float32",),
                                                     mamba_cache_mode="align")))
    return check_block_sizes(KVCacheConfig(8, (), groups),
                             VllmConfig(block_size=16, max_model_len=4096, mamba_cache_mode="align"))


def mamba_align_zero_chunk() -> list[Violation]:
    # pure Mamba in align mode, block size 16 > budget 8: the aligned chunk must not round to 0
    spec = MambaSpec(block_size=16, shapes=((1, 4), (1,)), dtypes=("bfloat16", "float32"), mamba_cache_mode="align")
    config = VllmConfig(block_size=16, max_model_len=16, max_num_batched_tokens=8, num_gpu_blocks_override=3,
                        mamba_cache_mode="align")
    t = _reference()
    return check_workload_completes(t, t.plan(config, [{"m0": spec}]), [WorkloadSpec("r0", tuple(range(12)), 2)])


def no_positive_validation() -> list[Violation]:
    # block_size=0 through the validation property's pipeline: a ConfigError naming the field,
    # never a ZeroDivisionError
    case = StartupCase(VllmConfig(block_size=16, max_model_len=2, num_gpu_blocks_override=2), ({"l0": full()},),
                       "override")
    try:
        _pipeline(_reference(), case, "block_size", 0)
    except ConfigError as e:
        return [] if "block_size" in str(e) else [
            Violation("validation.unnamed_field", "the error does not name the bad field", {"message": str(e)})]
    except Exception as e:  # noqa: BLE001 - any other exception is the violation itself
        return [Violation("validation.crash", f"{type(e).__name__} instead of a clear ValueError",
                          {"error": str(e)[:200]})]
    return [Violation("validation.accepted", "block_size=0 was silently accepted", {})]


def evictable_hits_not_counted() -> list[Violation]:
    # two requests share a 4-token prefix; the first finishes, its cached block sits in the
    # free queue; admitting the second must count touching it (3 blocks, B = 4).
    workload = [WorkloadSpec("r0", (1, 2, 3, 4, 5), 1), WorkloadSpec("r1", (1, 2, 3, 4, 9, 9), 1, 3)]
    return _allocations(VllmConfig(block_size=4, max_model_len=8, num_gpu_blocks_override=3), {"l0": full(4)},
                        workload)


# ------------------------------------------------------------ the KV-transfer paths (issue 29)

def _connector(config: VllmConfig, specs: dict[str, KVCacheSpec], workload: Sequence[WorkloadSpec],
               script: ConnectorScript | None) -> list[Violation]:
    """``test_connector_workload_completes``'s check: the workload through the connector scheduler finishes."""
    from kvverify.props.connector import completion_violations

    t = _reference()
    return completion_violations(t, t.plan(config, [specs]), workload, script)


def _prompt(rid: str, start: int, n: int, max_tokens: int = 1, arrival_step: int = 0) -> WorkloadSpec:
    return WorkloadSpec(rid, tuple(range(start, start + n)), max_tokens, arrival_step)


def async_load_unreserved() -> list[Violation]:
    # 21 blocks of 16 (20 usable), two async loads of 128 tokens (8 blocks each) for prompts of
    # 239 and 159 tokens (15 + 10 blocks): unreserved, both loads are admitted (16 blocks), land,
    # and neither can then get the rest of its prefill (7 or 2 more, 4 free): no_progress
    config = VllmConfig(block_size=16, max_model_len=256, max_num_batched_tokens=2048, num_gpu_blocks_override=21,
                        kv_connector=True)
    script = ConnectorScript.of({"a": RequestScript(hit_tokens=128, load_steps=2),
                                 "b": RequestScript(hit_tokens=128, load_steps=2)})
    return _connector(config, {"l0": full()}, [_prompt("a", 0, 239), _prompt("b", 1000, 159)], script)


def skipped_queue_not_split_by_blocks() -> list[Violation]:
    # B = 16, 5 blocks (4 usable), L = 64. "big" (49 tokens, 4 blocks) is deferred once (None);
    # "load" (33 tokens, behind it) gets 32 tokens by an async load (2 blocks, parked). Split
    # queues: the landed load is promoted first (1 more block), finishes, and "big" fits. One
    # skipped queue drained first: "big" sits ahead of the block holder, cannot get 4 of the 2
    # free blocks, the scan stops there, the load is never promoted: no_progress
    config = VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=2048, num_gpu_blocks_override=5,
                        kv_connector=True, enable_prefix_caching=False)
    script = ConnectorScript.of({"load": RequestScript(hit_tokens=32, load_steps=1),
                                 "big": RequestScript(hit_tokens=0, deferrals=1)})
    return _connector(config, {"l0": full()}, [_prompt("big", 1000, 49), _prompt("load", 0, 33)], script)


def priority_strands_parked_loads() -> list[Violation]:
    # B = 16, 5 blocks (4 usable), L = 64, priority scheduling. "load" (33 tokens, priority 1) gets
    # 32 tokens by an async load (2 blocks, parked); "big" (49 tokens: 4 blocks, priority 0) arrives
    # a step later. Block holders first: the landed load is promoted (1 more block), finishes, and
    # "big" fits. Heads compared by priority (<= 0.29): "big" goes first every step, cannot get 4 of
    # the 2 free blocks, the scan stops there, the load is never promoted: no_progress
    config = VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=2048, num_gpu_blocks_override=5,
                        kv_connector=True, enable_prefix_caching=False, scheduling_policy="priority")
    script = ConnectorScript.of({"load": RequestScript(hit_tokens=32, load_steps=1)})
    workload = [WorkloadSpec("load", tuple(range(33)), 1, 0, priority=1),
                WorkloadSpec("big", tuple(range(1000, 1049)), 1, 1, priority=0)]
    return _connector(config, {"l0": full()}, workload, script)


def spec_blocks_unreserved_after_load() -> list[Violation]:
    # B = 16, 5 blocks (4 usable), L = 48, one speculative token with its own KV (lookahead 1):
    # two 32-token prompts, each loaded asynchronously (31 tokens, 2 blocks). Promoted, a load
    # needs 31 + 1 + 1 + 1 = 34 slots (3 blocks). The gate reserves the parked load's speculative
    # block and the new load's own, so the second waits; without them both are admitted (4
    # blocks), land, and neither can get its third block: no_progress
    config = VllmConfig(block_size=16, max_model_len=48, max_num_batched_tokens=2048, num_gpu_blocks_override=5,
                        kv_connector=True, enable_prefix_caching=False, num_lookahead_tokens=1,
                        num_speculative_tokens=1)
    script = ConnectorScript.of({"a": RequestScript(hit_tokens=32, load_steps=1),
                                 "b": RequestScript(hit_tokens=32, load_steps=1)})
    return _connector(config, {"l0": full()}, [_prompt("a", 0, 32), _prompt("b", 1000, 32)], script)


def spec_step_blocks_not_per_group() -> list[Violation]:
    # one Mamba layer (mode none: B = L = 3), 2 blocks (1 usable), one speculative token with
    # lookahead 1: a 2-token prompt whose first token loads asynchronously needs the one state
    # block and nothing for its speculative slots (its manager allocates no speculative blocks).
    # 0.31.0's gate reserves cdiv(1 + 1 + 1, 3) = 1 block anyway: 1 needed > 1 free - 1 reserved,
    # on every step, with nothing running to free one: the load is never admitted (head_of_line)
    config = VllmConfig(block_size=3, max_model_len=3, max_num_batched_tokens=2048, num_gpu_blocks_override=2,
                        kv_connector=True, enable_prefix_caching=False, num_lookahead_tokens=1,
                        num_speculative_tokens=1)
    spec = MambaSpec(block_size=3, shapes=((1, 4), (1,)), dtypes=("bfloat16", "float32"))
    script = ConnectorScript.of({"r0": RequestScript(hit_tokens=1, load_steps=1)})
    return _connector(config, {"model.layers.0": spec}, [_prompt("r0", 20000, 2)], script)


def spec_pad_leaves_no_sampled_slot() -> list[Violation]:
    # B = L = 16, one speculative token: a 15-token prompt whose first 14 tokens the connector
    # loads synchronously is a new one-token decode (14 computed), padded to 1 + 1 placeholders.
    # The pin pads only with room for the sampled token (14 + 2 + 1 > 16: it schedules 1 token);
    # <= 0.28 padded whenever 14 + 2 <= 16, so the token sampled at position 17 > 16 crashes the
    # model runner ("Sampled token IDs exceed the max model length", #53812): worker_raised
    config = VllmConfig(block_size=16, max_model_len=16, max_num_batched_tokens=2048, num_gpu_blocks_override=4,
                        kv_connector=True, enable_prefix_caching=False, num_speculative_tokens=1)
    script = ConnectorScript.of({"r0": RequestScript(hit_tokens=14, load_steps=0)})
    return _connector(config, {"l0": full()}, [_prompt("r0", 10000, 15, max_tokens=1)], script)


def spec_pad_rescheduled_negative() -> list[Violation]:
    # B = 16, one speculative token, two batches in flight: a 15-token prompt whose first 14 tokens
    # the connector loads synchronously is a new one-token decode, padded to 1 + 1 placeholders
    # (16 computed of 15 tokens until the step's output returns). The next step, batch 1 still in
    # flight, its count is 15 - 16 = -1: the pin skips it; 0.25 - 0.27 skipped only 0 and sent -1 to
    # the model runner (np.repeat raises, update_from_output asserts): worker_raised
    config = VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=2048, num_gpu_blocks_override=6,
                        kv_connector=True, enable_prefix_caching=False, num_speculative_tokens=1,
                        max_concurrent_batches=2)
    script = ConnectorScript.of({"r0": RequestScript(hit_tokens=14, load_steps=0)})
    return _connector(config, {"l0": full()}, [_prompt("r0", 10000, 15, max_tokens=2)], script)


def delayed_free_idles_engine() -> list[Violation]:
    # two batches in flight, 2 blocks of 16 (1 usable): r0 and r1 (15 tokens each, 14 held by the
    # connector, loaded in one step) run one after the other; r1 finishes last and the connector
    # delays its free for two worker steps. Counted as work, the engine keeps stepping and the send
    # completes; not counted (<= 0.20.0), nothing steps again and the free stays pending:
    # pending_transfer (the shape vLLM 0.19.1's shrunk counterexample has)
    config = VllmConfig(block_size=16, max_model_len=16, max_num_batched_tokens=2048, max_concurrent_batches=2,
                        num_gpu_blocks_override=2, kv_connector=True, enable_prefix_caching=False)
    script = ConnectorScript.of({"r0": RequestScript(hit_tokens=14, load_steps=1),
                                 "r1": RequestScript(hit_tokens=14, load_steps=1, free_delay_steps=2)},
                                kv_role="kv_both")
    return _connector(config, {"l0": full()}, [_prompt("r0", 10000, 15), _prompt("r1", 20000, 15)], script)


def mamba_align_connector_asserts() -> list[Violation]:
    # full attention + Mamba in align mode (B = 16), one 15-token prompt the connector holds 14
    # tokens of (an async load): <= 0.22.0 clipped the load's chunk to Mamba blocks and asserted
    # there were no connector tokens
    config = VllmConfig(block_size=16, max_model_len=16, max_num_batched_tokens=2048, num_gpu_blocks_override=4,
                        kv_connector=True, enable_prefix_caching=True, mamba_cache_mode="align")
    specs = {"model.layers.0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, dtype="bfloat16"),
             "model.layers.1": MambaSpec(block_size=16, shapes=((1, 4), (1,)), dtypes=("bfloat16", "float32"),
                                         mamba_cache_mode="align", page_size_padded=512)}
    script = ConnectorScript.of({"r0": RequestScript(hit_tokens=14, load_steps=1)}, kv_role="kv_both")
    try:
        return _connector(config, specs, [_prompt("r0", 10000, 15)], script)
    except AssertionError as e:
        return [Violation("admission.raised", f"the scheduler raised: {e}", {"error": str(e)})]


def deferred_requests_hold_slots() -> list[Violation]:
    # max_num_seqs = 1, one request the connector defers once (get_num_new_matched_tokens -> None):
    # counted against max_num_seqs while it waits, the cap is full before it can be promoted
    config = VllmConfig(block_size=16, max_model_len=2, max_num_batched_tokens=2048, max_num_seqs=1,
                        num_gpu_blocks_override=2, kv_connector=True, enable_prefix_caching=False)
    script = ConnectorScript.of({"r0": RequestScript(hit_tokens=0, load_steps=1, deferrals=1)})
    return _connector(config, {"l0": full()}, [_prompt("r0", 10000, 1)], script)


def deferred_free_preemption_cascade() -> list[Violation]:
    # two batches in flight, 2048 B (B = 16: 4 blocks, 3 usable), budget 8, one speculative token:
    # r1 (16 tokens, 2 outputs) and r0 (16 tokens, a step later) fill the pool; the failed
    # allocation preempts a victim a batch in flight still holds (its free is fenced): zero progress
    from kvverify.props.connector import preemption_violations

    config = VllmConfig(block_size=16, max_model_len=33, max_num_batched_tokens=8, max_concurrent_batches=2,
                        kv_cache_memory_bytes=2048, kv_connector=True, num_lookahead_tokens=1,
                        num_speculative_tokens=1, enable_prefix_caching=False)
    t = _reference()
    plan = t.plan(config, [{"model.layers.0": full()}])
    return preemption_violations(t, plan, [_prompt("r0", 10000, 16, arrival_step=1), _prompt("r1", 20000, 16, 2)],
                                 ConnectorScript())
