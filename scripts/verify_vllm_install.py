"""Verify a vLLM install made by scripts/install-vllm-target.sh (its step before kvverify is installed).

    <venv>/bin/python scripts/verify_vllm_install.py LOCK VERSION COMPAT_PY

1. every pin in the lock is installed at exactly that version;
2. nothing CUDA-ish slipped in;
3. every vLLM requirement that is installed satisfies vLLM's specifier (torch* excepted:
   2.13.0+cpu instead of 2.14.0 is deliberate);
4. torch is a CPU build, ``vllm.__version__`` is VERSION, and every module the adapter may
   import (``MODULES`` of kvverify/targets/vllm/compat.py, COMPAT_PY: the one list) imports,
   where the release ships it, as the adapter imports it (a module the release does not have
   is skipped, as the adapter skips it).

Run with the vLLM environment (CPU platform, no hub) from outside the checkout. kvverify is not
installed yet, and nothing of it is imported: ``MODULES`` is read from compat.py's source. Once
kvverify is installed the script asks the adapter itself (``vllm_available()``), which also
decides which of the modules a release must have. Exit 0 when all holds, else 1 with every
problem listed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata as md
import re
import sys
from pathlib import Path


def adapter_modules(compat_py: Path | str) -> tuple[str, ...]:
    """The ``MODULES`` tuple of the adapter's compat.py, read from its source."""
    for node in ast.parse(Path(compat_py).read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "MODULES":
            modules = ast.literal_eval(value)
            if isinstance(modules, tuple) and modules and all(isinstance(m, str) for m in modules):
                return modules
            break
    raise SystemExit(f"{compat_py}: no MODULES = (\"module\", ...) tuple of module names")


def import_if_shipped(name: str) -> bool:
    """``import name``; ``False`` when the release has no such module (the adapter's rule: a
    ModuleNotFoundError for the module itself or a parent of it), any other error raises."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            return False
        raise
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name as canon

    lock_path, want_vllm, compat_py = argv
    problems = []

    # 1. every pin in the lock is installed at exactly that version
    pins = {}
    for line in open(lock_path):
        line = line.split("#", 1)[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line)
            if not m:
                problems.append(f"lock line is not an exact pin: {line!r}")
                continue
            pins[canon(m.group(1))] = m.group(2)
    installed = {canon(d.metadata["Name"]): d.version for d in md.distributions()}
    for name, ver in sorted(pins.items()):
        if installed.get(name) != ver:
            problems.append(f"{name}: lock pins {ver}, installed {installed.get(name)}")

    # 2. nothing CUDA-ish slipped in
    for name in installed:
        if name.startswith(("nvidia-", "cuda-")) or name in ("triton", "flashinfer-python"):
            problems.append(f"unexpected GPU package installed: {name}")

    # 3. every vLLM requirement that IS installed satisfies vLLM's specifier
    for req_s in md.requires("vllm") or []:
        req = Requirement(req_s)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        name = canon(req.name)
        if name in ("torch", "torchvision", "torchaudio") or name not in installed:
            continue
        if req.specifier and not req.specifier.contains(installed[name], prereleases=True):
            problems.append(f"{name} {installed[name]} does not satisfy vllm's {req}")

    # 4. the versions and the modules the adapter uses
    import torch
    if torch.version.cuda is not None:
        problems.append(f"torch is a CUDA build ({torch.__version__})")
    import vllm
    if vllm.__version__ != want_vllm:
        problems.append(f"vllm.__version__ is {vllm.__version__}, want {want_vllm}")
    shipped = 0
    modules = adapter_modules(compat_py)
    for mod in modules:
        try:
            shipped += import_if_shipped(mod)
        except Exception as e:  # noqa: BLE001 - report every failure
            problems.append(f"import {mod} failed: {type(e).__name__}: {e}")

    if problems:
        print("VERIFY FAILED:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(f"verified: torch {torch.__version__}, vllm {vllm.__version__}, {len(pins)} pins exact, "
          f"{shipped} of the adapter's {len(modules)} KV-cache modules ship and import on CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
