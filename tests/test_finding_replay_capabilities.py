"""``props.findings.replay_on_vllm`` on a release that cannot express a replay's input (fakes).

A finding's minimal counterexample that the release cannot build (``TargetUnsupported``: 0.14.1's
``MambaSpec`` has no ``mamba_cache_mode`` for F9's align-mode pool) is a skip naming what is
missing — before, it failed and the release page listed it as "no counterexample (suite /
adapter)" on 0.14.1; a replay that runs is still judged strictly both ways.
"""

from __future__ import annotations

import pytest
from _pytest.outcomes import Skipped

from kvverify.props.findings import replay_on_vllm
from kvverify.targets.base import TargetUnsupported


class _Release:
    version = "0.14.1"

    def __init__(self, expects: bool) -> None:
        self.expects = expects

    def finding_replay_masked(self, finding: str) -> None:
        return None

    def expects_finding(self, finding: str) -> bool:
        return self.expects


def _unsupported(target: object) -> None:
    raise TargetUnsupported("vLLM 0.14.1 has no MambaSpec.mamba_cache_mode")


def _reproduces(target: object) -> None:
    return None  # the replay's assertions held: the finding is there


def _absent(target: object) -> None:
    raise AssertionError("F9 no longer reproduces")


@pytest.mark.parametrize("expects", [True, False])
def test_an_inexpressible_replay_skips_and_names_what_is_missing(expects: bool) -> None:
    with pytest.raises(Skipped, match=r"F9: the release cannot express .*mamba_cache_mode"):
        replay_on_vllm(_Release(expects), "F9", _unsupported, "mamba_align_bound_exact")


def test_replays_that_run_are_still_strict_both_ways() -> None:
    replay_on_vllm(_Release(True), "F9", _reproduces, "mamba_align_bound_exact")
    replay_on_vllm(_Release(False), "F9", _absent, "mamba_align_bound_exact")
    with pytest.raises(AssertionError):
        replay_on_vllm(_Release(True), "F9", _absent, "mamba_align_bound_exact")
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        replay_on_vllm(_Release(False), "F9", _reproduces, "mamba_align_bound_exact")
