"""A stateful model of pool + managers: allocate, append, free, prefix hits, evictions.

Hypothesis drives ``KVCacheManager`` directly with random interleavings (swarm testing
of rules is built in); after every step the pool invariants (the free queue exactly
upstream's order included) and predictor == allocator must hold, and ``allocate_slots``
must never raise on a step it admitted.

Reference-only in the suite: the machine builds the reference ``KVCacheManager`` whatever
``--target`` says (:meth:`PoolMachine.make_manager` and :meth:`PoolMachine.make_request` are
the two places a subclass changes that: ``tests/test_pool_machine_vllm.py`` runs it on
upstream 0.33.0). A failure's report replays the program with ``record_steps`` on
(:class:`kvverify.reference.steptrace.RuleRecorder`) and draws it rule by rule.
"""

from __future__ import annotations

from typing import ClassVar

from hypothesis import note, target as hyp_target
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, multiple, rule

from kvverify.errors import KVVerifyError
from kvverify.invariants.allocation import AllocationRecorder, check_allocations
from kvverify.invariants.base import assert_no_violations
from kvverify.invariants.pool import FreeQueueModel, check_free_queue, check_pool
from kvverify.reference.kv_cache_manager import KVCacheManager
from kvverify.reference.planner import plan_kv_cache
from kvverify.reference.pool import hash_block_tokens
from kvverify.reference.request import Request
from kvverify.reference.steptrace import RuleRecorder
from kvverify.strategies import startup_cases

SHARED_PREFIX = tuple(range(10_000, 10_512))


class PoolMachine(RuleBasedStateMachine):
    requests = Bundle("requests")
    record_steps: ClassVar[bool] = False  # a report's replay records the run (RuleRecorder)
    reference_hashes: ClassVar[bool] = True  # block hashes are the reference's (chain recomputed)

    def __init__(self) -> None:
        super().__init__()
        self.kvm: KVCacheManager | None = None
        self.recorder: AllocationRecorder | None = None
        self.counter = 0
        self.max_len = 2
        self.max_usage = 0.0
        self.live: dict[str, Request] = {}  # requests not freed yet (hash-chain invariant)
        self.steps: RuleRecorder | None = None

    @initialize(case=startup_cases(allow_auto=False, max_len=256, sources=("override",), workers=False))
    def setup(self, case) -> None:
        plan = plan_kv_cache(case.vllm_config, case.kv_cache_specs, case.available_memory)
        self.plan = plan
        if not plan.groups or plan.num_blocks < 2 or plan.vllm_config.max_model_len < 2:
            return
        made = self.make_manager(plan)
        if made is None:
            return
        self.kvm, pool = made
        self.recorder = AllocationRecorder(self.kvm)
        self.free_queue = FreeQueueModel(self.kvm, pool)  # upstream's exact free-queue order
        self.max_len = plan.vllm_config.max_model_len
        if self.record_steps:
            self.steps = RuleRecorder(self.kvm, lambda: len(self.live))
            self.steps.step("setup")
        note(f"num_blocks={plan.num_blocks} groups={[g.kv_cache_spec.kind for g in plan.groups]}")

    def make_manager(self, plan) -> tuple[KVCacheManager, object] | None:
        """The ``KVCacheManager`` under test and the pool object its managers call."""
        kvm = KVCacheManager.from_config(plan.kv_cache_config, plan.vllm_config)
        return kvm, kvm.block_pool

    def make_request(self, request_id: str, prompt: list[int]) -> Request:
        """A one-output-token request hashed by the manager's block hasher."""
        assert self.kvm is not None
        return Request(request_id, prompt, 1, block_hasher=self.kvm.request_block_hasher)

    def _step(self, rule: str) -> None:
        if self.steps is not None:
            self.steps.step(rule)

    def _allocate(self, req: Request, num_new: int, hit: int = 0, blocks=None, gate: bool = False):
        assert self.kvm is not None
        try:
            return self.kvm.allocate_slots(req, num_new, hit, blocks, full_sequence_must_fit=gate)
        except KVVerifyError as e:
            raise AssertionError(f"allocate_slots raised on a step it admitted: {e}") from e

    @rule(target=requests, prompt_len=st.integers(1, 256), shared=st.integers(0, 512))
    def add_request(self, prompt_len: int, shared: int):
        if self.kvm is None:
            return multiple()
        self._step("add_request")
        prompt_len = min(prompt_len, self.max_len - 1)
        common = min(shared, prompt_len)
        self.counter += 1
        prompt = list(SHARED_PREFIX[:common]) + [20_000 * self.counter + i for i in range(prompt_len - common)]
        req = self.make_request(f"r{self.counter}", prompt)
        blocks, hit, _ = self.kvm.get_computed_blocks(req)
        chunk = prompt_len - hit
        if chunk <= 0:
            return multiple()
        got = self._allocate(req, chunk, hit, blocks, gate=True)
        if got is None:
            return multiple()
        req.num_computed_tokens = hit + chunk
        self.live[req.request_id] = req
        return req

    @rule(req=requests, n=st.integers(1, 16))
    def append_tokens(self, req: Request, n: int):
        assert self.kvm is not None
        self._step("append_tokens")
        room = self.max_len - 1 - req.num_tokens
        n = min(n, room)
        if n <= 0:
            return
        for i in range(n):
            req.append_output_token_ids(30_000 + i)
        got = self._allocate(req, req.num_tokens - req.num_computed_tokens)
        if got is not None:
            req.num_computed_tokens = req.num_tokens
        else:
            self.kvm.free(req)  # preempted: what the scheduler would do
            req.num_computed_tokens = 0

    @rule(req=consumes(requests))
    def free(self, req: Request):
        assert self.kvm is not None
        self._step("free")
        self.kvm.free(req)
        self.live.pop(req.request_id, None)

    @rule()
    def reset_prefix_cache(self):
        if self.kvm is not None:
            self._step("reset_prefix_cache")
            self.kvm.reset_prefix_cache()

    @invariant()
    def pool_invariants(self):
        if self.kvm is None:
            return
        self.max_usage = max(self.max_usage, self.kvm.usage)
        violations = check_pool(self.kvm)
        assert self.recorder is not None
        violations += check_allocations(self.recorder.records)
        violations += self.free_queue.violations or check_free_queue(self.kvm.block_pool, self.free_queue)
        assert_no_violations(violations)

    @invariant()
    def block_hashes_follow_the_chain(self):
        """Every request's block hashes, recomputed from its tokens along the chain
        (``hash_block_size`` blocks, each hashed with its parent): exactly the full blocks."""
        if self.kvm is None or self.kvm.request_block_hasher is None or not self.reference_hashes:
            return  # prefix caching off: requests carry no hashes (or another hash function)
        size = self.kvm.coordinator.hash_block_size
        for req in self.live.values():
            tokens, parent, expected = req.all_token_ids, None, []
            for start in range(0, len(tokens) - size + 1, size):
                parent = hash_block_tokens(parent, tokens[start:start + size])
                expected.append(parent)
            assert req.block_hashes == expected, (
                f"{req.request_id}: {len(req.block_hashes)} block hashes, {len(expected)} recomputed "
                f"from {len(tokens)} tokens at hash_block_size={size} (first difference at "
                f"{next((i for i, (a, b) in enumerate(zip(req.block_hashes, expected)) if a != b), None)})")


    def teardown(self) -> None:
        if self.steps is not None:
            self.steps.close()
        hyp_target(self.max_usage, label="max pool usage")  # steer toward exhaustion


TestPoolMachine = PoolMachine.TestCase
