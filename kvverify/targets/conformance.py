"""Does a target honour the :class:`~kvverify.targets.base.Target` contract?

In the spirit of Hypothesis's ``run_conformance_test`` for alternative backends: not just
``hasattr`` (nor ``getattr``): :func:`check_target` first compares the members the contract's protocols
declare (:func:`~kvverify.targets.base.protocol_members`) with the target's class, then calls
every member of :class:`~kvverify.targets.base.TargetBase` and every method of every
capability the target lists with small valid inputs and checks what comes back (types,
shapes, the few facts every faithful engine shares: a roomy pool starts, block 0 is the null
block, a one-block request is admitted and completes, hits of one group align to its block
size). It returns the problems found, one line each; ``[]`` means the target conforms. ``tests/test_target_conformance.py`` runs it on the reference, the
reference with each bug-zoo flaw on, fakes (a conforming one and broken ones, which it
must reject) and the vLLM adapter when vLLM is importable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

from kvverify import fixes
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import SchedulerLike, WorkloadResult
from kvverify.reference.planner import KVCacheConfig, StartupPlan
from kvverify.reference.specs import FullAttentionSpec, KVCacheSpec
from kvverify.reference.workloads import full_length_request
from kvverify.targets.base import (
    CAPABILITY_PROTOCOLS,
    Capability,
    Feature,
    KVCacheManagerLike,
    Target,
    TargetBase,
    has,
    protocol_members,
)

#: the probe model: two full-attention layers, B = 16, L = 64 (4 blocks per request and layer)
BLOCK_SIZE = 16
MAX_MODEL_LEN = 64
NUM_BLOCKS = 32  # roomy: 31 usable blocks, 4 needed per request (one group)
PROBE_MEMORY = 2 * NUM_BLOCKS * 2 * (BLOCK_SIZE * 2 * 128 * 2)  # 2 x N blocks of 2 fp16 layers
#: findings whose questions the probe asks: every proposed fix's finding, and one no target knows
#: (expected: unknown findings are strict)
UNKNOWN_FINDING = "F0-unknown"
PROBE_FINDINGS = (*sorted({f.finding_id for f in fixes.CATALOG.values()}), UNKNOWN_FINDING)

Call = Callable[[str, Callable[[], Any]], Any]


def probe_specs() -> dict[str, KVCacheSpec]:
    """The probe model's layer specs (upstream ``FullAttentionSpec``, fp16, 2 KV heads of 64)."""
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=2, head_size=64, dtype="float16")
    return {"layers.0.self_attn": spec, "layers.1.self_attn": spec}


def probe_config(**overrides: Any) -> VllmConfig:
    """The probe engine config: a pool of :data:`NUM_BLOCKS` blocks (the override) out of a
    memory budget that holds twice as many (so the check passes whichever source it reads)."""
    kw: dict[str, Any] = dict(block_size=BLOCK_SIZE, max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=2048,
                              num_gpu_blocks_override=NUM_BLOCKS, kv_cache_memory_bytes=PROBE_MEMORY)
    kw.update(overrides)
    return VllmConfig(**kw)


def missing_members(obj: object, proto: type) -> list[str]:
    """The members ``proto`` declares that ``obj`` lacks, read off ``obj``'s class (and, for an
    attribute, its instance dict): a method must be a callable of the class."""
    cls_attrs: dict[str, Any] = {}
    for klass in reversed(type(obj).__mro__):
        cls_attrs.update(vars(klass))
    try:
        own: dict[str, Any] = vars(obj)
    except TypeError:  # no instance dict (__slots__)
        own = {}
    out = []
    for name, kind in protocol_members(proto).items():
        if kind == "method":
            if not callable(cls_attrs.get(name)):
                out.append(name)
        elif name not in cls_attrs and name not in own:
            out.append(name)
    return out


def _reason_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and bool(value))


