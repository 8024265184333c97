"""Which installed package broke an ``import vllm``, and the one command that fixes it.

A vLLM installed from its own metadata (or by hand) can carry a dependency that does not
fit: an ``xgrammar`` built for another torch, a ``transformers`` too new for the release.
The import then dies deep inside that package with an ``AttributeError`` or an
``ImportError`` of a symbol. :func:`broken_dependency` turns that exception into one line
naming the package, what vLLM asks for, and the ``pip install`` that fixes it.

This module imports nothing of kvverify (``scripts/verify_vllm_install.py`` loads it by
path, before kvverify is installed in the venv) and nothing of vLLM.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
import sysconfig
from collections.abc import Iterable
from types import TracebackType
from typing import Any

#: packages that are never "the broken dependency": the target itself and the suite
_OWN = frozenset({"vllm", "kvverify"})


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _top_level(path: str) -> str | None:
    """The top-level package of a file under a site-packages directory, else ``None``."""
    norm = os.path.normpath(path)
    parts = norm.split(os.sep)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in ("site-packages", "dist-packages") and i + 1 < len(parts):
            top = parts[i + 1]
            return top[:-3] if top.endswith(".py") else top
    return None


def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(os.path.normpath(p) for p in (paths.get("stdlib"), paths.get("platstdlib")) if p)


def _frames(tb: TracebackType | None) -> list[str]:
    out = []
    while tb is not None:
        out.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return out


def distribution_of(module: str) -> str | None:
    """The installed distribution that provides top-level module ``module`` (``xgrammar``)."""
    try:
        mapping = md.packages_distributions()
    except Exception:  # noqa: BLE001 - broken metadata must not hide the real error
        mapping = {}
    dists = mapping.get(module) or []
    return dists[0] if dists else None


def culprit(exc: BaseException) -> str | None:
    """The top-level module of the third-party package that raised ``exc`` (innermost frame
    in a site-packages package other than vLLM / kvverify), or the module a
    ``ModuleNotFoundError`` names; ``None`` when vLLM's own code raised."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        missing = exc.name.split(".")[0]
        return None if missing in _OWN else missing
    stdlib = _stdlib_dirs()
    for path in reversed(_frames(exc.__traceback__)):
        top = _top_level(path)
        if path.startswith("<") or (top is None and os.path.normpath(path).startswith(stdlib)):
            continue
        if top is None or top in _OWN or top.startswith("_") and top[1:] in _OWN:
            continue
        return top
    if isinstance(exc, ImportError) and exc.name:  # "cannot import name X from Y"
        top = exc.name.split(".")[0]
        return None if top in _OWN else top
    return None


def vllm_requirement(dist: str, requires: Iterable[str] | None = None) -> str | None:
    """vLLM's own requirement on distribution ``dist`` (``xgrammar==0.1.21``), or ``None``."""
    if requires is None:
        try:
            requires = md.requires("vllm") or []
        except md.PackageNotFoundError:
            return None
    want = _canon(dist)
    for line in requires:
        head = line.split(";", 1)[0].strip()
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)", head)
        if m and _canon(m.group(1)) == want:
            if ";" in line and "extra ==" in line.split(";", 1)[1]:
                continue
            return re.sub(r"\[[^\]]*\]", "", head).replace(" ", "")
    return None


def _requirement_cls() -> Any:
    import importlib
    try:
        return importlib.import_module("packaging.requirements").Requirement
    except ImportError:  # a venv without packaging: pip's own copy
        return importlib.import_module("pip._vendor.packaging.requirements").Requirement


def unmet_requirements(dist: str) -> list[tuple[str, str | None]]:
    """``dist``'s own requirements (markers evaluated, no extras) that the installed packages do not
    meet: ``[("apache-tvm-ffi>=0.1.11", "0.1.9"), ("triton", None)]`` (``None``: not installed).
    A package installed ``--no-deps`` next to another's exact pin can miss one."""
    try:
        Requirement = _requirement_cls()
        requires = md.requires(dist) or []
    except Exception:  # noqa: BLE001 - no metadata: nothing to say
        return []
    out: list[tuple[str, str | None]] = []
    for line in requires:
        try:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
        except Exception:  # noqa: BLE001 - an unparsable line says nothing
            continue
        try:
            have: str | None = md.version(req.name)
        except md.PackageNotFoundError:
            have = None
        if have is None or (req.specifier and not req.specifier.contains(have, prereleases=True)):
            out.append((f"{req.name}{req.specifier}", have))
    return out


def broken_dependency(exc: BaseException, *, python: str | None = None) -> str | None:
    """One line naming the package that broke the import and its fix, or ``None`` when the
    exception came from vLLM itself (then it is drift or a vLLM bug, not a dependency)."""
    top = culprit(exc)
    if top is None:
        return None
    dist = distribution_of(top)
    python = python or sys.executable
    what = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}".rstrip(": ")
    if dist is None:
        want = vllm_requirement(top)
        fix = f"{python} -m pip install '{want or top}'"
        return f"package {top!r} is not installed ({what}); vLLM asks for {want or top}: fix: {fix}"
    try:
        have = md.version(dist)
    except md.PackageNotFoundError:
        have = "?"
    want = vllm_requirement(dist)
    # what the package itself needs and does not get (installed --no-deps next to another pin)
    unmet = [(r, v) for r, v in unmet_requirements(dist) if v is not None]
    if unmet:
        req, got = unmet[0]
        name = re.match(r"[A-Za-z0-9._-]+", req)
        other = vllm_requirement(name.group(0)) if name else None
        pins = " ".join(f"'{x}'" for x in (want or dist, other or req))
        return (f"package {dist} {have} fails to import ({what}): it needs {req}, and {got} is installed"
                f"{f' (vLLM asks for {other})' if other else ''}: fix: {python} -m pip install {pins} "
                f"(pip then picks a {dist} that works with it)")
    if want is None:
        return (f"package {dist} {have} fails to import ({what}); vLLM declares no requirement on it: "
                f"fix: {python} -m pip install --upgrade '{dist}' (or uninstall it)")
    return (f"package {dist} {have} fails to import ({what}); vLLM asks for {want}: "
            f"fix: {python} -m pip install '{want}'")


__all__ = ["broken_dependency", "culprit", "distribution_of", "unmet_requirements", "vllm_requirement"]
