"""torchvision stub submodule: every name is an inert placeholder (see ``torchvision/__init__``)."""

from __future__ import annotations

from typing import Any

from torchvision._placeholder import placeholder


def __getattr__(name: str) -> Any:
    return placeholder(__name__, name)


from torchvision.transforms.v2 import functional  # noqa: E402,F401
