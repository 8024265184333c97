"""The ``vllm`` target: the same interface as the reference, over an installed, pinned vLLM.

Every vLLM import of the project lives in this module, and only inside functions:
importing kvverify never imports vLLM. ``VllmTarget()`` raises a clear
:class:`~kvverify.errors.KVVerifyError` when vLLM is not importable (install it with
``scripts/install-vllm-target.sh``) or is not the pinned version.

What runs upstream code (vLLM 0.33.0, CPU, no model):

* ``plan``: ``resolve_kv_cache_layout`` + ``get_global_kv_cache_groups`` +
  ``get_kv_cache_configs`` (auto-fit and the startup check included); a
  ``ValueError`` of the check becomes ``starts=False`` with the message, as the
  reference records it. The plan is translated back into kvverify's
  :class:`~kvverify.reference.planner.StartupPlan` (groups with kvverify specs, tensors,
  ``blocks_per_group`` from upstream's ``max_memory_usage_bytes / page_size_bytes``,
  the auto-fit length read back from upstream's mutated ``model_config``).
* ``resolve_block_sizes``: upstream ``resolve_kv_cache_block_sizes``;
  ``coordinator_accepts`` builds upstream's KV cache coordinator on the result (its
  constructor holds the divisibility assertions).
* ``admit_on_empty_pool``, ``kv_cache_manager``: upstream ``KVCacheManager``.
* ``run_workload``, ``scheduler``: upstream ``Scheduler`` stepped with fake
  model-runner outputs, behind :class:`UpstreamScheduler`, a shim with the interface
  :func:`kvverify.reference.driver.run_workload` drives, so the stall semantics are the same code.

Upstream objects are rebuilt from the plan on every call (a fresh ``VllmConfig`` each
time: upstream mutates it), so a plan is plain data and can be replayed.

Knobs the adapter cannot express on upstream (``kv_connector``,
``max_concurrent_batches != 1``, ``num_prefill_lookahead_tokens``) raise
:class:`TargetUnsupported`; inside a Hypothesis example that example is rejected, so
a property only ever sees inputs both targets understand.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from kvverify.reference import specs as kv
from kvverify.reference.block_sizes import BlockSizeError
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadResult, WorkloadSpec
from kvverify.reference.driver import run_workload as drive
from kvverify.errors import ConfigError, KVVerifyError
from kvverify.reference.grouping import GroupingError, KVCacheGroupSpec
from kvverify.reference.ops import cdiv
from kvverify.reference.planner import KVCacheConfig, KVCacheTensor, StartupPlan
from kvverify.reference.request import fake_output_token
from kvverify.targets.base import Capability

PINNED_VERSION = "0.33.0"
INSTALL_HINT = ("install the pinned, CPU-only vLLM with `bash scripts/install-vllm-target.sh` "
                "and run with its interpreter (`.venv-vllm/bin/python -m pytest ... --target vllm`)")

#: Layout preference a worker reports. ``None``: "any backend" (upstream's default
#: preference, resolves to LBNHC, layer-outer — the layout the reference models).
DEFAULT_SUPPORTED_LAYOUTS: list[str] | None = None

#: Startup-check refusals (``ValueError`` messages of ``get_kv_cache_configs``).
_CHECK_MESSAGES = ("No available memory", "To serve at least one request", "Cannot auto-fit")


class TargetUnsupported(NotImplementedError):
    """An input or a request the vllm target cannot express on upstream vLLM."""


def unsupported(reason: str) -> None:
    """Refuse an input: a rejected example inside Hypothesis, else :class:`TargetUnsupported`."""
    try:
        from hypothesis import reject
        from hypothesis.control import currently_in_test_context
    except ImportError:  # pragma: no cover - hypothesis is a dependency
        raise TargetUnsupported(reason) from None
    if currently_in_test_context():
        reject()
    raise TargetUnsupported(reason)


def skip_unsupported(reason: str) -> None:
    """Skip the whole property (pytest) or raise :class:`TargetUnsupported` (elsewhere)."""
    if "pytest" in sys.modules:
        import pytest
        pytest.skip(f"vllm target: {reason}")
    raise TargetUnsupported(reason)


def require(target: Any, capability: Capability, what: str = "") -> None:
    """Skip (with the reason) a property that needs ``capability`` the target lacks."""
    if capability not in getattr(target, "capabilities", frozenset(Capability)):
        import pytest
        pytest.skip(f"target {getattr(target, 'name', target)!r} lacks capability "
                    f"{capability.value}{': ' + what if what else ''}")


# --------------------------------------------------------------------- upstream import

_LOCK = threading.RLock()
_UP: SimpleNamespace | None = None

#: Environment vLLM reads at import and at platform resolution. VLLM_TARGET_DEVICE is
#: forced: without it a machine with no GPU cannot build a VllmConfig at all.
_FORCED_ENV = {"VLLM_TARGET_DEVICE": "cpu"}
_DEFAULT_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                "VLLM_LOGGING_LEVEL": "WARNING"}


@contextlib.contextmanager
def _preserved_environ() -> Iterator[None]:
    """Undo what vLLM writes to ``os.environ`` (``CpuPlatform.check_and_update_config``
    sets LD_PRELOAD, VLLM_WORKER_MULTIPROC_METHOD, TORCHINDUCTOR_*...)."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for k in set(os.environ) - set(before):
            del os.environ[k]
        for k, v in before.items():
            if os.environ.get(k) != v:
                os.environ[k] = v


