"""The zoo's recorded run: ``docs/zoo.json``, and README's bug-zoo tables rendered from it.

``kvverify zoo --record`` runs every engine's every flaw the way ``kvverify zoo`` does
(derandomized, cold, no example database), writes the results to ``docs/zoo.json`` (one
file, each row naming its engine) and renders README's table of each engine between that
engine's markers (:func:`markers`) from that file. Examples and seconds are
the recorded run's: they move with the machine and with the modules a process has loaded
(Hypothesis mines constants from them), so the record keeps them rather than a test. What
must not move is checked by ``tests/test_zoo.py``: README's table is :func:`render` of the
file, the file's flaws, upstream issues and properties are the catalogues', and a fresh
``kvverify zoo --json`` process catches every flaw with the recorded property and shrunk
counterexample.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvverify import engines
from kvverify.errors import KVVerifyError

SCHEMA = "kvverify.zoo/1"


def markers(engine: str) -> tuple[str, str]:
    """The (begin, end) markers of ``engine``'s table in README (:data:`kvverify.engines.ENGINES`)."""
    title = engines.get(engine).title
    return (f"<!-- kvverify zoo --record: {title}'s bug-zoo table (generated from docs/zoo.json; do not edit) -->",
            f"<!-- end of the generated {title} bug-zoo table -->")
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


def render(data: Mapping[str, Any], engine: str | None = None) -> str:
    """README's bug-zoo table (Markdown) of ``engine``'s rows of a recorded run (all rows: ``None``)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in data["results"]:
        if engine is not None and r.get("engine") != engine:
            continue
        examples = r["examples"] if r["caught"] else f"ESCAPED after {r['examples']}"
        lines.append("| " + " | ".join([f"`{r['flaw']}`", _cell(r["upstream"]), f"`{r['property']}`",
                                        _cell(examples), f"{r['seconds']:.2f}",
                                        _cell(r["counterexample"] or r["error"] or "")]) + " |")
    return "\n".join(lines)


def readme_section(text: str, engine: str = "vllm") -> str | None:
    """The text between ``engine``'s README markers (without the newlines next to them), or ``None``."""
    begin, end = markers(engine)
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        return None
    return text[i + len(begin):j].strip("\n")


def with_section(text: str, section: str, engine: str = "vllm") -> str:
    """``text`` with the part between ``engine``'s README markers replaced by ``section``."""
    begin, end = markers(engine)
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise KVVerifyError(f"README.md has no {begin!r} ... {end!r} markers")
    return text[:i + len(begin)] + "\n" + section + "\n" + text[j:]


def with_tables(text: str, data: Mapping[str, Any]) -> str:
    """``text`` with every engine's table rendered from ``data`` between its markers."""
    for engine in engines.ENGINES:
        text = with_section(text, render(data, engine), engine)
    return text


def write(data: Mapping[str, Any], root: Path) -> tuple[Path, Path]:
    """Write ``root/docs/zoo.json`` and README's tables from it (each file atomically)."""
    from kvverify.reports.common import atomic_write_text

    readme = root / "README.md"
    try:
        text = readme.read_text(encoding="utf-8")
    except OSError as e:
        raise KVVerifyError(f"{readme}: cannot read: {e} (`kvverify zoo --record` writes into a checkout)") from None
    new = with_tables(text, data)
    path = root / "docs" / "zoo.json"
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    if new != text:
        atomic_write_text(readme, new)
    return path, readme


def repo_root() -> Path:
    """The checkout this kvverify runs from (the project is installed editable)."""
    return Path(__file__).resolve().parents[1]
