"""Build a contributor's vLLM checkout: a git repository of a release's Python sources.

    python scripts/make_vllm_checkout.py DIR [--release 0.33.0] [--wheel PATH] [--newer DIR]

What a vLLM contributor works in — a git checkout of vLLM's Python code at a dev version newer
than any release — made here from a release wheel (vLLM's source is never part of this
repository: the wheel is fetched from the package index at run time, ``pip download``):

1. the wheel's ``vllm/`` package without compiled objects (``*.so``: the KV-cache code is pure
   Python and the CPU platform needs none), committed as the release;
2. ``--newer DIR``: newer upstream versions of some files (``DIR/vllm/...``, e.g. the KV-cache
   modules from vLLM main), committed on top;
3. a ``pyproject.toml`` that installs it editable (``pip install -e DIR --no-deps``) and an
   untracked ``vllm/_version.py`` with the dev version setuptools-scm would give such a
   checkout: ``<release with the last part + 1>.dev<commits after the release>+g<commit>``.

``--stamp DIR`` rewrites ``_version.py`` after new commits (the version an editable install
reports is read from it at import). Prints the checkout's path and version.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

BINARY = (".so", ".pyd", ".dylib", ".a", ".cubin", ".fatbin", ".ptx")
AUTHOR = ["-c", "user.name=kvverify", "-c", "user.email=kvverify@localhost", "-c", "commit.gpgsign=false"]
PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "vllm"
dynamic = ["version"]
requires-python = ">=3.10"
description = "vLLM's Python sources (a contributor checkout made by kvverify's scripts/make_vllm_checkout.py)"

[tool.setuptools.dynamic]
version = {attr = "vllm._version.__version__"}

[tool.setuptools.packages.find]
include = ["vllm*"]

[tool.setuptools.package-data]
"*" = ["*.json", "*.jinja", "*.txt", "*.yaml", "*.cu", "*.h", "py.typed"]
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *AUTHOR, *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip()}")
    return done.stdout.strip()


def fetch_wheel(release: str, into: Path) -> Path:
    """``pip download vllm==RELEASE --no-deps`` (the package index; cached in ``into``)."""
    into.mkdir(parents=True, exist_ok=True)
    found = sorted(into.glob(f"vllm-{release}-*.whl"))
    if found:
        return found[0]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                    "-q", "-d", str(into), f"vllm=={release}"], check=True)
    found = sorted(into.glob(f"vllm-{release}-*.whl"))
    if not found:
        raise SystemExit(f"pip download gave no vllm-{release} wheel in {into}")
    return found[0]


def unpack_sources(wheel: Path, dest: Path) -> int:
    """The wheel's ``vllm/`` files but compiled objects, into ``dest``; returns the file count."""
    n = 0
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if not name.startswith("vllm/") or info.is_dir() or name.endswith(BINARY) or "/__pycache__/" in name:
                continue
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            n += 1
    return n


def dev_version(repo: Path, release: str) -> str:
    """setuptools-scm's default for a checkout past tag ``release``: the next patch's dev build."""
    head = git(repo, "rev-parse", "--short=9", "HEAD")
    count = int(git(repo, "rev-list", "--count", f"v{release}..HEAD"))
    if count == 0:
        return release
    major, minor, patch = (int(x) for x in release.split(".")[:3])
    return f"{major}.{minor}.{patch + 1}.dev{count}+g{head}"


def stamp(repo: Path) -> str:
    """Write ``vllm/_version.py`` (untracked) for the checkout's HEAD; returns the version."""
    release = git(repo, "describe", "--tags", "--abbrev=0").removeprefix("v")
    version = dev_version(repo, release)
    (repo / "vllm" / "_version.py").write_text(
        "# written by kvverify's scripts/make_vllm_checkout.py (as setuptools-scm does); untracked\n"
        f"__version__ = version = {version!r}\n__version_tuple__ = version_tuple = "
        f"{tuple(int(p) if p.isdigit() else p for p in version.replace('+', '.').split('.'))!r}\n")
    return version


def build(dest: Path, release: str, wheel: Path | None, newer: Path | None) -> str:
    if dest.exists() and any(dest.iterdir()):
        raise SystemExit(f"{dest} exists and is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    wheel = wheel or fetch_wheel(release, Path(tempfile.gettempdir()) / "kvverify-wheels")
    n = unpack_sources(wheel, dest)
    (dest / "vllm" / "_version.py").unlink(missing_ok=True)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", f"vLLM {release}: the Python sources of {wheel.name} ({n} files)")
    git(dest, "tag", f"v{release}")
    # one commit past the release, as a contributor's tree is: its version is a dev build
    (dest / "pyproject.toml").write_text(PYPROJECT)
    (dest / ".gitignore").write_text("__pycache__/\n*.egg-info/\nbuild/\nvllm/_version.py\n.venv-kvverify/\n")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "Make the checkout installable editable (pyproject.toml, .gitignore)")
    if newer is not None:
        copied = 0
        for src in sorted(p for p in newer.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            rel = src.relative_to(newer)
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
            copied += 1
        git(dest, "add", "-A")
        git(dest, "commit", "-q", "-m", f"Newer upstream versions of {copied} file(s) (from {newer})")
    return stamp(dest)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make_vllm_checkout.py", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--release", default="0.33.0")
    p.add_argument("--wheel", type=Path, default=None, help="a vllm wheel already downloaded")
    p.add_argument("--newer", type=Path, default=None, help="a tree of newer vllm/... files to commit on top")
    p.add_argument("--stamp", action="store_true", help="only rewrite vllm/_version.py of an existing checkout")
    args = p.parse_args(argv)
    version = stamp(args.dir) if args.stamp else build(args.dir, args.release, args.wheel, args.newer)
    print(f"CHECKOUT: {args.dir.resolve()} (vLLM {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
