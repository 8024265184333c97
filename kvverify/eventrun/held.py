"""Blocks one request holds per KV cache group, as a function of its progress.

The managers' own held-block arithmetic (:func:`kvverify.reference.arith.blocks_held_after_step`
with each recycling kind's registered ``skipped_tokens``, :func:`~kvverify.reference.arith.mamba_blocks_held`,
:func:`~kvverify.reference.arith.full_attention_blocks`): during a step that starts with ``c``
computed tokens and schedules ``k``, a group holds ``held(c, k)`` real blocks (the table grown to
``min(c + k + lookahead, L)`` slots, the blocks behind the window nulled by ``remove_skipped_blocks(c)``).
``properties/test_lemma_models.py`` checks those formulas against the managers step by step;
``properties/test_eventrun.py`` checks the whole event-based run against the step-by-step driver.

Each group also states the *shape* of ``held`` along a run, which is what lets a run of
millions of steps be judged by looking at a few of them (:mod:`kvverify.eventrun.search`):

* ``full_attention`` / ``mla``: non-decreasing in ``c``;
* ``sliding_window``: non-decreasing while ``c < W - 1 + E`` (nothing skipped yet), then
  periodic in ``c`` with period ``B`` (one block in, one block out);
* ``chunked_local``: periodic in ``c`` with period ``lcm(B, C)``;
* ``mamba``: periodic in ``c`` with period ``B`` from ``c = 1`` on.

"Periodic" holds while the slots are not clamped at ``max_model_len``; the run's last steps
(where they are) are evaluated one by one. A kind with no entry here (a toy kind, cross
attention) makes the event-based run decline, and the check runs step by step instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from kvverify.errors import KVVerifyError
from kvverify.reference import arith, kinds
from kvverify.reference.managers.base import behaviour_spec
from kvverify.reference.managers.full_attention import FullAttentionManager
from kvverify.reference.managers.mamba import MambaManager
from kvverify.reference.managers.registry import get_manager_class
from kvverify.reference.specs import KVCacheSpec, MambaSpec


class Unsupported(Exception):
    """The event-based run cannot model this case exactly; run it step by step instead."""


@dataclass(frozen=True)
class GroupModel:
    """One KV cache group: its label, its held-block function and its shape along a run.

    ``held(c, k)``: real blocks held during a step from ``c`` computed tokens scheduling ``k``.
    ``steady_from``: from this ``c`` on, ``held`` is periodic in ``c`` with ``period`` (0: never
    periodic, non-decreasing everywhere); before it, non-decreasing. ``uses_slots``: the group
    counts the lookahead slots (clamped at ``max_model_len``), not only computed tokens.
    """

    kind: str
    block_size: int
    held: Callable[[int, int], int]
    steady_from: int
    period: int
    uses_slots: bool = True


def group_model(group_spec: KVCacheSpec, *, lookahead: int, max_model_len: int) -> GroupModel:
    """The :class:`GroupModel` of one KV cache group's spec (the manager's ``kv_cache_spec``),
    by the manager class the registry gives it (:func:`get_manager_class`)."""
    b = group_spec.block_size
    inner = behaviour_spec(group_spec)
    la, length = lookahead, max_model_len
    try:
        manager_cls = get_manager_class(group_spec)
    except KVVerifyError as e:
        raise Unsupported(str(e)) from None

    def slots(c: int, k: int) -> int:
        return min(c + k + la, length)

    if manager_cls is MambaManager and isinstance(inner, MambaSpec):
        s = inner.num_speculative_blocks
        if inner.mamba_cache_mode == "align":
            return GroupModel("mamba", b, lambda c, k: int(arith.mamba_blocks_held(True, c + k, c, b, s)),
                              steady_from=1, period=b, uses_slots=False)
        return GroupModel("mamba", b, lambda c, k: int(arith.mamba_blocks_held(False, slots(c, k), c, b, s)),
                          steady_from=1, period=b)
    if manager_cls is FullAttentionManager:  # full attention and MLA
        return GroupModel(getattr(inner, "kind", "full_attention"), b,
                          lambda c, k: int(arith.full_attention_blocks(slots(c, k), b)), steady_from=0, period=0)
    registered = kinds.kind_of(inner)
    shape = _RECYCLING_SHAPES.get(registered.name) if registered is not None else None
    if registered is None or registered.held is None or shape is None or \
            manager_cls is not registered.manager_cls:
        raise Unsupported(f"the event-based run does not model {manager_cls.__name__} groups")
    model = registered.held
    values = model.values(inner)
    skipped = model.skipped_tokens

    def held(c: int, k: int) -> int:
        return int(arith.blocks_held_after_step(slots(c, k), skipped(c, values), b))

    steady, period = shape(values, b)
    return GroupModel(registered.name, b, held, steady_from=steady, period=period)


def _swa_shape(values: dict, b: int) -> tuple[int, int]:
    return int(values["sliding_window"]) - 1 + int(values["extra_retained_tokens"]), b


def _chunked_shape(values: dict, b: int) -> tuple[int, int]:
    c = int(values["attention_chunk_size"])
    return 0, b * c // math.gcd(b, c)


#: recycling kind -> (steady_from, period) from its window params and block size
_RECYCLING_SHAPES: dict[str, Callable[[dict, int], tuple[int, int]]] = {
    "sliding_window": _swa_shape,
    "chunked_local": _chunked_shape,
}


def modelled_recycling_kinds() -> frozenset[str]:
    """The recycling kinds the event-based run has a shape for (a conformance test reads it)."""
    return frozenset(_RECYCLING_SHAPES)
