"""The scheduler's event loop (``Scheduler.event_loop_normal``), one step at a time.

A step runs a prefill batch when ``PrefillAdder`` admits anything (the chunked request
first, then the waiting queue in arrival order, FCFS), else a decode step over the running
batch: ``check_decode_mem``, ``retract_decode`` when it fails (retracted requests rejoin the
waiting queue; an aborted one finishes with its reason), then ``prepare_for_decode``. Each
forward appends one token per request (``tokens_per_step`` under speculation). Requests are
validated at arrival (``validate_input_length``, ``init_req_max_new_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvverify.sglang.allocator import BaseAllocator
from kvverify.sglang.batch import ScheduleBatch, release_finished
from kvverify.sglang.config import SglangConfig
from kvverify.sglang.pool import build_allocator, resolve_max_total_num_tokens
from kvverify.sglang.prefill_adder import AddReqResult, PrefillAdder
from kvverify.sglang.radix_cache import RadixCache
from kvverify.sglang.request import Req
from kvverify.sglang.validation import Limits, init_req_max_new_tokens, validate_input_length, worker_limits


@dataclass
class StepOutcome:
    kind: str  # "prefill" | "decode" | "idle"
    tokens: int = 0
    finished: int = 0
    retracted: int = 0
    aborted: int = 0


class Scheduler:
    def __init__(self, config: SglangConfig, *, disable_radix_cache: bool = False) -> None:
        self.config = config
        self.max_total_num_tokens = resolve_max_total_num_tokens(config)
        self.allocator: BaseAllocator = build_allocator(config, self.max_total_num_tokens)
        self.tree_cache = RadixCache(self.allocator, config.page_size, disable=disable_radix_cache)
        self.limits: Limits = worker_limits(config, self.max_total_num_tokens)
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked_req: Req | None = None
        self.done: list[Req] = []
        self.new_token_ratio = config.init_new_token_ratio

    # -- arrival --

    def add_request(self, rid: str, input_ids: list[int], max_new_tokens: int) -> Req:
        """Validate and queue a request; a refused one is finished at once with the error."""
        req = Req(rid, list(input_ids), 0)
        error = validate_input_length(len(input_ids), self.limits.max_req_input_len)
        if error is not None:
            req.finished_reason, req.aborted = f"abort: {error}", True
            self.done.append(req)
            return req
        req.max_new_tokens = init_req_max_new_tokens(self.config, self.limits, len(input_ids), max_new_tokens)
        self.waiting.append(req)
        return req

    # -- one step --

    def step(self) -> StepOutcome:
        adder = self._schedule_prefill()
        if adder is not None and adder.can_run_list:
            return self._run_prefill(adder)
        if self.running:
            return self._run_decode()
        return StepOutcome("idle")

    def _schedule_prefill(self) -> PrefillAdder | None:
        if not self.waiting and self.chunked_req is None:
            return None
        if len(self.running) >= self.config.max_running_requests:
            return None
        cfg = self.config
        adder = PrefillAdder(cfg.page_size, self.tree_cache, self.allocator, self.running, self.new_token_ratio,
                             cfg.max_prefill_tokens, cfg.chunked_prefill_size)
        if self.chunked_req is not None:
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in list(self.waiting):
            if len(self.running) + len(adder.can_run_list) >= cfg.max_running_requests:
                break
            if req.seq_len == 0 and req.last_node is None:
                req.prefix_pages, node = self.tree_cache.match_prefix(req.fill_ids)
                req.last_node = node
            res = adder.add_one_req(req, has_chunked_req=self.chunked_req is not None)
            if res is not AddReqResult.CONTINUE:
                break  # (a request just added stays added: the verdict is for the next one)
        admitted = set(map(id, adder.can_run_list))
        self.waiting = [r for r in self.waiting if id(r) not in admitted]
        if adder.new_chunked_req is not None:
            self.chunked_req = adder.new_chunked_req
        return adder

    def _run_prefill(self, adder: PrefillAdder) -> StepOutcome:
        batch = ScheduleBatch(adder.can_run_list, self.allocator, self.tree_cache, self.config.tokens_per_step)
        batch.prepare_for_extend(adder.extend_lens)
        out = StepOutcome("prefill")
        for req in adder.can_run_list:
            if req is self.chunked_req:
                continue  # more chunks to go
            req.output_ids.append(len(req.output_ids))
            out.tokens += 1
            req.check_finished()
            if req.finished():
                release_finished(req, self.allocator, self.tree_cache)
                self.done.append(req)
                out.finished += 1
            else:
                self.running.append(req)
        return out

    def _run_decode(self) -> StepOutcome:
        batch = ScheduleBatch(self.running, self.allocator, self.tree_cache, self.config.tokens_per_step)
        out = StepOutcome("decode")
        if not batch.check_decode_mem():
            retracted, ratio, aborted = batch.retract_decode()
            self.waiting.extend(retracted)
            self.done.extend(aborted)
            out.retracted, out.aborted = len(retracted), len(aborted)
            self.new_token_ratio = ratio
        else:
            self.new_token_ratio = max(self.new_token_ratio - self.config.new_token_ratio_decay,
                                       self.config.min_new_token_ratio)
        self.running = batch.reqs
        if not self.running:
            return out
        batch.prepare_for_decode()
        still = []
        for req in self.running:
            n = min(self.config.tokens_per_step, req.max_new_tokens - len(req.output_ids))
            req.output_ids.extend(range(len(req.output_ids), len(req.output_ids) + n))
            out.tokens += n
            req.check_finished()
            if req.finished():
                release_finished(req, self.allocator, self.tree_cache)
                self.done.append(req)
                out.finished += 1
            else:
                still.append(req)
        self.running = still
        return out

    # -- accounting --

    def held_pages(self) -> list[int]:
        """Every page a request or the radix cache holds (each exactly once if all is well)."""
        held = [p for r in self.running + self.waiting + ([self.chunked_req] if self.chunked_req else [])
                for p in r.own_pages]
        return held + self.tree_cache.cached_pages()

    # -- what the driver reads (SglangSchedulerLike) --

    def outcomes(self) -> dict[str, tuple[str, int]]:
        reqs = self.done + self.running + self.waiting + ([self.chunked_req] if self.chunked_req else [])
        return {r.rid: (r.finished_reason or "", len(r.output_ids)) for r in reqs}

    def unfinished(self) -> int:
        return len(self.running) + len(self.waiting) + (1 if self.chunked_req else 0)

    def num_running(self) -> int:
        return len(self.running) + (1 if self.chunked_req else 0)

    def fingerprint(self) -> tuple:
        def reqs(rs: list[Req]) -> tuple:
            return tuple((r.rid, len(r.output_ids), r.seq_len, r.prefilled) for r in rs)
        return (reqs(self.waiting), reqs(self.running), self.chunked_req.rid if self.chunked_req else None,
                tuple(self.allocator.free_pages), tuple(sorted(self.tree_cache.cached_pages())),
                round(self.new_token_ratio, 12))

    def snapshot(self) -> dict[str, int]:
        return {"free": self.allocator.available_size(), "cached": len(self.tree_cache.cached_pages()) * self.config.page_size,
                "pool": self.allocator.num_pages * self.config.page_size, "running": self.num_running(),
                "waiting": len(self.waiting)}
