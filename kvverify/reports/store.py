"""Writing, loading and listing reports (atomic, idempotent per failure)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kvverify.reports.build import build_lemma_report, build_report
from kvverify.reports.capture import Capture
from kvverify.reports.common import ReportError, atomic_write_text, reports_dir
from kvverify.reports.schema import migrate
from kvverify.reports.render import render_markdown
from kvverify.reports.timeline import render_json, svg_sha256


def write_report(report: dict[str, Any], directory: str | os.PathLike[str] | None = None) -> Path:
    """Write ``<id>.svg`` (a workload failure's timeline, first), ``<id>.json`` and ``<id>.md``;
    returns the JSON path. Each file atomically; idempotent per failure."""
    where = Path(directory) if directory is not None else reports_dir()
    json_path = where / f"{report['id']}.json"
    write_timeline(report, where)
    atomic_write_text(json_path, json.dumps(report, indent=2, sort_keys=False) + "\n")
    atomic_write_text(where / f"{report['id']}.md", render_markdown(report))
    return json_path


def write_timeline(report: dict[str, Any], where: Path) -> Path | None:
    """Write the report's timeline picture as ``<id>.svg`` (atomically); ``None`` if it has none."""
    timeline = report.get("timeline")
    if not timeline:
        return None
    svg = render_json(timeline)
    report["timeline"] = {**timeline, "sha256": svg_sha256(svg)}  # the picture's bytes, content-hashed
    path = where / f"{report['id']}.svg"
    atomic_write_text(path, svg)
    return path


def report_failure(capture: Capture, *, found_by: str, directory: str | os.PathLike[str] | None = None,
                   **kw: Any) -> Path:
    """Build and write the report of a captured failure."""
    where = Path(directory) if directory is not None else reports_dir()
    return write_report(build_report(capture, found_by=found_by, directory=where, **kw), where)


def report_lemma(result: Any, *, directory: str | os.PathLike[str] | None = None) -> Path:
    where = Path(directory) if directory is not None else reports_dir()
    return write_report(build_lemma_report(result, directory=where), where)


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{p}: cannot read report: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{p}: malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    report = migrate(data, str(p))
    report["loaded_from"] = str(p)  # not written back: where replay looks for property_ref.file_from_report
    return report


def list_reports(directory: str | os.PathLike[str] | None = None) -> list[tuple[Path, dict[str, Any]]]:
    where = Path(directory) if directory is not None else reports_dir()
    out = []
    for p in sorted(where.glob("*.json")):
        try:
            out.append((p, load_report(p)))
        except ReportError:
            continue
    return out
