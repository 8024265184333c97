"""The report schema: its version, migration of older reports, and validation before replay.

``schema`` is ``kvverify.report/<version>``. This kvverify writes :data:`SCHEMA_VERSION` and
reads every version in :data:`READABLE`: :func:`migrate` brings an older report to the current
shape (and :func:`moved_module` follows the modules that moved since, for the classes an example
names), a newer one is refused with a message naming both versions. :func:`validate` checks the
fields replay reads have the JSON types it expects, so a corrupt report is a clear error (exit
2), never a traceback.

History: 1 — reports up to the split of the reference into ``kvverify/reference/`` (they may
carry an absolute ``property_ref.abs_file`` and name classes at their old modules); 2 — relative
paths only (``property_ref.file`` relative to the working directory, no ``abs_file``).
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from kvverify.reports.common import SCHEMA, ReportError

SCHEMA_PREFIX = "kvverify.report/"
SCHEMA_VERSION = int(SCHEMA.rpartition("/")[2])
READABLE = (1, 2)
#: modules that moved, old -> new (``fad6c44``: the reference apart, the CLI faces under ``cli/``)
MODULE_MOVES = {
    **{f"kvverify.{m}": f"kvverify.reference.{m}" for m in (
        "arith", "block_sizes", "config", "driver", "dtypes", "grouping", "kv_cache_manager", "ops", "planner",
        "pool", "request", "scheduler", "specs", "workloads", "managers", "managers.base",
        "managers.chunked_local", "managers.coordinator", "managers.cross_attention", "managers.full_attention",
        "managers.mamba", "managers.registry", "managers.sliding_window")},
    "kvverify.harness_cli": "kvverify.cli.harness",
    "kvverify.lemmas.cli_support": "kvverify.cli.lemmas",
}
_VERSION = re.compile(r"^kvverify\.report/(\d+)$")
KINDS = ("property", "lemma", "stateful")


def moved_module(name: str) -> str:
    """Where a module a report names lives now (itself when it did not move)."""
    return MODULE_MOVES.get(name, name)


def schema_version(data: Any, where: str) -> int:
    """The report's schema version; a newer or unknown one, or not a report at all, is refused."""
    if not isinstance(data, Mapping):
        raise ReportError(f"{where}: not a kvverify report (a JSON object with schema "
                          f"{SCHEMA_PREFIX}N expected, got {type(data).__name__})")
    schema = data.get("schema")
    m = _VERSION.match(schema) if isinstance(schema, str) else None
    if m is None:
        raise ReportError(f"{where}: not a kvverify report (schema {SCHEMA_PREFIX}N expected, got {schema!r})")
    version = int(m.group(1))
    if version > SCHEMA_VERSION:
        raise ReportError(f"{where}: written by a newer kvverify (report schema {version}); this kvverify reads "
                          f"schemas {READABLE[0]} to {SCHEMA_VERSION}: upgrade kvverify to replay it")
    if version not in READABLE:
        raise ReportError(f"{where}: report schema {version} is no longer readable (this kvverify reads "
                          f"{READABLE[0]} to {SCHEMA_VERSION}); rerun the property to write a new report")
    return version


def relative_file(file: str | None) -> str | None:
    """A file path as reports keep it: relative to the working directory, or none."""
    if not file:
        return None
    if not os.path.isabs(file):
        return file
    try:
        rel = os.path.relpath(file)
    except ValueError:
        return None
    return None if rel.startswith("..") else rel


def migrate(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The report in the current schema (a copy); validated (:func:`validate`)."""
    version = schema_version(data, where)
    report = dict(data)
    if version < 2:
        ref = dict(report.get("property_ref") or {})
        file = ref.get("file") if isinstance(ref.get("file"), str) else None
        abs_file = ref.pop("abs_file", None)
        ref["file"] = relative_file(file) or relative_file(abs_file if isinstance(abs_file, str) else None)
        if isinstance(ref.get("module"), str):
            ref["module"] = moved_module(ref["module"])
        report["property_ref"] = ref
    report["schema"] = SCHEMA
    report["migrated_from"] = version if version != SCHEMA_VERSION else None
    validate(report, where)
    return report


def _expect(report: Mapping[str, Any], key: str, types: tuple[type, ...], where: str, what: str) -> None:
    if key in report and report[key] is not None and not isinstance(report[key], types):
        raise ReportError(f"{where}: corrupt report: {key!r} must be {what}, got {type(report[key]).__name__}")


def validate(report: Mapping[str, Any], where: str) -> None:
    """The fields replay and the index read have their JSON types (:class:`ReportError` naming the
    field otherwise)."""
    kind = report.get("kind")
    if kind not in KINDS:
        raise ReportError(f"{where}: corrupt report: 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
    _expect(report, "example", (dict,), where, "an object")
    _expect(report, "property_ref", (dict,), where, "an object")
    _expect(report, "violation", (dict,), where, "an object")
    _expect(report, "replay", (dict,), where, "an object")
    _expect(report, "timeline", (dict,), where, "an object")
    _expect(report, "property", (str,), where, "a string")
    _expect(report, "target", (str,), where, "a string")
    for key in ("flaws", "fixes", "behaviours"):
        _expect(report, key, (list,), where, "a list of names")
        if not all(isinstance(x, str) for x in report.get(key) or []):
            raise ReportError(f"{where}: corrupt report: {key!r} must list names (strings)")
    ref = report.get("property_ref") or {}
    for key in ("module", "name", "file", "file_from_report", "lemma"):
        if ref.get(key) is not None and not isinstance(ref[key], str):
            raise ReportError(f"{where}: corrupt report: 'property_ref.{key}' must be a string")
    if kind == "stateful":
        blob = (report.get("example") or {}).get("reproduce_failure")
        if blob is not None and not (isinstance(blob, list) and len(blob) == 2
                                     and all(isinstance(x, str) for x in blob)):
            raise ReportError(f"{where}: corrupt report: 'example.reproduce_failure' must be [version, blob]")