def _upstream() -> SimpleNamespace:
    """Import the pinned vLLM once (lazily), with the environment it needs."""
    global _UP
    if _UP is not None:
        return _UP
    with _LOCK:
        if _UP is not None:
            return _UP
        import importlib.util
        try:
            present = importlib.util.find_spec("vllm") is not None
        except (ImportError, ValueError):
            present = False
        if not present:  # fail fast, without importing torch or touching the environment
            raise KVVerifyError(f"the vllm target needs vLLM {PINNED_VERSION}, which is not "
                                f"installed for {sys.executable}; {INSTALL_HINT}")
        before = dict(os.environ)
        os.environ.update(_FORCED_ENV)
        for k, v in _DEFAULT_ENV.items():
            os.environ.setdefault(k, v)
        os.environ.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="kvverify-vllm-cache-"))
        try:
            with _preserved_environ():
                import torch
                import vllm
        except ImportError as e:
            os.environ.clear()
            os.environ.update(before)  # leave the process as it was
            raise KVVerifyError(f"the vllm target needs vLLM {PINNED_VERSION}, which is not "
                                f"importable here ({type(e).__name__}: {e}); {INSTALL_HINT}") from e
        with _preserved_environ():
            if getattr(vllm, "__version__", None) != PINNED_VERSION:
                raise KVVerifyError(
                    f"the vllm target is pinned to vLLM {PINNED_VERSION}, found "
                    f"{getattr(vllm, '__version__', '?')} at {os.path.dirname(vllm.__file__)}; "
                    f"bumping the pin is a deliberate change (constraints/vllm-{PINNED_VERSION}.txt); "
                    f"{INSTALL_HINT}")
            try:
                from vllm.config import CacheConfig, SchedulerConfig
                from vllm.config import VllmConfig as UpVllmConfig
                from vllm.sampling_params import SamplingParams
                from vllm.utils.hashing import get_hash_fn_by_name
                from vllm.v1 import kv_cache_interface as iface
                from vllm.v1.attention.backends.utils import (
                    get_supported_kv_cache_layouts,
                    resolve_kv_cache_layout,
                )
                from vllm.v1.core import kv_cache_planning as planning
                from vllm.v1.core.kv_cache_config_builder import (
                    get_kv_cache_config_builder,
                )
                from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
                from vllm.v1.core.kv_cache_manager import KVCacheManager
                from vllm.v1.core.kv_cache_utils import (
                    generate_scheduler_kv_cache_config,
                    get_max_concurrency_for_kv_cache_config,
                    get_request_block_hasher,
                    init_none_hash,
                    resolve_kv_cache_block_sizes,
                )
                from vllm.v1.core.sched.scheduler import Scheduler
                from vllm.v1.core.single_type_kv_cache_manager import (
                    register_all_kvcache_specs,
                )
                from vllm.v1.outputs import ModelRunnerOutput
                from vllm.v1.request import Request
                from vllm.v1.structured_output import StructuredOutputManager
            except ImportError as e:
                raise KVVerifyError(f"vLLM {PINNED_VERSION} is installed but its KV-cache modules do "
                                    f"not import ({type(e).__name__}: {e}); {INSTALL_HINT}") from e
        import logging
        for name in ("vllm", "vllm.platforms", "vllm.platforms.cpu"):
            logging.getLogger(name).setLevel(logging.ERROR)
        hash_fns: dict[str, Any] = {}
        _UP = SimpleNamespace(
            torch=torch, vllm=vllm, CacheConfig=CacheConfig, SchedulerConfig=SchedulerConfig,
            VllmConfig=UpVllmConfig, SamplingParams=SamplingParams, get_hash_fn_by_name=get_hash_fn_by_name,
            get_supported_kv_cache_layouts=get_supported_kv_cache_layouts,
            resolve_kv_cache_layout=resolve_kv_cache_layout, planning=planning,
            get_kv_cache_config_builder=get_kv_cache_config_builder,
            get_kv_cache_coordinator=get_kv_cache_coordinator, KVCacheManager=KVCacheManager,
            generate_scheduler_kv_cache_config=generate_scheduler_kv_cache_config,
            get_max_concurrency_for_kv_cache_config=get_max_concurrency_for_kv_cache_config,
            get_request_block_hasher=get_request_block_hasher, init_none_hash=init_none_hash,
            resolve_kv_cache_block_sizes=resolve_kv_cache_block_sizes, Scheduler=Scheduler,
            register_all_kvcache_specs=register_all_kvcache_specs, iface=iface,
            ModelRunnerOutput=ModelRunnerOutput, Request=Request,
            StructuredOutputManager=StructuredOutputManager, hash_fns=hash_fns,
            default_layouts=[lay.name for lay in get_supported_kv_cache_layouts([])])
        return _UP


def vllm_available() -> tuple[bool, str]:
    """``(True, version)`` when the pinned vLLM imports here, else ``(False, reason)``."""
    try:
        up = _upstream()
    except KVVerifyError as e:
        return False, str(e)
    return True, up.vllm.__version__


# ------------------------------------------------------------------------------ dtypes

_TORCH_DTYPE_NAMES = {
    "float32": "float32", "fp32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2",
    "int8": "int8", "uint8": "uint8",
}


