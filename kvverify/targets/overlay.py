"""A patched vLLM on ``sys.path``: the installed ``vllm`` package with finding patches applied.

``--target vllm --fix NAME`` must run the properties against the real engine *with that
finding's patch* (``reports/findings/patches/F<n>-<slug>.diff``), not against a fix
re-implemented in the adapter, and never by editing the shared venv. :func:`activate`
therefore builds an overlay before anything imports vLLM:

* a directory ``<cache>/<hash>/vllm`` that mirrors the installed package with symlinks,
  except the directories on the way to a patched file (real directories) and the patched
  files themselves (copies, then ``patch -p1``); about a dozen entries, not 900 MB;
* ``<hash>`` covers the patches, the original files they touch and the package location,
  so a different patch or vLLM release gets another overlay; the build happens in a
  temporary directory that is renamed into place (``os.replace``), so several processes
  (``pytest -n 2`` workers) building the same overlay at once are safe;
* the overlay is put first on ``sys.path`` (and ``PYTHONPATH``, for subprocesses).

The cache is ``$KVVERIFY_CACHE/overlays`` (default ``~/.cache/kvverify/overlays``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kvverify import fixes
from kvverify.errors import ConfigError, KVVerifyError

#: fix option -> the patch of its finding, in reports/findings/patches/
PATCHES: dict[str, str] = {
    "concurrency_counts_usable_blocks": "F1-concurrency-counts-null-block.diff",
    "chunked_local_cap_plus_one": "F2-chunked-local-cap-misaligned-chunk.diff",
    "check_plans_computed_tokens": "F3-check-reserves-never-computed-token.diff",
    "caps_count_lookahead": "F4-admission-caps-ignore-lookahead.diff",
    "swa_cap_exact": "F5-swa-admission-cap-slack.diff",
    "capacity_helpers_plan_like_engine": "F6-public-capacity-helpers-disagree-with-planner.diff",
    "chunked_local_alignment_checked_at_startup": "F7-chunked-local-hybrid-asserts-after-startup.diff",
    "encoder_decoder_prefix_caching_refused": "F8-encoder-decoder-prefix-caching-crashes.diff",
    "mamba_align_bound_exact": "F9-mamba-align-bound-slack.diff",
    "spec_decode_padding_fits_budget": "F10-spec-decode-padding-exceeds-token-budget.diff",
    "async_load_reserves_own_need": "F11-async-load-spec-reservation-refuses-forever.diff",
    "landed_load_not_reloaded": "F12-one-token-full-hit-reloads-forever.diff",
    "mamba_align_counts_loaded_state": "F13-mamba-align-uncounted-loaded-state-block.diff",
    "budget_rechecked_after_late_chunked_prefill_off": "F14-late-chunked-prefill-off-skips-budget-check.diff",
    "kv_less_stage_planned": "F15-kv-less-pipeline-stage-divides-by-zero.diff",
    "num_gpu_blocks_override_validated": "F16-non-positive-block-override-blames-memory.diff",
}

#: bump when the layout of an overlay changes (old cache entries are then ignored)
_FORMAT = "1"
_MANIFEST = "kvverify-overlay.json"


def patches_dir() -> Path:
    """``$KVVERIFY_PATCHES_DIR`` or ``reports/findings/patches`` of this checkout."""
    env = os.environ.get("KVVERIFY_PATCHES_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "reports" / "findings" / "patches"


def cache_dir() -> Path:
    """Where overlays are kept: ``$KVVERIFY_CACHE/overlays`` or ``~/.cache/kvverify/overlays``."""
    root = os.environ.get("KVVERIFY_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "kvverify") / "overlays"


def patch_for(fix: str) -> Path:
    """The patch file of fix option ``fix`` (a clear error for an unknown fix or a missing file)."""
    if fix not in fixes.CATALOG:
        raise ConfigError("fix", fix, f"unknown fix; known: {', '.join(fixes.CATALOG)}")
    if fix not in PATCHES:
        raise ConfigError("fix", fix, f"no vLLM patch for this fix; patched: {', '.join(PATCHES)}")
    path = patches_dir() / PATCHES[fix]
    if not path.is_file():
        raise KVVerifyError(f"the patch of fix {fix!r} is missing: {path}")
    return path


def touched_files(patch: Path) -> list[str]:
    """Package-relative paths (``vllm/...``) a unified diff with ``a/`` ``b/`` prefixes changes."""
    out: list[str] = []
    for line in patch.read_text().splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0].strip()
            if not name.startswith("b/vllm/"):
                raise KVVerifyError(f"{patch.name}: expected paths like b/vllm/..., got {name!r}")
            out.append(name[2:])
    if not out:
        raise KVVerifyError(f"{patch.name}: not a unified diff (no +++ lines)")
    return out


def installed_vllm() -> Path:
    """The installed ``vllm`` package directory, found without importing it (overlays resolved)."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise KVVerifyError(f"--fix with the vllm target needs vLLM installed for {sys.executable} "
                            "(scripts/install-vllm-target.sh)")
    # an overlay's vllm/__init__.py is a symlink to the installed one
    return Path(spec.origin or "").resolve().parent


