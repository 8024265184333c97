"""Which vLLM release venvs there are: discovery, their versions, what installing them cost.

A release venv is one ``scripts/install-vllm-target.sh --version X.Y.Z VENV_DIR`` finished:
it holds a ``vllm-X.Y.Z.dist-info`` and both of the script's stamps (:data:`STAMPS`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ENV_VENVS = "KVVERIFY_RELEASE_VENVS"
#: written by scripts/install-vllm-target.sh once the lock is installed and verified, and once
#: kvverify is installed in the venv
STAMPS = (".kvverify-vllm-lock.stamp", ".kvverify-self.stamp")
#: written by the install script after a fresh install: ``{"install_seconds": ...}``
INSTALL_INFO = ".kvverify-install.json"
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(?:\.post\d+)?$")
_DIST_RE = re.compile(r"^vllm-(\d+\.\d+\.\d+(?:\.post\d+)?)\.dist-info$")


@dataclass(frozen=True)
class ReleaseVenv:
    """One installed release: its vLLM version and its venv."""

    version: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def is_version(text: str) -> bool:
    """Whether ``text`` is a release version ``X.Y.Z[.postN]``."""
    return bool(_VERSION_RE.match(text))


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of ``X.Y.Z[.postN]``."""
    return tuple(int(p) for p in re.findall(r"\d+", version))


def venv_vllm_version(path: Path) -> str | None:
    """The vLLM version installed in venv ``path`` (from its ``vllm-X.Y.Z.dist-info``), or None."""
    if not (path / "bin" / "python").exists():
        return None
    for site in sorted(path.glob("lib/python3*/site-packages")):
        for d in site.glob("vllm-*.dist-info"):
            m = _DIST_RE.match(d.name)
            if m:
                return m.group(1)
    return None


def default_sources(repo_root: Path) -> list[Path]:
    """``$KVVERIFY_RELEASE_VENVS`` (os.pathsep-separated), else the install script's default
    venvs in the checkout (``.venv-vllm``, ``.venv-vllm-X.Y.Z``) and ``../venvs/vllm-X.Y.Z``."""
    env = os.environ.get(ENV_VENVS, "")
    if env.strip():
        return [Path(p) for p in env.split(os.pathsep) if p.strip()]
    return [repo_root, repo_root.parent / "venvs"]


def discover(sources: Iterable[Path]) -> list[ReleaseVenv]:
    """Release venvs in ``sources``: each is a venv, or a directory holding ``vllm-*`` /
    ``.venv-vllm*`` venvs. Only venvs the install script finished (its lock stamp) count;
    one venv per version (the first found), sorted by version."""
    found: dict[str, ReleaseVenv] = {}
    seen: set[Path] = set()
    for src in sources:
        src = Path(src)
        candidates = [src] if (src / "bin" / "python").exists() else sorted(
            p for p in (src.iterdir() if src.is_dir() else [])
            if p.is_dir() and (p.name.startswith("vllm-") or p.name.startswith(".venv-vllm")))
        for cand in candidates:
            real = cand.resolve()
            if real in seen:
                continue
            seen.add(real)
            version = venv_vllm_version(cand)
            if version is None or not all((cand / s).exists() for s in STAMPS):  # not (yet) installed
                continue
            if version not in found:
                found[version] = ReleaseVenv(version, cand)
    return sorted(found.values(), key=lambda r: version_key(r.version))


def install_info(venv: Path) -> tuple[float | None, int | None]:
    """``(install seconds, venv bytes)``: the seconds the install script recorded after a fresh
    install (:data:`INSTALL_INFO`; ``None`` without one), and the size of the venv's files."""
    info = venv / INSTALL_INFO
    seconds = None
    if info.exists():
        try:
            seconds = float(json.loads(info.read_text()).get("install_seconds"))
        except (ValueError, TypeError, OSError):
            seconds = None
    total = 0
    for dirpath, _dirs, files in os.walk(venv):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return seconds, total