class _Translator:
    """kvverify specs <-> upstream specs for one call (remembers the dtype names used)."""

    def __init__(self, up: SimpleNamespace) -> None:
        self.up = up
        self.names: dict[Any, str] = {}

    # -- to upstream --

    def dtype(self, name: str) -> Any:
        if name not in _TORCH_DTYPE_NAMES:
            raise ConfigError("dtype", name, f"no torch dtype known for it; allowed: {sorted(_TORCH_DTYPE_NAMES)}")
        dt = getattr(self.up.torch, _TORCH_DTYPE_NAMES[name])
        self.names.setdefault(dt, name)
        return dt

    def spec(self, s: kv.KVCacheSpec) -> Any:
        i = self.up.iface
        if isinstance(s, kv.UniformTypeKVCacheSpecs):
            return i.UniformTypeKVCacheSpecs(block_size=s.block_size,
                                             kv_cache_specs={n: self.spec(x) for n, x in s.kv_cache_specs})
        if isinstance(s, kv.MambaSpec):
            return i.MambaSpec(block_size=s.block_size, shapes=tuple(tuple(x) for x in s.shapes),
                               dtypes=tuple(self.dtype(d) for d in s.dtypes),
                               page_size_padded=s.page_size_padded, mamba_cache_mode=s.mamba_cache_mode,
                               num_speculative_blocks=s.num_speculative_blocks,
                               num_prefill_checkpoint_blocks=s.num_prefill_checkpoint_blocks)
        if not isinstance(s, kv.AttentionSpec):
            raise KVVerifyError(f"the vllm target cannot translate spec {type(s).__name__}")
        common = dict(block_size=s.block_size, num_kv_heads=s.num_kv_heads, head_size=s.head_size,
                      dtype=self.dtype(s.dtype), head_size_v=s.head_size_v,
                      page_size_padded=s.page_size_padded)
        if isinstance(s, kv.MLAAttentionSpec):
            if s.sliding_window is not None or s.attention_chunk_size is not None:
                unsupported("MLAAttentionSpec with a window or chunk")
            return i.MLAAttentionSpec(**common)
        if isinstance(s, kv.FullAttentionSpec):
            return i.FullAttentionSpec(**common, sliding_window=s.sliding_window,
                                       attention_chunk_size=s.attention_chunk_size)
        if isinstance(s, kv.SlidingWindowSpec):
            return i.SlidingWindowSpec(**common, sliding_window=s.sliding_window,
                                       extra_retained_tokens=s.extra_retained_tokens)
        if isinstance(s, kv.ChunkedLocalAttentionSpec):
            return i.ChunkedLocalAttentionSpec(**common, attention_chunk_size=s.attention_chunk_size)
        if isinstance(s, kv.CrossAttentionSpec):
            return i.CrossAttentionSpec(**common)
        if isinstance(s, kv.EncoderOnlyAttentionSpec):
            return i.EncoderOnlyAttentionSpec(**common)
        raise KVVerifyError(f"the vllm target cannot translate spec {type(s).__name__}")

    def groups(self, groups: Sequence[KVCacheGroupSpec]) -> list[Any]:
        return [self.up.iface.KVCacheGroupSpec(list(g.layer_names), self.spec(g.kv_cache_spec))
                for g in groups]

    def kv_cache_config(self, cfg: KVCacheConfig) -> Any:
        i = self.up.iface
        return i.KVCacheConfig(
            num_blocks=cfg.num_blocks,
            kv_cache_tensors=[i.KVCacheTensor(size=t.size, layers=list(t.layers), layer_stride=t.layer_stride,
                                              block_stride=t.block_stride, offset=t.offset)
                              for t in cfg.kv_cache_tensors],
            kv_cache_groups=self.groups(cfg.kv_cache_groups))

    # -- back to kvverify --

    def dtype_name(self, dt: Any) -> str:
        if dt in self.names:
            return self.names[dt]
        name = str(dt).removeprefix("torch.")
        return {"float8_e4m3fn": "fp8", "float8_e5m2": "fp8_e5m2"}.get(name, name)

    def spec_back(self, s: Any) -> kv.KVCacheSpec:
        i = self.up.iface
        t = type(s)
        if t is i.UniformTypeKVCacheSpecs:
            return kv.UniformTypeKVCacheSpecs(
                block_size=s.block_size,
                kv_cache_specs=tuple((n, self.spec_back(x)) for n, x in s.kv_cache_specs.items()))
        if t is i.MambaSpec:
            return kv.MambaSpec(block_size=s.block_size, shapes=tuple(tuple(x) for x in s.shapes),
                                dtypes=tuple(self.dtype_name(d) for d in s.dtypes),
                                page_size_padded=s.page_size_padded, mamba_cache_mode=s.mamba_cache_mode,
                                num_speculative_blocks=s.num_speculative_blocks,
                                num_prefill_checkpoint_blocks=s.num_prefill_checkpoint_blocks)
        common = dict(block_size=s.block_size, num_kv_heads=s.num_kv_heads, head_size=s.head_size,
                      dtype=self.dtype_name(s.dtype), head_size_v=s.head_size_v,
                      page_size_padded=s.page_size_padded)
        if t is i.MLAAttentionSpec:
            return kv.MLAAttentionSpec(**common)
        if t is i.FullAttentionSpec:
            return kv.FullAttentionSpec(**common, sliding_window=s.sliding_window,
                                        attention_chunk_size=s.attention_chunk_size)
        if t is i.SlidingWindowSpec:
            return kv.SlidingWindowSpec(**common, sliding_window=s.sliding_window,
                                        extra_retained_tokens=s.extra_retained_tokens)
        if t is i.ChunkedLocalAttentionSpec:
            return kv.ChunkedLocalAttentionSpec(**common, attention_chunk_size=s.attention_chunk_size)
        if t is i.CrossAttentionSpec:
            return kv.CrossAttentionSpec(**common)
        if t is i.EncoderOnlyAttentionSpec:
            return kv.EncoderOnlyAttentionSpec(**common)
        raise KVVerifyError(f"upstream produced a spec the vllm target cannot translate: {t.__name__}")

    def groups_back(self, groups: Sequence[Any]) -> tuple[KVCacheGroupSpec, ...]:
        return tuple(KVCacheGroupSpec(tuple(g.layer_names), self.spec_back(g.kv_cache_spec)) for g in groups)

    def kv_cache_config_back(self, cfg: Any) -> KVCacheConfig:
        return KVCacheConfig(
            num_blocks=cfg.num_blocks,
            kv_cache_tensors=tuple(KVCacheTensor(size=t.size, layers=tuple(t.layers), layer_stride=t.layer_stride,
                                                 block_stride=t.block_stride, offset=t.offset)
                                   for t in cfg.kv_cache_tensors),
            kv_cache_groups=self.groups_back(cfg.kv_cache_groups))


