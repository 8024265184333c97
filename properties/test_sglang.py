"""SGLang's guarantees (:mod:`kvverify.targets.sglang_contract`), on the SGLang reference
(``pytest properties/``) or the installed SGLang (``--target sglang``).

Finding SG1 is a strict known failure here: it fails on SGLang 0.5.23 and on the faithful
reference, and passes under its fix (``--fix sglang_input_bound_page_aware``: the reference's
fix option, or SGLang with the finding's patch applied).
"""

import pytest

from kvverify.sglang import fixes as sglang_fixes
from kvverify.sglang import props


@pytest.fixture(scope="module")
def target(sglang_target):
    """The properties below take ``target``: here it is the SGLang target."""
    return sglang_target


test_sglang_validated_request_is_schedulable = props.test_sglang_validated_request_is_schedulable
test_sglang_retraction_frees_enough = props.test_sglang_retraction_frees_enough
test_sglang_retraction_terminates_with_reason = props.test_sglang_retraction_terminates_with_reason
test_sglang_pool_size_is_allocator_pool = props.test_sglang_pool_size_is_allocator_pool
test_sglang_admitted_workload_finishes = props.test_sglang_admitted_workload_finishes


def _known(finding: str, fix: str):
    return pytest.mark.xfail(not sglang_fixes.is_on(fix), strict=True,
                             reason=f"known finding {finding} (reports/findings/{finding}-*.md); fix: {fix}")


@_known("SG1", "sglang_input_bound_page_aware")
def test_sglang_finding_sg1(target) -> None:
    """SG1: validation accepts a request ``PrefillAdder`` never admits on an empty pool."""
    props.test_sglang_validated_request_is_schedulable_sg1(target=target)
