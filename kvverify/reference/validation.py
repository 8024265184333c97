"""Field validation of the engine's objects, where upstream validates them.

Upstream checks its configuration values when the objects are built (``CacheConfig``,
``SchedulerConfig``, the KV cache specs, ``BlockPool``, ``Request``); the reference does the
same, every field through :func:`require_int`. Releases before #43496, #43521 and #43842 did
not check positivity (``block_size=0``, ``hash_block_size=0``, an override of 0 reached a
``ZeroDivisionError`` or an endless loop): that is bug-zoo flaw ``no_positive_validation``,
switched here, so with it on a non-negative lower bound goes unchecked. Types and upper
bounds are checked either way. kvverify's own inputs (model catalog files) validate through
:func:`kvverify.errors.require_int`, which knows nothing of the zoo.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, TypeVar

from kvverify import errors, flaws

T = TypeVar("T")
_UNCHECKED = "_kvverify_unchecked"


def require_int(field: str, value: object, *, minimum: int | None = None,
                maximum: int | None = None) -> int:
    """:func:`kvverify.errors.require_int` for an engine field (flaw ``no_positive_validation``:
    a range starting at 0 or above is not checked from below)."""
    try:
        return errors.require_int(field, value, minimum=minimum, maximum=maximum)
    except errors.ConfigError:
        if minimum is None or minimum < 0 or not flaws.is_on("no_positive_validation"):
            raise
        return errors.require_int(field, value, maximum=maximum)


def unchecked(obj: T, **changes: Any) -> T:
    """A copy of the frozen dataclass ``obj`` with ``changes`` set and **not** validated.

    What an engine receives when nothing in front of it checked the value: kvverify's own
    configuration objects refuse a bad field on construction (kvverify's front validation, for
    its users), so the bad-input property (:mod:`kvverify.props.validation`) hands a target the
    raw value this way, and the *engine's* validation decides: the reference's
    :func:`~kvverify.reference.engine_validation.validate_engine_config` at planning, a real release's own config objects. A copy
    stays unchecked through :func:`evolve`."""
    fields = getattr(obj, "__dataclass_fields__", {})
    for name in changes:
        if name not in fields:
            raise errors.ConfigError("field", name, f"is not a field of {type(obj).__name__}")
    new = copy.copy(obj)
    for name, value in changes.items():
        object.__setattr__(new, name, value)
    object.__setattr__(new, _UNCHECKED, True)
    return new


def evolve(obj: T, **changes: Any) -> T:
    """``dataclasses.replace``, except that an :func:`unchecked` copy stays unchecked (the
    planner's own copies must not re-run kvverify's front validation on a value the engine
    accepted: that would mask what the engine does with it)."""
    if getattr(obj, _UNCHECKED, False):
        return unchecked(obj, **changes)
    return replace(obj, **changes)  # type: ignore[type-var]