# ------------------------------------------------------------------------------ config

def _model_config_stand_in(max_model_len: int, original_max_model_len: int) -> SimpleNamespace:
    """The attributes of ``ModelConfig`` the planner, managers and Scheduler read (0.33.0)."""
    return SimpleNamespace(
        max_model_len=max_model_len, original_max_model_len=original_max_model_len,
        supports_kv_cache_grouping=False, uses_mrope=False, is_encoder_decoder=False,
        runner_type="generate", is_diffusion=False, supports_multimodal_inputs=False,
        multimodal_config=None, return_sampling_mask=False, skip_tokenizer_init=True)


def upstream_config(config: VllmConfig, *, max_model_len: int | None = None) -> Any:
    """A fresh upstream ``VllmConfig`` for kvverify's flat config (upstream mutates it).

    ``max_model_len=-1`` becomes what ``ModelConfig`` makes of it: ``max_model_len`` =
    the derived maximum (``max_position_embeddings``), ``original_max_model_len = -1``.
    """
    up = _upstream()
    if config.kv_connector:
        unsupported("kv_connector=True (needs a real KV transfer config)")
    if config.max_concurrent_batches != 1:
        unsupported("max_concurrent_batches != 1 (upstream derives it from pipeline parallelism / "
                    "async scheduling, which the CPU platform turns off)")
    if config.num_prefill_lookahead_tokens:
        unsupported("num_prefill_lookahead_tokens (upstream derives it from a speculative config)")
    auto = config.auto_max_model_len and max_model_len is None
    length = config.planning_max_model_len if max_model_len is None else max_model_len
    with _preserved_environ():
        cache = up.CacheConfig(block_size=config.block_size,
                               num_gpu_blocks_override=config.num_gpu_blocks_override,
                               enable_prefix_caching=config.enable_prefix_caching,
                               mamba_cache_mode=config.mamba_cache_mode,
                               prefix_match_unit=config.prefix_match_unit)
        sched = up.SchedulerConfig(max_model_len=length, is_encoder_decoder=False,
                                   max_num_batched_tokens=config.max_num_batched_tokens,
                                   # upstream refuses max_num_seqs > max_num_batched_tokens
                                   # (kvverify's flat config does not): clamp, as a user must
                                   max_num_seqs=min(config.max_num_seqs, config.max_num_batched_tokens),
                                   disable_hybrid_kv_cache_manager=config.disable_hybrid_kv_cache_manager,
                                   watermark=config.watermark)
        vc = up.VllmConfig(cache_config=cache, scheduler_config=sched)
    # With model_config=None VllmConfig skips the model-dependent post-init; the stand-in
    # is assigned afterwards (no validation on assignment).
    vc.model_config = _model_config_stand_in(length, -1 if auto else length)
    vc.scheduler_config.max_num_encoder_input_tokens = config.encoder_tokens
    up.register_all_kvcache_specs(vc)
    return vc


# ------------------------------------------------------------------------ the target

def _is_check_refusal(e: BaseException) -> bool:
    return isinstance(e, ValueError) and any(m in str(e) for m in _CHECK_MESSAGES)


@contextlib.contextmanager
def _startup_checks_disabled(up: SimpleNamespace) -> Iterator[None]:
    """Let ``get_kv_cache_configs`` finish after a refusal, to learn what it would allocate."""
    planning = up.planning
    saved = planning._check_enough_kv_cache_memory, planning._auto_fit_max_model_len
    planning._check_enough_kv_cache_memory = lambda *a, **k: None
    planning._auto_fit_max_model_len = lambda *a, **k: None
    try:
        yield
    finally:
        planning._check_enough_kv_cache_memory, planning._auto_fit_max_model_len = saved


def _group_blocks(spec: Any, vc: Any, up: SimpleNamespace) -> int:
    """Blocks one max_model_len request holds in a group (``_max_memory_usage_bytes_from_groups``)."""
    if isinstance(spec, up.iface.UniformTypeKVCacheSpecs):
        return spec.max_memory_usage_pages(vc)
    return cdiv(spec.max_memory_usage_bytes(vc), spec.page_size_bytes)


@dataclass
class _Upstream:
    """Upstream objects for one plan (rebuilt per call)."""

    vc: Any
    translator: _Translator
    worker_configs: list[Any]
    scheduler_config: Any
    scheduler_block_size: int
    hash_block_size: int


