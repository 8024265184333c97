"""The lemmas' step models are the reference managers' behaviour.

``swa_held_within_cap``, ``chunked_local_held_within_cap`` and
``mamba_held_within_startup_bound`` reason about ``arith.blocks_held_after_step`` /
``arith.mamba_blocks_held``. Those are only worth proving if they are what the real
managers do: drive one request through a random chunked-prefill / decode schedule on
the reference managers and compare, step by step, the real blocks held with the model.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st

from kvverify.hypothesis_hooks import given
from kvverify.reference import arith, kinds
from kvverify.reference.managers.registry import get_manager_for_kv_cache_spec
from kvverify.reference.ops import cdiv
from kvverify.reference.pool import BlockPool
from kvverify.reference.specs import ChunkedLocalAttentionSpec, MambaSpec, SlidingWindowSpec

KINDS = ("swa", "chunked", "mamba_none", "mamba_align")


@st.composite
def runs(draw):
    kind = draw(st.sampled_from(KINDS))
    length = draw(st.integers(1, 160))
    block = length if kind == "mamba_none" else draw(st.sampled_from([1, 2, 3, 4, 16]))
    in_flight = draw(st.integers(1, 48))
    spec_blocks = draw(st.integers(0, 3))
    if kind == "swa":
        spec = SlidingWindowSpec(block_size=block, num_kv_heads=1, head_size=1, dtype="int8",
                                 sliding_window=draw(st.integers(1, 64)),
                                 extra_retained_tokens=draw(st.integers(0, 4)))
    elif kind == "chunked":
        spec = ChunkedLocalAttentionSpec(block_size=block, num_kv_heads=1, head_size=1, dtype="int8",
                                         attention_chunk_size=draw(st.integers(1, 64)))
    else:
        spec = MambaSpec(block_size=block, shapes=((1,),), dtypes=("float32",),
                         mamba_cache_mode=kind.removeprefix("mamba_"), num_speculative_blocks=spec_blocks)
    steps, done = [], 0
    while done < length:
        k = draw(st.integers(1, min(in_flight, length - done)))
        steps.append(k)
        done += k
    return kind, spec, length, in_flight, steps


def model(kind: str, spec, num_computed: int, new: int) -> int:
    """The lemmas' model: a recycling kind's registered held-block model, or Mamba's."""
    b = spec.block_size
    registered = kinds.kind_of(spec)
    if registered is not None and registered.held is not None:
        held = registered.held
        skipped = held.skipped_tokens(num_computed, held.values(spec))
        return arith.blocks_held_after_step(num_computed + new, skipped, b)
    return arith.mamba_blocks_held(kind == "mamba_align", num_computed + new, num_computed, b,
                                   spec.num_speculative_blocks)


@settings(deadline=None)
@given(run=runs())
def test_step_models_match_the_managers(run):
    kind, spec, length, in_flight, steps = run
    b = spec.block_size
    pool = BlockPool(cdiv(length, b) + 8, enable_caching=False, hash_block_size=b)
    manager = get_manager_for_kv_cache_spec(spec, pool, max_in_flight_tokens=in_flight,
                                            max_model_len=length, enable_caching=False,
                                            kv_cache_group_id=0, scheduler_block_size=b)
    manager.add_local_computed_blocks("r", [], 0)
    computed = 0
    for k in steps:
        manager.remove_skipped_blocks("r", computed)
        manager.allocate_new_blocks("r", computed + k)
        held = manager.num_held_blocks("r")
        assert held == model(kind, spec, computed, k), (kind, computed, k, held)
        computed += k
