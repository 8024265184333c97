"""``triton.backends`` stand-in: no backend is installed (torch's device checks read this)."""

from __future__ import annotations

backends: dict[str, object] = {}
