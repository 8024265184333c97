"""A contributor's checkout (issue 27, item 2): scripts/make_vllm_checkout.py builds a git
repository of a release wheel's Python sources at a dev version, the install script's
``--editable`` venv is recognised as such, and the fork workflow calls options that exist.

The real run (a 0.33.0 checkout installed editable, the suite, #47272 reverted and restored) is
scripts/contributor-demo.sh; its transcript is in docs/contributors.md.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from kvverify.cli import build_parser
from kvverify.releases.venvs import EDITABLE_MARK, STAMPS, discover

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_vllm_checkout", REPO / "scripts" / "make_vllm_checkout.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _wheel(tmp_path: Path) -> Path:
    whl = tmp_path / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("vllm/__init__.py", "from vllm.version import __version__\n")
        zf.writestr("vllm/version.py", "from ._version import __version__\n")
        zf.writestr("vllm/_version.py", "__version__ = '0.33.0'\n")  # the wheel's own: replaced
        zf.writestr("vllm/v1/core/block_pool.py", "NULL = 1\n")
        zf.writestr("vllm/_C.abi3.so", b"\x7fELF")  # compiled: left out
        zf.writestr("vllm/__pycache__/x.cpython-311.pyc", b"")
        zf.writestr("vllm-0.33.0.dist-info/METADATA", "Name: vllm\n")
    return whl


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_checkout_is_a_git_repository_of_the_wheels_python_sources_at_a_dev_version(tmp_path: Path) -> None:
    mod = _script()
    dest = tmp_path / "vllm"
    newer = tmp_path / "newer"
    (newer / "vllm" / "v1" / "core").mkdir(parents=True)
    (newer / "vllm" / "v1" / "core" / "block_pool.py").write_text("NULL = 1  # upstream main\n")
    version = mod.build(dest, "0.33.0", _wheel(tmp_path), newer)
    head = _git(dest, "rev-parse", "--short=9", "HEAD")
    assert version == f"0.33.1.dev2+g{head}"  # two commits past the v0.33.0 tag
    assert (dest / "vllm" / "_version.py").read_text().count(repr(version)) == 1
    assert not (dest / "vllm" / "_C.abi3.so").exists() and not (dest / "vllm" / "__pycache__").exists()
    assert (dest / "vllm" / "v1" / "core" / "block_pool.py").read_text().endswith("# upstream main\n")
    assert _git(dest, "tag") == "v0.33.0"
    assert "_version.py" not in _git(dest, "ls-files")  # untracked, as setuptools-scm's
    assert "vllm/v1/core/block_pool.py" in _git(dest, "show", "--name-only", "HEAD")  # the newer files on top
    # a contributor's commit moves the dev version on
    (dest / "vllm" / "v1" / "core" / "block_pool.py").write_text("NULL = 0\n")
    _git(dest, "-c", "user.name=c", "-c", "user.email=c@x", "commit", "-qam", "my change")
    assert mod.stamp(dest).startswith("0.33.1.dev3+g")
    with pytest.raises(SystemExit, match="not empty"):
        mod.build(dest, "0.33.0", _wheel(tmp_path), None)


def test_editable_venv_is_found_with_its_provenance(tmp_path: Path) -> None:
    v = tmp_path / "checkout-venv"
    (v / "bin").mkdir(parents=True)
    (v / "bin" / "python").write_text("")
    site = v / "lib" / "python3.11" / "site-packages"
    (site / "vllm-0.33.1.dev1+g50ffafb3d.dist-info").mkdir(parents=True)
    for s in STAMPS:
        (v / s).write_text("x")
    (v / EDITABLE_MARK).write_text("/src/vllm\n")
    [found] = discover([v])
    assert (found.version, found.provenance) == ("0.33.1.dev1+g50ffafb3d", "editable")


def test_fork_workflow_runs_kvverify_diff_with_options_that_exist() -> None:
    wf = yaml.safe_load((REPO / "scripts" / "vllm-fork-workflow.yml").read_text())
    steps = wf["jobs"]["diff"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps).replace("\\\n", " ")
    assert "install-vllm-target.sh" in runs and "--editable" in runs
    line = next(ln for ln in runs.splitlines() if "kvverify diff" in ln)
    argv = [a.strip('"') for a in line.split("kvverify", 1)[1].split("|", 1)[0].split()]
    args = build_parser().parse_args(argv)
    assert args.func.__name__ == "cmd_diff"
    assert args.base.endswith("/base") and args.python and args.workers == 2
    install = (REPO / "scripts" / "install-vllm-target.sh").read_text()
    assert "--editable)" in install and "--version)" in install


def test_demo_script_is_valid_bash() -> None:
    done = subprocess.run(["bash", "-n", str(REPO / "scripts" / "contributor-demo.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
