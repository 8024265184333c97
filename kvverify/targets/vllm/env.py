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
from types import ModuleType, SimpleNamespace
from typing import Any

from kvverify.errors import KVVerifyError
from kvverify.targets.vllm import compat

INSTALL_HINT = ("install a CPU-only vLLM with `bash scripts/install-vllm-target.sh [--version X.Y.Z]` "
                "and run with its interpreter (`<venv>/bin/python -m pytest ... --target vllm`)")

LOCK = threading.RLock()
_UP: SimpleNamespace | None = None

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


def upstream() -> SimpleNamespace:
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
            raise KVVerifyError(f"the vllm target needs vLLM {compat.SUPPORTED}, which is not "
                                f"installed for {sys.executable}; {INSTALL_HINT}")
        before = dict(os.environ)
        os.environ.update(_FORCED_ENV)
        for k, v in _DEFAULT_ENV.items():
            os.environ.setdefault(k, v)
        os.environ.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="kvverify-vllm-cache-"))
        try:
            with preserved_environ():
                import torch
                import vllm
        except ImportError as e:
            os.environ.clear()
            os.environ.update(before)  # leave the process as it was
            raise KVVerifyError(f"the vllm target needs vLLM {compat.SUPPORTED}, which is not "
                                f"importable here ({type(e).__name__}: {e}); {INSTALL_HINT}") from e
        version = str(getattr(vllm, "__version__", "?"))
        with preserved_environ():
            why = compat.unsupported_release(version)
            if why:
                raise KVVerifyError(f"{why} (found at {os.path.dirname(vllm.__file__)}); {INSTALL_HINT}")
            try:
                select_cpu_platform()
                modules = {name: _optional_module(name) for name in compat.MODULES}
                caps = compat.detect(version, modules)
                ns = compat.resolve_names(caps, modules)
            except (ImportError, compat.DriftError) as e:
                raise KVVerifyError(f"vLLM {version} is installed but its KV-cache modules do not "
                                    f"import as the adapter expects ({type(e).__name__}: {e}); "
                                    f"{INSTALL_HINT}") from e
        import logging
        for name in ("vllm", "vllm.platforms", "vllm.platforms.cpu"):
            logging.getLogger(name).setLevel(logging.ERROR)
        layouts = ([lay.name for lay in ns["get_supported_kv_cache_layouts"]([])]
                   if ns.get("get_supported_kv_cache_layouts") else [])
        _UP = SimpleNamespace(torch=torch, vllm=vllm, compat=caps, hash_fns={}, default_layouts=layouts, **ns)
        return _UP


def vllm_available() -> tuple[bool, str]:
    """``(True, version)`` when a supported vLLM imports here, else ``(False, reason)``."""
    try:
        up = upstream()
    except KVVerifyError as e:
        return False, str(e)
    return True, str(up.vllm.__version__)


__all__ = ["INSTALL_HINT", "LOCK", "preserved_environ", "select_cpu_platform", "upstream", "vllm_available"]
