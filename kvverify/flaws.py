"""The bug zoo: real historical vLLM defects, re-introduced as named switches.

Each flaw is off by default. Switching one on changes the reference at the place
upstream had the defect (``bug-zoo.md``); the suite must then catch it. Flaws are
held in a context variable, so a test, a CLI run or a Hypothesis example can turn one
on for exactly its own extent::

    with flaws.enabled("null_block_not_reserved"):
        plan = plan_kv_cache(...)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvverify.switches import Switches


@dataclass(frozen=True)
class Flaw:
    """One historical defect: where upstream had it, what users saw, and the property of
    :mod:`kvverify.props` that must catch it (``caught_by``, its dotted path; the zoo runs it)."""

    name: str
    upstream: str
    symptom: str
    defect: str
    caught_by: str

    @property
    def property_name(self) -> str:
        """The catching property's function name."""
        return self.caught_by.rpartition(".")[2]

    def catching_property(self) -> Callable[..., Any]:
        """The catching ``@given`` property (imported on first use: flaws load before props)."""
        module, _, name = self.caught_by.rpartition(".")
        prop: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return prop


CATALOG: dict[str, Flaw] = {f.name: f for f in (
    Flaw("override_ignored_in_check", "#27181, fixed by #41069",
         "starts with a tiny override, then nothing longer than one block runs",
         "the startup check sizes capacity from raw available memory instead of "
         "num_gpu_blocks_override * bytes_per_block",
         "kvverify.props.startup.test_startup_check_passes_implies_servable"),
    Flaw("null_block_not_reserved", "#35541 / #47272",
         "engine logs 1.00x concurrency, then 0 tok/s forever",
         "check passes when sum_g blocks_g(L) <= N instead of <= N - 1",
         "kvverify.props.startup.test_startup_check_passes_implies_servable"),
    Flaw("autofit_ignores_null_block", "#48724",
         "max_model_len=auto picks a length one block too long, which then hangs",
         "auto-fit searches against the full pool instead of pool - 1 block",
         "kvverify.props.startup.test_auto_fit_is_servable_and_maximal"),
    Flaw("autofit_first_group_only", "#36030",
         "auto-fit too large on hybrid models",
         "auto-fit counts only the first KV cache group's blocks",
         "kvverify.props.startup.test_auto_fit_is_servable_and_maximal"),
    Flaw("swa_admission_uncapped", "#39734, fixed by #40946",
         "Gemma-class hybrids: every request between real capacity and max_model_len deadlocks",
         "the full-sequence gate charges SWA/chunked groups cdiv(num_tokens, B) while startup "
         "sized them with the recycling cap",
         "kvverify.props.admission.test_request_within_startup_bound_is_admitted"),
    Flaw("swa_cap_on_allocation", "#39866 -> #40027",
         "ValueError: Cannot get 1 free blocks from the pool mid-request",
         "the admission cap is also applied to the per-step allocation",
         "kvverify.props.runtime.test_predictor_equals_allocator"),
    Flaw("mamba_hash_fallback_by_block_size", "#51108",
         "engine fails to start: group block_size must be divisible by hash_block_size",
         "the Mamba fallback tests block_size != cache block size instead of "
         "mamba_cache_mode != 'align'",
         "kvverify.props.block_sizes.test_resolved_block_sizes_accepted_by_coordinator"),
    Flaw("mamba_align_zero_chunk", "#34445",
         "Mamba-align model hangs on the first long prompt",
         "when block_size > max_num_batched_tokens the aligned chunk rounds down to 0 tokens",
         "kvverify.props.admission.test_admitted_workload_completes"),
    Flaw("no_positive_validation", "#43496, #43521, #43842",
         "ZeroDivisionError / infinite loop on block_size=0, hash_block_size=0, override 0",
         "configuration values are not checked for positivity",
         "kvverify.props.validation.test_bad_input_is_a_clear_error"),
    Flaw("evictable_hits_not_counted", "test_evictable_cached_blocks_not_double_allocated",
         "ValueError: Cannot get N free blocks right after an admission that said it fits",
         "get_num_blocks_to_allocate does not count prefix-cache hits sitting in the free queue",
         "kvverify.props.runtime.test_predictor_equals_allocator"),
    Flaw("async_load_unreserved", "#45387 / #45388, fixed by #44560",
         "Running: 0, Waiting: N, free blocks present, 0 tok/s under a KV-offloading connector",
         "an async KV load is admitted against all free blocks (reserved_blocks=0), taking the "
         "blocks other in-flight prefills and parked loads still need to finish",
         "kvverify.props.connector.test_connector_workload_completes"),
    Flaw("skipped_queue_not_split_by_blocks", "#45406 / #57841 (0.27 - 0.29: one skipped_waiting queue)",
         "parked loads that landed are stranded behind a skipped head that needs more blocks than "
         "are free: running=0, nothing scheduled, only a restart recovers",
         "skip_request puts every skipped request into the queue drained first, so a request "
         "holding no blocks can sit ahead of block holders and stop the scan",
         "kvverify.props.connector.test_connector_workload_completes"),
    Flaw("spec_blocks_unreserved_after_load", "#57104",
         "KV connector + MTP under KV pressure: a landed load cannot get the block for its "
         "speculative slots, every step repeats the same state",
         "the async-load gate reserves neither the admitted load's own speculative step "
         "(_spec_decode_step_blocks) nor the speculative slots of the other parked loads",
         "kvverify.props.connector.test_speculative_connector_workload_completes"),
    Flaw("deferred_requests_hold_slots", "#53130 (reported on 0.27.1) / #42568's accounting",
         "admission stops for good once running + deferred requests reach max_num_seqs, "
         "with the KV cache mostly free; /health stays 200",
         "requests parked or skipped in the waiting scan count against max_num_seqs, and the "
         "cap is checked before any of them can be promoted",
         "kvverify.props.connector.test_connector_workload_completes"),
    Flaw("deferred_free_preemption_cascade", "#49674, fixed by #49675",
         "two batches in flight + a consumer connector: one failed allocation preempts every "
         "running request while their blocks stay fenced; 0 tok/s",
         "the running pass preempts a victim whose block free is deferred behind a step fence "
         "(it frees nothing now) and keeps retrying",
         "kvverify.props.connector.test_no_zero_progress_preemption"),
)}

_SWITCHES = Switches("flaw", CATALOG)
check_name = _SWITCHES.check_name
is_on = _SWITCHES.is_on  #: whether flaw ``name`` is switched on in the current context
active = _SWITCHES.active
enabled = _SWITCHES.enabled  #: ``with enabled("null_block_not_reserved"): ...``
only = _SWITCHES.only  #: exactly these flaws on, nothing inherited
set_global = _SWITCHES.set_global  #: for the rest of this context (``pytest --flaw``, ``kvverify --flaw``)
