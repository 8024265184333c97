"""``triton.language`` stand-in: every name is an inert placeholder (kernels never run on CPU)."""

from __future__ import annotations

from typing import Any


class constexpr:  # noqa: N801 - upstream's name
    def __init__(self, value: Any = None) -> None:
        self.value = value


class dtype:  # noqa: N801 - upstream's name
    def __init__(self, name: str = "") -> None:
        self.name = name


class tensor:  # noqa: N801 - upstream's name
    pass


for _n in ("int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float8e4nv", "float8e5", "float8e4b15", "float16", "bfloat16", "float32", "float64"):
    globals()[_n] = dtype(_n)


#: submodules of ``triton.language`` that code reaches by attribute (``tl.core.view``,
#: ``tl.extra``); the stub's finder (``triton/__init__``) makes them placeholder modules
_SUBMODULES = frozenset({"core", "extra", "math", "standard", "semantic", "libdevice", "random"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    if name.startswith("__"):
        raise AttributeError(name)
    if name[:1].isupper():
        cls = type(name, (), {"__init__": lambda self, *a, **k: None})
        globals()[name] = cls
        return cls

    def _inert(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"triton stub: triton.language.{name} called on a CPU-only install")
    _inert.__name__ = name
    return _inert
