"""pytest integration of :mod:`kvverify.reports`: a failing property writes its report.

Load it with ``pytest_plugins = ["kvverify.pytest_reports"]`` (done by
:mod:`kvverify.pytest_plugin`) or ``-p kvverify.pytest_reports``.

While a test runs, every ``@given`` property it calls — the test itself, or a property
body from :mod:`kvverify.props` it calls directly — is instrumented (see
:func:`kvverify.reports.instrument`). When the test fails because a property failed,
the shrunk example is written to ``$KVVERIFY_REPORTS_DIR`` (default ``<rootdir>/reports``)
and the paths are attached to the failure output and listed at the end of the session.

Expected findings — tests marked ``xfail`` that fail as expected — write no report
unless ``--kvverify-report-xfail`` is given. ``--kvverify-no-reports`` turns reports off.
Safe under ``pytest -n N``: each worker writes its own reports atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from kvverify import reports
from kvverify.hypothesis_hooks import is_genuine_failure, state_machine_of

_SINK = pytest.StashKey[Any]()
_PROPERTIES: list[Any] = []  # kvverify.props bodies, found once per session
_collected: list[str] = []  # report paths seen this session (the controller's view under xdist)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvverify")
    group.addoption("--kvverify-report-xfail", action="store_true", default=False,
                    help="also write counterexample reports for xfail tests that fail as expected "
                         "(known findings)")
    group.addoption("--kvverify-no-reports", action="store_true", default=False,
                    help="do not write counterexample reports for failing properties")
    group.addoption("--kvverify-reports-dir", default=None, metavar="DIR",
                    help="where reports go (default: $KVVERIFY_REPORTS_DIR or <rootdir>/reports)")


def _reports_dir(config: pytest.Config) -> Path:
    explicit = config.getoption("kvverify_reports_dir", default=None)
    if explicit:
        return Path(explicit)
    return reports.reports_dir(default=config.rootpath / reports.DEFAULT_DIR)


def _enabled(config: pytest.Config) -> bool:
    return not config.getoption("kvverify_no_reports", default=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if not _enabled(item.config):
        yield
        return
    if not _PROPERTIES:
        _PROPERTIES.extend(reports.property_functions())
    functions = list(_PROPERTIES)
    obj = getattr(item, "obj", None)
    if reports.is_property(obj):
        functions.append(obj)
    with reports.instrument(functions) as sink:
        item.stash[_SINK] = sink
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[Any]:
    outcome: Any = yield
    if call.when != "call" or not _enabled(item.config):
        return
    rep = outcome.get_result()
    xfailed = hasattr(rep, "wasxfail") and rep.skipped
    if not (rep.failed or (xfailed and item.config.getoption("kvverify_report_xfail", default=False))):
        return
    sink = item.stash.get(_SINK, None)
    exc = call.excinfo.value if call.excinfo is not None else None
    # only when the test failed *because* a property failed: the exception pytest saw is the
    # one the recording wrapper captured (or groups / wraps it). A test that expects a
    # property to fail and then fails on its own assertion writes no report.
    captures = sink.matching(exc) if sink is not None else []
    obj = getattr(item, "obj", None)
    lines = []
    for capture in captures:
        own = capture.function is obj
        try:
            path = reports.report_failure(
                capture, found_by="pytest", directory=_reports_dir(item.config),
                name=(getattr(item, "originalname", None) or item.name) if own else None,
                file=str(item.path) if own else None, nodeid=item.nodeid if own else None,
                known_finding=(rep.wasxfail or "xfail") if xfailed else None)
        except Exception as e:  # noqa: BLE001 - a report must never break the run
            lines.append(f"could not write the report: {type(e).__name__}: {e}")
            continue
        shown = reports.display_path(path)
        lines.append(f"counterexample report: {shown[:-5]}.md\nreplay: kvverify replay {shown}")
        rep.user_properties.append(("kvverify_report", shown))
    machine = state_machine_of(getattr(item, "cls", None))  # TestX = Machine.TestCase
    if not captures and machine is not None and exc is not None and is_genuine_failure(exc):
        from kvverify import flaws
        try:
            paths = reports.report_stateful(
                machine, exc, directory=_reports_dir(item.config), found_by="pytest", nodeid=item.nodeid,
                flaw_names=sorted(flaws.active()), fix_names=sorted(reports.active_fixes()),
                known_finding=(rep.wasxfail or "xfail") if xfailed else None)
        except Exception as e:  # noqa: BLE001 - a report must never break the run
            paths = []
            lines.append(f"could not write the report: {type(e).__name__}: {e}")
        for path in paths:
            shown = reports.display_path(path)
            lines.append(f"counterexample report: {shown[:-5]}.md\nreplay: kvverify replay {shown}")
            rep.user_properties.append(("kvverify_report", shown))
    if lines:
        rep.sections.append(("kvverify report", "\n".join(lines)))


def pytest_sessionstart(session: pytest.Session) -> None:
    _collected.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # runs on the controller too under xdist: collect what the workers wrote
    for key, value in getattr(report, "user_properties", ()):
        if key == "kvverify_report":
            _collected.append(str(value))



def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _collected:
        return
    paths = sorted(set(_collected))
    terminalreporter.section("kvverify counterexample reports")
    for p in paths:
        terminalreporter.write_line(f"{p}  (replay: kvverify replay {p})")
    terminalreporter.write_line("index: kvverify report")