@dataclass(frozen=True)
class Overlay:
    """A built overlay: ``path`` goes on ``sys.path``; ``fixes`` / ``patches`` it applies."""

    path: Path
    fixes: tuple[str, ...]
    patches: tuple[str, ...]
    source: Path


def _key(source: Path, patch_paths: list[Path]) -> str:
    h = hashlib.sha256(f"kvverify-overlay {_FORMAT}\n{source}\n".encode())
    for p in patch_paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
        for rel in touched_files(p):
            original = source.parent / rel
            h.update(rel.encode() + b"\0" + (original.read_bytes() if original.is_file() else b"<new>") + b"\0")
    return h.hexdigest()[:20]


def _mirror(source: Path, dest: Path, touched: set[str]) -> None:
    """``dest`` mirrors directory ``source`` with symlinks; ``touched`` (paths relative to
    ``source``) are copied, and the directories leading to them are real directories.

    ``__pycache__`` is never linked inside a real directory, so bytecode of a patched module
    is written into the overlay, never over the shared venv's.
    """
    dest.mkdir()
    files = {t for t in touched if "/" not in t}
    below: dict[str, set[str]] = {}
    for t in touched - files:
        head, rest = t.split("/", 1)
        below.setdefault(head, set()).add(rest)
    for entry in sorted(os.listdir(source)):
        if entry == "__pycache__":
            continue
        src = source / entry
        if entry in below and src.is_dir():
            _mirror(src, dest / entry, below[entry])
        elif entry in files:
            shutil.copy2(src, dest / entry)
        else:
            os.symlink(src, dest / entry)
    missing = (files | set(below)) - set(os.listdir(source))
    if missing:
        raise KVVerifyError(f"the patches change {sorted(missing)} under {source}, which do not exist")


def _apply(patch: Path, root: Path) -> None:
    """``patch -p1`` in ``root`` (``git apply`` when ``patch`` is not installed); errors are clear."""
    if shutil.which("patch"):
        cmd = ["patch", "-p1", "--forward", "--batch", "--no-backup-if-mismatch", "-r", "-",
               "-d", str(root), "-i", str(patch)]
    elif shutil.which("git"):
        cmd = ["git", "apply", "--unsafe-paths", f"--directory={root}", str(patch)]
    else:
        raise KVVerifyError("building a patched vLLM needs `patch` or `git` on PATH")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KVVerifyError(f"{patch.name} does not apply to vLLM at {root}: "
                            f"{(done.stdout + done.stderr).strip()[-800:]}")


def _publish(final: Path, manifest: Mapping[str, object], fill: Callable[[Path], None]) -> None:
    """Build ``final`` unless it exists: ``fill`` a temporary directory beside it, then rename it
    into place (atomic; a process that loses the race keeps the winner's identical copy)."""
    if (final / _MANIFEST).is_file():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        fill(tmp)
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        try:
            os.replace(tmp, final)  # atomic; fails if another process got there first
        except OSError:
            if not (final / _MANIFEST).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def build(fix_names: list[str] | tuple[str, ...], *, source: Path | None = None,
          cache: Path | None = None) -> Overlay:
    """Build (or reuse) the overlay for ``fix_names``; the shared install is only read."""
    names = tuple(sorted(set(fix_names)))
    patch_paths = [patch_for(n) for n in names]
    patch_paths.sort(key=lambda p: p.name)  # F1 < F2 < ...: one order for every selection
    source = (source or installed_vllm()).resolve()
    cache = cache or cache_dir()
    final = cache / _key(source, patch_paths)
    manifest = {"format": _FORMAT, "fixes": list(names), "patches": [p.name for p in patch_paths],
                "source": str(source)}
    def fill(tmp: Path) -> None:
        touched = {t for p in patch_paths for t in touched_files(p)}
        _mirror(source, tmp / "vllm", {t.split("/", 1)[1] for t in touched})
        for p in patch_paths:
            _apply(p, tmp)

    _publish(final, manifest, fill)
    return Overlay(final, names, tuple(p.name for p in patch_paths), source)


