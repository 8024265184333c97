"""The per-release differences of vLLM 0.19.1 … 0.33.0 — the one place they are written down.

Everything here is *detected* from what the installed release exposes (a module that
imports, a function that exists, a parameter in a signature, a dataclass field), not read
off the version string; the version only bounds the supported range and names the release
in messages. :func:`detect` works on plain module objects, so the logic is tested with
small fakes (``tests/test_vllm_compat.py``) without installing any release.

Measured drift (``/work/notes/api-drift.md``, ``docs/vllm-target-notes.md``):

==========================  =========================================================
capability                  releases that differ
==========================  =========================================================
``planner_module``          <= 0.32: the planner lives in ``kv_cache_utils`` (no
                            ``kv_cache_planning`` / ``kv_cache_config_builder``)
``global_groups``           <= 0.32: no ``get_global_kv_cache_groups``;
                            ``get_kv_cache_configs(vllm_config, specs, memory)``
``layout_resolution``       <= 0.27: no ``resolve_kv_cache_layout``
``tensor_layout``           <= 0.27: ``KVCacheTensor(size, shared_by)``
``block_size_resolution``   <= 0.19: no ``resolve_kv_cache_block_sizes`` (one block size)
``admission_gate``          <= 0.19: ``KVCacheManager.can_fit_full_sequence``
``admission_caps``          <= 0.19: no SWA / chunked-local admission cap (no
                            ``max_admission_blocks_per_request``); 0.20: the cap is
                            applied to every ``get_num_blocks_to_allocate``, the per-step
                            allocation included (#39866); >= 0.22: ``apply_admission_cap``
``params``                  keyword drift of the coordinator, the manager, the scheduler;
                            the in-flight window is ``max_num_batched_tokens`` in
                            0.20-0.25, ``max_in_flight_tokens`` from 0.27, absent in
                            0.19 (:meth:`Compat.in_flight_param`);
                            ``_pool_bytes_per_block`` takes ``vllm_config`` in 0.25-0.28
                            and 0.32+, only the groups in 0.22 and 0.29-0.31
==========================  =========================================================

A knob a release does not have is dropped when it holds its neutral value (it then means
what the release did before the knob existed) and refused otherwise: the example is
rejected with the reason (:func:`fit_kwargs`). A capability a property needs and the
release lacks skips the property with the reason (:func:`~.refusals.lacks`).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

#: Oldest and newest release the adapter supports (inclusive).
SUPPORTED_MIN = (0, 19, 1)
SUPPORTED_MAX = (0, 33, 0)
SUPPORTED = "0.19.1 … 0.33.0"
#: The release the reference mirrors (the differential compares against it).
REFERENCE_RELEASE = "0.33.0"

#: Modules the adapter may import; a missing one is ``None`` in :func:`detect`'s input.
MODULES = (
    "vllm.config",
    "vllm.sampling_params",
    "vllm.utils.hashing",
    "vllm.utils",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.attention.backends.utils",
    "vllm.v1.core.kv_cache_planning",
    "vllm.v1.core.kv_cache_config_builder",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.core.kv_cache_coordinator",
    "vllm.v1.core.kv_cache_manager",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.core.single_type_kv_cache_manager",
    "vllm.v1.outputs",
    "vllm.v1.request",
    "vllm.v1.structured_output",
    "vllm.distributed.kv_transfer.kv_connector.v1.base",
)


class DriftError(ImportError):
    """The release differs in a way the adapter does not know (an adapter gap, not a defect)."""


def parse_version(version: str) -> tuple[int, ...] | None:
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else None


def unsupported_release(version: str) -> str | None:
    """Why ``version`` is outside the supported range, or ``None``."""
    v = parse_version(version)
    if v is None:
        return f"cannot read the vLLM version {version!r}; the vllm target supports {SUPPORTED}"
    if v < SUPPORTED_MIN or v > SUPPORTED_MAX:
        return (f"the vllm target supports vLLM {SUPPORTED}, found {version}: its KV-cache API "
                f"has not been measured (add it to kvverify/targets/vllm/compat.py deliberately)")
    return None


def params(fn: Any) -> frozenset[str]:
    """Parameter names of a callable (a class: its constructor; a dataclass: its fields)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        if isinstance(fn, type) and dataclasses.is_dataclass(fn):
            return frozenset(f.name for f in dataclasses.fields(fn) if f.init)
        return frozenset()
    return frozenset(n for n, p in sig.parameters.items()
                     if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n != "self")


