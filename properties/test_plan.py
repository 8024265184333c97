"""The tensor plan, and the reported concurrency (known finding F1)."""

import pytest

from kvverify import fixes
from kvverify.props.findings import known_failure
from kvverify.props.plan import test_reported_concurrency_matches_servability as _concurrency
from kvverify.props.plan import test_tensor_plan_matches_block_count  # noqa: F401

test_reported_concurrency_matches_servability = known_failure(_concurrency)


def test_reported_concurrency_under_fix(target) -> None:
    """Under the proposed fix (divide the usable N - 1 blocks) the property holds."""
    if target.name != "reference":
        pytest.skip("fixes are options on the reference")
    with fixes.enabled("concurrency_counts_usable_blocks"):
        _concurrency(target=target)
