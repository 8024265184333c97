"""The SGLang target under test conforms to SGLang's contract (the reference by default, the
installed SGLang with ``--target sglang``)."""

import pytest

from kvverify.targets.sglang_conformance import check_sglang_target


@pytest.fixture(scope="module")
def target(sglang_target):
    return sglang_target


def test_sglang_target_conforms(target) -> None:
    assert check_sglang_target(target) == []
