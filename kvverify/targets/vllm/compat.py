"""The per-release differences of the supported vLLM releases — the one place they are detected.

Everything here is *detected* from what the installed release exposes (a module that
imports, a function that exists, a parameter in a signature, a dataclass field, an attribute
a class's own code sets), not read off the version string; the version only bounds the
supported range (:mod:`.support`) and names the release in messages. :func:`detect` works on
plain module objects, so every probe is tested with small fakes (``tests/test_vllm_compat.py``)
without installing any release. The rest of the adapter asks :class:`Compat`, by name; it
never probes a release's KV-cache API itself (only :func:`.env.select_cpu_platform` asks the
platform registry which platform it would pick, before anything here can be imported).
The operator checks' late imports (lengths, startup traps) go through :mod:`.late`, the same
rule for modules too heavy to import up front.

Measured drift (``docs/vllm-target.md``, "How drift is absorbed"; ``docs/vllm-target-notes.md``,
section 9, "Older releases"):

==========================  =========================================================
capability                  releases that differ
==========================  =========================================================
``planner_module``          <= 0.32: the planner lives in ``kv_cache_utils`` (no
                            ``kv_cache_planning`` / ``kv_cache_config_builder``)
``global_groups``           <= 0.32: no ``get_global_kv_cache_groups``;
                            ``get_kv_cache_configs(vllm_config, specs, memory)``
``layout_resolution``       <= 0.28: no ``resolve_kv_cache_layout``
``tensor_layout``           <= 0.28: ``KVCacheTensor(size, shared_by)``
``block_size_resolution``   <= 0.19: no ``resolve_kv_cache_block_sizes`` (one block size)
``admission_gate``          <= 0.19: ``KVCacheManager.can_fit_full_sequence``
``admission_caps``          <= 0.19: no SWA / chunked-local admission cap (no
                            ``max_admission_blocks_per_request``); 0.20: the cap is
                            applied to every ``get_num_blocks_to_allocate``, the per-step
                            allocation included (#39866); >= 0.22: ``apply_admission_cap``
``params``                  keyword drift of the coordinator, the manager, the scheduler;
                            the in-flight window is ``max_num_batched_tokens`` in
                            0.20-0.25, ``max_in_flight_tokens`` from 0.27, absent in
                            0.19 (:meth:`Compat.in_flight_param`)
``pool_bytes``              ``_pool_bytes_per_block`` takes ``vllm_config`` in 0.25-0.28
                            and 0.32, only the groups in 0.22 and 0.29-0.31, is absent
                            in 0.19-0.20; 0.33 asks the config builder
``in_flight_tokens``        <= 0.25: no ``VllmConfig.max_in_flight_tokens``
``lookahead_property``      <= 0.27: no ``VllmConfig.num_lookahead_tokens`` property (the
                            Scheduler derives lookahead itself)
``prefill_lookahead``       <= 0.29: no ``num_prefill_lookahead_tokens``
``prefix_cacheable``        <= 0.28: no ``KVCacheSpec.prefix_cacheable``
``*_retention``             <= 0.28: no ``prefix_cache_retention_interval`` (on
                            ``CacheConfig`` and ``KVCacheConfig`` from 0.29)
``cache_hit_alignment``     <= 0.31: no ``resolve_cache_hit_alignment_tokens``
``kv_holding_waiting``      <= 0.29: no separate queue of waiting requests holding blocks
``drained_first``           0.18 - 0.29: one ``skipped_waiting`` queue, drained first, for
                            every skipped request (#45406 / #57841)
``kv_connector``            the scheduler-side connector API the scripted connector plugs
                            into (``KVConnectorBase_V1``, ``KVConnectorOutput``,
                            ``KVTransferConfig.kv_connector_module_path``)
``kv_failed_recving``       <= 0.30: no ``KVConnectorOutput.failed_recving``
``kv_supports_hma``         ``SupportsHMA`` (a connector next to the hybrid manager)
``kv_spec_step_blocks``     <= 0.30: the async-load gate reserves no speculative step
                            (``_spec_decode_step_blocks``, #57104)
``spec_decode_padding``     the waiting scan pads a one-token decode (``pad_spec_decode``;
                            <= 0.22: none); <= 0.29 only behind a running request
==========================  =========================================================

A knob a release does not have is dropped when it holds its neutral value (it then means
what the release did before the knob existed) and refused otherwise: the example is
rejected with the reason (:func:`fit_kwargs`). A capability a property needs and the
release lacks skips the property with the reason (:func:`~.refusals.lacks`).

Every symbol :func:`detect` looks for goes through one reader (:class:`_Release`), which
records each one the release lacks (``Compat.absent``: ``"module.name"`` or
``"module.Class.attr"``). Telling an absence the adapter knows (a capability value above
explains it) from one it does not — a :class:`DriftError` naming the symbol and the release
— is therefore one check over ``absent`` at the end of :func:`detect`.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any

from kvverify.targets.vllm import history
from kvverify.targets.vllm.support import REFERENCE_RELEASE, SUPPORTED, SUPPORTED_MAX, SUPPORTED_MIN

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
    "vllm.v1.core.block_pool",
    "vllm.v1.core.sched.output",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.core.single_type_kv_cache_manager",
    "vllm.v1.outputs",
    "vllm.v1.request",
    "vllm.v1.structured_output",
    "vllm.distributed.kv_transfer.kv_connector.v1.base",
)

_UTILS = "vllm.v1.core.kv_cache_utils"
_IFACE = "vllm.v1.kv_cache_interface"
_BACKENDS = "vllm.v1.attention.backends.utils"
_BUILDER = "vllm.v1.core.kv_cache_config_builder"
_SCHED = "vllm.v1.core.sched.scheduler"
_CONNECTOR = "vllm.distributed.kv_transfer.kv_connector.v1.base"


class DriftError(ImportError):
    """The release differs in a way the adapter does not know (an adapter gap, not a defect)."""


def parse_version(version: str) -> tuple[int, ...] | None:
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else None


def outside_measured_range(version: str) -> str | None:
    """A notice when ``version`` is not a release the adapter was measured on (:mod:`.support`):
    a dev build, a release newer or older than the range, an unreadable version. Never a
    refusal: capability detection (:func:`detect`, :mod:`.history`) decides whether the
    adapter knows the release's API, and says what it lacks when it does not."""
    v = parse_version(version)
    if v is None:
        return f"vLLM version {version!r} cannot be read; the API is judged by capability detection alone"
    if v < SUPPORTED_MIN or v > SUPPORTED_MAX or not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?(\+\w+)?", version):
        return (f"vLLM {version} is outside the measured releases ({SUPPORTED}): capability detection "
                "decides (docs/bring-your-own-vllm.md)")
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


