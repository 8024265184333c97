"""The reference and the vLLM adapter run the same effective config (traced on 0.25.0's report).

Two gaps made the reference replay of a release's counterexample diverge from the release, so
the attribution called a report "unexplained" that one zoo flaw explains:

* ``max_num_seqs > max_num_batched_tokens``: upstream's ``SchedulerConfig`` refuses it, the
  adapter clamps it (as a user must), the reference ran the larger cap;
* releases before 0.28 (0.25, 0.27) read ``num_speculative_tokens`` off the speculative config
  in ``Scheduler.__init__`` only, and the adapter builds none: their scheduler ran with no
  draft tokens (no padding) while the example asked for some.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from runtime_helpers import full, kv_config

from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec, run_workload
from kvverify.reference.scheduler import Scheduler
from kvverify.targets.vllm.scheduler import give_speculative_tokens


def test_the_reference_clamps_the_request_cap_to_the_token_budget() -> None:
    cfg = VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=2, max_num_seqs=128)
    sched = Scheduler(cfg, kv_config(20, full(16)))
    assert sched.max_num_running_reqs == 2
    assert Scheduler(VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=64, max_num_seqs=3),
                     kv_config(20, full(16))).max_num_running_reqs == 3


def test_never_more_running_than_the_budget_allows() -> None:
    """Four one-token decodes on a budget of 2: at most two run at once (upstream's cap)."""
    cfg = VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=2, max_num_seqs=128)
    seen: list[int] = []
    work = [WorkloadSpec(f"r{i}", (100 * i,), 8) for i in range(4)]
    result = run_workload(cfg, kv_config(20, full(16)), work,
                          on_step=lambda s, step: seen.append(len(s.running)))
    assert result.completed and max(seen) == 2


@pytest.mark.parametrize(("lookahead_property", "speculative_tokens_property", "given"), [
    (False, True, True),    # 0.25, 0.27: only the scheduler can be told
    (True, True, False),    # 0.28 and later: the config subclass answers the property
    (False, False, False),  # <= 0.22: such a config is refused before a scheduler is built
])
def test_releases_before_0_28_get_their_draft_tokens(lookahead_property: bool, speculative_tokens_property: bool,
                                                      given: bool) -> None:
    caps = SimpleNamespace(lookahead_property=lookahead_property, speculative_tokens_property=speculative_tokens_property)
    scheduler = SimpleNamespace(num_spec_tokens=0)
    give_speculative_tokens(caps, scheduler, 2)
    assert scheduler.num_spec_tokens == (2 if given else 0)
