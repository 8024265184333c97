"""Which vLLM release venvs there are: discovery, their versions, what installing them cost.

A release venv is any venv with a ``vllm-VERSION.dist-info`` (a release, a dev build, an
editable checkout): the matrix runs the vLLM a user has (issue 27). Where it came from is
its :attr:`ReleaseVenv.provenance`: ``lock`` (``scripts/install-vllm-target.sh`` finished
from a lock: both of its stamps, :data:`STAMPS`), ``unlocked`` (the script, from the
release's own metadata: :data:`UNLOCKED_FREEZE`), ``editable`` (the script's ``--editable``
checkout: :data:`EDITABLE_MARK`), ``user`` (a venv the script did not make).
A venv whose install is still under way (the script's lock stamp without its self stamp)
is left out.
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
#: what pip resolved for an unlocked install (the install script, without a lock)
UNLOCKED_FREEZE = ".kvverify-unlocked-freeze.txt"
#: the checkout an ``--editable`` install (the install script) put in the venv
EDITABLE_MARK = ".kvverify-editable"
#: a vLLM version: a release ``X.Y.Z[.postN]``, a pre-release, a dev build, a local label
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?(?:\+[A-Za-z0-9.]+)?$")
_DIST_RE = re.compile(r"^vllm-(\d+\.\d+\.\d+[A-Za-z0-9.+_]*)\.dist-info$")


@dataclass(frozen=True)
class ReleaseVenv:
    """One installed vLLM: its version, its venv, where it came from (``lock`` / ``unlocked`` / ``user``)."""

    version: str
    path: Path
    provenance: str = "lock"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def is_version(text: str) -> bool:
    """Whether ``text`` is a vLLM version (``0.27.1``, ``0.25.0.post1``, ``0.33.1.dev3+g1a2b3c4``)."""
    return bool(_VERSION_RE.match(text))


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of a vLLM version: the release numbers, then a dev build before its release,
    a pre-release before the final one, a post-release after it."""
    m = re.match(r"^(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?", version)
    if not m:
        return tuple(int(p) for p in re.findall(r"\d+", version))
    release = tuple(int(p) for p in m.group(1).split("."))
    release = release + (0,) * max(0, 4 - len(release))
    pre = {"a": -3, "b": -2, "rc": -1}.get(m.group(2) or "", 0)
    dev = m.group(5)
    if dev is not None and not m.group(2) and not m.group(4):
        return release + (-4, int(dev))  # 0.33.1.dev3 < 0.33.1a1 < 0.33.1rc1 < 0.33.1
    return release + (pre, int(m.group(3) or 0), int(m.group(4) or 0), -1 if dev is not None else 0,
                      int(dev or 0))


def venv_vllm_version(path: Path) -> str | None:
    """The vLLM version installed in venv ``path`` (from its ``vllm-X.Y.Z.dist-info``), or None."""
    if not (path / "bin" / "python").exists():
        return None
    for site in sorted(path.glob("lib/python3*/site-packages")):
        for d in site.glob("vllm-*.dist-info"):
            m = _DIST_RE.match(d.name)
            if m:
                return m.group(1).replace("_", "+") if "+" not in m.group(1) else m.group(1)
    return None


def provenance(path: Path) -> str | None:
    """``lock`` / ``unlocked`` / ``user`` (see the module docstring), ``None`` while the install
    script is still installing it."""
    lock, self_stamp = (path / s for s in STAMPS)
    if lock.exists() and not self_stamp.exists():
        return None
    if lock.exists():
        return ("unlocked" if (path / UNLOCKED_FREEZE).exists() else
                "editable" if (path / EDITABLE_MARK).exists() else "lock")
    return "user"


def default_sources(repo_root: Path) -> list[Path]:
    """``$KVVERIFY_RELEASE_VENVS`` (os.pathsep-separated), else the install script's default
    venvs in the checkout (``.venv-vllm``, ``.venv-vllm-X.Y.Z``) and ``../venvs/vllm-X.Y.Z``."""
    env = os.environ.get(ENV_VENVS, "")
    if env.strip():
        return [Path(p) for p in env.split(os.pathsep) if p.strip()]
    return [repo_root, repo_root.parent / "venvs"]


def discover(sources: Iterable[Path]) -> list[ReleaseVenv]:
    """Release venvs in ``sources``: each is a venv, or a directory holding ``vllm-*`` /
    ``.venv-vllm*`` venvs. Any venv with vLLM counts (:func:`provenance`), but one the install
    script is still installing; one venv per version (the first found), sorted by version."""
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
            how = provenance(cand) if version is not None else None
            if version is None or how is None:  # no vLLM, or the install script is not done
                continue
            if version not in found:
                found[version] = ReleaseVenv(version, cand, how)
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