def constructor_fields(cls: type) -> frozenset[str]:
    """Fields of an upstream spec / tensor class (a dataclass: all its fields; else its signature)."""
    if dataclasses.is_dataclass(cls):
        return frozenset(f.name for f in dataclasses.fields(cls))
    return frozenset(inspect.signature(cls).parameters)


def _config_fields(cls: Any) -> frozenset[str]:
    """Fields of an upstream config class (a dataclass, or a pydantic dataclass's model fields)."""
    names = set(getattr(cls, "__dataclass_fields__", {}) or {})
    names |= set(getattr(cls, "model_fields", {}) or {})
    return frozenset(names)


def _code_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


def class_code_names(cls: type) -> frozenset[str]:
    """Every attribute name the methods of ``cls`` (and its bases) load or store: an instance
    attribute set in ``__init__`` (``self.kv_holding_waiting = ...``) is found this way."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        for value in vars(klass).values():
            fn = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            code = getattr(fn, "__code__", None)
            if isinstance(code, types.CodeType):
                names.update(_code_names(code))
    return frozenset(names)


_MISSING = object()


class _Release:
    """The release's modules, read by :func:`detect`: every symbol looked for and not found is
    recorded in :attr:`absent` (``"module.name"``, ``"module.Class.attr"``)."""

    def __init__(self, modules: Mapping[str, ModuleType | None]) -> None:
        self.modules = modules
        self.absent: set[str] = set()
        self.present: set[str] = set()

    def _seen(self, key: str, found: bool) -> bool:
        (self.present if found else self.absent).add(key)
        return found

    def module(self, name: str) -> ModuleType | None:
        mod = self.modules.get(name)
        self._seen(name, mod is not None)
        return mod

    def symbol(self, module: str, name: str) -> Any:
        """``module.name``, or ``None`` when the release has no such module or name."""
        mod = self.modules.get(module)
        value = getattr(mod, name, _MISSING) if mod is not None else _MISSING
        if not self._seen(f"{module}.{name}", value is not _MISSING and value is not None):
            return None
        return value

    def member(self, module: str, cls_name: str, name: str) -> Any:
        """``module.Class.name`` (a class attribute: method, property, field default), or ``None``."""
        cls = self.symbol(module, cls_name)
        value = getattr(cls, name, _MISSING) if cls is not None else _MISSING
        if not self._seen(f"{module}.{cls_name}.{name}", value is not _MISSING):
            return None
        return value

    def has_member(self, module: str, cls_name: str, name: str) -> bool:
        cls = self.symbol(module, cls_name)
        return self._seen(f"{module}.{cls_name}.{name}", cls is not None and hasattr(cls, name))

    def has_property(self, module: str, cls_name: str, name: str) -> bool:
        return isinstance(self.member(module, cls_name, name), property)

    def sets(self, module: str, cls_name: str, name: str) -> bool:
        """Whether ``module.Class``'s own code names attribute ``name`` (an instance attribute)."""
        cls = self.symbol(module, cls_name)
        return self._seen(f"{module}.{cls_name}.{name}", isinstance(cls, type) and name in class_code_names(cls))

    def mentions(self, module: str, cls_name: str, method: str, name: str) -> bool:
        """Whether ``module.Class.method``'s own code names ``name`` (a behaviour read off the code)."""
        fn = self.member(module, cls_name, method)
        code = getattr(fn, "__code__", None)
        found = isinstance(code, types.CodeType) and name in set(_code_names(code)) | set(code.co_varnames)
        return self._seen(f"{module}.{cls_name}.{method}:{name}", found)

    def source_has(self, module: str, cls_name: str, method: str, label: str, pattern: str) -> bool:
        """Whether ``module.Class.method``'s source, whitespace collapsed, matches ``pattern`` (a
        condition no name in the code tells apart; recorded as ``module.Class.method~label``)."""
        fn = self.member(module, cls_name, method)
        try:
            text = " ".join(inspect.getsource(fn).split()) if fn is not None else ""
        except (OSError, TypeError):
            text = ""
        return self._seen(f"{module}.{cls_name}.{method}~{label}", re.search(pattern, text) is not None)

    def spec_classes(self) -> Iterator[tuple[str, type]]:
        """The interface module's spec classes (``*Spec`` / ``*Specs``)."""
        iface = self.modules.get(_IFACE)
        for name, value in sorted(vars(iface).items() if iface is not None else ()):
            if isinstance(value, type) and name.endswith(("Spec", "Specs")):
                yield name, value