def accepts_any_keyword(fn: Any) -> bool:
    try:
        return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False


@dataclasses.dataclass(frozen=True)
class Compat:
    """What the installed release can do, and where its functions live."""

    version: str
    planner_module: str            # module holding get_kv_cache_configs / the startup check
    config_builder: bool           # kv_cache_config_builder (pool bytes per block from a builder)
    global_groups: bool            # get_global_kv_cache_groups + 4-argument get_kv_cache_configs
    layout_resolution: bool        # resolve_kv_cache_layout / get_supported_kv_cache_layouts
    tensor_layout: str             # "strided" | "shared_by"
    block_size_resolution: bool    # resolve_kv_cache_block_sizes (scheduler / hash block sizes)
    admission_gate: str            # "full_sequence_must_fit" | "can_fit_full_sequence" | "none"
    spec_registry: bool            # register_all_kvcache_specs(vllm_config)
    #: SWA / chunked-local admission caps: "none" (<= 0.19), "on_allocation" (0.20: the cap
    #: also clamps the per-step allocation), "admission_only" (>= 0.22: ``apply_admission_cap``)
    admission_caps: str = "admission_only"
    #: the scheduler-side KV connector API the scripted connector plugs into
    #: (``KVConnectorBase_V1``, ``KVConnectorOutput``, ``KVTransferConfig.kv_connector_module_path``)
    kv_connector: bool = False
    #: ``KVConnectorOutput.failed_recving`` (>= 0.31): request-level load failures
    kv_failed_recving: bool = False
    #: ``SupportsHMA`` (``request_finished_all_groups``): a connector next to the hybrid manager
    kv_supports_hma: bool = False
    #: the async-load gate's ``_spec_decode_step_blocks`` (>= 0.31, #57104)
    kv_spec_step_blocks: bool = False
    #: the waiting scan pads a new one-token decode to ``1 + num_speculative_tokens`` (``pad_spec_decode``)
    spec_decode_padding: bool = False
    #: parameter names of the callables whose keywords drifted
    params: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    #: callables taking **kwargs (anything is accepted)
    open_params: frozenset[str] = frozenset()

    def has(self, where: str, name: str) -> bool:
        return where in self.open_params or name in self.params.get(where, frozenset())

    def in_flight_param(self, where: str) -> str | None:
        """The keyword through which ``where`` (the coordinator / manager) receives the token
        window the Scheduler passes: ``max_in_flight_tokens`` (>= 0.27),
        ``max_num_batched_tokens`` (0.20 - 0.25, passed the scheduler's budget), ``None`` (0.19)."""
        for name in ("max_in_flight_tokens", "max_num_batched_tokens"):
            if name in self.params.get(where, frozenset()):
                return name
        return None

    def lacking(self) -> dict[str, str]:
        """Capability name -> what the release lacks, in words (for skip reasons and docs)."""
        out = {}
        if not self.block_size_resolution:
            out["block_sizes"] = ("has no resolve_kv_cache_block_sizes (no separate hash block size): "
                                  "the scheduler and hash block sizes are not resolved by the release")
        if self.admission_gate == "none":
            out["admission"] = "has no full-sequence admission gate"
        if not self.kv_connector:
            out["kv_connector"] = ("has no scheduler-side KV connector API the scripted connector can plug into "
                                   "(KVConnectorBase_V1 with kv_connector_module_path, KVConnectorOutput)")
        return out


def _fields(cls: Any) -> frozenset[str]:
    return params(cls) if cls is not None else frozenset()


def _attr(mod: ModuleType | None, name: str) -> Any:
    return getattr(mod, name, None) if mod is not None else None


