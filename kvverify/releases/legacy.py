"""The published record: what ``docs/releases.json`` and ``docs/releases.md`` already hold, so
that running one release and publishing keeps every other release (issue 27: run the new
releases only, render from all stored ones).

From now on each release's entry in ``docs/releases.json`` carries its whole stored result
(``"result"``: :class:`~.defects.ReleaseResult` as a dict). :func:`published` reads those back
as stored results. An entry written before that (no ``"result"``) is *carried*. Its summary
entry stays in the data (and so in the README's table). The page's cells and its per-release
section are taken from the committed page as they were rendered, because that entry's full
result was never stored. A carried release is shown as it was published; nothing about it is
recomputed. Rerun it (``kvverify releases --release X --publish``) to store its result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvverify.releases.defects import ReleaseResult
from kvverify.releases.venvs import version_key


@dataclass(frozen=True)
class Carried:
    """Releases published before their results were stored: summary entries, their page cells
    (property shown as on the page -> cell) and their per-release sections, verbatim."""

    entries: tuple[dict[str, Any], ...] = ()
    cells: dict[str, dict[str, str]] = field(default_factory=dict)
    sections: dict[str, str] = field(default_factory=dict)
    #: the release's row of the page's "Releases" table, verbatim
    rows: dict[str, str] = field(default_factory=dict)

    @property
    def versions(self) -> list[str]:
        return [e["version"] for e in self.entries]


def _read_json(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    rels = data.get("releases") if isinstance(data, dict) else None
    return [e for e in rels or [] if isinstance(e, dict) and isinstance(e.get("version"), str)]


def published(data_path: Path) -> list[ReleaseResult]:
    """The full results stored in the published data (entries with ``"result"``)."""
    out = []
    for e in _read_json(data_path):
        try:
            out.append(ReleaseResult(**e["result"]))
        except (KeyError, TypeError):
            continue
    return out


def _row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def page_cells(page: str) -> dict[str, dict[str, str]]:
    """The release x property table of a rendered page: version -> property -> cell."""
    lines = page.splitlines()
    try:
        start = lines.index("## Release x property")
    except ValueError:
        return {}
    head = next((i for i in range(start, len(lines)) if lines[i].startswith("| property |")), None)
    if head is None:
        return {}
    versions = _row(lines[head])[1:]
    cells: dict[str, dict[str, str]] = {v: {} for v in versions}
    for ln in lines[head + 2:]:
        if not ln.startswith("|"):
            break
        row = _row(ln)
        for v, c in zip(versions, row[1:]):
            cells[v][row[0]] = c
    return cells


def page_rows(page: str) -> dict[str, str]:
    """The rows of a rendered page's "Releases" table, by version, verbatim."""
    lines = page.splitlines()
    try:
        start = lines.index("## Releases")
    except ValueError:
        return {}
    out = {}
    for ln in lines[start + 4:]:
        if not ln.startswith("|"):
            break
        out[_row(ln)[0]] = ln
    return out


def page_sections(page: str) -> dict[str, str]:
    """The ``### vLLM X`` sections of a rendered page's "Per release" part, verbatim."""
    out: dict[str, str] = {}
    current: str | None = None
    buf: list[str] = []
    for ln in page.splitlines() + ["### vLLM END"]:
        if ln.startswith("### vLLM ") or ln.startswith("## "):
            if current is not None:
                out[current] = "\n".join(buf).rstrip() + "\n"
            current = ln.removeprefix("### vLLM ").strip() if ln.startswith("### vLLM ") else None
            buf = [ln]
        elif current is not None:
            buf.append(ln)
    return out


def carried(data_path: Path, page_path: Path, stored: set[str]) -> Carried:
    """The published releases with neither a stored result nor one in the data."""
    entries = tuple(e for e in _read_json(data_path) if "result" not in e and e["version"] not in stored)
    if not entries:
        return Carried()
    try:
        page = page_path.read_text()
    except OSError:
        page = ""
    keep = {e["version"] for e in entries}
    cells = {v: c for v, c in page_cells(page).items() if v in keep}
    sections = {v: s for v, s in page_sections(page).items() if v in keep}
    rows = {v: r for v, r in page_rows(page).items() if v in keep}
    return Carried(entries, cells, sections, rows)


def with_published(results: Sequence[ReleaseResult], data_path: Path,
                   page_path: Path) -> tuple[list[ReleaseResult], Carried]:
    """``results`` (the stored ones) plus every release already published in ``data_path`` /
    ``page_path`` that is not among them: a published full result renders again
    (:func:`published`), an entry without one is carried verbatim (:func:`carried`). Publishing
    one more release (``kvverify releases --publish``, ``python -m kvverify.releases.selected``)
    therefore drops none of the published ones; a stored result replaces its published entry."""
    have = {r.version for r in results}
    shown = list(results) + [r for r in published(data_path) if r.version not in have]
    shown.sort(key=lambda r: version_key(r.version))
    return shown, carried(data_path, page_path, {r.version for r in shown})
