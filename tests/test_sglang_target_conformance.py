"""Every SGLang target honours SGLang's contract (kvverify.targets.sglang_conformance).

As ``tests/test_target_conformance.py`` for vLLM's: the check passes the SGLang reference and
a fake offering a subset of the capabilities, and rejects broken fakes — one per member the
contract's protocols declare (generated from them, so a member added to
``kvverify/targets/sglang_contract.py`` is not covered until the check calls it and judges
what comes back). The installed SGLang: ``properties/test_sglang_conformance.py --target sglang``.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvverify.targets.base import protocol_members
from kvverify.targets.conformance import missing_members
from kvverify.targets.sglang_conformance import check_sglang_target
from kvverify.targets.sglang_contract import (
    SGLANG_BASE_MEMBERS,
    SGLANG_CAPABILITY_PROTOCOLS,
    SglangCapability,
    SglangTarget,
    SglangTargetBase,
    require_capability,
)
from kvverify.targets.sglang_reference import SglangReferenceTarget


def test_the_reference_conforms() -> None:
    assert check_sglang_target(SglangReferenceTarget()) == []


class PoolAndAdmissionOnly(SglangReferenceTarget):
    """A fake release: pool sizing and admission, no retraction nor scheduler, page size 1."""

    name = "sglang-pool-only"
    sglang_capabilities = frozenset({SglangCapability.POOL, SglangCapability.ADMISSION})

    def lacks(self, capability: SglangCapability) -> str | None:
        return None if capability in self.sglang_capabilities else f"{self.name}: no {capability.value}"


def test_a_capability_subset_conforms_and_skips_with_its_reason() -> None:
    fake = PoolAndAdmissionOnly()
    assert check_sglang_target(fake) == []
    with pytest.raises(pytest.skip.Exception, match="sglang-pool-only: no sglang_retraction"):
        require_capability(fake, SglangCapability.RETRACTION)
    require_capability(fake, SglangCapability.POOL)  # no skip


def test_the_contract_is_its_base_and_capability_protocols() -> None:
    assert SGLANG_BASE_MEMBERS == ("name", "version", "sglang_capabilities", "lacks")
    assert set(SGLANG_CAPABILITY_PROTOCOLS) == set(SglangCapability)
    union = [m for proto in SGLANG_CAPABILITY_PROTOCOLS.values() for m in protocol_members(proto)]
    assert len(union) == len(set(union)) and not set(union) & set(SGLANG_BASE_MEMBERS)
    assert set(SglangTarget.__bases__) - {object} >= {SglangTargetBase, *[
        p for p in SGLANG_CAPABILITY_PROTOCOLS.values() if protocol_members(p)]}
    assert protocol_members(SglangTarget) == {}


class MissingRetraction:
    """Lists RETRACTION without its method."""

    name = "missing"
    version = "0.0.1"
    sglang_capabilities = frozenset({SglangCapability.RETRACTION})

    def lacks(self, capability: SglangCapability) -> str | None:
        return None if capability in self.sglang_capabilities else "not here"


class LacksWithoutReason(SglangReferenceTarget):
    sglang_capabilities = frozenset({SglangCapability.POOL})

    def lacks(self, capability: SglangCapability) -> str | None:
        return None  # planted defect: says it has what it does not list


def test_broken_targets_are_rejected() -> None:
    assert any(p.startswith("sglang_retraction: probe_retraction() missing")
               for p in check_sglang_target(MissingRetraction()))
    assert missing_members(MissingRetraction(), SglangTargetBase) == []
    assert any(p.startswith("lacks: sglang_admission is not offered") for p in check_sglang_target(
        LacksWithoutReason()))


_WRONG = object()  # of no type any member may return


def _contract_members() -> list[tuple[str, str]]:
    protos = [SglangTargetBase, *SGLANG_CAPABILITY_PROTOCOLS.values()]
    return [(name, kind) for proto in protos for name, kind in protocol_members(proto).items()]


@pytest.mark.parametrize("member, kind", _contract_members(), ids=[m for m, _ in _contract_members()])
def test_every_member_of_the_contract_is_checked(member: str, kind: str) -> None:
    """The reference with one member answering nonsense is rejected, naming the member."""
    value: Any = (lambda self, *a, **k: _WRONG) if kind == "method" else _WRONG
    broken = type(f"Broken_{member}", (SglangReferenceTarget,), {member: value})()
    problems = check_sglang_target(broken)
    assert any(p.startswith((f"{member}:", f"{member}(")) for p in problems), problems
