"""Runtime: predictor == allocator, the SWA/chunked caps, and the pool state machine."""

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvverify import fixes
from kvverify.props.findings import known_failure
from kvverify.props import examples as ex
from kvverify.props.pool_machine import TestPoolMachine  # noqa: F401
from kvverify.props.runtime import (  # noqa: F401
    check_caps_on_workload,
    test_held_blocks_within_admission_caps,
    test_fine_grained_prefix_hits_predictor_equals_allocator,
    test_predictor_equals_allocator,
)
from kvverify.props.runtime import test_chunked_local_held_blocks_within_admission_caps as _chunked
from kvverify.reports.capture import ReplayData
from kvverify.targets import Feature, require


def _f2_then_search(target) -> None:
    """The explicit minimal case first (always replayed), then the search.

    The case runs through the property's own body (``.hypothesis.inner_test``, its workload
    served as the recorded ``data`` draw), not beside it: a failure there is captured like a
    shrunk example and writes its counterexample report (called directly, it wrote none).
    A case the target refuses at startup promises nothing and is left to the search."""
    case = ex.F2_CASE
    if target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory).starts:
        body = _chunked.hypothesis.inner_test
        draws = [{"label": "workload", "value": list(ex.F2_WORKLOAD)}]

        @settings(database=None, deadline=None, max_examples=1, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(data=st.builds(ReplayData, st.just(draws)))  # a fresh one for each run
        def explicit(data) -> None:
            body(target=target, case=case, data=data)

        explicit()
    _chunked(target=target)


@known_failure
def test_chunked_local_held_blocks_within_admission_caps(target) -> None:
    _f2_then_search(target)


def test_chunked_local_caps_under_fix(target) -> None:
    """Under the proposed fix (one more block when C % B != 0) the property holds."""
    require(target, Feature.FIX_OPTIONS)
    with fixes.enabled("chunked_local_cap_plus_one"):
        _f2_then_search(target)
