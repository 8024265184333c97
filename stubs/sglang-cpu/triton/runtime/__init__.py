"""``triton.runtime`` stand-in: ``driver.active`` raises, so SGLang falls back to CPU."""

from __future__ import annotations

from typing import Any

from . import driver, jit  # noqa: F401
from .jit import JITFunction, KernelInterface  # noqa: F401


class Autotuner:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class Heuristics:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class OutOfResources(Exception):
    pass
