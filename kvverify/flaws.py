"""The bug zoo: real historical vLLM defects, re-introduced as named switches.

Each flaw is off by default. Switching one on changes the reference at the place
upstream had the defect (``bug-zoo.md``); the suite must then catch it. Flaws are
held in a context variable, so a test, a CLI run or a Hypothesis example can turn one
on for exactly its own extent::

    with flaws.enabled("null_block_not_reserved"):
        plan = plan_kv_cache(...)

:data:`CATALOG` is the one table of the zoo: every fact about a flaw that the zoo, the
tests, the README table and the release attribution use is on its :class:`Flaw`
(``docs/add-a-flaw.md`` walks through adding one; ``tests/test_zoo.py`` fails when a
flaw lacks a fact).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvverify.switches import Switches


@dataclass(frozen=True)
class Budget:
    """The zoo's quality bar for one flaw (``tests/test_zoo.py``): from a cold start
    (derandomized, no example database) the catching property fails within ``examples``
    examples, and its shrunk counterexample's lengths are at most ``shrunk_len`` and its
    blocks at most ``shrunk_blocks`` (which fields those are is the engine's,
    :attr:`kvverify.engines.Engine.shrunk_bounds`: vLLM's ``max_model_len`` and blocks,
    SGLang's pool and request lengths in tokens and its pages)."""

    examples: int
    shrunk_len: int
    shrunk_blocks: int = 8


@dataclass(frozen=True, kw_only=True)
class Flaw:
    """One historical defect, and everything the suite knows about it.

    * ``upstream``, ``symptom``, ``defect``: the issue or PR, what users saw, what was wrong;
    * ``switched_in``: the module that switches it (``flaws.is_on(name)``), where upstream
      had the defect;
    * ``caught_by``: the property of :mod:`kvverify.props` that must catch it (its dotted
      path; ``kvverify zoo`` runs it), within ``budget``;
    * ``regression``: the dotted path of its regression case in its engine's zoo cases
      (:mod:`kvverify.zoo_cases`, :mod:`kvverify.sglang.zoo_cases`), a function returning the
      violations of a fixed minimal input (none without the flaw);
    * ``no_lemma``: why no Z3 lemma catches it; empty when some lemma of
      :mod:`kvverify.lemmas` lists it in ``catches`` (the lemma's own statement);
    * ``not_in_recorded``: why the recorded vLLM 0.33.0 differential cannot see it; empty
      when some recorded case must disagree with upstream once it is on;
    * ``not_shipped``: why no release of the matrix ships it, read off the oldest release's own
      code (the README's real-release table says so instead of "not found"); empty when some
      release does or nobody looked;
    * ``policies``: the scheduling policies (``SchedulerConfig.policy``) the defect lives in,
      empty for all: under any other policy the flaw changes nothing, so nothing can catch it
      there (``tests/test_alternative_policies.py`` shows it inert instead).

    SGLang's flaws are the same dataclass in their own catalogue (:mod:`kvverify.sglang.flaws`);
    :mod:`kvverify.engines` routes a name to its engine.
    """

    name: str
    upstream: str
    symptom: str
    defect: str
    switched_in: str
    caught_by: str
    budget: Budget
    regression: str
    no_lemma: str = ""
    not_in_recorded: str = ""
    policies: tuple[str, ...] = ()
    not_shipped: str = ""

    @property
    def property_name(self) -> str:
        """The catching property's function name."""
        return self.caught_by.rpartition(".")[2]

    def catching_property(self) -> Callable[..., Any]:
        """The catching ``@given`` property (imported on first use: flaws load before props)."""
        prop: Callable[..., Any] = _resolve(self.caught_by)
        return prop

    def regression_case(self) -> Callable[[], list[Any]]:
        """The regression case: ``case()`` returns its violations (imported on first use)."""
        case: Callable[[], list[Any]] = _resolve(self.regression)
        return case


def _resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


_NO_LEMMA_SCHED = ("the scheduler's KV-transfer paths (a liveness defect over steps), not a capacity "
                   "formula the lemmas prove")

CATALOG: dict[str, Flaw] = {f.name: f for f in (
    Flaw(name="override_ignored_in_check",
         upstream="#27181, fixed by #41069",
         symptom="starts with a tiny override, then nothing longer than one block runs",
         defect="the startup check sizes capacity from raw available memory instead of "
                "num_gpu_blocks_override * bytes_per_block",
         switched_in="kvverify/reference/arith.py",
         caught_by="kvverify.props.startup.test_startup_check_passes_implies_servable",
         budget=Budget(examples=600, shrunk_len=64),
         regression="kvverify.zoo_cases.override_ignored_in_check"),
    Flaw(name="null_block_not_reserved",
         upstream="#35541 / #47272",
         symptom="engine logs 1.00x concurrency, then 0 tok/s forever",
         defect="check passes when sum_g blocks_g(L) <= N instead of <= N - 1",
         switched_in="kvverify/reference/arith.py",
         caught_by="kvverify.props.startup.test_startup_check_passes_implies_servable",
         budget=Budget(examples=100, shrunk_len=64),
         regression="kvverify.zoo_cases.null_block_not_reserved"),
    Flaw(name="autofit_ignores_null_block",
         upstream="#48724",
         symptom="max_model_len=auto picks a length one block too long, which then hangs",
         defect="auto-fit searches against the full pool instead of pool - 1 block",
         switched_in="kvverify/reference/arith.py",
         caught_by="kvverify.props.startup.test_auto_fit_is_servable_and_maximal",
         budget=Budget(examples=100, shrunk_len=64),
         regression="kvverify.zoo_cases.autofit_ignores_null_block"),
    Flaw(name="autofit_first_group_only",
         upstream="#36030",
         symptom="auto-fit too large on hybrid models",
         defect="_max_memory_usage_bytes_from_groups (auto-fit's search and the startup check) "
                "counts only the first KV cache group's blocks",
         switched_in="kvverify/reference/arith.py",
         caught_by="kvverify.props.startup.test_auto_fit_is_servable_and_maximal",
         budget=Budget(examples=600, shrunk_len=64),
         regression="kvverify.zoo_cases.autofit_first_group_only"),
    Flaw(name="swa_admission_uncapped",
         upstream="#39734, fixed by #40946",
         symptom="Gemma-class hybrids: every request between real capacity and max_model_len deadlocks",
         defect="the full-sequence gate charges SWA/chunked groups cdiv(num_tokens, B) while startup "
                "sized them with the recycling cap",
         switched_in="kvverify/reference/arith.py",
         caught_by="kvverify.props.admission.test_request_within_startup_bound_is_admitted",
         budget=Budget(examples=200, shrunk_len=256),
         regression="kvverify.zoo_cases.swa_admission_uncapped"),
    Flaw(name="swa_cap_on_allocation",
         upstream="#39866 -> #40027",
         symptom="ValueError: Cannot get 1 free blocks from the pool mid-request",
         defect="the admission cap is also applied to the per-step allocation",
         switched_in="kvverify/reference/arith.py",
         caught_by="kvverify.props.runtime.test_predictor_equals_allocator",
         budget=Budget(examples=200, shrunk_len=256, shrunk_blocks=16),  # B=2: 12 blocks hold L=12
         regression="kvverify.zoo_cases.swa_cap_on_allocation"),
    Flaw(name="mamba_hash_fallback_by_block_size",
         upstream="#51108",
         symptom="engine fails to start: group block_size must be divisible by hash_block_size",
         defect="the Mamba fallback tests block_size != cache block size instead of "
                "mamba_cache_mode != 'align'",
         switched_in="kvverify/reference/block_sizes.py",
         caught_by="kvverify.props.block_sizes.test_resolved_block_sizes_accepted_by_coordinator",
         budget=Budget(examples=200, shrunk_len=4096),
         regression="kvverify.zoo_cases.mamba_hash_fallback_by_block_size"),
    Flaw(name="mamba_align_zero_chunk",
         upstream="#34445",
         symptom="Mamba-align model hangs on the first long prompt",
         defect="when block_size > max_num_batched_tokens the aligned chunk rounds down to 0 tokens",
         switched_in="kvverify/reference/sched/scheduler.py",
         caught_by="kvverify.props.admission.test_admitted_workload_completes",
         budget=Budget(examples=200, shrunk_len=256),
         regression="kvverify.zoo_cases.mamba_align_zero_chunk",
         no_lemma="the scheduler's chunk alignment (a liveness defect), not a capacity formula the lemmas prove"),
    Flaw(name="no_positive_validation",
         upstream="#43496, #43521, #43842",
         symptom="ZeroDivisionError / infinite loop on block_size=0, hash_block_size=0, override 0",
         defect="configuration values are not checked for positivity",
         switched_in="kvverify/reference/validation.py",
         caught_by="kvverify.props.validation.test_bad_input_is_a_clear_error",
         budget=Budget(examples=50, shrunk_len=64),
         regression="kvverify.zoo_cases.no_positive_validation",
         no_lemma="input validation: every lemma's domain is positive by construction",
         not_in_recorded="bad input: every recorded case is one upstream accepts as input "
                         "(the suite's strategies draw valid configs only)"),
    Flaw(name="evictable_hits_not_counted",
         upstream="test_evictable_cached_blocks_not_double_allocated",
         symptom="ValueError: Cannot get N free blocks right after an admission that said it fits",
         defect="get_num_blocks_to_allocate does not count prefix-cache hits sitting in the free queue",
         switched_in="kvverify/reference/managers/base.py",
         caught_by="kvverify.props.runtime.test_predictor_equals_allocator",
         budget=Budget(examples=200, shrunk_len=256),
         regression="kvverify.zoo_cases.evictable_hits_not_counted",
         no_lemma="the managers' prefix-cache accounting at runtime, outside the proved capacity formulas",
         not_shipped="fixed before 0.14.1, the oldest release run: its SingleTypeKVCacheManager."
                     "get_num_blocks_to_allocate already adds num_evictable_blocks (hits with ref_cnt 0)"),
    # the KV-transfer paths (issue 29): two or three requests whose prompts fill a pool at the
    # startup boundary; the shrinker keeps N with L (N = blocks for L + 1), so N may stay larger
    Flaw(name="async_load_unreserved",
         upstream="#45387 / #45388, fixed by #44560",
         symptom="Running: 0, Waiting: N, free blocks present, 0 tok/s under a KV-offloading connector",
         defect="an async KV load is admitted against all free blocks (reserved_blocks=0), taking the "
                "blocks other in-flight prefills and parked loads still need to finish",
         switched_in="kvverify/reference/sched/kv_transfer.py",
         caught_by="kvverify.props.connector.test_connector_workload_completes",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.async_load_unreserved",
         no_lemma=_NO_LEMMA_SCHED),
    Flaw(name="skipped_queue_not_split_by_blocks",
         upstream="#45406 / #57841 (0.27 - 0.29: one skipped_waiting queue)",
         symptom="parked loads that landed are stranded behind a skipped head that needs more blocks than "
                 "are free: running=0, nothing scheduled, only a restart recovers",
         defect="skip_request puts every skipped request into the queue drained first, so a request "
                "holding no blocks can sit ahead of block holders and stop the scan",
         switched_in="kvverify/reference/sched/waiting.py",
         caught_by="kvverify.props.connector.test_connector_workload_completes",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.skipped_queue_not_split_by_blocks",
         no_lemma=_NO_LEMMA_SCHED),
    Flaw(name="priority_strands_parked_loads",
         upstream="#45406 / #57841 (\"FCFS only\"); <= 0.29 _select_waiting_queue_for_scheduling, "
                  "0.31.0 drains kv_holding_waiting first whatever the policy",
         symptom="priority scheduling + a KV connector: a landed load is never promoted behind a "
                 "higher-priority request that does not fit; running=0, free blocks present, 0 tok/s",
         defect="under the priority policy the waiting scan tries the head of waiting before the skipped "
                "queue's when it has the better priority: a block-less request whose allocation fails "
                "stops the scan ahead of the parked loads holding the blocks it needs",
         switched_in="kvverify/reference/sched/waiting.py",
         caught_by="kvverify.props.connector.test_connector_workload_completes",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.priority_strands_parked_loads",
         no_lemma=_NO_LEMMA_SCHED,
         policies=("priority",)),
    Flaw(name="spec_blocks_unreserved_after_load",
         upstream="#57104",
         symptom="KV connector + MTP under KV pressure: a landed load cannot get the block for its "
                 "speculative slots, every step repeats the same state",
         defect="the async-load gate reserves neither the admitted load's own speculative step "
                "(_spec_decode_step_blocks) nor the speculative slots of the other parked loads",
         switched_in="kvverify/reference/sched/kv_transfer.py",
         caught_by="kvverify.props.connector.test_speculative_connector_workload_completes",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.spec_blocks_unreserved_after_load",
         no_lemma=_NO_LEMMA_SCHED),
    Flaw(name="spec_step_blocks_not_per_group",
         upstream="#57104 as shipped in 0.31.0; per group, Mamba groups excluded, in 0.32.0",
         symptom="KV connector + MTP on a Mamba (hybrid) model: a load that fits the free blocks is never "
                 "admitted, waiting=1 with the blocks free, 0 tok/s",
         defect="the async-load gate reserves one speculative step as cdiv(1 + num_spec_tokens + "
                "num_lookahead_tokens, block_size) at the scheduler's block size, whatever the groups: "
                "Mamba groups are charged for slots their managers never allocate (other attention groups "
                "for none of theirs)",
         switched_in="kvverify/reference/sched/kv_transfer.py",
         caught_by="kvverify.props.connector.test_speculative_connector_workload_completes",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.spec_step_blocks_not_per_group",
         no_lemma=_NO_LEMMA_SCHED),
    Flaw(name="spec_pad_leaves_no_sampled_slot",
         upstream="#53812 (fixed in 0.29.0: pad only with room for the sampled token)",
         symptom="speculative decoding at the context limit: RuntimeError: Sampled token IDs exceed the max "
                 "model length. Total number of tokens: 262145 > max_model_len: 262144 (the engine dies)",
         defect="the waiting scan pads a new one-token decode to 1 + num_spec_tokens whenever the placeholders "
                "fit max_model_len, leaving no slot for the token the step samples (the running path keeps "
                "one), and a pad past max_model_len stops the scan instead of scheduling the request un-padded",
         switched_in="kvverify/reference/sched/waiting.py",
         caught_by="kvverify.props.connector.test_connector_workload_completes",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.spec_pad_leaves_no_sampled_slot",
         no_lemma=_NO_LEMMA_SCHED),
    Flaw(name="spec_pad_rescheduled_negative",
         upstream="0.25.0 - 0.27.1 running loop (skips only num_new_tokens == 0; the count is clamped at 0 "
                  "from 0.28.0, Scheduler._reserve_prefill_lookahead); the class of #35978 / #53962",
         symptom="speculative decoding with two batches in flight (pipeline parallelism's batch queue): the "
                 "engine dies on its next step with AssertionError (update_from_output: num_tokens_scheduled "
                 "> 0), a negative token count reaching the model runner",
         defect="the waiting scan pads a new one-token decode to 1 + num_spec_tokens, so its computed tokens "
                "run past its tokens until the step's output returns; scheduled again while that batch is "
                "in flight, its count num_tokens_with_spec - num_computed_tokens is negative, and the "
                "running loop skips only a count of 0",
         switched_in="kvverify/reference/sched/scheduler.py",
         caught_by="kvverify.props.connector.test_connector_workload_completes",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.spec_pad_rescheduled_negative",
         no_lemma=_NO_LEMMA_SCHED),
    Flaw(name="delayed_free_idles_engine",
         upstream="#43433 (fixed in 0.22.0; see also #46502 / #46579)",
         symptom="a KV connector that delays a finished request's block free (an async send): once "
                 "nothing else runs the engine stops stepping, the send's completion is never polled, "
                 "and the blocks stay held until another request arrives",
         defect="Scheduler.has_finished_requests counts only finished_req_ids: a finished request "
                "waiting on delayed connector cleanup, still in self.requests, is not work, so "
                "has_requests() is False and the engine loop idles with the free pending",
         switched_in="kvverify/reference/sched/scheduler.py",
         caught_by="kvverify.props.connector.test_connector_workload_completes",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.delayed_free_idles_engine",
         no_lemma=_NO_LEMMA_SCHED),
    Flaw(name="mamba_align_connector_asserts",
         upstream="<= 0.22.0 _mamba_block_aligned_split (\"External KV connector is not verified yet\"), "
                  "gone in 0.25.0",
         symptom="a Mamba model in prefix-caching align mode with a KV connector: the first request the "
                 "connector has tokens for crashes the engine with an AssertionError",
         defect="the waiting scan clips every new request's chunk to Mamba blocks, async loads included, "
                "and the clip asserts that no external (connector) tokens came with the request",
         switched_in="kvverify/reference/sched/waiting.py",
         caught_by="kvverify.props.connector.test_connector_workload_completes",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.mamba_align_connector_asserts",
         no_lemma=_NO_LEMMA_SCHED),
    Flaw(name="deferred_requests_hold_slots",
         upstream="#53130 (reported on 0.27.1) / #42568's accounting",
         symptom="admission stops for good once running + deferred requests reach max_num_seqs, "
                 "with the KV cache mostly free; /health stays 200",
         defect="requests parked or skipped in the waiting scan count against max_num_seqs, and the "
                "cap is checked before any of them can be promoted",
         switched_in="kvverify/reference/sched/waiting.py",
         caught_by="kvverify.props.connector.test_connector_workload_completes",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.deferred_requests_hold_slots",
         no_lemma=_NO_LEMMA_SCHED),
    Flaw(name="deferred_free_preemption_cascade",
         upstream="#49674, fixed by #49675",
         symptom="two batches in flight + a consumer connector: one failed allocation preempts every "
                 "running request while their blocks stay fenced; 0 tok/s",
         defect="the running pass preempts a victim whose block free is deferred behind a step fence "
                "(it frees nothing now) and keeps retrying",
         switched_in="kvverify/reference/sched/scheduler.py",
         caught_by="kvverify.props.connector.test_no_zero_progress_preemption",
         budget=Budget(examples=300, shrunk_len=256, shrunk_blocks=64),
         regression="kvverify.zoo_cases.deferred_free_preemption_cascade",
         no_lemma=_NO_LEMMA_SCHED,
         not_in_recorded="no recorded connector workload (two batches in flight, a consumer connector) "
                         "preempts a victim a batch in flight still holds: the flaw changes no recorded output"),
)}

_SWITCHES = Switches("flaw", CATALOG)
check_name = _SWITCHES.check_name
is_on = _SWITCHES.is_on  #: whether flaw ``name`` is switched on in the current context
active = _SWITCHES.active
enabled = _SWITCHES.enabled  #: ``with enabled("null_block_not_reserved"): ...``
only = _SWITCHES.only  #: exactly these flaws on, nothing inherited
set_global = _SWITCHES.set_global  #: for the rest of this context (``pytest --flaw``, ``kvverify --flaw``)
