"""The pool state machine on upstream vLLM's ``KVCacheManager`` (skipped without vLLM).

``PoolMachine`` is reference-only in the suite (it ignores ``--target``). Here the same rules
and checks — the pool invariants, predictor == allocator and the exact free-queue model
(``FreeQueueModel``) — drive the installed release's manager through the vLLM adapter, which
shows that the model is upstream's order and not only the reference's. Upstream hashes with
its own function, so the reference hash-chain invariant is off. Run it with the pinned venv::

    VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 /work/venvs/vllm-0.33.0/bin/python -m pytest \\
        tests/test_pool_machine_vllm.py -p no:xdist
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kvverify.props.pool_machine import PoolMachine
from kvverify.targets import get_target
from kvverify.targets.base import TargetUnsupported

FAST = settings(max_examples=100, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
                suppress_health_check=list(HealthCheck), report_multiple_bugs=False, stateful_step_count=20)
SEEN = {"pools": 0, "request_frees": 0}  # how much of upstream the runs reached


@pytest.fixture(scope="module")
def upstream_machine() -> type[PoolMachine]:
    pytest.importorskip("vllm", reason="vLLM is not installed (see docs/vllm-target.md)")
    from kvverify.targets.vllm import runtime

    target: Any = get_target("vllm")
    seen = SEEN

    class UpstreamPoolMachine(PoolMachine):
        reference_hashes = False

        def make_manager(self, plan):
            try:
                view = target.kv_cache_manager(plan)
            except TargetUnsupported:
                return None
            seen["pools"] += 1
            upstream_free = view.upstream.free

            def free(request: Any) -> None:
                seen["request_frees"] += 1
                upstream_free(request)

            view.free = free
            return view, view.block_pool._pool  # the model wraps what upstream's managers call

        def make_request(self, request_id, prompt):
            return runtime.request(target, self.kvm, request_id, prompt, 1)

    return UpstreamPoolMachine


def test_upstream_follows_the_free_queue_model(upstream_machine: type[PoolMachine]) -> None:
    run_state_machine_as_test(upstream_machine, settings=FAST)
    assert SEEN["pools"] >= 50 and SEEN["request_frees"] >= 50  # upstream really ran


def test_the_model_catches_forward_order_frees_on_upstream(upstream_machine: type[PoolMachine],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's own manager patched to free a request head-first: the model sees it."""
    import vllm.v1.core.single_type_kv_cache_manager as stm

    monkeypatch.setattr(stm.SingleTypeKVCacheManager, "free",
                        lambda self, rid: self.block_pool.free_blocks(self.pop_blocks_for_free(rid)))
    with pytest.raises(AssertionError, match="pool.free_queue_order"):
        run_state_machine_as_test(upstream_machine, settings=FAST)