def check_target(target: object) -> list[str]:
    """Every way ``target`` breaks the contract, one line each (``[]``: it conforms)."""
    missing = missing_members(target, TargetBase)
    problems = [f"{m}: missing" for m in missing]
    if {"name", "capabilities"} & set(missing):
        return problems
    t = cast(Target, target)
    name = t.name
    if not isinstance(name, str) or not name:
        problems.append(f"name: expected a non-empty str, got {name!r}")
    if "version" not in missing and (not isinstance(t.version, str) or not t.version):
        problems.append(f"version: expected a non-empty str, got {t.version!r}")
    caps = t.capabilities
    if not isinstance(caps, frozenset) or not all(isinstance(c, Capability) for c in caps):
        problems.append(f"capabilities: expected a frozenset of Capability, got {caps!r}")
        return problems
    for cap in sorted(caps, key=lambda c: c.value):
        problems += [f"{cap.value}: {m}() missing" for m in missing_members(target, CAPABILITY_PROTOCOLS[cap])]
    if problems:
        return problems

    def call(label: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - a raise on valid input is the finding
            problems.append(f"{label}: raised {type(e).__name__}: {e}")
            return None

    _check_base(t, call, problems)
    if problems:
        return problems  # the features are asked below: their answers must be readable
    config, specs = probe_config(), probe_specs()
    plan = None
    if Capability.PLANNER in caps or caps & {Capability.BLOCK_SIZES, Capability.RUNTIME, Capability.SCHEDULER}:
        plan = call("plan", lambda: t.plan(config, [specs]))
        if plan is not None and not _plan_ok(plan, problems):
            plan = None
    if plan is None:
        return problems or ["plan: no plan to probe the other capabilities with"]

    if Capability.PLANNER in caps:
        _check_planner(t, plan, call, problems)
    if Capability.BLOCK_SIZES in caps:
        _check_block_sizes(t, plan, call, problems)
    if Capability.RUNTIME in caps:
        _check_runtime(t, plan, call, problems)
    if Capability.SCHEDULER in caps:
        _check_scheduler(t, plan, call, problems)
    if Capability.KV_CONNECTOR in caps:
        _check_kv_connector(t, config, specs, call, problems)
    return problems


def _check_base(target: Target, call: Call, problems: list[str]) -> None:
    """The features (``None`` or a reason each), the findings (expected?, masked?) and the old
    release rules (known names)."""
    from kvverify import behaviours
    rules = call("reference_behaviours", lambda: target.reference_behaviours)
    if not isinstance(rules, frozenset) or not rules <= set(behaviours.CATALOG):
        problems.append(f"reference_behaviours: expected a frozenset of {', '.join(behaviours.CATALOG)}, got {rules!r}")
    for feature in Feature:
        why = call(f"lacks({feature.value})", lambda: target.lacks(feature))
        if not _reason_or_none(why):
            problems.append(f"lacks: expected None or a reason (a non-empty str) for {feature.value}, got {why!r}")
    for finding in PROBE_FINDINGS:
        expected = call(f"expects_finding({finding})", lambda: target.expects_finding(finding))
        if not isinstance(expected, bool):
            problems.append(f"expects_finding: expected a bool for {finding}, got {expected!r}")
        elif finding == UNKNOWN_FINDING and not expected:
            problems.append(f"expects_finding: an unknown finding ({finding}) must be expected (strict)")
        masked = call(f"finding_replay_masked({finding})", lambda: target.finding_replay_masked(finding))
        if not _reason_or_none(masked):
            problems.append(f"finding_replay_masked: expected None or a reason for {finding}, got {masked!r}")


def _plan_ok(plan: Any, problems: list[str]) -> bool:
    if not isinstance(plan, StartupPlan):
        problems.append(f"plan: expected a StartupPlan, got {type(plan).__name__}")
        return False
    ok = True
    if not plan.starts or plan.error is not None:
        problems.append(f"plan: a roomy pool ({NUM_BLOCKS} blocks, 4 needed) must start; error={plan.error!r}")
        ok = False
    if plan.num_blocks != NUM_BLOCKS or plan.usable_blocks != NUM_BLOCKS - 1:
        problems.append(f"plan: num_blocks={plan.num_blocks} usable={plan.usable_blocks}, expected the override "
                        f"{NUM_BLOCKS} and {NUM_BLOCKS - 1} usable (block 0 is the null block)")
        ok = False
    if not isinstance(plan.kv_cache_config, KVCacheConfig) or len(plan.groups) != 1:
        problems.append(f"plan: expected one KVCacheConfig with one group, got {len(plan.groups)} groups")
        ok = False
    if plan.blocks_needed_per_request != MAX_MODEL_LEN // BLOCK_SIZE:
        problems.append(f"plan: blocks_needed_per_request={plan.blocks_needed_per_request}, expected "
                        f"{MAX_MODEL_LEN // BLOCK_SIZE}")
    return ok


def _check_planner(target: Target, plan: StartupPlan, call: Call, problems: list[str]) -> None:
    refused = call("plan (refusal)", lambda: target.plan(
        probe_config(num_gpu_blocks_override=None, kv_cache_memory_bytes=2 * plan.bytes_per_block), [probe_specs()]))
    if refused is not None and (not isinstance(refused, StartupPlan) or refused.starts
                                or not isinstance(refused.error, str)):
        problems.append("plan: a 2-block budget (4 needed) must be refused with an error message")
    started = call("initialize_engine_core", lambda: target.initialize_engine_core(probe_config(), [probe_specs()]))
    if started is not None and (not isinstance(started, StartupPlan) or not started.starts
                                or not started.vllm_config.enable_chunked_prefill):
        problems.append("initialize_engine_core: a roomy causal deployment must start with chunked prefill on")
    conc = call("max_concurrency", lambda: target.max_concurrency(plan))
    if conc is not None and (not isinstance(conc, float) or not math.isfinite(conc) or conc < 1):
        problems.append(f"max_concurrency: expected a finite float >= 1 for a roomy pool, got {conc!r}")
    memory = NUM_BLOCKS * plan.bytes_per_block
    est = call("estimate_max_model_len",
               lambda: target.estimate_max_model_len(probe_config(num_gpu_blocks_override=None,
                                                                  kv_cache_memory_bytes=memory), probe_specs(), memory))
    if est is not None and (not isinstance(est, int) or isinstance(est, bool) or not 1 <= est <= MAX_MODEL_LEN):
        problems.append(f"estimate_max_model_len: expected an int in [1, {MAX_MODEL_LEN}], got {est!r}")
    ok = call("check_enough_kv_cache_memory",
              lambda: target.check_enough_kv_cache_memory(probe_config(num_gpu_blocks_override=None,
                                                                       kv_cache_memory_bytes=memory),
                                                          probe_specs(), memory))
    if ok is not None:
        problems.append(f"check_enough_kv_cache_memory: a roomy budget must pass (None), got {ok!r}")
    short = call("check_enough_kv_cache_memory (refusal)",
                 lambda: target.check_enough_kv_cache_memory(probe_config(num_gpu_blocks_override=None,
                                                                          kv_cache_memory_bytes=memory),
                                                             probe_specs(), plan.bytes_per_block))
    if not isinstance(short, str) or not short:
        problems.append(f"check_enough_kv_cache_memory: a one-block budget must be refused with a message, "
                        f"got {short!r}")


def _check_block_sizes(target: Target, plan: StartupPlan, call: Call, problems: list[str]) -> None:
    sizes = call("resolve_block_sizes", lambda: target.resolve_block_sizes(plan.kv_cache_config, plan.vllm_config))
    if sizes is None:
        return
    if (not isinstance(sizes, tuple) or len(sizes) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in sizes)):
        problems.append(f"resolve_block_sizes: expected (scheduler_block_size, hash_block_size) positive ints, "
                        f"got {sizes!r}")
        return
    if sizes[0] % BLOCK_SIZE or BLOCK_SIZE % sizes[1]:
        problems.append(f"resolve_block_sizes: {sizes!r} for one group of block size {BLOCK_SIZE}")
    accepted = call("coordinator_accepts",
                    lambda: target.coordinator_accepts(plan.kv_cache_config, plan.vllm_config, *sizes))
    if accepted is not None:
        problems.append(f"coordinator_accepts: the resolved sizes must be accepted (None), got {accepted!r}")
    if not has(target, Feature.CACHE_HIT_ALIGNMENT):
        return
    align = call("resolve_cache_hit_alignment_tokens",
                 lambda: target.resolve_cache_hit_alignment_tokens(plan.kv_cache_config, plan.vllm_config, *sizes))
    if align is not None and (not isinstance(align, int) or isinstance(align, bool) or align != sizes[0]):
        problems.append(f"resolve_cache_hit_alignment_tokens: hits of one group align to the scheduler block "
                        f"size {sizes[0]} (a positive int), got {align!r}")


