"""``triton.runtime.driver`` stand-in: there is no active GPU driver."""

from __future__ import annotations

from typing import Any


class _NoDriver:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("triton stub: no GPU driver on a CPU-only install")


class _Holder:
    @property
    def active(self) -> Any:
        raise RuntimeError("triton stub: no active GPU driver (CPU-only install)")


driver = _Holder()
active = property(lambda self: _NoDriver())


def __getattr__(name: str) -> Any:
    if name == "active":
        raise RuntimeError("triton stub: no active GPU driver (CPU-only install)")
    raise AttributeError(name)
