"""A broken dependency of vLLM is one line naming the package and the fix (issue 27).

A venv built from a release's own metadata got an ``xgrammar`` that did not fit, and
``pytest --target vllm`` ended in a 68-line INTERNALERROR. Here a fake ``vllm`` (a package
and its dist-info, in a temporary site-packages) imports a fake dependency that raises the way
such a package does; the adapter's import (:func:`kvverify.targets.vllm.env.upstream`) and
``pytest --target vllm`` must both say, on one line, which package broke, what vLLM asks for
and the ``pip install`` that fixes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvverify.targets.vllm import deps

ROOT = Path(__file__).resolve().parents[1]


def _site(tmp_path: Path, dep_body: str, requires: str = "brokendep==2.0") -> Path:
    site = tmp_path / "lib" / "site-packages"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("import brokendep\n__version__ = '0.24.0'\n")
    info = site / "vllm-0.24.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: 0.24.0\nRequires-Dist: {requires}\n")
    (site / "brokendep").mkdir()
    (site / "brokendep" / "__init__.py").write_text(textwrap.dedent(dep_body))
    dinfo = site / "brokendep-1.0.dist-info"
    dinfo.mkdir()
    (dinfo / "METADATA").write_text("Metadata-Version: 2.1\nName: brokendep\nVersion: 1.0\n")
    (dinfo / "top_level.txt").write_text("brokendep\n")
    return site


def _run(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{site}")
    env.pop("KVVERIFY_TARGET", None)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


_PROBE = ("from kvverify.errors import KVVerifyError\nfrom kvverify.targets.vllm.env import upstream\n"
          "try:\n    upstream()\nexcept KVVerifyError as e:\n    print('ERR', e)\n")


def test_an_incompatible_dependency_is_named_with_its_fix(tmp_path: Path) -> None:
    site = _site(tmp_path, """
        def _grammar():
            raise AttributeError("module 'torch' has no attribute 'compiler_abi'")
        _grammar()
    """)
    out = _run(site, "-c", _PROBE).stdout.strip()
    assert out.startswith("ERR vLLM cannot be imported"), out
    assert "package brokendep 1.0 fails to import (AttributeError: module 'torch' has no attribute" in out
    assert "vLLM asks for brokendep==2.0" in out and "-m pip install 'brokendep==2.0'" in out
    assert len(out.splitlines()) == 1


def test_a_missing_dependency_is_named_with_its_fix(tmp_path: Path) -> None:
    site = _site(tmp_path, "import notinstalled_xyz\n", requires="notinstalled-xyz>=1.2")
    out = _run(site, "-c", _PROBE).stdout.strip()
    assert "package 'notinstalled_xyz' is not installed" in out, out
    assert "pip install 'notinstalled-xyz>=1.2'" in out


def test_pytest_target_vllm_ends_in_one_line_not_an_internal_error(tmp_path: Path) -> None:
    site = _site(tmp_path, "raise TypeError('expected torch 2.10 ABI')\n")
    done = _run(site, "-m", "pytest", "properties/test_bad_input.py", "--target", "vllm", "-p", "no:xdist",
                "-p", "no:cacheprovider", "-q")
    text = done.stdout + done.stderr
    assert "INTERNALERROR" not in text, text[-3000:]
    assert done.returncode == 4, text[-2000:]  # pytest's usage error
    lines = [ln for ln in text.splitlines() if "brokendep" in ln]
    assert len(lines) == 1 and "fails to import (TypeError: expected torch 2.10 ABI)" in lines[0], text[-2000:]


def test_vllms_own_errors_are_not_put_on_a_dependency() -> None:
    """An exception raised by vLLM's own code is drift or a vLLM bug: no package is blamed."""
    try:
        exec(compile("raise RuntimeError('x')", "/venv/lib/python3.11/site-packages/vllm/config.py", "exec"))
    except RuntimeError as e:
        assert deps.culprit(e) is None


@pytest.mark.parametrize(("requires", "want"), [
    (["xgrammar==0.1.21; platform_machine == 'x86_64'", "torch==2.10.0"], "xgrammar==0.1.21"),
    (["fastapi[standard]<0.137.0,>=0.133.0"], None),
    (["xgrammar>=0.1; extra == 'tools'"], None),
])
def test_vllm_requirement_reads_the_release_metadata(requires: list[str], want: str | None) -> None:
    assert deps.vllm_requirement("xgrammar", requires) == want