def _check_runtime(target: Target, plan: StartupPlan, call: Call, problems: list[str]) -> None:
    kvm = call("kv_cache_manager", lambda: target.kv_cache_manager(plan))
    if kvm is not None:
        missing = missing_members(kvm, KVCacheManagerLike)
        if missing:
            problems.append(f"kv_cache_manager: the manager lacks {missing}")
        else:
            free = call("kv_cache_manager.get_num_free_blocks", kvm.get_num_free_blocks)
            if free != NUM_BLOCKS - 1:
                problems.append(f"kv_cache_manager: an empty pool has {NUM_BLOCKS - 1} free blocks, got {free!r}")
            held = call("kv_cache_manager.num_held_blocks", lambda: kvm.num_held_blocks("nobody"))
            if held != 0:
                problems.append(f"kv_cache_manager: an unknown request holds 0 blocks, got {held!r}")
    got = call("admit_on_empty_pool", lambda: target.admit_on_empty_pool(plan, BLOCK_SIZE))
    if got is None:
        return
    if (not isinstance(got, tuple) or len(got) != 2 or not isinstance(got[0], bool)
            or not isinstance(got[1], dict)):
        problems.append(f"admit_on_empty_pool: expected (bool, dict), got {got!r}")
        return
    admitted, info = got
    if not admitted:
        problems.append(f"admit_on_empty_pool: a one-block prompt on an empty roomy pool must be admitted ({info})")
    if set(info) != {"gate_charged_blocks", "free_blocks"} or not all(isinstance(v, int) for v in info.values()):
        problems.append(f"admit_on_empty_pool: expected int gate_charged_blocks and free_blocks, got {info!r}")


