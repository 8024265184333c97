"""The SGLang reference as an SGLang target (its flaws apply through :mod:`kvverify.sglang.flaws`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvverify.sglang import REFERENCE_RELEASE
from kvverify.sglang.batch import ScheduleBatch
from kvverify.sglang.config import SglangConfig
from kvverify.sglang.driver import SglangRequestSpec, SglangWorkloadResult, run_workload
from kvverify.sglang.pool import SglangStartupError, build_allocator, resolve_max_total_num_tokens
from kvverify.sglang.prefill_adder import PrefillAdder
from kvverify.sglang.radix_cache import RadixCache
from kvverify.sglang.request import Req
from kvverify.sglang.scheduler import Scheduler
from kvverify.sglang.validation import init_req_max_new_tokens, validate_input_length, worker_limits
from kvverify.targets.base import TargetUnsupported
from kvverify.targets.sglang_contract import (
    AdmissionProbe,
    DecodingReqSpec,
    PoolProbe,
    RetractProbe,
    SglangCapability,
)


def decoding_batch_ids(spec: DecodingReqSpec, index: int) -> list[int]:
    """The prompt of the ``index``-th request of a retraction probe (distinct, no cache hits)."""
    return [10**9 + index * 100_003 + i for i in range(spec.input_len)]


class SglangReferenceTarget:
    """Every SGLang capability, on :mod:`kvverify.sglang`."""

    name = "sglang-reference"
    version = REFERENCE_RELEASE
    sglang_capabilities = frozenset(SglangCapability)

    def lacks(self, capability: SglangCapability) -> str | None:
        return None

    def derive_pool(self, config: SglangConfig) -> PoolProbe:
        try:
            tokens = resolve_max_total_num_tokens(config)
        except SglangStartupError as e:
            return PoolProbe(None, None, None, error=f"{type(e).__name__}: {e}")
        allocator = build_allocator(config, tokens)
        return PoolProbe(tokens, allocator.size, allocator.available_size())

    def probe_admission(self, config: SglangConfig, input_len: int, max_new_tokens: int) -> AdmissionProbe:
        try:
            tokens = resolve_max_total_num_tokens(config)
        except SglangStartupError as e:
            return AdmissionProbe(0, 0, f"{type(e).__name__}: {e}", None, None)
        limits = worker_limits(config, tokens)
        error = validate_input_length(input_len, limits.max_req_input_len)
        if error is not None:
            return AdmissionProbe(tokens, limits.max_req_input_len, error, None, None)
        max_new = init_req_max_new_tokens(config, limits, input_len, max_new_tokens)
        allocator = build_allocator(config, tokens)
        tree = RadixCache(allocator, config.page_size)
        req = Req("probe", list(range(input_len)), max_new)
        req.prefix_pages, req.last_node = tree.match_prefix(req.fill_ids)
        adder = PrefillAdder(config.page_size, tree, allocator, [], config.init_new_token_ratio,
                             config.max_prefill_tokens, config.chunked_prefill_size)
        rem = adder.rem_total_tokens
        res = adder.add_one_req(req, has_chunked_req=False)
        admitted = "admitted" if req in adder.can_run_list else res.value
        return AdmissionProbe(tokens, limits.max_req_input_len, None, max_new, admitted, rem)

    def probe_retraction(self, config: SglangConfig, batch: Sequence[DecodingReqSpec]) -> RetractProbe:
        tokens = resolve_max_total_num_tokens(config)
        allocator = build_allocator(config, tokens)
        tree = RadixCache(allocator, config.page_size)
        reqs = []
        for i, spec in enumerate(batch):
            if spec.output_len < 1 or spec.output_len > spec.max_new_tokens:
                raise TargetUnsupported("a decoding request has 1 <= output_len <= max_new_tokens")
            req = Req(f"d{i}", decoding_batch_ids(spec, i), spec.max_new_tokens)
            reqs.append(req)
            one = ScheduleBatch([req], allocator, tree, config.tokens_per_step)
            try:
                one.prepare_for_extend({req.rid: spec.input_len})
                req.output_ids.append(0)
                for _ in range(spec.output_len - 1):
                    one.prepare_for_decode()
                    req.output_ids.append(len(req.output_ids))
            except RuntimeError as e:
                raise TargetUnsupported(f"the batch does not fit the pool before the probed step: {e}") from None
        step = ScheduleBatch(reqs, allocator, tree, config.tokens_per_step)
        out: dict[str, Any] = {"pool_tokens": allocator.num_pages * config.page_size}
        try:
            fits = step.check_decode_mem()
            out["fits_before"] = fits
            if not fits:
                retracted, _, aborted = step.retract_decode()
                out["retracted"] = tuple(r.rid for r in retracted)
                out["aborted"] = tuple((r.rid, r.finished_reason or "") for r in aborted)
            if step.reqs:
                step.prepare_for_decode()
                out["decode_allocated"] = True
        except Exception as e:  # noqa: BLE001 - an escaped exception is the answer
            out.setdefault("fits_before", False)
            out["error"] = f"{type(e).__name__}: {e}"[:300]
        out["kept"] = tuple(r.rid for r in step.reqs)
        out["available_after"] = allocator.available_size()
        out["held_after"] = (sum(len(r.pages) for r in step.reqs) + len(tree.cached_pages())) * config.page_size
        return RetractProbe(**out)

    def scheduler(self, config: SglangConfig) -> Scheduler:
        return Scheduler(config)

    def run_workload(self, config: SglangConfig, workload: Sequence[SglangRequestSpec]) -> SglangWorkloadResult:
        try:
            scheduler = self.scheduler(config)
        except SglangStartupError as e:
            return SglangWorkloadResult("refused", 0, error=f"{type(e).__name__}: {e}")
        return run_workload(scheduler, workload)
