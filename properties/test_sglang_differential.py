"""The SGLang reference vs the installed SGLang, case by case (needs ``--target sglang``)."""

import pytest

from kvverify.sglang import differential


@pytest.fixture(scope="module")
def target(request):
    """The installed SGLang: the differential needs ``--target sglang``."""
    from kvverify.targets import get_sglang_target, targets_for
    name = request.config.getoption("target")
    if targets_for(name).get("sglang") != "sglang":
        pytest.skip("differential vs SGLang: needs --target sglang (an installed SGLang, "
                    "scripts/install-sglang-target.sh)")
    return get_sglang_target("sglang")


test_sglang_differential_admission = differential.test_sglang_differential_admission
test_sglang_differential_retraction = differential.test_sglang_differential_retraction
test_sglang_differential_pool = differential.test_sglang_differential_pool