class VllmTarget:
    """The pinned upstream vLLM behind the target interface (see the module docstring)."""

    name = "vllm"
    capabilities = frozenset({Capability.PLANNER, Capability.BLOCK_SIZES, Capability.RUNTIME,
                              Capability.SCHEDULER})

    def __init__(self, supported_layouts: Sequence[str] | None = DEFAULT_SUPPORTED_LAYOUTS) -> None:
        self.up = _upstream()
        self.version = self.up.vllm.__version__
        self.supported_layouts = list(supported_layouts) if supported_layouts else list(self.up.default_layouts)

    # -- planning --

    def _resolve_layout(self, vc: Any, specs: Sequence[Mapping[str, Any]]) -> None:
        self.up.resolve_kv_cache_layout(vc, [list(self.supported_layouts)],
                                        [s for w in specs for s in w.values()])

    def plan(self, vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, kv.KVCacheSpec]],
             available_memory: Sequence[int] | None = None) -> StartupPlan:
        from kvverify.reference.planner import _available_memory

        up = self.up
        if not kv_cache_specs:
            raise ConfigError("kv_cache_specs", [], "must list at least one worker's specs")
        memory = _available_memory(vllm_config, available_memory, len(kv_cache_specs))
        tr = _Translator(up)
        up_specs = [{n: tr.spec(s) for n, s in w.items()} for w in kv_cache_specs]

        def attempt(checks: bool) -> tuple[Any, list[Any], list[Any]]:
            vc = upstream_config(vllm_config)
            try:
                self._resolve_layout(vc, up_specs)
                groups = up.planning.get_global_kv_cache_groups(vc, [dict(w) for w in up_specs])
            except (AssertionError, ValueError, NotImplementedError, TypeError) as e:
                raise GroupingError(f"upstream grouping refused the specs: {type(e).__name__}: {e}") from e
            with contextlib.ExitStack() as stack:
                if not checks:
                    stack.enter_context(_startup_checks_disabled(up))
                configs = up.planning.get_kv_cache_configs(vc, [dict(w) for w in up_specs], list(memory), groups)
            return vc, groups, configs

        error: str | None = None
        with _LOCK, _preserved_environ():
            try:
                vc, groups, configs = attempt(checks=True)
            except KVVerifyError:
                raise
            except ValueError as e:
                if not _is_check_refusal(e):
                    raise KVVerifyError(f"upstream planning failed: {type(e).__name__}: {e}") from e
                error = str(e)
                vc, groups, configs = attempt(checks=False)
            builder = up.get_kv_cache_config_builder(vc)
            projected = [up.planning._project_kv_cache_groups_to_worker(groups, w) for w in up_specs]
            bpb_worker = [up.planning._pool_bytes_per_block_from_builder(builder, vc, g) if g else 0
                          for g in projected]
            override = vllm_config.num_gpu_blocks_override
            effective = [override * b if (override is not None and g) else m
                         for g, b, m in zip(projected, bpb_worker, memory)]
            check_mem = [m - b if g else m for g, b, m in zip(projected, bpb_worker, effective)]
            bpb = up.planning._pool_bytes_per_block_from_builder(builder, vc, groups) if groups else 0
            resolved_len = vc.model_config.max_model_len
            blocks_per_group = tuple(_group_blocks(g.kv_cache_spec, vc, up) for g in groups)
        auto_fit_len = None
        if vllm_config.auto_max_model_len and (error is None or "Cannot auto-fit" not in error):
            auto_fit_len = resolved_len
        config = vllm_config.with_max_model_len(resolved_len)
        return StartupPlan(
            vllm_config=config, groups=tr.groups_back(groups),
            kv_cache_configs=tuple(tr.kv_cache_config_back(c) for c in configs),
            available_memory=tuple(effective), check_memory=tuple(check_mem), bytes_per_block=bpb,
            blocks_per_group=blocks_per_group, starts=error is None, error=error,
            auto_fit_max_model_len=auto_fit_len,
            worker_groups=tuple(tr.groups_back(g) for g in projected))

    def max_concurrency(self, plan: StartupPlan) -> float:
        """Upstream ``get_max_concurrency_for_kv_cache_config`` on the plan (what the engine logs)."""
        u = self._runtime(plan, resolve_block_sizes=False)
        return self.up.get_max_concurrency_for_kv_cache_config(u.vc, u.scheduler_config)

    def estimate_max_model_len(self, vllm_config: VllmConfig, kv_cache_spec: Mapping[str, kv.KVCacheSpec],
                               available_memory: int) -> int:
        """Upstream's public ``estimate_max_model_len``."""
        tr = _Translator(self.up)
        specs = {n: tr.spec(s) for n, s in kv_cache_spec.items()}
        with _LOCK, _preserved_environ():
            vc = upstream_config(vllm_config)
            self._resolve_layout(vc, [specs])
            return self.up.planning.estimate_max_model_len(vc, specs, available_memory)

    def check_enough_kv_cache_memory(self, vllm_config: VllmConfig,
                                     kv_cache_spec: Mapping[str, kv.KVCacheSpec], available_memory: int) -> str | None:
        """Upstream's public ``check_enough_kv_cache_memory``: ``None`` if it passes, else the message."""
        tr = _Translator(self.up)
        specs = {n: tr.spec(s) for n, s in kv_cache_spec.items()}
        with _LOCK, _preserved_environ():
            vc = upstream_config(vllm_config)
            self._resolve_layout(vc, [specs])
            try:
                self.up.planning.check_enough_kv_cache_memory(vc, specs, available_memory)
            except ValueError as e:
                return str(e)
        return None

    # -- block sizes --

    def resolve_block_sizes(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig) -> tuple[int, int]:
        """Upstream ``resolve_kv_cache_block_sizes`` on the scheduler's view of the config.

        Its ``ValueError`` (invalid ``prefix_match_unit``) is a :class:`BlockSizeError`;
        any other exception (an assertion) is a :class:`KVVerifyError` naming it.
        """
        up = self.up
        tr = _Translator(up)
        cfg = up.generate_scheduler_kv_cache_config([tr.kv_cache_config(kv_cache_config)])
        with _LOCK, _preserved_environ():
            vc = upstream_config(vllm_config, max_model_len=_runtime_len(vllm_config))
            try:
                return up.resolve_kv_cache_block_sizes(cfg, vc)
            except ValueError as e:
                raise BlockSizeError(str(e)) from e
            except Exception as e:
                raise KVVerifyError(f"upstream resolve_kv_cache_block_sizes raised "
                                    f"{type(e).__name__}: {e}") from e

    def coordinator_accepts(self, kv_cache_config: KVCacheConfig, vllm_config: VllmConfig,
                            scheduler_block_size: int, hash_block_size: int) -> str | None:
        """Build upstream's KV cache coordinator; ``None`` if it accepts, else its error."""
        up = self.up
        tr = _Translator(up)
        cfg = up.generate_scheduler_kv_cache_config([tr.kv_cache_config(kv_cache_config)])
        try:
            up.get_kv_cache_coordinator(
                kv_cache_config=cfg, max_model_len=_runtime_len(vllm_config),
                max_in_flight_tokens=vllm_config.max_in_flight_tokens, use_eagle=False,
                enable_caching=vllm_config.enable_prefix_caching, enable_kv_cache_events=False,
                dcp_world_size=1, pcp_world_size=1, scheduler_block_size=scheduler_block_size,
                hash_block_size=hash_block_size)
        except Exception as e:  # noqa: BLE001 - the constructor's assertions are the answer
            return f"{type(e).__name__}: {e}"
        return None

    # -- runtime --

    def _runtime(self, plan: StartupPlan, resolve_block_sizes: bool = True) -> _Upstream:
        """Upstream objects for a plan, as ``EngineCore._initialize_kv_caches`` leaves them."""
        up = self.up
        tr = _Translator(up)
        config = plan.vllm_config
        with _preserved_environ():
            vc = upstream_config(config, max_model_len=_runtime_len(config))
        workers = [tr.kv_cache_config(c) for c in plan.kv_cache_configs]
        sched_cfg = up.generate_scheduler_kv_cache_config(workers)
        vc.cache_config.num_gpu_blocks = sched_cfg.num_blocks
        groups = sched_cfg.kv_cache_groups
        if groups:
            # The engine sets the cache block size to the smallest prefix-cacheable group's
            # before resolving block sizes (a pure-Mamba model in mode none: max_model_len).
            sizes = [g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable]
            vc.cache_config.block_size = min(sizes or [g.kv_cache_spec.block_size for g in groups])
        sbs = hbs = 0
        if resolve_block_sizes:
            try:
                sbs, hbs = up.resolve_kv_cache_block_sizes(sched_cfg, vc)
            except ValueError as e:
                raise BlockSizeError(str(e)) from e
        return _Upstream(vc, tr, workers, sched_cfg, sbs, hbs)

    def _hasher(self, vc: Any, hash_block_size: int) -> Callable | None:
        if not vc.cache_config.enable_prefix_caching:
            return None
        up = self.up
        algo = vc.cache_config.prefix_caching_hash_algo
        with _LOCK:
            fn = up.hash_fns.get(algo)
            if fn is None:
                fn = up.get_hash_fn_by_name(algo)
                up.init_none_hash(fn)
                up.hash_fns[algo] = fn
        return up.get_request_block_hasher(hash_block_size, fn)

    def kv_cache_manager(self, plan: StartupPlan) -> UpstreamKVCacheManager:
        """A fresh upstream ``KVCacheManager`` over the plan's pool, built as the Scheduler builds it."""
        u = self._runtime(plan)
        cfg = plan.vllm_config
        kvm = self.up.KVCacheManager(
            kv_cache_config=u.scheduler_config, max_model_len=u.vc.model_config.max_model_len,
            scheduler_block_size=u.scheduler_block_size, hash_block_size=u.hash_block_size,
            max_in_flight_tokens=u.vc.max_in_flight_tokens, enable_caching=cfg.enable_prefix_caching,
            watermark=cfg.watermark)
        return UpstreamKVCacheManager(kvm, u.translator, self._hasher(u.vc, u.hash_block_size))

    def admit_on_empty_pool(self, plan: StartupPlan, num_tokens: int) -> tuple[bool, dict]:
        """Ask upstream ``allocate_slots(full_sequence_must_fit=True)`` to admit a prompt of ``num_tokens``."""
        view = self.kv_cache_manager(plan)
        kvm = view.upstream
        req = self._request(view, "probe", list(range(num_tokens)), 1)
        blocks, hit, _ = kvm.get_computed_blocks(req)
        chunk = min(num_tokens - hit, plan.vllm_config.max_num_batched_tokens)
        full = min(req.num_tokens, kvm.max_model_len)
        local = req.num_computed_tokens + hit
        need = kvm.coordinator.get_num_blocks_to_allocate(
            request_id=req.request_id, num_tokens=full, new_computed_blocks=blocks.blocks,
            num_encoder_tokens=0, total_computed_tokens=min(local, kvm.max_model_len),
            num_local_computed_tokens=local, num_tokens_main_model=full, apply_admission_cap=True,
            prefill_end=max(req.num_prompt_tokens, req.num_tokens - 1))
        free = kvm.block_pool.get_num_free_blocks()
        got = kvm.allocate_slots(req, chunk, hit, blocks, full_sequence_must_fit=True, has_scheduled_reqs=False)
        return got is not None, {"gate_charged_blocks": need, "free_blocks": free}

    def _request(self, view: UpstreamKVCacheManager, request_id: str, prompt: Sequence[int], max_tokens: int) -> Any:
        up = self.up
        return up.Request(request_id=request_id, prompt_token_ids=list(prompt),
                          sampling_params=up.SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                          pooling_params=None, block_hasher=view.block_hasher)

    def scheduler(self, plan: StartupPlan) -> UpstreamScheduler:
        """Upstream's ``Scheduler`` for the plan, behind the interface the driver steps."""
        if plan.vllm_config.auto_max_model_len:
            raise ConfigError("max_model_len", -1, "must be resolved before scheduling; plan the startup first")
        if not plan.groups:
            skip_unsupported("scheduling an attention-free model (no KV cache groups)")
        return UpstreamScheduler(self, plan)

    def run_workload(self, plan: StartupPlan, workload: Sequence[WorkloadSpec], **kw: Any) -> WorkloadResult:
        """Upstream's scheduler through :func:`kvverify.reference.driver.run_workload` (same stall detection)."""
        sched = kw.pop("scheduler", None)
        if sched is not None and not isinstance(sched, UpstreamScheduler):
            skip_unsupported("the property passes a reference Scheduler; use target.scheduler(plan)")
        for knob in ("scheduler_block_size", "hash_block_size"):
            if kw.pop(knob, None) is not None:
                skip_unsupported(f"{knob}= is resolved by upstream, not passed in")
        if kw.pop("full_sequence_must_fit", True) is not True:
            skip_unsupported("full_sequence_must_fit=False (the scheduler always gates admission)")
        sched = sched or self.scheduler(plan)
        return drive(plan.vllm_config, plan.kv_cache_config, workload, scheduler=sched, **kw)


