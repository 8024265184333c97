"""Turning a failure into a report: the violation, the example, its tables, the trace, the replay command.

A report is a JSON-ready dict (schema ``kvverify.report/1``). Its ``id`` is the property
name plus a short hash of what identifies the failure (property, target, flaws, fixes,
example, invariant and reason); what varies between runs (who found it, Hypothesis's
notes) lives under ``run`` and is left out of the hash.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kvverify import engines
from kvverify.reports.capture import Capture, RecordingData, ReplayData
from kvverify.reports.common import (
    MAX_TRACE_ROWS,
    SCHEMA,
    display_path,
    reports_dir,
    sanitize,
    short_repr,
)
from kvverify.reports.serialize import NotSerializable, canonical_json, encode, plain
from kvverify.reports.schema import relative_file
from kvverify.reports.timeline import timeline_of_capture

# --- violations ----------------------------------------------------------------------

_VIOLATION_LINE = re.compile(r"^\[(?P<name>[A-Za-z0-9_.:-]+)\] (?P<rest>.+)$")


def violations_from_exception(exc: BaseException) -> list[dict[str, Any]]:
    """The :class:`~kvverify.invariants.base.Violation` s an exception carries.

    Uses ``exc.violations`` when the raiser attached them; otherwise parses the
    ``[name] reason (k=v, ...)`` lines ``assert_no_violations`` writes; otherwise the
    exception type and its first line.
    """
    attached = getattr(exc, "violations", None)
    if attached:
        return [_violation_dict(v) for v in attached]
    found = []
    for line in str(exc).splitlines():
        m = _VIOLATION_LINE.match(line.strip())
        if m:
            reason, evidence = _split_evidence(m.group("rest"))
            found.append({"name": m.group("name"), "reason": reason, "evidence": evidence})
    if found:
        return found
    groups = getattr(exc, "exceptions", None)
    if groups:
        out: list[dict[str, Any]] = []
        for sub in groups:
            out.extend(violations_from_exception(sub))
        return out
    first = (str(exc).strip().splitlines() or [""])[0]
    return [{"name": type(exc).__name__, "reason": sanitize(first)[:500] or type(exc).__name__,
             "evidence": {}}]


def _violation_dict(v: Any) -> dict[str, Any]:
    if hasattr(v, "to_json"):
        return v.to_json()
    return {"name": str(getattr(v, "name", "violation")), "reason": str(getattr(v, "reason", v)),
            "evidence": plain(dict(getattr(v, "evidence", {}) or {}))}


def _split_evidence(rest: str) -> tuple[str, dict[str, Any]]:
    """Split ``reason (k=v, k=v)`` into the reason and the evidence dict."""
    if not rest.endswith(")"):
        return rest, {}
    depth = 0
    for i in range(len(rest) - 1, -1, -1):
        ch = rest[i]
        if ch in ")]}":
            depth += 1
        elif ch in "([{":
            depth -= 1
            if depth == 0:
                inner = rest[i + 1:-1]
                if not re.match(r"^\w+=", inner):
                    return rest, {}
                return rest[:i].rstrip(), _parse_pairs(inner)
    return rest, {}


def _parse_pairs(text: str) -> dict[str, Any]:
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0 and re.match(r"^ ?\w+=", text[i + 1:]):
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    out: dict[str, Any] = {}
    for part in parts:
        key, _, value = part.strip().partition("=")
        try:
            out[key] = plain(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            out[key] = value
    return out

# --- reports -------------------------------------------------------------------------


def property_ref(fn: Any, *, name: str | None = None, file: str | None = None,
                 directory: Path | None = None) -> dict[str, Any]:
    """Where replay finds the property: module + attribute, and the file as a fallback (relative
    to the working directory, and to the report's ``directory``: no absolute path)."""
    module = getattr(fn, "__module__", None)
    attr = name or getattr(fn, "__name__", None)
    if file is None:
        try:
            source = getattr(getattr(fn, "hypothesis", None), "inner_test", fn)
            file = inspect.getsourcefile(inspect.unwrap(source))
        except (TypeError, OSError, ValueError):
            file = None
    # relative paths only: a report names no directory of the machine that wrote it
    ref = {"module": module, "name": attr, "file": relative_file(os.path.abspath(file)) if file else None}
    if file:
        here, there = os.path.abspath(file), os.path.abspath(directory or reports_dir())
        try:  # only within one tree: a path that climbs to the root would name the machine's layout
            common = Path(os.path.commonpath([here, there]))
            ref["file_from_report"] = os.path.relpath(here, there) if len(common.parts) > 2 else None
        except ValueError:  # another drive (Windows)
            ref["file_from_report"] = None
    return ref


def resembles(flaw_names: Iterable[str]) -> list[dict[str, str]]:
    out = []
    catalog = engines.flaw_catalog()
    for name in flaw_names:
        f = catalog.get(name)
        if f is not None:
            out.append({"flaw": f.name, "upstream": f.upstream, "symptom": f.symptom,
                        "defect": f.defect, "caught_by": f.caught_by})
    return out


def build_report(capture: Capture, *, found_by: str, name: str | None = None, file: str | None = None,
                 nodeid: str | None = None, known_finding: str | None = None,
                 directory: Path | None = None) -> dict[str, Any]:
    """A property failure as a report (a JSON-ready dict)."""
    exc = capture.exc
    violations = violations_from_exception(exc)
    replayable, why_not = True, None
    example: dict[str, Any] = {}
    for key, value in capture.kwargs.items():
        try:
            example[key] = encode(value)
        except NotSerializable as e:
            replayable, why_not = False, f"argument {key!r}: {e}"
            example[key] = {"__repr__": short_repr(value, 400)}
    ref = property_ref(capture.function, name=name, file=file, directory=directory)
    prop = ref["name"] or "property"
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": "property",
        "property": prop,
        "property_ref": ref,
        "target": capture.target_name,
        "flaws": list(capture.flaws),
        "fixes": list(capture.fixes),
        "behaviours": list(capture.behaviours),
        "violation": violations[0],
        "other_violations": violations[1:],
        "exception": {"type": type(exc).__name__, "message": sanitize(str(exc))[:4000]},
        "resembles": resembles(capture.flaws),
        "known_finding": known_finding,
        "example": example,
        "configuration": describe_example(capture.kwargs),
        "trace": trace_of(capture.workloads),
        "timeline": None,
        "z3_model": None,
        "replayable": replayable,
        "not_replayable_because": why_not,
    }
    notes = [sanitize(str(n)) for n in getattr(exc, "__notes__", []) or []]
    report["run"] = {"found_by": found_by, "nodeid": nodeid, "hypothesis_notes": notes,
                     "versions": versions()}
    try:
        report["timeline"] = timeline_of_capture(capture, violations[0], prop)
    except Exception as e:  # noqa: BLE001 - a report without its picture beats no report
        report["run"]["timeline_error"] = f"{type(e).__name__}: {sanitize(str(e))[:300]}"
    return finish_report(report, directory, pytest_cmd=_pytest_command(nodeid, ref, capture.flaws))


