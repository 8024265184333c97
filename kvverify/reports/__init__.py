"""Counterexample reports: capture a failing property, write it up, index it, replay it.

When a property fails — under pytest (:mod:`kvverify.pytest_reports`), ``kvverify fuzz``
or as a lemma counterexample (``kvverify prove``) — a report is written to
``$KVVERIFY_REPORTS_DIR`` (default ``reports/``) as two files::

    reports/<property>-<short hash>.json   the failure, fully serialized (replayable)
    reports/<property>-<short hash>.md     the same for a person to read
    reports/<property>-<short hash>.svg    a workload failure's timeline, step by step
                                           (a pool state machine's: rule by rule)

A report holds the invariant and its one-line reason, the evidence numbers, the shrunk
example with every ``VllmConfig`` field and every layer spec as tables (VOPR-style), the
operation trace of the last workload the property ran, the Z3 model of a lemma, the
bug-zoo flaw it resembles, and a replay command::

    kvverify replay reports/<property>-<short hash>.json

which rebuilds the example from the JSON and runs the property body once on it, with
the recorded flaws and fixes switched on (exit 1: reproduced, 0: passes now).

**How failures are captured.** :func:`instrument` swaps the ``.hypothesis.inner_test``
of ``@given`` properties (Hypothesis's documented hook for plugins) for a recording
wrapper. The wrapper hands the body a :class:`RecordingData` (which remembers every
``data.draw``) and a :class:`RecordingTarget` (which remembers the workloads run), and
when the body raises it keeps the keyword arguments, the draws, the active flaws and
fixes and the exception. Hypothesis replays the shrunk example last, so the last capture
is the minimal failing example.

**Same failure, same file.** The file name is the property name plus a hash of the
canonical JSON of what identifies the failure (property, target, flaws, fixes, example,
invariant and reason); the volatile part (who found it, Hypothesis's notes) is kept
under ``run`` and left out of the hash. Files are written atomically (a temporary file
in the same directory, then ``os.replace``), so concurrent writers (``pytest -n 2``)
never leave a torn file: two writers of one report write identical bytes, and
different reports have different names.

Modules: :mod:`~kvverify.reports.capture` (recording a failing call),
:mod:`~kvverify.reports.serialize` (tagged JSON), :mod:`~kvverify.reports.build` (the
report dict), :mod:`~kvverify.reports.stateful` (state machines),
:mod:`~kvverify.reports.render` (Markdown), :mod:`~kvverify.reports.index` (the index,
Markdown and HTML), :mod:`~kvverify.reports.store`
(atomic writes), :mod:`~kvverify.reports.replay` (``kvverify replay``).
"""

from __future__ import annotations

from kvverify.reports.build import (
    build_lemma_report,
    build_report,
    describe_example,
    report_key,
    resembles,
    violations_from_exception,
)
from kvverify.reports.capture import (
    Capture,
    RecordingData,
    RecordingTarget,
    ReplayData,
    ReplayMismatch,
    Sink,
    instrument,
    is_property,
    leaf_exceptions,
    property_functions,
)
from kvverify.reports.common import (
    DEFAULT_DIR,
    INDEX_HTML,
    INDEX_MD,
    OVERVIEW_SVG,
    REPORTS_ENV,
    SCHEMA,
    ReportError,
    active_fixes,
    atomic_write_text,
    display_path,
    reports_dir,
    switched,
)
from kvverify.reports.index import render_index
from kvverify.reports.render import render_markdown
from kvverify.reports.replay import (
    ReplayOutcome,
    load_module_from_file,
    replay_path,
    replay_report,
    resolve_property,
)
from kvverify.reports.serialize import NotSerializable, decode, encode
from kvverify.reports.stateful import build_stateful_report, report_stateful
from kvverify.reports.store import (
    list_reports,
    load_report,
    report_failure,
    report_lemma,
    write_report,
)

__all__ = [
    "Capture", "DEFAULT_DIR", "INDEX_HTML", "INDEX_MD", "NotSerializable", "OVERVIEW_SVG", "REPORTS_ENV", "RecordingData",
    "RecordingTarget", "ReplayData", "ReplayMismatch", "ReplayOutcome", "ReportError", "SCHEMA", "Sink",
    "active_fixes", "atomic_write_text", "build_lemma_report", "build_report", "build_stateful_report",
    "decode", "describe_example", "display_path", "encode", "instrument", "is_property", "leaf_exceptions",
    "list_reports", "load_module_from_file", "load_report", "property_functions", "render_index",
    "render_markdown", "replay_path", "replay_report", "report_failure", "report_key", "report_lemma",
    "report_stateful", "reports_dir", "resembles", "resolve_property", "switched",
    "violations_from_exception", "write_report",
]