def _runtime_len(config: VllmConfig) -> int:
    return config.planning_max_model_len if config.auto_max_model_len else config.max_model_len


# ------------------------------------------------------------------ runtime views

class _BlockPoolView:
    """Upstream ``BlockPool`` with the read-only helpers kvverify's pool invariants use."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def free_block_ids(self) -> list[int]:
        return [b.block_id for b in self._pool.free_block_queue.get_all_free_blocks()]

    def held_block_ids(self) -> list[int]:
        return [b.block_id for b in self._pool.blocks if b.ref_cnt > 0 and not b.is_null]

    def ref_counts(self) -> dict[int, int]:
        return {b.block_id: b.ref_cnt for b in self._pool.blocks if not b.is_null}

    def cached_entries(self) -> Iterator[tuple[Any, Any]]:
        for key, blocks in self._pool.cached_block_hash_to_block._cache.items():
            for block in (blocks.values() if isinstance(blocks, dict) else (blocks,)):
                yield key, _CachedBlockView(block, self._pool)


class _CachedBlockView:
    """A cached block seen through one of its keys (upstream may file a block under several)."""

    def __init__(self, block: Any, pool: Any) -> None:
        self._block, self._pool = block, pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._block, name)

    @property
    def block_hash(self) -> Any:
        extra = self._pool.cached_block_hashes_by_block.get(self._block.block_id)
        if not extra:
            return self._block.block_hash
        return _AnyOf({self._block.block_hash, *extra} - {None})


class _AnyOf:
    """Compares equal to any member (a block filed under several hash keys)."""

    def __init__(self, keys: Any) -> None:
        self.keys = set(keys)

    def __eq__(self, other: object) -> bool:
        return other in self.keys

    def __ne__(self, other: object) -> bool:
        return other not in self.keys

    __hash__ = None  # type: ignore[assignment]


class _ManagerView:
    """One upstream single-type manager with its spec in kvverify's terms."""

    def __init__(self, manager: Any, spec: kv.KVCacheSpec) -> None:
        self._manager = manager
        self.kv_cache_spec = spec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)


