"""Element dtypes a KV cache can hold, by name, with their sizes in bytes."""

from __future__ import annotations

from kvverify.errors import ConfigError

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "fp32": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int8": 1, "uint8": 1,
}


def get_dtype_size(dtype: str, field: str = "dtype") -> int:
    """Bytes per element of ``dtype`` (upstream: ``get_dtype_size``)."""
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise ConfigError(field, dtype, f"unknown dtype; allowed: {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[dtype]
