"""What ``--base`` and ``--head`` name: a release, a venv, or a vLLM source tree."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvverify.errors import ConfigError
from kvverify.releases import venvs


@dataclass(frozen=True)
class Side:
    """One vLLM to run the suite on: the interpreter, extra environment (a source tree on
    ``PYTHONPATH``), and what the user named."""

    label: str
    python: Path
    kind: str  # "release" | "venv" | "source" | "current"
    where: str
    env: Mapping[str, str] = field(default_factory=dict)


def _source_root(path: Path) -> Path | None:
    """The directory to put on ``PYTHONPATH`` for a vLLM source tree: ``path`` when it holds
    ``vllm/__init__.py``, its parent when ``path`` is the ``vllm`` package itself."""
    if (path / "vllm" / "__init__.py").is_file():
        return path
    if path.name == "vllm" and (path / "__init__.py").is_file():
        return path.parent
    return None


def resolve(spec: str, *, field_name: str, python: Path | None = None,
            sources: Sequence[Path] = ()) -> Side:
    """The side ``spec`` names: ``X.Y.Z`` (a release venv :func:`kvverify.releases.venvs.discover`
    finds in ``sources``), a venv directory, or a vLLM source tree (run with ``python``, default
    this interpreter, the tree first on ``PYTHONPATH``)."""
    path = Path(spec).expanduser()
    if path.exists():
        path = path.resolve()
        if (path / "bin" / "python").exists():
            return Side(spec, path / "bin" / "python", "venv", str(path))
        root = _source_root(path)
        if root is not None:
            pythonpath = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])
            return Side(spec, Path(python or sys.executable), "source", str(root), {"PYTHONPATH": pythonpath})
        raise ConfigError(field_name, spec, "a venv (with bin/python), a vLLM source tree (holding vllm/__init__.py) "
                                            "or an installed release X.Y.Z")
    if venvs.is_version(spec):
        found = {rv.version: rv for rv in venvs.discover(sources)}
        if spec not in found:
            raise ConfigError(field_name, spec, f"no venv of vLLM {spec} found (found: {', '.join(found) or 'none'}; "
                                                f"--venvs DIR, or scripts/install-vllm-target.sh --version {spec} DIR)")
        rv = found[spec]
        return Side(spec, rv.python, "release", str(rv.path))
    raise ConfigError(field_name, spec, "an installed release X.Y.Z, a venv or a vLLM source tree (no such path)")


def current(python: Path | None = None) -> Side:
    """The head by default: the vLLM this interpreter imports (an editable checkout, say)."""
    exe = Path(python or sys.executable)
    return Side("current", exe, "current", str(exe))


def vllm_version(side: Side, repo_root: Path, timeout: float = 120) -> str:
    """The vLLM version a side runs (``vllm.version``, without importing the engine), or why not."""
    env = dict(os.environ, **side.env)
    code = "import vllm.version as v; print(v.__version__)"
    try:
        done = subprocess.run([str(side.python), "-c", code], cwd=repo_root, env=env, capture_output=True,
                              text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"? ({type(e).__name__})"
    lines = done.stdout.strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else "? (no vllm importable)"
