"""What a fuzzing run tested, from Hypothesis' observability output, as a small table.

With ``HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1`` (documented by Hypothesis) every test case
is written as one JSON line to ``.hypothesis/observed/<date>_testcases.jsonl``: its
property, status (passed / failed / gave_up) and *features*, the ``event()`` s the property
recorded. :class:`Accumulator` folds those lines into counts per property (a few KB however
long the run: ``kvverify fuzz --coverage-json`` folds them after every batch and empties the
file, so a night of fuzzing leaves no gigabytes behind; a shard uploads the counts);
:func:`combine` adds the shards' summaries up; :func:`markdown` renders the table that goes on the run page
(``$GITHUB_STEP_SUMMARY``).

The columns come from the properties' own events, through one table of rules
(:data:`COLUMNS`): boundary hits (``event("boundary: ...")``), the spec kinds drawn
(``kinds=[...]``), the violations seen (``violation <name>``, recorded by
:func:`kvverify.props.known.assert_or_known` before it decides whether a known finding
explains them; stalls are ``admission.stall.*``), and those a known finding explained.
"""

from __future__ import annotations

import ast
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kvverify.errors import ConfigError

SCHEMA = "kvverify-coverage/1"


def _is_boundary(label: str) -> bool:
    return label.startswith("boundary") or label == "N == blocks per request"


#: column -> which event labels it counts (one table: the summary and the markdown share it)
COLUMNS: dict[str, Callable[[str], bool]] = {
    "boundary hits": _is_boundary,
    "violations seen": lambda label: label.startswith("violation "),
    "stalls seen": lambda label: label.startswith("violation admission.stall"),
    "explained by a known finding": lambda label: label.startswith("explained by known finding"),
}


#: features Hypothesis records itself (target scores, filter retries): not the properties' events
_NOT_EVENTS = ("target:", "Retried draw from ", "Aborted test because")


def _labels(features: dict[str, Any]) -> list[str]:
    """The event labels of one test case (Hypothesis' own features left out)."""
    out = []
    for k, v in features.items():
        if k.startswith(_NOT_EVENTS):
            continue
        out.append(f"{k}: {v}" if v not in ("", None) else k)
    return out


def _kinds(label: str) -> list[str]:
    """``kinds=['full_attention', 'mamba']`` -> the kinds."""
    if not label.startswith("kinds="):
        return []
    try:
        value = ast.literal_eval(label[len("kinds="):])
    except (ValueError, SyntaxError):
        return []
    return [str(k) for k in value] if isinstance(value, (list, tuple)) else []


