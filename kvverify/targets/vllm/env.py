"""Importing the installed vLLM: environment, platform, the modules the adapter uses.

Every vLLM import of the project happens here, inside :func:`upstream`, lazily: importing
kvverify never imports vLLM (a sys.path overlay, :mod:`kvverify.targets.overlay`, may
patch upstream modules before this first import). Which module holds what differs by
release; :mod:`.compat` names the candidates and reads the capabilities off what imported.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from kvverify.errors import KVVerifyError
from kvverify.targets.vllm import compat, deps, names
from kvverify.targets.vllm.findings import CheckRules

INSTALL_HINT = ("install a CPU-only vLLM with `bash scripts/install-vllm-target.sh [--version X.Y.Z]` "
                "and run with its interpreter (`<venv>/bin/python -m pytest ... --target vllm`)")

LOCK = threading.RLock()


@dataclass
class Upstream:
    """The installed release as the adapter uses it: what it can do (:class:`~.compat.Compat`)
    and vLLM's own objects, found where the release keeps them (:func:`.names.resolve_names`;
    typed ``Any``: this is the boundary to vLLM). ``None``: a name the release does not have."""

    torch: Any
    vllm: Any
    compat: compat.Compat
    #: the layouts a worker reports by default (``get_supported_kv_cache_layouts([])``)
    default_layouts: list[str]
    iface: Any
    planning: Any
    CacheConfig: Any
    SchedulerConfig: Any
    VllmConfig: Any
    SamplingParams: Any
    get_hash_fn_by_name: Any
    get_supported_kv_cache_layouts: Any
    resolve_kv_cache_layout: Any
    get_kv_cache_config_builder: Any
    get_kv_cache_coordinator: Any
    KVCacheManager: Any
    generate_scheduler_kv_cache_config: Any
    get_max_concurrency_for_kv_cache_config: Any
    estimate_max_model_len: Any
    check_enough_kv_cache_memory: Any
    get_request_block_hasher: Any
    init_none_hash: Any
    resolve_kv_cache_block_sizes: Any
    resolve_cache_hit_alignment_tokens: Any
    Scheduler: Any
    register_all_kvcache_specs: Any
    ModelRunnerOutput: Any
    Request: Any
    StructuredOutputManager: Any
    KVConnectorBase_V1: Any
    KVConnectorMetadata: Any
    SupportsHMA: Any
    KVConnectorOutput: Any
    KVTransferConfig: Any
    #: hash algorithm name -> its initialised hash function (``init_none_hash`` once each)
    hash_fns: dict[str, Any] = field(default_factory=dict)
    #: how the release's startup check counts memory, probed once (:func:`.planner.memory_rules`)
    memory_rules: CheckRules | None = None


_UP: Upstream | None = None

#: Environment vLLM reads at import and at platform resolution. VLLM_TARGET_DEVICE is
#: forced: without it a machine with no GPU cannot build a VllmConfig at all.
_FORCED_ENV = {"VLLM_TARGET_DEVICE": "cpu"}
_DEFAULT_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                "VLLM_LOGGING_LEVEL": "WARNING"}


@contextlib.contextmanager
def preserved_environ() -> Iterator[None]:
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


def _optional_module(name: str) -> ModuleType | None:
    """``import name`` or ``None`` when the release has no such module."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            return None
        raise


def select_cpu_platform() -> None:
    """Make the CPU platform current where platform detection ignores VLLM_TARGET_DEVICE.

    Releases <= 0.28 infer the device from installed packages and, finding no GPU stack,
    resolve to ``UnspecifiedPlatform`` ("Failed to infer device type" at ``VllmConfig()``).
    Capability test, before anything resolves the platform: what
    ``resolve_current_platform_cls_qualname()`` would pick (or, if already resolved, its
    ``device_type``); only when that is not the CPU platform is ``CpuPlatform()`` installed
    as ``vllm.platforms._current_platform``, which the lazy ``current_platform`` returns.
    """
    platforms = importlib.import_module("vllm.platforms")
    current = getattr(platforms, "_current_platform", None)
    if current is not None:
        if getattr(current, "device_type", "") == "cpu":
            return
    else:
        try:
            qualname = str(platforms.resolve_current_platform_cls_qualname())
        except Exception:  # noqa: BLE001 - detection itself may raise on a GPU-less machine
            qualname = ""
        if qualname.endswith(".CpuPlatform"):
            return
    from vllm.platforms.cpu import CpuPlatform
    setattr(platforms, "_current_platform", CpuPlatform())  # what the lazy current_platform returns