def detect(version: str, modules: Mapping[str, ModuleType | None]) -> Compat:
    """Read the capabilities off the imported modules (``None``: the release has no such module)."""
    m = modules.get
    utils = m("vllm.v1.core.kv_cache_utils")
    planning = m("vllm.v1.core.kv_cache_planning")
    if planning is not None and hasattr(planning, "get_kv_cache_configs"):
        planner_module = "vllm.v1.core.kv_cache_planning"
    elif utils is not None and hasattr(utils, "get_kv_cache_configs"):
        planner_module = "vllm.v1.core.kv_cache_utils"
    else:
        raise DriftError(f"vLLM {version}: no get_kv_cache_configs in kv_cache_planning or kv_cache_utils")
    planner = m(planner_module)
    iface = m("vllm.v1.kv_cache_interface")
    if iface is None:
        raise DriftError(f"vLLM {version}: no vllm.v1.kv_cache_interface")
    tensor = _fields(_attr(iface, "KVCacheTensor"))
    if {"layers", "layer_stride", "block_stride"} <= tensor:
        tensor_layout = "strided"
    elif "shared_by" in tensor:
        tensor_layout = "shared_by"
    else:
        raise DriftError(f"vLLM {version}: KVCacheTensor has neither layer strides nor shared_by ({sorted(tensor)})")
    manager_mod = m("vllm.v1.core.kv_cache_manager")
    kvm_cls = _attr(manager_mod, "KVCacheManager")
    if kvm_cls is None:
        raise DriftError(f"vLLM {version}: no KVCacheManager")
    allocate = params(getattr(kvm_cls, "allocate_slots", None))
    if "full_sequence_must_fit" in allocate:
        gate = "full_sequence_must_fit"
    elif hasattr(kvm_cls, "can_fit_full_sequence"):
        gate = "can_fit_full_sequence"
    else:
        gate = "none"
    coord_mod = m("vllm.v1.core.kv_cache_coordinator")
    coordinator_cls = _attr(coord_mod, "KVCacheCoordinator")
    if not any(hasattr(_attr(iface, cls), "max_admission_blocks_per_request")
               for cls in ("SlidingWindowSpec", "ChunkedLocalAttentionSpec")):
        admission_caps = "none"
    elif "apply_admission_cap" in params(getattr(coordinator_cls, "get_num_blocks_to_allocate", None)):
        admission_caps = "admission_only"
    else:
        admission_caps = "on_allocation"
    coordinator_fn = _attr(coord_mod, "get_kv_cache_coordinator")
    sched_mod = m("vllm.v1.core.sched.scheduler")
    config = m("vllm.config")
    callables: dict[str, Any] = {
        "get_kv_cache_configs": _attr(planner, "get_kv_cache_configs"),
        "get_kv_cache_coordinator": coordinator_fn,
        "get_num_blocks_to_allocate": getattr(coordinator_cls, "get_num_blocks_to_allocate", None),
        "KVCacheManager": kvm_cls,
        "allocate_slots": getattr(kvm_cls, "allocate_slots", None),
        "can_fit_full_sequence": getattr(kvm_cls, "can_fit_full_sequence", None),
        "Scheduler": _attr(sched_mod, "Scheduler"),
        "CacheConfig": _attr(config, "CacheConfig"),
        "SchedulerConfig": _attr(config, "SchedulerConfig"),
        "Request": _attr(m("vllm.v1.request"), "Request"),
        "ModelRunnerOutput": _attr(m("vllm.v1.outputs"), "ModelRunnerOutput"),
        "resolve_kv_cache_block_sizes": _attr(utils, "resolve_kv_cache_block_sizes"),
        # (vllm_config, kv_cache_groups) in 0.25-0.28, 0.32+; (kv_cache_groups) in 0.22, 0.29-0.31;
        # absent in 0.19-0.20
        "_pool_bytes_per_block": _attr(planner, "_pool_bytes_per_block"),
    }
    connector_base = m("vllm.distributed.kv_transfer.kv_connector.v1.base")
    kv_output = _attr(m("vllm.v1.outputs"), "KVConnectorOutput")
    kv_config = _attr(config, "KVTransferConfig")
    kv_connector = (_attr(connector_base, "KVConnectorBase_V1") is not None and kv_output is not None
                    and "kv_connector_module_path" in _fields(kv_config))
    sched_cls = callables["Scheduler"]
    sigs = {k: params(v) for k, v in callables.items() if v is not None}
    open_ = frozenset(k for k, v in callables.items() if v is not None and accepts_any_keyword(v))
    return Compat(
        version=version,
        planner_module=planner_module,
        config_builder=m("vllm.v1.core.kv_cache_config_builder") is not None,
        global_groups=hasattr(planner, "get_global_kv_cache_groups"),
        layout_resolution=_attr(m("vllm.v1.attention.backends.utils"), "resolve_kv_cache_layout") is not None,
        tensor_layout=tensor_layout,
        block_size_resolution=_attr(utils, "resolve_kv_cache_block_sizes") is not None,
        admission_gate=gate,
        admission_caps=admission_caps,
        spec_registry=_attr(m("vllm.v1.core.single_type_kv_cache_manager"), "register_all_kvcache_specs") is not None,
        kv_connector=kv_connector,
        kv_failed_recving="failed_recving" in _fields(kv_output),
        kv_supports_hma=_attr(connector_base, "SupportsHMA") is not None,
        kv_spec_step_blocks=kv_connector and (callable(getattr(sched_cls, "_spec_decode_step_blocks", None))
                                              or _method_mentions(sched_cls, "__init__", "_spec_decode_step_blocks")),
        spec_decode_padding=_method_mentions(sched_cls, "schedule", "pad_spec_decode"),
        params=sigs,
        open_params=open_,
    )