#: the upstream Scheduler's KV-transfer state the connector adapter reads (its stall fingerprint,
#: ``has_pending_external_events``, the in-flight reservation check): the connector's landed and
#: failed loads (0.18+), the deferred frees and their step fences, the in-flight prefills and
#: ``defer_block_free`` (0.25+), the deferred waiting requests (0.31+); history.py places each
TRANSFER_STATE_ATTRS: tuple[str, ...] = (
    "finished_recving_kv_req_ids", "failed_recving_kv_req_ids", "processed_step_seq", "sched_step_seq",
    "deferred_frees", "defer_block_free", "_inflight_prefills", "deferred_waiting")


@dataclasses.dataclass(frozen=True)
class Compat:
    """What the installed release can do, and where its functions live (:func:`detect`)."""

    version: str
    planner_module: str            # module holding get_kv_cache_configs / the startup check
    config_builder: bool           # kv_cache_config_builder (pool bytes per block from a builder)
    global_groups: bool            # get_global_kv_cache_groups + 4-argument get_kv_cache_configs
    layout_resolution: bool        # resolve_kv_cache_layout (a worker's layout preference resolved)
    layout_preferences: bool       # get_supported_kv_cache_layouts (the layouts a worker reports)
    tensor_layout: str             # "strided" | "shared_by"
    block_size_resolution: bool    # resolve_kv_cache_block_sizes (scheduler / hash block sizes)
    admission_gate: str            # "full_sequence_must_fit" | "can_fit_full_sequence" | "none"
    spec_registry: bool            # register_all_kvcache_specs(vllm_config)
    #: SWA / chunked-local admission caps: "none" (<= 0.19), "on_allocation" (0.20: the cap
    #: also clamps the per-step allocation), "admission_only" (>= 0.22: ``apply_admission_cap``)
    admission_caps: str
    #: the planner module's startup-check helpers that :func:`~.planner.startup_checks_disabled`
    #: neutralises (<= 0.32 also calls the public ``check_enough_kv_cache_memory``)
    check_helpers: tuple[str, ...]
    #: the public capacity helpers the release has (``estimate_max_model_len``,
    #: ``check_enough_kv_cache_memory``), in the planner module or ``kv_cache_utils``
    capacity_helpers: frozenset[str]
    worker_projection: bool        # _project_kv_cache_groups_to_worker (else projected inline)
    #: bytes per block of the pool: "builder" (``_pool_bytes_per_block_from_builder``),
    #: "vllm_config" / "groups" (``_pool_bytes_per_block`` with / without the config),
    #: "page_times_layers" (no helper: one page times the largest group's layers)
    pool_bytes: str
    uniform_pages: bool            # UniformTypeKVCacheSpecs.max_memory_usage_pages
    in_flight_tokens: bool         # VllmConfig.max_in_flight_tokens
    lookahead_property: bool       # VllmConfig.num_lookahead_tokens is a property
    prefill_lookahead: bool        # VllmConfig.num_prefill_lookahead_tokens is a property
    cache_config_retention: bool   # CacheConfig.prefix_cache_retention_interval
    kv_cache_config_retention: bool  # KVCacheConfig.prefix_cache_retention_interval
    cache_hit_alignment: bool      # kv_cache_utils.resolve_cache_hit_alignment_tokens
    prefix_cacheable: bool         # KVCacheSpec.prefix_cacheable (else every group is)
    #: upstream spec class name -> its constructor fields / every attribute it has (fields,
    #: properties, methods); a class the release lacks is no key
    spec_fields: Mapping[str, frozenset[str]]
    spec_attrs: Mapping[str, frozenset[str]]
    pool_hash_sets: bool           # BlockPool.cached_block_hashes_by_block (a block under several keys)
    hash_map: bool                 # BlockPool's cache is a BlockHashToBlockMap (its dict is ``_cache``)
    kv_holding_waiting: bool       # Scheduler.kv_holding_waiting (waiting requests holding blocks)
    shared_prefix_boundary: bool   # Request.shared_prefix_boundary (the Marconi junction)
    preempted_req_ids: bool        # SchedulerOutput.preempted_req_ids
    #: the waiting queue the scan drains first: "kv_holding_waiting" (>= 0.31: requests holding
    #: blocks), "skipped_waiting" (0.18 - 0.29: every skipped request), "" (none)
    drained_first: str = ""
    #: the scheduler-side KV connector API the scripted connector plugs into
    #: (``KVConnectorBase_V1``, ``KVConnectorOutput``, ``KVTransferConfig.kv_connector_module_path``)
    kv_connector: bool = False
    kv_failed_recving: bool = False    # KVConnectorOutput.failed_recving: request-level load failures
    kv_supports_hma: bool = False      # SupportsHMA (request_finished_all_groups)
    #: the async-load gate's ``_spec_decode_step_blocks`` (#57104)
    kv_spec_step_blocks: bool = False
    #: the Scheduler's transfer-state attributes (:data:`TRANSFER_STATE_ATTRS`) this release sets:
    #: what the adapter's stall fingerprint and the in-flight reservation check read. Each one is
    #: probed, so a release that lacks one the history does not explain is drift, not a default
    transfer_state: frozenset[str] = frozenset()
    #: the waiting scan pads a new one-token decode to ``1 + num_speculative_tokens`` (``pad_spec_decode``)
    spec_decode_padding: bool = False
    #: ... also with nothing running (``scheduled_running_reqs or num_computed_tokens > 0``, >= 0.31)
    spec_decode_padding_idle: bool = False
    speculative_tokens_property: bool = False  # VllmConfig.num_speculative_tokens is a property
    #: parameter names of the callables whose keywords drifted
    params: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    #: callables taking **kwargs (anything is accepted)
    open_params: frozenset[str] = frozenset()
    #: every symbol :func:`detect` looked for and the release lacks (see the module docstring)
    absent: frozenset[str] = frozenset()
    #: every symbol :func:`detect` looked for and found (:mod:`.history` reads both)
    present: frozenset[str] = frozenset()

    def has(self, where: str, name: str) -> bool:
        return where in self.open_params or name in self.params.get(where, frozenset())

    @property
    def coordinator_block_sizes(self) -> bool:
        """``get_kv_cache_coordinator`` receives the scheduler block size (>= 0.25; 0.20 - 0.22
        hand it to the Scheduler alone)."""
        return self.has("get_kv_cache_coordinator", "scheduler_block_size")

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

    def waiting_queues(self) -> tuple[str, str]:
        """``(queue drained first, waiting queue)`` of the release's Scheduler: block holders in
        ``kv_holding_waiting`` (>= 0.31), one ``skipped_waiting`` queue (0.18 - 0.29), else none."""
        return self.drained_first, "waiting"


