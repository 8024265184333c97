"""A patched SGLang on ``sys.path``: the installed ``sglang`` package with finding patches applied.

``--target sglang --fix NAME`` runs the SGLang properties against the real engine *with that
finding's patch* (``reports/findings/patches/SG<n>-*.patch``), never by editing the venv: the
same mirror-with-symlinks overlay as vLLM's (:mod:`kvverify.targets.overlay`, whose builders
this reuses), for the ``sglang`` package, cached under ``<cache>/overlays/sglang-<hash>``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from kvverify.errors import ConfigError, KVVerifyError
from kvverify.sglang import fixes as sglang_fixes
from kvverify.targets import overlay as _vllm_overlay

_FORMAT = "1"
_MANIFEST = "kvverify-overlay.json"
ENV = "KVVERIFY_SGLANG_OVERLAY"


def patch_for(fix: str) -> Path:
    if fix not in sglang_fixes.CATALOG:
        raise ConfigError("fix", fix, f"unknown SGLang fix; known: {', '.join(sglang_fixes.CATALOG)}")
    path = _vllm_overlay.patches_dir() / sglang_fixes.CATALOG[fix].patch
    if not path.is_file():
        raise KVVerifyError(f"the patch of fix {fix!r} is missing: {path}")
    return path


def touched_files(patch: Path) -> list[str]:
    """Package-relative paths (``sglang/...``) the diff changes (``a/`` ``b/`` prefixes)."""
    out = []
    for line in patch.read_text().splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0].strip()
            if not name.startswith("b/sglang/"):
                raise KVVerifyError(f"{patch.name}: expected paths like b/sglang/..., got {name!r}")
            out.append(name[2:])
    if not out:
        raise KVVerifyError(f"{patch.name}: not a unified diff (no +++ lines)")
    return out


def installed_sglang() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise KVVerifyError(f"--fix with the sglang target needs SGLang installed for {sys.executable} "
                            "(scripts/install-sglang-target.sh)")
    return Path(spec.origin or "").resolve().parent


def build(fix_names: list[str] | tuple[str, ...], *, source: Path | None = None) -> Path:
    names = tuple(sorted(set(fix_names)))
    patches = sorted((patch_for(n) for n in names), key=lambda p: p.name)
    source = (source or installed_sglang()).resolve()
    h = hashlib.sha256(f"kvverify-sglang-overlay {_FORMAT}\n{source}\n".encode())
    for p in patches:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
        for rel in touched_files(p):
            original = source.parent / rel
            h.update(rel.encode() + (original.read_bytes() if original.is_file() else b"<new>"))
    cache = _vllm_overlay.cache_dir()
    final = cache / f"sglang-{h.hexdigest()[:20]}"
    if not (final / _MANIFEST).is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
        try:
            touched = {t.split("/", 1)[1] for p in patches for t in touched_files(p)}
            _vllm_overlay._mirror(source, tmp / "sglang", touched)
            for p in patches:
                _vllm_overlay._apply(p, tmp)
            (tmp / _MANIFEST).write_text(json.dumps({"fixes": list(names), "patches": [p.name for p in patches],
                                                     "source": str(source)}, indent=2) + "\n")
            try:
                os.replace(tmp, final)
            except OSError:
                if not (final / _MANIFEST).is_file():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def activate(fix_names: list[str] | tuple[str, ...]) -> Path:
    """Build the overlay and put it first on ``sys.path`` (before anything imports SGLang)."""
    path = build(fix_names)
    loaded = [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]
    current = os.environ.get(ENV) if os.environ.get(ENV) in sys.path else None  # inherited env: not active here
    if current and current != str(path):
        raise KVVerifyError(f"another SGLang overlay is active in this process ({current})")
    if loaded and not current:
        raise KVVerifyError("cannot apply the SGLang patches: sglang is already imported in this process")
    if not current:
        sys.path.insert(0, str(path))
        pythonpath = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(path) + (os.pathsep + pythonpath if pythonpath else "")
        os.environ[ENV] = str(path)
        importlib.invalidate_caches()
    spec = importlib.util.find_spec("sglang")
    if spec is None or not (spec.origin or "").startswith(str(path) + os.sep):
        raise KVVerifyError(f"the SGLang overlay {path} is on sys.path but sglang resolves to "
                            f"{spec.origin if spec else None}")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m kvverify.targets.sglang.overlay FIX...``: build it, print its path."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        print(build(args))
    except KVVerifyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