def _check_scheduler(target: Target, plan: StartupPlan, call: Call, problems: list[str]) -> None:
    sched = call("scheduler", lambda: target.scheduler(plan))
    if sched is not None:
        missing = missing_members(sched, SchedulerLike)
        if missing:
            problems.append(f"scheduler: lacks {missing}")
        else:
            counts = call("scheduler.get_request_counts", sched.get_request_counts)
            if counts != (0, 0) or sched.has_unfinished_requests():
                problems.append(f"scheduler: a fresh scheduler has no requests, got counts {counts!r}")
            if sched.max_model_len != MAX_MODEL_LEN:
                problems.append(f"scheduler: max_model_len={sched.max_model_len!r}, expected {MAX_MODEL_LEN}")
            _check_abort(target, plan, call, problems)
    steps: list[int] = []
    result = call("run_workload", lambda: target.run_workload(
        plan, [full_length_request(MAX_MODEL_LEN, 2)], keep_trace=True, max_steps=500,
        on_step=lambda s, step: steps.append(step)))
    if result is None:
        return
    if not isinstance(result, WorkloadResult):
        problems.append(f"run_workload: expected a WorkloadResult, got {type(result).__name__}")
        return
    if not result.completed or len(result.finished) != 1 or result.num_output_tokens != 2:
        problems.append(f"run_workload: a full-length request on a roomy pool must complete with its 2 outputs "
                        f"(completed={result.completed}, finished={result.finished}, "
                        f"outputs={result.num_output_tokens}, stall={result.stall_reason}, error={result.error})")
    if steps != list(range(1, result.steps + 1)) or len(result.trace) != result.steps:
        problems.append(f"run_workload: on_step must see steps 1..{result.steps} and the trace one row each "
                        f"(saw {steps[:5]}..., {len(result.trace)} rows)")
    if result.free_blocks != NUM_BLOCKS - 1:
        problems.append(f"run_workload: every block is freed after the request, got {result.free_blocks} free")


