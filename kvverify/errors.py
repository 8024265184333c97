"""Project exceptions.

Every bad input is reported as a :class:`KVVerifyError` (a ``ValueError``), naming the
field and the allowed range, never as a ``ZeroDivisionError``, an assertion or a hang.
"""

from __future__ import annotations


class KVVerifyError(ValueError):
    """Base class of every error kvverify raises on purpose."""


class ConfigError(KVVerifyError):
    """A configuration or spec field is out of range."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={value!r} is invalid: {allowed}")


class PoolExhaustedError(KVVerifyError):
    """``BlockPool.get_new_blocks`` was asked for more blocks than are free."""


class WorkerError(KVVerifyError):
    """The model runner refused a step the scheduler produced (upstream's worker assertion
    ``Sampled token IDs exceed the max model length``: the engine dies)."""


class StartupCheckError(KVVerifyError):
    """The startup check (``_check_enough_kv_cache_memory``) refused the config."""

    def __init__(self, message: str, *, max_model_len: int, needed_bytes: int,
                 available_bytes: int, estimated_max_model_len: int) -> None:
        self.max_model_len = max_model_len
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes
        self.estimated_max_model_len = estimated_max_model_len
        super().__init__(message)


def require_int(field: str, value: object, *, minimum: int | None = None,
                maximum: int | None = None) -> int:
    """Validate an integer field; raise :class:`ConfigError` naming it otherwise."""
    if type(value) is int and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
        return value  # fast path: valid
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, value, "must be an integer")
    if minimum is not None and value < minimum:
        rng = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ConfigError(field, value, f"must be {rng}")
    if maximum is not None and value > maximum:
        rng = f"<= {maximum}" if minimum is None else f"in [{minimum}, {maximum}]"
        raise ConfigError(field, value, f"must be {rng}")
    return value


# Upper bound for sizes: large enough for any real deployment (1 PiB of KV cache,
# 2**40 tokens), small enough that absurd values are refused instead of planned.
MAX_BYTES = 2**50
MAX_TOKENS = 2**40
MAX_BLOCKS = 2**40