def build_mutant(rel: str, text: str, *, source: Path | None = None, cache: Path | None = None) -> Overlay:
    """An overlay whose one changed file is ``rel`` (``vllm/...``) with contents ``text`` (a
    mutant, :mod:`kvverify.mutate`); keyed by the file's text, built atomically like :func:`build`."""
    source = (source or installed_vllm()).resolve()
    if not rel.startswith("vllm/") or not (source.parent / rel).is_file():
        raise KVVerifyError(f"a mutant overlay replaces an existing vllm/... file; {rel!r} is not one under {source}")
    cache = cache or cache_dir()
    h = hashlib.sha256(f"kvverify-mutant {_FORMAT}\n{source}\n{rel}\n".encode() + text.encode())
    final = cache / f"mutant-{h.hexdigest()[:20]}"

    def fill(tmp: Path) -> None:
        _mirror(source, tmp / "vllm", {rel.split("/", 1)[1]})
        (tmp / rel).write_text(text)

    _publish(final, {"format": _FORMAT, "mutant": rel, "source": str(source)}, fill)
    return Overlay(final, (), (), source)


def _imported_vllm() -> list[str]:
    return sorted(m for m in sys.modules if m == "vllm" or m.startswith("vllm."))


def active() -> Path | None:
    """The overlay this process runs vLLM from (``None``: the installed, unpatched vLLM)."""
    value = os.environ.get("KVVERIFY_VLLM_OVERLAY")
    return Path(value) if value and value in sys.path else None


def activate(fix_names: list[str] | tuple[str, ...], *, source: Path | None = None,
             cache: Path | None = None) -> Overlay:
    """Build the overlay for ``fix_names`` and put it first on ``sys.path``.

    Must run before anything imports vLLM; if vLLM is already imported (unpatched, or with
    other patches) this is a clear :class:`KVVerifyError`. Idempotent for the same fixes.
    """
    overlay = build(fix_names, source=source, cache=cache)
    path = str(overlay.path)
    current = active()
    if current is not None and str(current) != path:
        raise KVVerifyError(f"another vLLM overlay is already active in this process ({current}); "
                            "one process runs one patched vLLM")
    loaded = _imported_vllm()
    if loaded and current is None:
        raise KVVerifyError(
            f"cannot apply the vLLM patches of --fix {' '.join(overlay.fixes)}: vLLM is already imported "
            f"in this process ({', '.join(loaded[:3])}{'...' if len(loaded) > 3 else ''}) from "
            f"{overlay.source}; the overlay must be set up before the first `import vllm`")
    if current is None:
        sys.path.insert(0, path)
        pythonpath = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = path + (os.pathsep + pythonpath if pythonpath else "")
        os.environ["KVVERIFY_VLLM_OVERLAY"] = path
        importlib.invalidate_caches()
    spec = importlib.util.find_spec("vllm")
    if spec is None or not (spec.origin or "").startswith(path + os.sep):
        raise KVVerifyError(f"the vLLM overlay {path} is on sys.path but `vllm` resolves to "
                            f"{spec.origin if spec else None}")
    return overlay


def main(argv: list[str] | None = None) -> int:
    """``python -m kvverify.targets.overlay FIX...``: build the overlay, print its path (for
    ``PYTHONPATH=...`` runs such as scripts/verify-finding-patches.sh)."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m kvverify.targets.overlay",
                                     description="build a patched vLLM overlay and print its path")
    parser.add_argument("fix", nargs="+", help=f"fix options with a patch: {', '.join(PATCHES)}")
    args = parser.parse_args(argv)
    try:
        print(build(args.fix).path)
    except KVVerifyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


__all__ = ["Overlay", "PATCHES", "activate", "active", "build", "build_mutant", "cache_dir", "installed_vllm",
           "patch_for", "patches_dir", "touched_files"]


if __name__ == "__main__":
    sys.exit(main())