def _check_abort(target: Target, plan: StartupPlan, call: Call, problems: list[str]) -> None:
    """A request aborted after its first step (``abort_requests``) is returned, ends (``finished``), is
    forgotten (``requests``) and gives back every block; aborting it again aborts nothing."""
    sched = target.scheduler(plan)
    req = full_length_request(MAX_MODEL_LEN, 2).to_request()
    rid = req.request_id
    sched.add_request(req)
    if call("scheduler.step", sched.step) is None:
        return
    if rid not in sched.requests:
        problems.append(f"scheduler.requests: a request in flight is not known ({sorted(sched.requests)!r})")
    aborted = call("scheduler.abort_requests", lambda: sched.abort_requests([rid, "no-such-request"]))
    if aborted is None:
        return
    again = call("scheduler.abort_requests", lambda: sched.abort_requests([rid]))
    free = sched.kv_cache_manager.get_num_free_blocks()
    if (aborted != [rid] or again != [] or sched.has_unfinished_requests() or rid not in sched.finished
            or rid in sched.requests or free != NUM_BLOCKS - 1):
        problems.append(f"scheduler.abort_requests: an aborted request must be returned once, end and give back "
                        f"its blocks (returned {aborted!r} then {again!r}, unfinished="
                        f"{sched.has_unfinished_requests()}, finished={list(sched.finished)!r}, "
                        f"known={rid in sched.requests}, free={free} of {NUM_BLOCKS - 1})")


def _check_kv_connector(target: Target, config: VllmConfig, specs: dict[str, KVCacheSpec],
                        call: Callable[[str, Callable[[], Any]], Any], problems: list[str]) -> None:
    """A prompt whose first two blocks the connector loads asynchronously (one step), with one or
    two batches in flight, completes with its outputs and frees every block."""
    from dataclasses import replace

    from kvverify.reference.connector import ConnectorScript, RequestScript

    script = ConnectorScript.of({"full": RequestScript(hit_tokens=2 * BLOCK_SIZE, load_steps=1)})
    for batches in (1, 2):
        plan = call("plan(kv_connector)", lambda: target.plan(
            replace(config, kv_connector=True, max_concurrent_batches=batches), [specs]))
        if plan is None or not _plan_ok(plan, problems):
            return
        sched = call("connector_scheduler", lambda: target.connector_scheduler(plan, script))
        if sched is None:
            return
        missing = missing_members(sched, SchedulerLike)
        if missing:
            problems.append(f"connector_scheduler: lacks {missing}")
            return
        from kvverify.invariants.reservations import ReservingScheduler

        missing = missing_members(sched, ReservingScheduler)
        if missing:  # the in-flight reservation check (reservation.short_of_inflight_need) reads them
            problems.append(f"connector_scheduler: lacks {missing}")
            return
        if sched.has_pending_external_events():
            problems.append("connector_scheduler: a fresh scheduler has no pending transfer")
        result = call("run_connector_workload", lambda: target.run_connector_workload(
            plan, [full_length_request(MAX_MODEL_LEN, 2)], script, max_steps=500, scheduler=sched))
        if result is None:
            return
        if (not isinstance(result, WorkloadResult) or not result.completed or result.num_output_tokens != 2
                or result.free_blocks != NUM_BLOCKS - 1):
            problems.append(f"run_connector_workload: ({batches} batch(es) in flight) a full-length request "
                            f"with a 2-block async load on a roomy pool must complete with its 2 outputs and "
                            f"free every block, got {result!r}")