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

from kvverify import errors, flaws


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
