"""A CPU-only stand-in for ``triton``, for importing SGLang's KV/admission modules.

SGLang imports triton unconditionally (``sglang/__init__`` -> ``srt/utils/common.py``) but on
a CPU the allocators take their plain-torch paths and no kernel is launched. This stub
offers what those imports touch: pass-through ``jit``/``autotune``/``heuristics``
decorators, real ``cdiv``/``next_power_of_2``, real classes for CamelCase names (torch's
flop counter calls ``isinstance(x, triton.runtime.jit.JITFunction)``), and
``triton.runtime.driver.active`` raising, so SGLang falls back to CPU. Calling a "kernel"
raises: a CPU path that launched one would be a bug in the target, not a silent no-op.
"""

from __future__ import annotations

from typing import Any

import importlib.abc
import importlib.machinery
import sys
import types

from . import backends, language, runtime  # noqa: F401
from .runtime.jit import JITFunction, KernelInterface  # noqa: F401

__version__ = "0.0.0+kvverify.stub"


class _Kernel(JITFunction):
    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"triton stub: kernel {self.__name__} launched on a CPU-only install")
        return launch

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self[None](*args, **kwargs)


def _decorator(*dargs: Any, **dkwargs: Any) -> Any:
    if len(dargs) == 1 and callable(dargs[0]) and not dkwargs:
        return _Kernel(dargs[0])
    return lambda fn: _Kernel(fn) if not isinstance(fn, _Kernel) else fn


jit = _decorator
autotune = _decorator
heuristics = _decorator


def cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class Config:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class OutOfResources(Exception):
    pass


class CompilationError(Exception):
    pass


def __getattr__(name: str) -> Any:
    if name[:1].isupper():
        cls = type(name, (), {"__init__": lambda self, *a, **k: None})
        globals()[name] = cls
        return cls
    raise AttributeError(f"triton stub has no attribute {name!r}")


class _PlaceholderModule(types.ModuleType):
    """A ``triton.*`` submodule the stub does not ship (``triton.compiler.compiler``, ...):
    CamelCase names are inert classes, anything else raises when called."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():
            cls = type(name, (), {"__init__": lambda self, *a, **k: None, "__module__": self.__name__})
            setattr(self, name, cls)
            return cls

        def _inert(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"triton stub: {self.__name__}.{name} called on a CPU-only install")
        return _inert


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolve any ``triton.X`` the stub lacks on disk to a :class:`_PlaceholderModule`."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not fullname.startswith("triton."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return None  # a real stub file: let the normal import use it
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: Any) -> None:
        return None


if not any(isinstance(f, _SubmoduleFinder) for f in sys.meta_path):
    sys.meta_path.append(_SubmoduleFinder())
