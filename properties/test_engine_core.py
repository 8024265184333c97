"""The engine core's startup hooks: a started engine admits only what it completes (finding F14).

``test_started_engine_admits_only_what_it_completes`` (:mod:`kvverify.props.engine_core`): on the
reference, which mirrors 0.33.0's ``EngineCore`` startup (:mod:`kvverify.reference.engine_core`),
and on ``--target vllm``, where the release's own hooks decide startup (the real
``SchedulerConfig`` and ``EngineCore._initialize_kv_caches``, :mod:`kvverify.targets.vllm.engine_core`)
and its ``Scheduler`` runs the prompt. A strict known failure (F14) on both, passing under the
fix option / with the F14 patch (``--fix budget_rechecked_after_late_chunked_prefill_off``).
``tests/test_engine_core_startup.py`` shows it catching the defect and a planted mutation.
"""

from kvverify import fixes
from kvverify.props.engine_core import test_started_engine_admits_only_what_it_completes as _started
from kvverify.props.findings import known_failure
from kvverify.targets import Feature, require

test_started_engine_admits_only_what_it_completes = known_failure(_started)


def test_started_engine_admits_only_what_it_completes_under_fix(target) -> None:
    """Under the proposed fix (re-check the budget after the late hooks) startup refuses instead."""
    require(target, Feature.FIX_OPTIONS)
    with fixes.enabled("budget_rechecked_after_late_chunked_prefill_off"):
        _started(target=target)