class _CoordinatorView:
    def __init__(self, coordinator: Any, translator: _Translator) -> None:
        self._coordinator = coordinator
        self.single_type_managers = [_ManagerView(m, translator.spec_back(m.kv_cache_spec))
                                     for m in coordinator.single_type_managers]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._coordinator, name)


class UpstreamKVCacheManager:
    """An upstream ``KVCacheManager`` seen through the reference manager's surface.

    ``allocate_slots`` is routed through this object (the upstream Scheduler's calls
    too), and every successful call records ``last_allocation = (predicted, pulled)``:
    the last ``get_num_blocks_to_allocate`` the call made (the per-step prediction) and
    the blocks the free queue lost from that moment to the end of the call — what
    :class:`kvverify.invariants.allocation.AllocationRecorder` reads on the reference.
    """

    def __init__(self, kvm: Any, translator: _Translator, block_hasher: Callable | None) -> None:
        self.upstream = kvm
        self.block_hasher = block_hasher
        self.request_block_hasher = block_hasher
        self.block_pool = _BlockPoolView(kvm.block_pool)
        self.coordinator = _CoordinatorView(kvm.coordinator, translator)
        self.last_allocation: tuple[int, int] | None = None
        coordinator = kvm.coordinator
        predict = coordinator.get_num_blocks_to_allocate
        pool = kvm.block_pool
        state: dict[str, tuple[int, int]] = {}

        def counted(*args: Any, **kwargs: Any) -> int:
            n = predict(*args, **kwargs)
            state["last"] = (n, pool.get_num_free_blocks())
            return n

        coordinator.get_num_blocks_to_allocate = counted
        original = kvm.allocate_slots

        def instrumented(*args: Any, **kwargs: Any) -> Any:
            state.clear()
            got = original(*args, **kwargs)
            if got is not None and "last" in state:
                n, free = state["last"]
                self.last_allocation = (n, free - pool.get_num_free_blocks())
            return got

        self.allocate_slots = instrumented
        kvm.allocate_slots = lambda *a, **k: self.allocate_slots(*a, **k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.upstream, name)

    def get_num_free_blocks(self) -> int:
        return self.upstream.block_pool.get_num_free_blocks()

    @property
    def usage(self) -> float:
        return self.upstream.usage

    def num_held_blocks(self, request_id: str) -> int:
        return sum(1 for m in self.upstream.coordinator.single_type_managers
                   for b in m.req_to_blocks.get(request_id, ()) if not b.is_null)


