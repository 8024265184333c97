"""Bad input gets a clear ValueError naming the field and range, from the engine's own checks.

``test_bad_input_is_a_clear_error`` (:mod:`kvverify.props.validation`) hands the target a
non-positive field past kvverify's own validation, so the reference's mirror of upstream's config
checks, or a real release's ``CacheConfig`` / ``SchedulerConfig`` / planner, answers it.
``test_bad_block_override_is_a_clear_error`` is the strict known failure of finding F16 (a
non-positive ``num_gpu_blocks_override`` passes ``CacheConfig``; the startup check then blames
``gpu_memory_utilization``) on both targets, passing under its fix / with the F16 patch
(``--fix num_gpu_blocks_override_validated``). ``tests/test_bad_input_engine.py`` shows both catching
zoo flaw ``no_positive_validation``, F16 and planted mutations.
"""

from kvverify import fixes
from kvverify.props.findings import known_failure
from kvverify.props.validation import test_bad_block_override_is_a_clear_error as _override
from kvverify.props.validation import test_bad_input_is_a_clear_error  # noqa: F401
from kvverify.targets import Feature, require

test_bad_block_override_is_a_clear_error = known_failure(_override)


def test_bad_block_override_is_a_clear_error_under_fix(target) -> None:
    """Under the proposed fix (``CacheConfig`` refuses an override <= 0) it passes."""
    require(target, Feature.FIX_OPTIONS)
    with fixes.enabled("num_gpu_blocks_override_validated"):
        _override(target=target)
