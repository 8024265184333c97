"""``triton.runtime.jit`` stand-in: real classes, so ``isinstance`` checks work."""

from __future__ import annotations


class KernelInterface:
    pass


class JITFunction(KernelInterface):
    pass
