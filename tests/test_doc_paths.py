"""Every repository path that README.md and docs/ mention exists.

Paths under ``reports/`` and ``benchmarks/results/`` are outputs a run writes (gitignored),
and ``tests/v1/...`` is upstream vLLM's tree, so those are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH = re.compile(r"(?<![\w/.-])((?:kvverify|properties|scripts|docs|constraints|\.ci|benchmarks|tests/test_)"
                  r"[\w/.-]*[\w/])")
GENERATED = ("benchmarks/results",)
TEMPLATE = re.compile(r"(?<![A-Za-z])[A-Z](?:\.[A-Z])+(?![A-Za-z])")  # X.Y.Z


def mentioned_paths() -> list[tuple[str, int, str]]:
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for lineno, line in enumerate(doc.read_text().splitlines(), 1):
            for m in PATH.finditer(line):
                path = m.group(1).rstrip(".")
                if ("/" not in path or path.startswith(GENERATED) or line[m.end():m.end() + 1] in ("*", "{", "<")
                        or TEMPLATE.search(path)):
                    continue  # a glob or template (properties/test_*.py, vllm-X.Y.Z.txt), not a path
                out.append((str(doc.relative_to(ROOT)), lineno, path))
    return out


def test_docs_mention_paths() -> None:
    assert len(mentioned_paths()) > 50


def test_every_mentioned_path_exists() -> None:
    missing = [f"{doc}:{lineno}: {path}" for doc, lineno, path in mentioned_paths() if not (ROOT / path).exists()]
    assert not missing, "paths in the docs that do not exist:\n" + "\n".join(missing)