def _pool_bytes(r: _Release, planner: str, has_config: Callable[[], bool]) -> str:
    if (r.symbol(_BUILDER, "get_kv_cache_config_builder") is not None
            and r.symbol(planner, "_pool_bytes_per_block_from_builder") is not None):
        return "builder"
    if r.symbol(planner, "_pool_bytes_per_block") is not None:
        return "vllm_config" if has_config() else "groups"
    return "page_times_layers"


def _drained_first(r: _Release) -> str:
    if r.sets(_SCHED, "Scheduler", "kv_holding_waiting"):
        return "kv_holding_waiting"
    return "skipped_waiting" if r.sets(_SCHED, "Scheduler", "skipped_waiting") else ""


def detect(version: str, modules: Mapping[str, ModuleType | None]) -> Compat:
    """Read the capabilities off the imported modules (``None``: the release has no such module)."""
    r = _Release(modules)
    if r.module(_IFACE) is None:
        raise DriftError(f"vLLM {version}: no vllm.v1.kv_cache_interface: not a v1 engine (the vllm target "
                         "needs vLLM's v1 engine and its KV-cache planner)")
    planning = "vllm.v1.core.kv_cache_planning"
    if r.symbol(planning, "get_kv_cache_configs") is not None:
        planner_module = planning
    elif r.symbol(_UTILS, "get_kv_cache_configs") is not None:
        planner_module = _UTILS
    else:
        raise DriftError(f"vLLM {version}: no get_kv_cache_configs in kv_cache_planning or kv_cache_utils "
                         "(a v1 engine without the KV-cache planner the adapter knows)")
    tensor_cls = r.symbol(_IFACE, "KVCacheTensor")
    tensor = params(tensor_cls) if tensor_cls is not None else frozenset()
    if {"layers", "layer_stride", "block_stride"} <= tensor:
        tensor_layout = "strided"
    elif "shared_by" in tensor:
        tensor_layout = "shared_by"
    else:
        raise DriftError(f"vLLM {version}: KVCacheTensor has neither layer strides nor shared_by ({sorted(tensor)})")
    manager = "vllm.v1.core.kv_cache_manager"
    kvm_cls = r.symbol(manager, "KVCacheManager")
    if kvm_cls is None:
        raise DriftError(f"vLLM {version}: no KVCacheManager")
    allocate = r.member(manager, "KVCacheManager", "allocate_slots")
    can_fit = r.member(manager, "KVCacheManager", "can_fit_full_sequence")
    # a parameter recorded as a symbol: it replaced can_fit_full_sequence (.history.REPLACED)
    if allocate is not None and r._seen(f"{manager}.KVCacheManager.allocate_slots(full_sequence_must_fit)",
                                        "full_sequence_must_fit" in params(allocate)):
        gate = "full_sequence_must_fit"
    elif can_fit is not None:
        gate = "can_fit_full_sequence"
    else:
        gate = "none"
    coordinator = "vllm.v1.core.kv_cache_coordinator"
    per_step = r.member(coordinator, "KVCacheCoordinator", "get_num_blocks_to_allocate")
    if not any([r.has_member(_IFACE, cls, "max_admission_blocks_per_request")
                for cls in ("SlidingWindowSpec", "ChunkedLocalAttentionSpec")]):
        admission_caps = "none"
    elif "apply_admission_cap" in params(per_step):
        admission_caps = "admission_only"
    else:
        admission_caps = "on_allocation"
    callables: dict[str, Any] = {
        "get_kv_cache_configs": r.symbol(planner_module, "get_kv_cache_configs"),
        "get_kv_cache_coordinator": r.symbol(coordinator, "get_kv_cache_coordinator"),
        "get_num_blocks_to_allocate": per_step,
        "KVCacheManager": kvm_cls,
        "allocate_slots": allocate,
        "can_fit_full_sequence": can_fit,
        "Scheduler": r.symbol("vllm.v1.core.sched.scheduler", "Scheduler"),
        "CacheConfig": r.symbol("vllm.config", "CacheConfig"),
        "SchedulerConfig": r.symbol("vllm.config", "SchedulerConfig"),
        "Request": r.symbol("vllm.v1.request", "Request"),
        "ModelRunnerOutput": r.symbol("vllm.v1.outputs", "ModelRunnerOutput"),
        "resolve_kv_cache_block_sizes": r.symbol(_UTILS, "resolve_kv_cache_block_sizes"),
        # (vllm_config, kv_cache_groups) in 0.25-0.28, 0.32+; (kv_cache_groups) in 0.22, 0.29-0.31;
        # absent in 0.19-0.20
        "_pool_bytes_per_block": r.symbol(planner_module, "_pool_bytes_per_block"),
    }
    sigs = {k: params(v) for k, v in callables.items() if v is not None}
    open_ = frozenset(k for k, v in callables.items() if v is not None and accepts_any_keyword(v))
    global_groups = r.symbol(planner_module, "get_global_kv_cache_groups") is not None
    check_helpers = tuple(n for n in ("_check_enough_kv_cache_memory", "_auto_fit_max_model_len")
                          if r.symbol(planner_module, n) is not None)
    if not global_groups and r.symbol(planner_module, "check_enough_kv_cache_memory") is not None:
        check_helpers += ("check_enough_kv_cache_memory",)  # <= 0.32 calls the public one
    capacity = frozenset(n for n in ("estimate_max_model_len", "check_enough_kv_cache_memory")
                         if any([r.symbol(mod, n) is not None for mod in (planner_module, _UTILS)]))
    spec_classes = list(r.spec_classes())
    kv_cache_config = r.symbol(_IFACE, "KVCacheConfig")
    pool = "vllm.v1.core.block_pool"
    kv_output = r.symbol("vllm.v1.outputs", "KVConnectorOutput")
    kv_connector = (r.symbol(_CONNECTOR, "KVConnectorBase_V1") is not None and kv_output is not None
                    and "kv_connector_module_path" in _config_fields(r.symbol("vllm.config", "KVTransferConfig")))
    caps = Compat(
        version=version,
        planner_module=planner_module,
        config_builder=r.module(_BUILDER) is not None,
        global_groups=global_groups,
        layout_resolution=r.symbol(_BACKENDS, "resolve_kv_cache_layout") is not None,
        layout_preferences=r.symbol(_BACKENDS, "get_supported_kv_cache_layouts") is not None,
        tensor_layout=tensor_layout,
        block_size_resolution=callables["resolve_kv_cache_block_sizes"] is not None,
        admission_gate=gate,
        admission_caps=admission_caps,
        spec_registry=r.symbol("vllm.v1.core.single_type_kv_cache_manager", "register_all_kvcache_specs") is not None,
        check_helpers=check_helpers,
        capacity_helpers=capacity,
        worker_projection=r.symbol(planner_module, "_project_kv_cache_groups_to_worker") is not None,
        pool_bytes=_pool_bytes(r, planner_module, lambda: "_pool_bytes_per_block" in open_
                               or "vllm_config" in sigs.get("_pool_bytes_per_block", frozenset())),
        uniform_pages=r.has_member(_IFACE, "UniformTypeKVCacheSpecs", "max_memory_usage_pages"),
        in_flight_tokens=r.has_member("vllm.config", "VllmConfig", "max_in_flight_tokens"),
        lookahead_property=r.has_property("vllm.config", "VllmConfig", "num_lookahead_tokens"),
        prefill_lookahead=r.has_property("vllm.config", "VllmConfig", "num_prefill_lookahead_tokens"),
        cache_config_retention="prefix_cache_retention_interval" in _config_fields(callables["CacheConfig"]),
        kv_cache_config_retention=(kv_cache_config is not None and "prefix_cache_retention_interval"
                                   in constructor_fields(kv_cache_config) | set(dir(kv_cache_config))),
        cache_hit_alignment=r.symbol(_UTILS, "resolve_cache_hit_alignment_tokens") is not None,
        prefix_cacheable=r.has_member(_IFACE, "KVCacheSpec", "prefix_cacheable"),
        spec_fields={n: constructor_fields(c) for n, c in spec_classes},
        spec_attrs={n: constructor_fields(c) | frozenset(dir(c)) for n, c in spec_classes},
        pool_hash_sets=r.sets(pool, "BlockPool", "cached_block_hashes_by_block"),
        hash_map=r.sets(pool, "BlockHashToBlockMap", "_cache"),
        kv_holding_waiting=r.sets("vllm.v1.core.sched.scheduler", "Scheduler", "kv_holding_waiting"),
        shared_prefix_boundary=r.sets("vllm.v1.request", "Request", "shared_prefix_boundary"),
        preempted_req_ids="preempted_req_ids" in params(r.symbol("vllm.v1.core.sched.output", "SchedulerOutput")),
        drained_first=_drained_first(r),
        kv_connector=kv_connector,
        kv_failed_recving=kv_output is not None and "failed_recving" in params(kv_output),
        kv_supports_hma=r.symbol(_CONNECTOR, "SupportsHMA") is not None,
        kv_spec_step_blocks=kv_connector and r.sets(_SCHED, "Scheduler", "_spec_decode_step_blocks"),
        transfer_state=frozenset(n for n in TRANSFER_STATE_ATTRS if kv_connector and r.sets(_SCHED, "Scheduler", n)),
        speculative_tokens_property=r.has_property("vllm.config", "VllmConfig", "num_speculative_tokens"),
        spec_decode_padding=r.mentions(_SCHED, "Scheduler", "schedule", "pad_spec_decode"),
        # 0.31: a new one-token decode is padded with nothing running too (a re-sent cached prompt)
        spec_decode_padding_idle=r.source_has(_SCHED, "Scheduler", "schedule", "pad_when_idle",
                                              r"scheduled_running_reqs or num_computed_tokens > 0"),
        params=sigs,
        open_params=open_,
        absent=frozenset(r.absent),
        present=frozenset(r.present),
    )
    drift = history.unexplained_absences(caps.absent, caps.present)
    if drift:
        raise DriftError(history.drift_message(version, drift, caps.present))
    return caps


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


__all__ = ["Compat", "DriftError", "KnobMissing", "MODULES", "REFERENCE_RELEASE", "SUPPORTED",
           "SUPPORTED_MAX", "SUPPORTED_MIN", "accepts_any_keyword", "class_code_names", "constructor_fields", "detect", "fit_kwargs",
           "outside_measured_range", "params", "parse_version"]