def build_lemma_report(result: Any, *, found_by: str = "prove",
                       directory: Path | None = None) -> dict[str, Any]:
    """A lemma counterexample (a :class:`kvverify.lemmas.core.Result`) as a report."""
    cex = dict(result.counterexample or {})
    evidence = plain(cex.get("evidence", {}) or {})
    flaw_names = [result.flaw] if result.flaw else []
    fix_names = [result.fix] if result.fix else []
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": "lemma",
        "property": f"lemma_{result.name}",
        "property_ref": {"lemma": result.name, "fix": bool(result.fix)},
        "target": "reference",
        "flaws": flaw_names,
        "fixes": fix_names,
        "violation": {"name": f"lemma.{result.name}",
                      "reason": f"counterexample to: {result.statement}", "evidence": evidence},
        "other_violations": [],
        "exception": None,
        "resembles": resembles(flaw_names),
        "known_finding": (f"{result.finding}: {result.finding_title}" if result.finding else None),
        "example": {},
        "configuration": {"lemma": {"name": result.name, "topic": result.topic, "domain": result.domain,
                                    "case": cex.get("case"), "params": plain(cex.get("params", {}))}},
        "trace": None,
        "z3_model": {"case": cex.get("case"), "values": plain(cex.get("values", {})),
                     "params": plain(cex.get("params", {})), "replay_on_reference": result.replay,
                     "replay_confirmed": result.replay_confirmed},
        "replayable": True,
        "not_replayable_because": None,
    }
    report["run"] = {"found_by": found_by, "nodeid": None, "seconds": round(result.seconds, 3),
                     "hypothesis_notes": [], "versions": versions()}
    cmd = f"kvverify prove {result.name}" + (f" --flaw {result.flaw}" if result.flaw else "") + \
        (" --fix" if result.fix else "")
    return finish_report(report, directory, pytest_cmd=None, equivalent=cmd)


