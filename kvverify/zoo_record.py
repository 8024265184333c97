"""The zoo's recorded run: ``docs/zoo.json``, and README's bug-zoo table rendered from it.

``kvverify zoo --record`` runs every flaw the way ``kvverify zoo`` does (derandomized, cold,
no example database), writes the results to ``docs/zoo.json`` and renders README's table
between :data:`README_BEGIN` and :data:`README_END` from that file. Examples and seconds are
the recorded run's: they move with the machine and with the modules a process has loaded
(Hypothesis mines constants from them), so the record keeps them rather than a test. What
must not move is checked by ``tests/test_zoo.py``: README's table is :func:`render` of the
file, the file's flaws, upstream issues and properties are the catalogue's, and a fresh
``kvverify zoo --json`` process catches every flaw with the recorded property and shrunk
counterexample.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvverify.errors import KVVerifyError

SCHEMA = "kvverify.zoo/1"
README_BEGIN = "<!-- kvverify zoo --record: the bug-zoo table (generated from docs/zoo.json; do not edit) -->"
README_END = "<!-- end of the generated bug-zoo table -->"
COLUMNS = ("flaw", "upstream", "caught by", "examples", "s", "shrunk counterexample")


def record(results: Sequence[Any]) -> dict[str, Any]:
    """The data ``docs/zoo.json`` holds: every :class:`kvverify.zoo.ZooResult`, and what ran it."""
    import hypothesis

    return {"schema": SCHEMA, "command": "kvverify zoo --record", "hypothesis": hypothesis.__version__,
            "python": platform.python_version(), "results": [r.to_json() for r in results]}


def load(path: Path) -> dict[str, Any]:
    """A recorded run, or a :class:`KVVerifyError` saying why the file is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise KVVerifyError(f"{path}: cannot read the recorded zoo run: {e}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("results"), list):
        raise KVVerifyError(f"{path}: not a recorded zoo run (schema {SCHEMA!r}); run `kvverify zoo --record`")
    return data


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render(data: Mapping[str, Any]) -> str:
    """README's bug-zoo table (Markdown) from a recorded run."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in data["results"]:
        examples = r["examples"] if r["caught"] else f"ESCAPED after {r['examples']}"
        lines.append("| " + " | ".join([f"`{r['flaw']}`", _cell(r["upstream"]), f"`{r['property']}`",
                                        _cell(examples), f"{r['seconds']:.2f}",
                                        _cell(r["counterexample"] or r["error"] or "")]) + " |")
    return "\n".join(lines)


def readme_section(text: str) -> str | None:
    """The text between README's markers (without the newlines next to them), or ``None``."""
    i, j = text.find(README_BEGIN), text.find(README_END)
    if i < 0 or j < i:
        return None
    return text[i + len(README_BEGIN):j].strip("\n")


def with_section(text: str, section: str) -> str:
    """``text`` with the part between README's markers replaced by ``section``."""
    i, j = text.find(README_BEGIN), text.find(README_END)
    if i < 0 or j < i:
        raise KVVerifyError(f"README.md has no {README_BEGIN!r} ... {README_END!r} markers")
    return text[:i + len(README_BEGIN)] + "\n" + section + "\n" + text[j:]


def write(data: Mapping[str, Any], root: Path) -> tuple[Path, Path]:
    """Write ``root/docs/zoo.json`` and README's table from it (each file atomically)."""
    from kvverify.reports.common import atomic_write_text

    readme = root / "README.md"
    try:
        text = readme.read_text(encoding="utf-8")
    except OSError as e:
        raise KVVerifyError(f"{readme}: cannot read: {e} (`kvverify zoo --record` writes into a checkout)") from None
    new = with_section(text, render(data))
    path = root / "docs" / "zoo.json"
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    if new != text:
        atomic_write_text(readme, new)
    return path, readme


def repo_root() -> Path:
    """The checkout this kvverify runs from (the project is installed editable)."""
    return Path(__file__).resolve().parents[1]
