"""The tensor plan, and the reported concurrency (known finding F1)."""

from kvverify import fixes
from kvverify.props.findings import known_failure
from kvverify.props.plan import test_reported_concurrency_matches_servability as _concurrency
from kvverify.props.plan import test_tensor_plan_matches_block_count  # noqa: F401
from kvverify.targets import Feature, require

test_reported_concurrency_matches_servability = known_failure(_concurrency)


def test_reported_concurrency_under_fix(target) -> None:
    """Under the proposed fix (divide the usable N - 1 blocks) the property holds."""
    require(target, Feature.FIX_OPTIONS)
    with fixes.enabled("concurrency_counts_usable_blocks"):
        _concurrency(target=target)