def observation_files(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """The test-case observation files Hypothesis wrote under ``directory`` (default
    :func:`observed_dir`)."""
    root = Path(directory) if directory is not None else observed_dir()
    return sorted(root.glob("*_testcases.jsonl")) if root.is_dir() else []


class Accumulator:
    """Counts per property (per ``target``, when given), fed observation by observation."""

    def __init__(self, *, label: str = "", target: str = "") -> None:
        self.label, self.target = label, target
        self.props: dict[str, dict[str, Any]] = {}
        self.unreadable = 0

    def add(self, obs: Any, name: str | None = None) -> None:
        """One observation (a decoded JSON line); ``name`` overrides its property's name."""
        if not isinstance(obs, dict) or obs.get("type") != "test_case":
            return
        prop = name or str(obs.get("property", "?"))
        p = self.props.setdefault(f"{self.target}\t{prop}" if self.target else prop, _empty())
        p["test_cases"] += 1
        status = str(obs.get("status", ""))
        if status in ("passed", "failed", "gave_up"):
            p[status] += 1
        p["events"].update(_labels(obs.get("features") or {}))

    def add_files(self, files: Iterable[str | os.PathLike[str]], *, name: str | None = None,
                  truncate: bool = False) -> None:
        """Every observation in ``files`` (streamed: any size); ``truncate`` empties each file
        once read, so a long run's observations never pile up on disk."""
        for path in files:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        obs = json.loads(line)
                    except json.JSONDecodeError:
                        self.unreadable += 1  # a line cut short when a run was killed
                        continue
                    self.add(obs, name)
            if truncate:
                os.truncate(path, 0)

    def to_json(self) -> dict[str, Any]:
        props = {k: {**v, "events": dict(v["events"])} for k, v in sorted(self.props.items())}
        return {"schema": SCHEMA, "shards": [self.label] if self.label else [], "unreadable_lines": self.unreadable,
                "properties": props}


def summarize(files: Iterable[str | os.PathLike[str]], *, label: str = "", target: str = "") -> dict[str, Any]:
    """Counts per property (per ``target``, when given) over observation files."""
    acc = Accumulator(label=label, target=target)
    acc.add_files(files)
    return acc.to_json()


def observed_dir() -> Path:
    """Where Hypothesis writes observations: ``$HYPOTHESIS_STORAGE_DIRECTORY/observed``, else
    ``.hypothesis/observed``."""
    return Path(os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or ".hypothesis") / "observed"


def observability_on() -> bool:
    """Hypothesis was started with observability (it reads the variable once, at import)."""
    return "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY" in os.environ


def _empty() -> dict[str, Any]:
    return {"test_cases": 0, "passed": 0, "failed": 0, "gave_up": 0, "events": Counter()}


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError("coverage", str(path), f"cannot read the summary ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ConfigError("coverage", str(path), f"not a {SCHEMA} summary")
    return doc


def combine(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The shards' summaries added up (per property)."""
    props: dict[str, dict[str, Any]] = {}
    shards: list[str] = []
    bad = 0
    for doc in summaries:
        shards.extend(doc.get("shards", []))
        bad += int(doc.get("unreadable_lines", 0))
        for name, p in doc.get("properties", {}).items():
            into = props.setdefault(name, _empty())
            for k in ("test_cases", "passed", "failed", "gave_up"):
                into[k] += int(p.get(k, 0))
            into["events"].update(p.get("events", {}))
    for p in props.values():
        p["events"] = dict(p["events"])
    return {"schema": SCHEMA, "shards": shards, "unreadable_lines": bad, "properties": props}


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per property: the counts, each :data:`COLUMNS` column, the kinds drawn."""
    out = []
    for name, p in sorted(doc.get("properties", {}).items()):
        events: dict[str, int] = {k: n for k, n in p.get("events", {}).items() if not k.startswith(_NOT_EVENTS)}
        target, _, prop = name.rpartition("\t")
        row = {"property": prop, "target": target or "–", "test cases": p["test_cases"], "failed": p["failed"],
               "invalid": p["gave_up"]}
        for col, rule in COLUMNS.items():
            row[col] = sum(n for label, n in events.items() if rule(label))
        kinds: Counter[str] = Counter()
        for label, n in events.items():
            for k in _kinds(label):
                kinds[k] += n
        row["spec kinds drawn"] = ", ".join(k for k, _ in kinds.most_common())
        row["top events"] = ", ".join(f"{_short(label)} ({n})" for label, n in Counter(events).most_common(3))
        out.append(row)
    return out


def markdown(doc: dict[str, Any], *, title: str = "What was tested") -> str:
    """The coverage table (markdown), for ``$GITHUB_STEP_SUMMARY``."""
    table = rows(doc)
    shards = doc.get("shards", [])
    lines = [f"### {title}", ""]
    total = sum(r["test cases"] for r in table)
    lines.append(f"{total:,} test cases over {len(table)} properties"
                 + (f", {len(shards)} shard(s): {', '.join(shards)}" if shards else "")
                 + " (Hypothesis observability; events are the properties' own `event()` calls).")
    lines.append("")
    if not table:
        lines.append("_No observations: was HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY set for the run?_")
        return "\n".join(lines) + "\n"
    cols = list(table[0])
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "|".join("---:" if isinstance(table[0][c], int) else "---" for c in cols) + "|")
    for r in table:
        lines.append("| " + " | ".join(_cell(r[c]) for c in cols) + " |")
    if doc.get("unreadable_lines"):
        lines += ["", f"({doc['unreadable_lines']} observation line(s) could not be read: a run cut short.)"]
    return "\n".join(lines) + "\n"


def _short(label: str, width: int = 60) -> str:
    return label if len(label) <= width else label[:width - 1] + "…"


def _cell(value: Any) -> str:
    text = f"{value:,}" if isinstance(value, int) else str(value)
    return text.replace("|", "\\|").replace("\n", " ") or "–"


__all__ = ["COLUMNS", "SCHEMA", "Accumulator", "combine", "load", "markdown", "observability_on", "observation_files",
           "observed_dir", "rows", "summarize"]
