"""A stand-in for ``torchvision``: SGLang imports it through ``srt/configs`` -> multimodal
utilities (and transformers' image utilities), but PyPI's torchvision does not load against
the local CPU torch, and the KV-cache and admission modules never use it. Names resolve to
inert placeholders; calling one raises a clear error."""

from __future__ import annotations

from typing import Any

from torchvision._placeholder import placeholder

__version__ = "0.0.0+kvverify.stub"

from torchvision import io, transforms  # noqa: E402,F401


def __getattr__(name: str) -> Any:
    return placeholder(__name__, name)