def _method_mentions(cls: Any, method: str, name: str) -> bool:
    """Whether ``cls.method``'s code refers to ``name`` (a capability read off the release's code)."""
    code = getattr(getattr(cls, method, None), "__code__", None)
    return code is not None and name in code.co_names + code.co_varnames


def waiting_queues(scheduler: Any) -> tuple[str, str]:
    """``(queue drained first, waiting queue)`` of a built upstream Scheduler: 0.31 and later
    keep block holders in ``kv_holding_waiting``; 0.27 - 0.29 one ``skipped_waiting`` queue for
    every skipped request (read off the instance: the queues are made in ``__init__``)."""
    if hasattr(scheduler, "kv_holding_waiting"):
        return "kv_holding_waiting", "waiting"
    if hasattr(scheduler, "skipped_waiting"):
        return "skipped_waiting", "waiting"
    return "", "waiting"


def _first(modules: Mapping[str, ModuleType | None], name: str, *where: str) -> Any:
    for mod in where:
        value = _attr(modules.get(mod), name)
        if value is not None:
            return value
    return None


def resolve_names(caps: Compat, modules: Mapping[str, ModuleType | None]) -> dict[str, Any]:
    """The upstream objects the adapter uses, looked up where the release keeps them."""
    m = modules.get
    utils = "vllm.v1.core.kv_cache_utils"
    planner = caps.planner_module
    ns: dict[str, Any] = {
        "iface": m("vllm.v1.kv_cache_interface"),
        "planning": m(planner),
        "CacheConfig": _first(modules, "CacheConfig", "vllm.config"),
        "SchedulerConfig": _first(modules, "SchedulerConfig", "vllm.config"),
        "VllmConfig": _first(modules, "VllmConfig", "vllm.config"),
        "SamplingParams": _first(modules, "SamplingParams", "vllm.sampling_params"),
        "get_hash_fn_by_name": _first(modules, "get_hash_fn_by_name", "vllm.utils.hashing", "vllm.utils"),
        "get_supported_kv_cache_layouts": _first(modules, "get_supported_kv_cache_layouts",
                                                 "vllm.v1.attention.backends.utils"),
        "resolve_kv_cache_layout": _first(modules, "resolve_kv_cache_layout", "vllm.v1.attention.backends.utils"),
        "get_kv_cache_config_builder": _first(modules, "get_kv_cache_config_builder",
                                              "vllm.v1.core.kv_cache_config_builder"),
        "get_kv_cache_coordinator": _first(modules, "get_kv_cache_coordinator", "vllm.v1.core.kv_cache_coordinator"),
        "KVCacheManager": _first(modules, "KVCacheManager", "vllm.v1.core.kv_cache_manager"),
        "generate_scheduler_kv_cache_config": _first(modules, "generate_scheduler_kv_cache_config", utils, planner),
        "get_max_concurrency_for_kv_cache_config": _first(modules, "get_max_concurrency_for_kv_cache_config",
                                                          planner, utils),
        "estimate_max_model_len": _first(modules, "estimate_max_model_len", planner, utils),
        "check_enough_kv_cache_memory": _first(modules, "check_enough_kv_cache_memory", planner, utils),
        "get_request_block_hasher": _first(modules, "get_request_block_hasher", utils),
        "init_none_hash": _first(modules, "init_none_hash", utils),
        "resolve_kv_cache_block_sizes": _first(modules, "resolve_kv_cache_block_sizes", utils),
        "Scheduler": _first(modules, "Scheduler", "vllm.v1.core.sched.scheduler"),
        "register_all_kvcache_specs": _first(modules, "register_all_kvcache_specs",
                                             "vllm.v1.core.single_type_kv_cache_manager"),
        "ModelRunnerOutput": _first(modules, "ModelRunnerOutput", "vllm.v1.outputs"),
        "Request": _first(modules, "Request", "vllm.v1.request"),
        "StructuredOutputManager": _first(modules, "StructuredOutputManager", "vllm.v1.structured_output"),
        # the KV connector API (optional: caps.kv_connector says whether it is there)
        "KVConnectorBase_V1": _first(modules, "KVConnectorBase_V1", "vllm.distributed.kv_transfer.kv_connector.v1.base"),
        "KVConnectorMetadata": _first(modules, "KVConnectorMetadata",
                                      "vllm.distributed.kv_transfer.kv_connector.v1.base"),
        "SupportsHMA": _first(modules, "SupportsHMA", "vllm.distributed.kv_transfer.kv_connector.v1.base"),
        "KVConnectorOutput": _first(modules, "KVConnectorOutput", "vllm.v1.outputs"),
        "KVTransferConfig": _first(modules, "KVTransferConfig", "vllm.config"),
        "ParallelConfig": _first(modules, "ParallelConfig", "vllm.config"),
    }
    needed = ("iface", "planning", "CacheConfig", "SchedulerConfig", "VllmConfig", "SamplingParams",
              "get_hash_fn_by_name", "get_kv_cache_coordinator", "KVCacheManager",
              "generate_scheduler_kv_cache_config", "get_max_concurrency_for_kv_cache_config",
              "get_request_block_hasher", "init_none_hash", "Scheduler", "ModelRunnerOutput", "Request",
              "StructuredOutputManager")
    missing = [n for n in needed if ns[n] is None]
    if missing:
        raise DriftError(f"vLLM {caps.version}: not found where the adapter looks: {', '.join(missing)}")
    return ns


