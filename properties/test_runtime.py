"""Runtime: predictor == allocator, the SWA/chunked caps, and the pool state machine."""

import pytest

from kvverify import fixes
from kvverify.props.findings import known_failure
from kvverify.props import examples as ex
from kvverify.props.pool_machine import TestPoolMachine  # noqa: F401
from kvverify.props.runtime import (  # noqa: F401
    check_caps_on_workload,
    test_held_blocks_within_admission_caps,
    test_predictor_equals_allocator,
)
from kvverify.props.runtime import test_chunked_local_held_blocks_within_admission_caps as _chunked


def _f2_then_search(target) -> None:
    """The explicit minimal case first (always replayed), then the search."""
    case = ex.F2_CASE
    check_caps_on_workload(target, target.plan(case.vllm_config, case.kv_cache_specs), ex.F2_WORKLOAD)
    _chunked(target=target)


@known_failure
def test_chunked_local_held_blocks_within_admission_caps(target) -> None:
    _f2_then_search(target)


def test_chunked_local_caps_under_fix(target) -> None:
    """Under the proposed fix (one more block when C % B != 0) the property holds."""
    if target.name != "reference":
        pytest.skip("fixes are options on the reference")
    with fixes.enabled("chunked_local_cap_plus_one"):
        _f2_then_search(target)