def finish_report(report: dict[str, Any], directory: Path | None, *, pytest_cmd: str | None,
            equivalent: str | None = None) -> dict[str, Any]:
    key = report_key(report)
    report["id"] = f"{_safe_name(report['property'])}-{key}"
    where = (directory or reports_dir()) / f"{report['id']}.json"
    rel = relative_file(os.path.abspath(where))  # relative paths only: else the bare name, from its directory
    report["replay"] = {"command": f"kvverify replay {rel or where.name}",
                        "run_from": "." if rel else "the report's directory",
                        "pytest": pytest_cmd, "equivalent": equivalent}
    return report


def report_key(report: Mapping[str, Any]) -> str:
    """Short content hash over what identifies the failure (never the volatile ``run``)."""
    ident = {k: report.get(k) for k in ("kind", "property", "target", "flaws", "fixes", "example", "z3_model")}
    # where the property lives, not where it was run from (a file path depends on the cwd)
    ident["property_ref"] = {k: v for k, v in (report.get("property_ref") or {}).items()
                             if k not in ("file", "abs_file", "file_from_report")}
    v = report.get("violation") or {}
    ident["violation"] = {"name": v.get("name"), "reason": v.get("reason")}
    return hashlib.sha256(canonical_json(ident).encode()).hexdigest()[:10]


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80] or "property"


def _pytest_command(nodeid: str | None, ref: Mapping[str, Any], flaw_names: Sequence[str]) -> str | None:
    target = nodeid
    if target is None and ref.get("name"):
        target = suite_nodeid(str(ref["name"]), ref.get("file"))
    if target is None:
        return None
    flags = "".join(f" --flaw {n}" for n in flaw_names)
    return f"python -m pytest '{target}'{flags}"


def suite_nodeid(name: str, file: str | None = None, suite: str | os.PathLike[str] = "properties") -> str | None:
    """``properties/test_x.py::name`` for a property a suite file collects, if one does."""
    if file and Path(file).name.startswith("test_") and Path(file).is_file():
        return f"{display_path(Path(file))}::{name}"
    root = Path(suite)
    if not root.is_dir():
        return None
    pattern = re.compile(rf"^(?:{re.escape(name)}\b|\s+{re.escape(name)},?\s*(?:#.*)?$)", re.M)
    for path in sorted(root.glob("test_*.py")):
        try:
            if pattern.search(path.read_text(encoding="utf-8")):
                return f"{display_path(path)}::{name}"
        except OSError:
            continue
    return None


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    try:
        import hypothesis
        out["hypothesis"] = hypothesis.__version__
    except ImportError:  # pragma: no cover
        pass
    try:
        from importlib.metadata import version
        out["kvverify"] = version("kvverify")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        pass
    return out


