"""Lazy, optional torch: the core suite never imports it."""

from __future__ import annotations

from typing import Any

from kvverify.errors import ConfigError, KVVerifyError

INSTALL_HINT = "install it with `pip install -e '.[torch]'` (pins torch==2.13.0, a CPU build)"


class TorchUnavailableError(KVVerifyError, ImportError):
    """The harness needs torch, which is an optional extra of kvverify."""


class HarnessError(KVVerifyError):
    """The harness cannot run as asked (device missing, plan too large for the device...)."""


DEVICES = ("cpu", "meta", "cuda")


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def require_torch() -> Any:
    """``import torch`` or raise :class:`TorchUnavailableError` with the install hint."""
    try:
        import torch
    except ImportError as e:
        raise TorchUnavailableError(f"the allocation harness needs torch: {INSTALL_HINT}") from e
    return torch


def torch_dtype(name: str) -> Any:
    """The torch dtype of a kvverify dtype name (``kvverify.reference.dtypes``)."""
    torch = require_torch()
    table = {
        "float32": torch.float32, "fp32": torch.float32,
        "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
        "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
        "fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn,
        "float8_e4m3fn": torch.float8_e4m3fn,
        "fp8_e5m2": torch.float8_e5m2, "float8_e5m2": torch.float8_e5m2,
        "int8": torch.int8, "uint8": torch.uint8,
    }
    if name not in table:
        raise ConfigError("dtype", name, f"no torch dtype for it; allowed: {', '.join(sorted(table))}")
    return table[name]


def resolve_device(device: str) -> Any:
    """``cpu``, ``meta`` or ``cuda[:i]`` as a torch.device; a clear error if CUDA is absent."""
    torch = require_torch()
    if not isinstance(device, str) or device.split(":")[0] not in DEVICES:
        raise ConfigError("device", device, f"must be one of {', '.join(DEVICES)} (cuda may be cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise HarnessError(f"device {device!r} asked for, but torch {torch.__version__} sees no CUDA GPU")
    return torch.device(device)