@dataclass
class _StepOutput:
    """What the driver reads from one step (kvverify's ``SchedulerOutput`` surface)."""

    step: int
    num_scheduled_tokens: dict[str, int]
    preempted_reqs: list[str]
    sampled_reqs: list[str] = field(default_factory=list)
    finished_reqs: list[str] = field(default_factory=list)
    upstream: Any = None

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


class UpstreamScheduler:
    """Upstream ``Scheduler`` stepped with fake model-runner outputs.

    Same surface as :class:`kvverify.reference.scheduler.Scheduler` for
    :func:`kvverify.reference.driver.run_workload`: ``add_request``, ``step()``,
    ``has_unfinished_requests()``, ``get_request_counts()``, ``kv_cache_manager``,
    ``waiting``, ``running``, ``finished``, ``num_preemptions``, ``max_model_len``,
    ``max_num_scheduled_tokens``. A request that computed all its tokens in a step
    samples one (kvverify's deterministic ``fake_output_token``); a mid-prefill chunk
    samples nothing. ``num_lookahead_tokens`` (speculative decoding's extra slots) is
    set on the scheduler as upstream's ``vllm_config.num_lookahead_tokens`` would.
    """

    def __init__(self, target: VllmTarget, plan: StartupPlan) -> None:
        up = target.up
        self.target = target
        u = target._runtime(plan)
        self.plan = plan
        with _LOCK, _preserved_environ():
            self.upstream = up.Scheduler(
                vllm_config=u.vc, kv_cache_config=u.scheduler_config,
                structured_output_manager=up.StructuredOutputManager(u.vc),
                block_size=u.scheduler_block_size, hash_block_size=u.hash_block_size, log_stats=False)
        self.upstream.num_lookahead_tokens = plan.vllm_config.num_lookahead_tokens
        self.scheduler_block_size = u.scheduler_block_size
        self.hash_block_size = u.hash_block_size
        self.kv_cache_manager = UpstreamKVCacheManager(
            self.upstream.kv_cache_manager, u.translator, target._hasher(u.vc, u.hash_block_size))
        self.max_model_len = self.upstream.max_model_len
        self.max_num_scheduled_tokens = self.upstream.max_num_scheduled_tokens
        self.finished: list[str] = []
        self.num_preemptions = 0
        self.current_step = 0
        #: scheduled steps of requests carrying a Marconi shared-prefix junction
        #: (``Request.shared_prefix_boundary > 0``): a Mamba-align prefill chunk stops there
        self.junction_stops = 0

    def add_request(self, request: Any) -> None:
        """Queue a kvverify ``Request`` (as the engine's input processor would)."""
        if request.num_prompt_tokens >= self.max_model_len:
            raise ConfigError("prompt_token_ids", f"<{request.num_prompt_tokens} tokens>",
                              f"prompt length must be in [1, {self.max_model_len - 1}] "
                              f"(max_model_len={self.max_model_len} minus one output token)")
        self.upstream.add_request(self.target._request(self.kv_cache_manager, request.request_id,
                                                       request.prompt_token_ids, request.max_tokens))

    def has_unfinished_requests(self) -> bool:
        return self.upstream.has_unfinished_requests()

    def get_request_counts(self) -> tuple[int, int]:
        return self.upstream.get_request_counts()

    @property
    def running(self) -> list[Any]:
        return list(self.upstream.running)

    @property
    def waiting(self) -> list[Any]:
        return list(self.upstream.kv_holding_waiting) + list(self.upstream.waiting)

    def step(self) -> tuple[_StepOutput, list[str]]:
        up = self.target.up
        sched = self.upstream
        self.current_step += 1
        out = sched.schedule()
        rids = list(out.num_scheduled_tokens)
        self.junction_stops += sum(1 for rid in rids if getattr(sched.requests[rid], "shared_prefix_boundary", 0))
        sampled: list[list[int]] = []
        sampled_ids: list[str] = []
        for rid in rids:
            r = sched.requests[rid]
            if r.num_computed_tokens >= r.num_tokens:
                sampled.append([fake_output_token(rid, r.num_tokens)])
                sampled_ids.append(rid)
            else:
                sampled.append([])
        mro = up.ModelRunnerOutput(req_ids=rids, req_id_to_index={r: i for i, r in enumerate(rids)},
                                   sampled_token_ids=sampled)
        engine_outputs = sched.update_from_output(out, mro)
        finished = [o.request_id for eco in engine_outputs.values() for o in eco.outputs
                    if o.finish_reason is not None]
        preempted = sorted(out.preempted_req_ids or ())
        self.num_preemptions += len(preempted)
        self.finished.extend(finished)
        step_out = _StepOutput(step=self.current_step, num_scheduled_tokens=dict(out.num_scheduled_tokens),
                               preempted_reqs=preempted, sampled_reqs=sampled_ids, finished_reqs=finished,
                               upstream=out)
        return step_out, finished


__all__ = ["PINNED_VERSION", "TargetUnsupported", "UpstreamKVCacheManager", "UpstreamScheduler",
           "VllmTarget", "require", "skip_unsupported", "unsupported", "upstream_config", "vllm_available"]