def describe_example(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The human view of an example: every VllmConfig field, every layer spec, other args."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.specs import KVCacheSpec

    configs: list[Any] = []
    workers: list[list[dict[str, Any]]] = []
    groups: list[dict[str, Any]] = []
    seen: set[int] = set()

    def layer_rows(specs: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"layer": str(n), **_spec_row(s)} for n, s in specs.items()]

    def walk(value: Any, depth: int = 0) -> None:
        if depth > 6 or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, VllmConfig):
            configs.append(value)
            return
        if isinstance(value, dict) and value and all(isinstance(s, KVCacheSpec) for s in value.values()):
            workers.append(layer_rows(value))
            return
        if type(value).__name__ == "KVCacheGroupSpec":
            groups.append({"layers": list(value.layer_names), **_spec_row(value.kv_cache_spec)})
            return
        if isinstance(value, (ReplayData, RecordingData)):
            for d in value.draws:
                walk(d["value"], depth + 1)
            return
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                walk(getattr(value, f.name), depth + 1)
        elif isinstance(value, (list, tuple)):
            for v in value[:64]:
                walk(v, depth + 1)
        elif isinstance(value, dict):
            for v in list(value.values())[:64]:
                walk(v, depth + 1)

    for v in kwargs.values():
        walk(v)
    out: dict[str, Any] = {}
    if configs:
        cfg = configs[0]
        defaults = VllmConfig.__dataclass_fields__
        out["vllm_config"] = [
            {"field": f.name, "value": plain(getattr(cfg, f.name)),
             "default": plain(defaults[f.name].default) if defaults[f.name].default is not dataclasses.MISSING
             else None,
             "changed": getattr(cfg, f.name) != defaults[f.name].default}
            for f in dataclasses.fields(cfg)]
    if workers:
        out["workers"] = workers
    if groups:
        out["groups"] = groups
    scalars: dict[str, Any] = {}
    for k, v in kwargs.items():
        if isinstance(v, (ReplayData, RecordingData)):
            scalars[k] = [{"label": d["label"], "value": summarize(d["value"])} for d in v.draws]
        elif not dataclasses.is_dataclass(v):
            scalars[k] = summarize(v)
        else:
            extra = {f.name: summarize(getattr(v, f.name)) for f in dataclasses.fields(v)
                     if not isinstance(getattr(v, f.name), (VllmConfig,)) and f.name not in
                     ("kv_cache_specs", "kv_cache_config")}
            if extra:
                scalars[k] = extra
    if scalars:
        out["arguments"] = scalars
    return out


def _spec_row(spec: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"type": type(spec).__name__}
    if dataclasses.is_dataclass(spec):
        for f in dataclasses.fields(spec):
            value = getattr(spec, f.name)
            if f.name == "kv_cache_specs":  # UniformTypeKVCacheSpecs: name the members
                row[f.name] = ", ".join(f"{n}: {type(s).__name__}" for n, s in value)
            else:
                row[f.name] = plain(value)
    for prop in ("page_size_bytes",):
        try:
            row[prop] = getattr(spec, prop)
        except Exception:  # noqa: BLE001 - an invalid spec (e.g. under a flaw) has no page
            pass
    return row


def summarize(value: Any) -> Any:
    """Short human form: workloads as (id, prompt length, outputs, arrival)."""
    from kvverify.reference.driver import WorkloadSpec

    if isinstance(value, WorkloadSpec):
        return {"request_id": value.request_id, "prompt_tokens": len(value.prompt_token_ids),
                "max_tokens": value.max_tokens, "arrival_step": value.arrival_step,
                "shared_prefix_head": list(value.prompt_token_ids[:4])}
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, WorkloadSpec) for v in value):
        return [summarize(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return short_repr(value, 300)


def trace_of(workloads: Sequence[tuple[list[Any], Any]]) -> dict[str, Any] | None:
    """The last workload the property ran: requests, outcome and the per-step trace."""
    if not workloads:
        return None
    workload, result = workloads[-1]
    rows: list[list[Any] | None] = [list(r) for r in getattr(result, "trace", ())]
    elided = 0
    if len(rows) > MAX_TRACE_ROWS:
        elided = len(rows) - MAX_TRACE_ROWS
        rows = rows[:50] + [None] + rows[-(MAX_TRACE_ROWS - 50):]
    outcome = {k: plain(getattr(result, k, None)) for k in
               ("stalled", "stall_reason", "stalled_request_ids", "error", "steps", "preemptions",
                "num_output_tokens", "running", "waiting", "free_blocks", "finished")}
    return {"requests": [summarize(w) for w in workload], "outcome": outcome,
            "columns": ["step", "running", "waiting", "free_blocks", "scheduled_tokens"],
            "rows": rows, "elided_rows": elided, "runs_recorded": len(workloads)}
