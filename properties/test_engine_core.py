"""The engine core's startup hooks: a started engine admits only what it completes (finding F14).

``test_started_engine_admits_only_what_it_completes`` (:mod:`kvverify.props.engine_core`) runs
on the reference, which mirrors 0.33.0's ``EngineCore`` startup (:mod:`kvverify.reference.engine_core`):
a strict known failure (F14), passing under the fix option. ``tests/test_engine_core_startup.py``
shows it catching the defect and a planted mutation of the early budget check.
"""

from kvverify import fixes
from kvverify.props.engine_core import test_started_engine_admits_only_what_it_completes as _started
from kvverify.props.findings import known_failure

test_started_engine_admits_only_what_it_completes = known_failure(_started)


def test_started_engine_admits_only_what_it_completes_under_fix() -> None:
    """Under the proposed fix (re-check the budget after the late hooks) startup refuses instead."""
    with fixes.enabled("budget_rechecked_after_late_chunked_prefill_off"):
        _started()
