"""Placeholders for the torchvision stub: classes for CamelCase names (attribute access on
them, e.g. ``InterpolationMode.BICUBIC``, gives an inert member), functions that raise."""

from __future__ import annotations

from typing import Any


class _Meta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return f"{cls.__name__}.{name}"


def placeholder(module: str, name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    if name[:1].isupper():
        return _Meta(name, (), {"__module__": module})

    def _unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"torchvision stub: {module}.{name} is not available on a CPU-only SGLang install")
    _unavailable.__name__ = name
    return _unavailable
