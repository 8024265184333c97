"""Every flaw's regression case (:attr:`kvverify.flaws.Flaw.regression`), both ways, for
every engine (:data:`kvverify.engines.ENGINES`).

Each case (``kvverify/zoo_cases.py``, ``kvverify/sglang/zoo_cases.py``) passes on the faithful
reference and fails with its flaw on, so the deterministic CI gate always replays it,
whatever random search reaches. The numbers are the minimal boundaries the properties shrink
to (see ``kvverify zoo``).
"""

from __future__ import annotations

import pytest

from kvverify import engines, flaws
from kvverify.reference.config import VllmConfig
from kvverify.reference.workloads import full_length_request
from kvverify.targets import get_target
from kvverify.zoo_cases import full


@pytest.mark.parametrize("name", list(engines.flaw_catalog()))
def test_regression_case_passes_faithful_and_fails_flawed(name: str) -> None:
    case = engines.flaw(name).regression_case()
    assert case() == [], f"{name}: the faithful reference must pass its regression case"
    with engines.enabled(flaws=[name]):
        assert case(), f"{name} must be caught by its regression case"


def test_seed_hang_end_to_end() -> None:
    """#35541: with the flaw the check passes for 32 blocks / L=512 / B=16, then 0 tok/s."""
    t = get_target("reference")
    specs = {f"layer.{i}": full() for i in range(2)}
    config = VllmConfig(block_size=16, max_model_len=512, num_gpu_blocks_override=32)
    assert not t.plan(config, [specs]).starts
    with flaws.enabled("null_block_not_reserved"):
        plan = t.plan(config, [specs])
        assert plan.starts and plan.num_blocks == 32
        result = t.run_workload(plan, [full_length_request(512, 1)])
    assert result.stalled and result.stall_reason == "head_of_line"
    assert (result.running, result.waiting) == (0, 1) and result.free_blocks == 31
