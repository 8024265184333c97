"""Shared pieces of the reports package: constants, errors, flaw/fix switches, paths, atomic writes."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from kvverify import engines
from kvverify.errors import KVVerifyError

SCHEMA = "kvverify.report/2"  # kvverify.reports.schema: versions, migration
REPORTS_ENV = "KVVERIFY_REPORTS_DIR"
DEFAULT_DIR = "reports"
INDEX_MD = "index.md"
INDEX_HTML = "index.html"
OVERVIEW_SVG = "overview.svg"  # failures per invariant and per property (`kvverify report`)
MAX_TRACE_ROWS = 200  # rows kept in the JSON (first 50 + last 150)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class ReportError(KVVerifyError):
    """A report that cannot be read, decoded or replayed (the message says why)."""


def reports_dir(default: str | os.PathLike[str] | None = None) -> Path:
    """``$KVVERIFY_REPORTS_DIR``, else ``default``, else ``reports/`` (relative to the cwd)."""
    env = os.environ.get(REPORTS_ENV)
    if env:
        return Path(env)
    return Path(default) if default is not None else Path(DEFAULT_DIR)


active_fixes = engines.active_fixes  #: every engine's fixes on in this context
active_flaws = engines.active_flaws  #: every engine's flaws on in this context


@contextlib.contextmanager
def switched(flaw_names: Iterable[str] = (), fix_names: Iterable[str] = ()) -> Iterator[None]:
    """Exactly these flaws and fixes on, each in its engine (a clean context: nothing inherited)."""
    flaw_names, fix_names = tuple(flaw_names), tuple(fix_names)
    for n in fix_names:
        if n not in engines.fix_names():
            raise ReportError(f"unknown fix {n!r}; known: {', '.join(engines.fix_names())}")
    with engines.only(flaws=flaw_names, fixes=fix_names):
        yield


def sanitize(text: str) -> str:
    return _ADDRESS.sub("", text)


def short_repr(value: Any, limit: int = 120) -> str:
    text = sanitize(repr(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def display_path(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same directory + ``os.replace``),
    with the umask's mode, never through a symlink or onto a non-regular file
    (:func:`kvverify.safefiles.write_text`; refused as a :class:`ReportError`)."""
    from kvverify.safefiles import UnsafeOutput, write_text

    try:
        write_text(path, text, what="report file")
    except UnsafeOutput as e:
        raise ReportError(str(e)) from None
