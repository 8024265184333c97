"""The per-release results: ``reports/releases/X.Y.Z/result.json``, one a release, written
atomically (another ``kvverify releases --release Y`` may be rendering the page from them at
the same time), and read back by version.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kvverify.releases.defects import ReleaseResult
from kvverify.releases.venvs import version_key

RESULT = "result.json"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory, then rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_result(result: ReleaseResult, out_root: Path) -> Path:
    """``reports/releases/X.Y.Z/result.json``, written atomically."""
    path = out_root / result.version / RESULT
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(asdict(result), indent=1))
    return path


def read_result(path: Path) -> ReleaseResult | None:
    """One stored result, or ``None`` when it is missing or unreadable."""
    try:
        return ReleaseResult(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def load_results(out_root: Path) -> list[ReleaseResult]:
    """Every stored ``reports/releases/X.Y.Z/result.json``, by version."""
    results = [r for r in (read_result(p) for p in sorted(out_root.glob(f"*/{RESULT}"))) if r is not None]
    return sorted(results, key=lambda r: version_key(r.version))


def results_json(results: Sequence[ReleaseResult]) -> dict[str, Any]:
    """What ``kvverify releases --json`` prints: every stored result, whole."""
    return {"releases": [asdict(r) for r in results]}