class KnobMissing(Exception):
    """A keyword the release's callable lacks, holding a non-neutral value."""

    def __init__(self, where: str, name: str, value: Any) -> None:
        self.where, self.name, self.value = where, name, value
        super().__init__(f"{where} has no parameter {name} (needed for {name}={value!r})")


_NEUTRAL_MISSING = object()


def fit_kwargs(caps: Compat, where: str, kwargs: Mapping[str, Any],
               neutral: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The keywords of ``kwargs`` that the release's ``where`` accepts.

    A keyword it lacks is dropped when ``neutral`` lists it and the value equals the neutral
    one (the release behaved that way before the knob existed); otherwise
    :class:`KnobMissing` (the caller refuses the input) or, for a keyword with no neutral
    value, :class:`DriftError` (the adapter does not know this release: a gap to fix).
    """
    neutral = neutral or {}
    if where in caps.open_params:
        return dict(kwargs)
    known = caps.params.get(where, frozenset())
    out = {}
    for name, value in kwargs.items():
        if name in known:
            out[name] = value
            continue
        n = neutral.get(name, _NEUTRAL_MISSING)
        if n is _NEUTRAL_MISSING:
            raise DriftError(f"vLLM {caps.version}: {where} takes no {name!r} and the adapter has no "
                             f"neutral value for it (parameters: {sorted(known)})")
        if value != n:
            raise KnobMissing(where, name, value)
    return out


def call(caps: Compat, where: str, fn: Callable[..., Any], kwargs: Mapping[str, Any],
         neutral: Mapping[str, Any] | None = None) -> Any:
    """``fn(**fit_kwargs(...))``."""
    return fn(**fit_kwargs(caps, where, kwargs, neutral))


# ------------------------------------------------------------- findings per release

@dataclasses.dataclass(frozen=True)
class CheckRules:
    """How the release's startup check counts memory, probed on its own planner
    (:func:`kvverify.targets.vllm.planner.memory_rules`)."""

    override_counted: bool   # num_gpu_blocks_override replaces the profiled memory in the check
    reserves_null_block: bool  # the check keeps the null block out of the usable memory


def _has_admission_caps(caps: Compat, rules: CheckRules) -> bool:
    return caps.admission_caps != "none"


def _reserves_null_block(caps: Compat, rules: CheckRules) -> bool:
    return rules.reserves_null_block


#: Finding (``reports/findings/F<n>-*.md``; a repro id of
#: ``properties/test_differential.py::test_finding_reproduces_on_vllm``) -> the capability the
#: defect lives in; ``None``: every supported release. Each entry is confirmed by running the
#: finding's minimal counterexample on every installed release (``docs/vllm-target.md``,
#: "Findings per release"); on a release where the predicate is false the finding's strict
#: xfail does not apply (its property must pass) and its repro must *not* reproduce.
FINDING_CAPABILITY: dict[str, Callable[[Compat, CheckRules], bool] | None] = {
    "F1": None,                      # concurrency = num_blocks / blocks per request, null block counted
    "F2": _has_admission_caps,       # the chunked-local admission cap (no cap, no short cap)
    "F3": _reserves_null_block,      # the check reserves a block for the never-computed token...
    # SWA / chunked caps ignore lookahead; so does the SWA / chunked startup bound of a release
    # without caps (0.19.1: its replay livelocks the same way), hence every release
    "F4": None,
    "F5": None,                      # the SWA per-request blocks' unreachable +1 (max_memory_usage)
    "F6-estimate": _reserves_null_block,  # estimate (no null block) vs check (null block reserved)
    "F6-check": None,                # the public check ignores group padding
    "F7": None,                      # chunked-local hybrid with unequal pages asserts after startup
    # Mamba align's 2 + S: its replay's pool (N = 2) starts where the check reserves no null block
    # (replayed on every installed release: reproduces on 0.29.0 and later, as F3)
    "F9": _reserves_null_block,
    # the KV-transfer paths (issue 29; docs/releases-connector.md)
    "F10": lambda caps, rules: caps.spec_decode_padding,           # pad_spec_decode in the waiting scan
    "F11": lambda caps, rules: caps.kv_spec_step_blocks,           # the constant speculative reservation
    "F12": lambda caps, rules: caps.kv_connector,                  # full-hit rewind to num_tokens - 1
    "F13": lambda caps, rules: caps.kv_connector,                  # Mamba align + external tokens
}


def _allocation_capped(caps: Compat) -> str | None:
    if caps.admission_caps == "on_allocation":
        return ("the release applies the SWA / chunked-local admission cap to the per-step allocation too "
                "(zoo flaw swa_cap_on_allocation, #39866; get_num_blocks_to_allocate has no "
                "apply_admission_cap): the replay's step crashes in allocate_slots ('Cannot get N free "
                "blocks from the pool') before the finding's own symptom can show")
    return None


#: Finding -> why its minimal counterexample cannot show it on a release that has it (another
#: defect of that release fails the replay first); ``None``: the replay judges it. The replay
#: then skips with that reason (``properties/test_differential.py``).
FINDING_REPLAY_MASKED: dict[str, Callable[[Compat], str | None]] = {
    "F2": _allocation_capped,
    "F4": _allocation_capped,
}


def finding_replay_masked(finding: str, caps: Compat) -> str | None:
    """Why ``finding``'s replay cannot judge the release described by ``caps``, or ``None``."""
    why = FINDING_REPLAY_MASKED.get(finding)
    return why(caps) if why is not None else None


def finding_expected(finding: str, caps: Compat, rules: CheckRules) -> bool:
    """Whether ``finding`` (``"F3"``, ``"F6-check"``; ``"F6"`` = any of its parts) exists in the
    release described by ``caps`` / ``rules``. Unknown findings are expected (strict)."""
    keys = [k for k in FINDING_CAPABILITY if k == finding or k.split("-")[0] == finding]
    if not keys:
        return True
    return any(FINDING_CAPABILITY[k] is None or FINDING_CAPABILITY[k](caps, rules) for k in keys)  # type: ignore[misc]


__all__ = ["CheckRules", "Compat", "DriftError", "FINDING_CAPABILITY", "KnobMissing", "MODULES", "REFERENCE_RELEASE",
           "SUPPORTED", "SUPPORTED_MAX", "SUPPORTED_MIN", "call", "detect", "finding_expected", "finding_replay_masked",
           "fit_kwargs",
           "params", "parse_version", "resolve_names", "unsupported_release", "waiting_queues"]
