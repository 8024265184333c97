"""One request alone on a fresh pool, run by events instead of step by step.

What ``kvverify check`` runs: a request of ``prompt + outputs`` tokens alone on the runtime
pool, through the reference scheduler (:func:`kvverify.reference.driver.run_workload`). Alone,
the FCFS step is simple enough to jump: admission at step 1 (the real prefix lookup, gate and
Mamba chunk split, asked of a scheduler over a two-block pool), then chunked-prefill steps of
``max_num_batched_tokens`` tokens, the last prefill chunk, and one decode token per step until
``max_model_len`` or ``max_tokens``. Within each stretch of equal steps the blocks held per
group follow the managers' own arithmetic (:mod:`kvverify.eventrun.held`), so the run costs
the number of stretches and picture rows, not the number of tokens:
``max_model_len = 10**8`` is judged in well under a second (``docs/performance.md``).

It declines (:class:`~kvverify.eventrun.held.Unsupported`) whatever it cannot reproduce
exactly, and the caller runs the step-by-step driver instead:

* a step that would outgrow the pool (:class:`Preempts`: the request would preempt itself,
  re-prefill from its own cached blocks: the driver's business);
* a bug-zoo flaw switched on (flaws change the managers' and the scheduler's code paths);
* a group kind without a shape (cross attention, a toy kind), or a stretch whose common
  period would need too many evaluations;
* the model and the coordinator disagreeing on the blocks taken at admission.

``properties/test_eventrun.py`` checks, on generated plans and splits, that every run it
accepts gives the driver's result and the driver's timeline trace, row for row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvverify import flaws
from kvverify.eventrun.held import GroupModel, Unsupported, group_model
from kvverify.eventrun.search import held_at, stretch_peak
from kvverify.eventrun.trace import CountRecorder, _Scheduler, new_recorder
from kvverify.reference import arith
from kvverify.reference.driver import WorkloadResult
from kvverify.reference.planner import get_kv_cache_config_from_groups
from kvverify.reference.request import RequestStatus
from kvverify.reference.scheduler import Scheduler
from kvverify.reference.steptrace import StepTrace, group_labels

#: prefill steps the run walks one at a time (Mamba ``align`` chunk splits) before declining
PER_STEP_LIMIT = 1 << 20


class Preempts(Unsupported):
    """A step would need more blocks than the pool has free: the request would preempt itself."""

    def __init__(self, step: int, computed: int, held: int, usable: int) -> None:
        self.step, self.computed, self.held, self.usable = step, computed, held, usable
        super().__init__(f"the request would outgrow the pool by step {step:,} ({held:,} blocks "
                         f"needed with {computed:,} tokens computed, {usable:,} usable)")


class _BlindHashes(Sequence[bytes]):
    """A fresh request's block hashes as a prefix lookup on an *empty* cache reads them.

    Every lookup misses on an empty cache, so the hashes only bound how far each manager's
    scan goes before it finds nothing: full attention stops at its first block, Mamba and
    the sliding window scan to the start and keep nothing, chunked local keeps the null
    blocks of the chunks before the last (from ``max_length``, not from the hashes). The
    probe therefore carries none — the lookup returns what it returns over all of them
    (the driver, which hashes every block, is the check: ``properties/test_eventrun.py``)."""

    def __init__(self, n: int) -> None:
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            return [b""] * len(range(*idx.indices(self._n)))
        if not -self._n <= idx < self._n:
            raise IndexError(idx)
        return b""


class _Probe:
    """What the prefix lookup, the gate and the Mamba chunk split read from a request."""

    def __init__(self, request_id: str, num_prompt_tokens: int, hashes: int) -> None:
        self.request_id = request_id
        self.num_prompt_tokens = num_prompt_tokens
        self.num_tokens = num_prompt_tokens
        self.num_computed_tokens = 0
        self.num_in_flight_tokens = 0
        self.shared_prefix_boundary = 0
        self.status = RequestStatus.WAITING
        self.block_hashes = _BlindHashes(hashes)


def run_alone(vllm_config: Any, kv_cache_config: Any, num_prompt_tokens: int, max_tokens: int, *,
              request_id: str = "full", record: bool = False) -> tuple[WorkloadResult, StepTrace | None]:
    """The driver's :class:`WorkloadResult` (and, with ``record``, its timeline trace) for one
    request of ``num_prompt_tokens`` + up to ``max_tokens`` outputs alone on the plan's pool.

    Raises :class:`Unsupported` (or :class:`Preempts`) where the event-based run would not be
    exact; run :func:`kvverify.reference.driver.run_workload` then."""
    if flaws.active():
        raise Unsupported(f"flaws on ({', '.join(sorted(flaws.active()))}): they change the step")
    length = vllm_config.max_model_len
    if vllm_config.auto_max_model_len or not 1 <= num_prompt_tokens < length or max_tokens < 1:
        raise Unsupported("not a request the scheduler accepts (the driver says why)")
    groups = kv_cache_config.kv_cache_groups
    la = vllm_config.num_lookahead_tokens
    models = [group_model(g.kv_cache_spec, lookahead=la, max_model_len=length) for g in groups]
    probe_config = get_kv_cache_config_from_groups(groups, 2)
    sched = Scheduler(vllm_config, probe_config)
    kvm = sched.kv_cache_manager
    num_blocks = kv_cache_config.num_blocks
    usable = int(arith.usable_blocks(num_blocks))
    budget = vllm_config.max_num_batched_tokens
    # the scheduler's effective request cap (max_num_seqs clamped to the token budget), as the driver's
    run = _Run(models, usable, la, length, record, group_labels(kvm), num_blocks, sched.max_num_running_reqs, budget)

    # step 1: the waiting pass admits (or refuses) the request on the empty pool
    probe = _Probe(request_id, num_prompt_tokens, 0)
    _refuse_a_huge_null_table(models, num_prompt_tokens)
    blocks, num_local, probe.shared_prefix_boundary = kvm.get_computed_blocks(probe)  # type: ignore[arg-type]
    k = min(num_prompt_tokens - num_local, budget)
    if sched.need_mamba_block_aligned_split:
        k = sched._mamba_block_aligned_split(probe, k, num_local)  # type: ignore[arg-type]
    admitted = k > 0
    if admitted:
        coordinator = kvm.coordinator
        full = min(num_prompt_tokens, length)
        need_full = coordinator.get_num_blocks_to_allocate(request_id, full, blocks.blocks, 0, num_local, full,
                                                           apply_admission_cap=True)
        slots = min(num_local + k + la, length)
        need_step = coordinator.get_num_blocks_to_allocate(request_id, slots, blocks.blocks, 0, num_local,
                                                           num_local + k)
        admitted = bool(arith.allocation_fits(need_full, 0, usable)) and bool(arith.allocation_fits(need_step, 0, usable))
    if not admitted:
        run.rec_step(1, scheduled=0, running=0, waiting=1, held=(0,) * len(models), finished=False)
        return run.result(1, finished=False, stall="head_of_line", request_id=request_id, outputs=0)
    held = held_at(models, num_local, k)
    if sum(held) != need_step:
        raise Unsupported(f"the held-block model ({sum(held)}) and the coordinator ({need_step}) disagree "
                          "on the blocks admission takes")
    return run.rest(num_local, k, held, num_prompt_tokens, max_tokens, request_id,
                    sched if sched.need_mamba_block_aligned_split else None, probe)


#: the most null slots a chunked-local lookup may build on an empty pool before the run declines
NULL_TABLE_LIMIT = 1 << 24


def _refuse_a_huge_null_table(models: list[GroupModel], prompt: int) -> None:
    """A chunked-local model without full attention takes every earlier chunk as a hit of null
    blocks (upstream's lookup): a table of ``prompt / B`` slots, too big to build past a point."""
    if any(g.kind == "chunked_local" for g in models) and not any(g.kind in ("full_attention", "mla")
                                                               for g in models):
        slots = prompt // min(g.block_size for g in models)
        if slots > NULL_TABLE_LIMIT:
            raise Unsupported(f"the prefix lookup would build a table of {slots:,} null blocks")


class _Run:
    """The bookkeeping of one event-based run: the pool bound and the optional recorder."""

    def __init__(self, models: list[GroupModel], usable: int, lookahead: int, length: int, record: bool,
                 labels: tuple[str, ...], num_blocks: int, max_num_seqs: int, budget: int) -> None:
        self.models, self.usable, self.la, self.length = models, usable, lookahead, length
        self.budget = budget
        #: the Mamba-align chunk pattern repeats with this period in computed tokens (the split's
        #: block and every group's own period: then every step of a cycle holds no fewer blocks
        #: than the same step one cycle earlier)
        self.cycle_period = 1
        for g in models:
            for q in ((g.block_size if g.kind == "mamba" else 1), g.period or 1):
                self.cycle_period = self.cycle_period * q // math.gcd(self.cycle_period, q)
        self.rec: CountRecorder | None = None
        self.sched: _Scheduler | None = None
        if record:
            self.rec, self.sched = new_recorder(labels, num_blocks, max_num_seqs, budget)

    # -- recording --

    def rec_step(self, step: int, *, scheduled: int, running: int, waiting: int, held: tuple[int, ...],
                 finished: bool, admitted: int = 0) -> None:
        if self.rec is None or self.sched is None:
            return
        zeros = (0,) * len(held)
        if finished:
            self.rec.step(self.sched, step, scheduled=scheduled, running=running, waiting=waiting,
                          held_now=zeros, free_now=self.usable, finished=True, released=held, admitted=admitted)
        else:
            self.rec.step(self.sched, step, scheduled=scheduled, running=running, waiting=waiting,
                          held_now=held, free_now=self.usable - sum(held), admitted=admitted)

    def rec_stretch(self, first: int, c0: int, k: int, m: int, *, last_of_run: bool) -> None:
        if self.rec is None or self.sched is None or m < 1:
            return
        models = self.models

        def row_at(step: int) -> dict[str, Any]:
            held = held_at(models, c0 + (step - first) * k, k)
            return dict(scheduled=k, running=1, waiting=0, held_now=held, free_now=self.usable - sum(held))

        self.rec.stretch(self.sched, first, m, row_at, last_of_run=last_of_run)

    def check_fits(self, step: int, c0: int, k: int, m: int) -> None:
        """Every step of the stretch fits the pool alone, else :class:`Preempts`."""
        peak = stretch_peak(self.models, c0, k, m, lookahead=self.la, max_model_len=self.length)
        if peak > self.usable:
            raise Preempts(step, c0, peak, self.usable)

    # -- the run after admission --

    def rest(self, c: int, k: int, held: tuple[int, ...], prompt: int, max_tokens: int, rid: str,
             split_sched: Scheduler | None, probe: _Probe) -> tuple[WorkloadResult, StepTrace | None]:
        """From step 1 (admitted: ``k`` tokens from ``c`` computed, ``held`` blocks) to the last step."""
        n, outputs, step, walked = prompt, 0, 1, 0
        length, budget = self.length, self.budget
        history: list[tuple[int, int, int]] = []  # Mamba-align prefill steps: (step, computed, chunk)
        while True:
            # step `step` schedules `k` tokens from `c` (known to fit) and holds `held`
            c += k
            done = False
            if c >= n:  # the prompt is computed: the step samples a token
                n += 1
                outputs += 1
                done = n >= length or outputs >= max_tokens
            self.rec_step(step, scheduled=k, running=0 if done else 1, waiting=0, held=held, finished=done,
                          admitted=1 if step == 1 else 0)
            if done:
                return self.result(step, finished=True, stall=None, request_id=rid, outputs=outputs)
            if outputs == 0 and split_sched is None:
                # chunked prefill: chunks of M while more than M remain (no token sampled), then the rest
                partial = -(-(n - c) // budget) - 1
                if partial > 0:
                    self.check_fits(step + 1, c, budget, partial)
                    self.rec_stretch(step + 1, c, budget, partial, last_of_run=False)
                    step += partial
                    c += partial * budget
                k = min(n - c, budget, length - c - 1)
            elif outputs == 0:
                # Mamba align: the scheduler's own chunk split, step by step until its pattern repeats
                walked += 1
                if walked > PER_STEP_LIMIT:
                    raise Unsupported(f"more than {PER_STEP_LIMIT:,} Mamba-aligned prefill steps")
                assert split_sched is not None
                k = self._split(split_sched, probe, c, n)
                jumped = self._jump_cycles(history, step + 1, c, k, n, split_sched)
                if jumped:
                    step, c = step + jumped[0], c + jumped[1]
                    history.clear()
                    k = self._split(split_sched, probe, c, n)
            else:
                # decode: one token a step; every step but the last samples without finishing
                left = min(length - n, max_tokens - outputs)
                if left > 1:
                    self.check_fits(step + 1, c, 1, left - 1)
                    self.rec_stretch(step + 1, c, 1, left - 1, last_of_run=False)
                    step += left - 1
                    c += left - 1
                    n += left - 1
                    outputs += left - 1
                k = 1
            step += 1
            self.check_fits(step, c, k, 1)
            held = held_at(self.models, c, k)

    def _split(self, sched: Scheduler, probe: _Probe, c: int, n: int) -> int:
        probe.num_computed_tokens, probe.num_tokens = c, n
        k = sched._mamba_block_aligned_split(probe, min(n - c, self.budget, self.length - c - 1))  # type: ignore[arg-type]
        if k <= 0:
            raise Unsupported("a running request scheduled no tokens (the driver's stall)")
        return k

    def _jump_cycles(self, history: list[tuple[int, int, int]], step: int, c: int, k: int, n: int,
                     sched: Scheduler) -> tuple[int, int] | None:
        """Skip whole repeats of the Mamba-align chunk pattern far from the prompt's end.

        ``step`` (from ``c``, chunk ``k``) is about to run. When an earlier step of this prefill
        started at the same ``c mod cycle_period``, the steps since then repeat (the split reads
        ``c`` only modulo its block, while the chunk ends before the last checkpoint); they are
        recorded and checked (the last repeat holds the most: see ``cycle_period``) without being
        walked. Returns ``(steps, tokens)`` skipped, or ``None``.
        """
        q = self.cycle_period
        history.append((step, c, k))
        phase = c % q
        first = next((i for i, (_, c0, _) in enumerate(history[:-1]) if c0 % q == phase), None)
        if first is None:
            return None
        cycle = history[first:-1]
        steps, tokens = step - cycle[0][0], c - cycle[0][1]
        checkpoint = max((n - 1) // sched.mamba_block_size * sched.mamba_block_size, 0)
        room = checkpoint - self.budget - 1 - c  # every skipped chunk ends before the last checkpoint
        room = min(room, self.length - self.budget - self.la - c)  # and its slots stay below max_model_len
        repeats = room // tokens if tokens > 0 else 0
        if repeats < 1:
            return None
        offsets = [(c0 - cycle[0][1], k0) for _, c0, k0 in cycle]
        last = c + (repeats - 1) * tokens
        peak = max(sum(g.held(last + dc, k0) for g in self.models) for dc, k0 in offsets)
        if peak > self.usable:
            raise Preempts(step, last, peak, self.usable)
        if self.rec is not None and self.sched is not None:
            models = self.models

            def row_at(s: int) -> dict[str, Any]:
                i, o = divmod(s - step, steps)
                dc, k0 = offsets[o]
                held = held_at(models, c + i * tokens + dc, k0)
                return dict(scheduled=k0, running=1, waiting=0, held_now=held, free_now=self.usable - sum(held))

            self.rec.stretch(self.sched, step, repeats * steps, row_at, last_of_run=False)
        return repeats * steps, repeats * tokens

    def result(self, steps: int, *, finished: bool, stall: str | None, request_id: str,
               outputs: int) -> tuple[WorkloadResult, StepTrace | None]:
        trace = None
        if self.rec is not None and self.sched is not None:
            self.sched.counts = (0, 0) if finished else (0, 1)
            self.sched.held_now = (0,) * len(self.models)
            self.sched.free_now = self.usable
            trace = self.rec.finish(self.sched, steps=steps, stall_reason=stall,
                                    stalled_request_ids=() if finished else (request_id,))
        result = WorkloadResult(finished=(request_id,) if finished else (), stalled=not finished,
                                stall_reason=stall, stalled_request_ids=() if finished else (request_id,),
                                steps=steps, preemptions=0, num_output_tokens=outputs,
                                running=0, waiting=0 if finished else 1, free_blocks=self.usable, trace=())
        return result, trace