def upstream() -> Upstream:
    """Import the installed vLLM once (lazily), with the environment it needs."""
    global _UP
    if _UP is not None:
        return _UP
    with LOCK:
        if _UP is not None:
            return _UP
        import importlib.util
        try:
            present = importlib.util.find_spec("vllm") is not None
        except (ImportError, ValueError):
            present = False
        if not present:  # fail fast, without importing torch or touching the environment
            raise KVVerifyError(f"the vllm target needs vLLM (a v1 engine), which is not installed for "
                                f"{sys.executable}; {INSTALL_HINT}")
        before = dict(os.environ)
        os.environ.update(_FORCED_ENV)
        for k, v in _DEFAULT_ENV.items():
            os.environ.setdefault(k, v)
        os.environ.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="kvverify-vllm-cache-"))
        try:
            # vLLM's logging handler writes to the sys.stdout of its first import: make that stderr,
            # so `--json` output stays clean JSON
            with preserved_environ(), contextlib.redirect_stdout(sys.stderr):
                import torch
                import vllm
        except Exception as e:  # noqa: BLE001 - a broken dependency raises anything; say which
            os.environ.clear()
            os.environ.update(before)  # leave the process as it was
            raise KVVerifyError(import_failure("?", e)) from e
        version = str(getattr(vllm, "__version__", "?"))
        with preserved_environ(), contextlib.redirect_stdout(sys.stderr):
            notice = compat.outside_measured_range(version)
            if notice:
                print(f"kvverify: {notice} (found at {os.path.dirname(vllm.__file__)})", file=sys.stderr)
            try:
                select_cpu_platform()
                modules = {name: _optional_module(name) for name in compat.MODULES}
            except Exception as e:  # noqa: BLE001 - as above
                raise KVVerifyError(import_failure(version, e)) from e
            try:
                caps = compat.detect(version, modules)
                ns = names.resolve_names(caps, modules)
            except compat.DriftError as e:
                raise KVVerifyError(f"{e} (vLLM at {os.path.dirname(vllm.__file__)})") from e
        import logging
        for name in ("vllm", "vllm.platforms", "vllm.platforms.cpu"):
            logging.getLogger(name).setLevel(logging.ERROR)
        layouts = ([str(lay.name) for lay in ns["get_supported_kv_cache_layouts"]([])]
                   if caps.layout_preferences else [])
        _UP = Upstream(torch=torch, vllm=vllm, compat=caps, default_layouts=layouts, **ns)
        return _UP


def import_failure(version: str, e: BaseException) -> str:
    """One line for an ``import vllm`` (or of its KV-cache modules) that raised: the package that
    broke it and the fix (:func:`.deps.broken_dependency`), else what vLLM itself raised."""
    line = deps.broken_dependency(e)
    who = f"vLLM {version}" if version != "?" else "vLLM"
    if line:
        return f"{who} cannot be imported for {sys.executable}: {line}"
    first = str(e).splitlines()[0][:300] if str(e) else ""
    return (f"{who} is installed but does not import as the adapter expects ({type(e).__name__}: {first}); "
            f"{INSTALL_HINT}")


def vllm_available() -> tuple[bool, str]:
    """``(True, version)`` when a supported vLLM imports here, else ``(False, reason)``."""
    try:
        up = upstream()
    except KVVerifyError as e:
        return False, str(e)
    return True, str(up.vllm.__version__)


__all__ = ["INSTALL_HINT", "LOCK", "Upstream", "import_failure", "preserved_environ", "select_cpu_platform", "upstream", "vllm_available"]
