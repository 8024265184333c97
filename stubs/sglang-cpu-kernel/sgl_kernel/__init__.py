"""A stand-in for ``sgl_kernel`` (SGLang's CUDA kernel package), for releases that import it
unconditionally from modules the KV/admission code loads (``mem_cache/memory_pool_host.py``
before 0.5.1x). Only such releases' locks name it (``# needs-stub: sgl_kernel``); newer
releases must not see it (they would take it for a working kernel package). Any submodule
resolves to a placeholder; calling a kernel raises."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__version__ = "0.0.0+kvverify.stub"


class _Placeholder(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def _kernel(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"sgl_kernel stub: {self.__name__}.{name} called on a CPU-only install")
        return _kernel


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        m = _Placeholder(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module: Any) -> None:
        return None


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)

    def _kernel(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"sgl_kernel stub: sgl_kernel.{name} called on a CPU-only install")
    return _kernel
