"""The patched-vLLM overlay (kvverify/targets/overlay.py), on a stand-in ``vllm`` package.

No vLLM needed: a tiny package named ``vllm`` and a patch against it exercise the build
(symlinks, copies, ``patch -p1``), the content-hashed cache, concurrent builds, refusals
and activation. The real patches are checked for shape here and for effect by
scripts/verify-finding-patches.sh (fail before, pass after, on vLLM 0.33.0).
"""

from __future__ import annotations

import importlib
import importlib.util
import multiprocessing
import os
import sys
import types
from pathlib import Path

import pytest

from kvverify import fixes
from kvverify.errors import ConfigError, KVVerifyError
from kvverify.targets import overlay

FIX = "concurrency_counts_usable_blocks"

PATCH = """--- a/vllm/v1/core/kv_cache_utils.py
+++ b/vllm/v1/core/kv_cache_utils.py
@@ -1,3 +1,3 @@
 def get_max_concurrency(num_blocks, per_request):
-    return num_blocks / per_request
+    return (num_blocks - 1) / per_request
 # end
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A stand-in ``vllm`` package, a patches dir holding FIX's patch, and a cache dir."""
    site = tmp_path / "site"
    core = site / "vllm" / "v1" / "core"
    core.mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("__version__ = 'fake'\n")
    (site / "vllm" / "v1" / "__init__.py").write_text("")
    (site / "vllm" / "v1" / "other.py").write_text("X = 1\n")
    (core / "__init__.py").write_text("")
    (core / "kv_cache_utils.py").write_text(
        "def get_max_concurrency(num_blocks, per_request):\n    return num_blocks / per_request\n# end\n")
    (core / "__pycache__").mkdir()
    (core / "__pycache__" / "kv_cache_utils.cpython-311.pyc").write_bytes(b"stale")
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / overlay.PATCHES[FIX]).write_text(PATCH)
    monkeypatch.setenv("KVVERIFY_PATCHES_DIR", str(patches))
    return {"source": site / "vllm", "cache": tmp_path / "cache", "patches": patches}


def test_build_patches_a_mirror_and_leaves_the_install_alone(fake: dict[str, Path]) -> None:
    original = (fake["source"] / "v1" / "core" / "kv_cache_utils.py").read_text()
    built = overlay.build([FIX], source=fake["source"], cache=fake["cache"])
    pkg = built.path / "vllm"
    patched = pkg / "v1" / "core" / "kv_cache_utils.py"
    assert "(num_blocks - 1)" in patched.read_text() and not patched.is_symlink()
    assert (fake["source"] / "v1" / "core" / "kv_cache_utils.py").read_text() == original
    assert (pkg / "v1" / "other.py").is_symlink() and (pkg / "__init__.py").is_symlink()
    assert not (pkg / "v1" / "core").is_symlink()  # a real directory on the way to the patch
    assert not (pkg / "v1" / "core" / "__pycache__").exists()  # no bytecode shared with the install
    assert built.fixes == (FIX,) and built.patches == (overlay.PATCHES[FIX],)


def test_build_is_cached_by_content(fake: dict[str, Path]) -> None:
    first = overlay.build([FIX], source=fake["source"], cache=fake["cache"])
    stamp = (first.path / "kvverify-overlay.json").stat().st_mtime_ns
    again = overlay.build([FIX, FIX], source=fake["source"], cache=fake["cache"])
    assert again.path == first.path
    assert (again.path / "kvverify-overlay.json").stat().st_mtime_ns == stamp  # reused, not rebuilt
    (fake["patches"] / overlay.PATCHES[FIX]).write_text(PATCH.replace("(num_blocks - 1)", "(num_blocks - 2)"))
    other = overlay.build([FIX], source=fake["source"], cache=fake["cache"])
    assert other.path != first.path  # another patch, another overlay
    assert not [p for p in fake["cache"].iterdir() if p.name.startswith(".build-")]


def _build_in_child(source: str, cache: str, patches: str, out: "multiprocessing.Queue[str]") -> None:
    os.environ["KVVERIFY_PATCHES_DIR"] = patches
    out.put(str(overlay.build([FIX], source=Path(source), cache=Path(cache)).path))


def test_concurrent_builds_agree(fake: dict[str, Path]) -> None:
    """Two processes (like ``pytest -n 2`` workers) building at once get one valid overlay."""
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[str] = ctx.Queue()
    args = (str(fake["source"]), str(fake["cache"]), str(fake["patches"]), out)
    procs = [ctx.Process(target=_build_in_child, args=args) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    paths = {out.get(timeout=5) for _ in procs}
    assert len(paths) == 1
    built = Path(paths.pop())
    assert "(num_blocks - 1)" in (built / "vllm" / "v1" / "core" / "kv_cache_utils.py").read_text()
    assert [p.name for p in fake["cache"].iterdir()] == [built.name]


def test_a_patch_that_does_not_apply_is_refused_and_leaves_nothing(fake: dict[str, Path]) -> None:
    (fake["source"] / "v1" / "core" / "kv_cache_utils.py").write_text("def something_else():\n    pass\n")
    with pytest.raises(KVVerifyError, match="does not apply"):
        overlay.build([FIX], source=fake["source"], cache=fake["cache"])
    assert list(fake["cache"].iterdir()) == []


def test_unknown_or_unpatched_fix_is_a_clear_error(fake: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="unknown fix"):
        overlay.build(["no_such_fix"], source=fake["source"], cache=fake["cache"])
    (fake["patches"] / overlay.PATCHES[FIX]).unlink()
    with pytest.raises(KVVerifyError, match="missing"):
        overlay.build([FIX], source=fake["source"], cache=fake["cache"])


def test_activate_puts_the_overlay_first(fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("KVVERIFY_VLLM_OVERLAY", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        built = overlay.activate([FIX], source=fake["source"], cache=fake["cache"])
        assert overlay.active() == built.path
        assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(built.path)
        module = importlib.import_module("vllm.v1.core.kv_cache_utils")
        assert module.get_max_concurrency(2, 2) == 0.5  # the patched code runs
        assert overlay.activate([FIX], source=fake["source"], cache=fake["cache"]) == built  # idempotent
    finally:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]
        importlib.invalidate_caches()


def test_activate_refuses_once_vllm_is_imported(fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("KVVERIFY_VLLM_OVERLAY", raising=False)
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    with pytest.raises(KVVerifyError, match="already imported"):
        overlay.activate([FIX], source=fake["source"], cache=fake["cache"])


def test_every_finding_has_a_fix_a_patch_and_an_upstream_style_test() -> None:
    """The shipped patches: one per fix option, unified diffs against b/vllm/..., each with its
    regression test (no kvverify import: it must be sendable upstream as is)."""
    assert set(overlay.PATCHES) <= set(fixes.CATALOG)
    patches = overlay.patches_dir()
    assert sorted(p.name for p in patches.glob("F*.diff")) == sorted(overlay.PATCHES.values())
    findings = {p.stem for p in patches.parent.glob("F*.md")}
    assert {Path(d).stem for d in overlay.PATCHES.values()} <= findings
    for fix, name in overlay.PATCHES.items():
        assert fixes.CATALOG[fix].finding == Path(name).stem
        touched = overlay.touched_files(patches / name)
        assert all(t.startswith("vllm/") for t in touched)
        number, slug = Path(name).stem.split("-", 1)
        test = patches / f"test_{number}_{slug.replace('-', '_')}.py"
        assert test.is_file(), test
        assert "kvverify" not in test.read_text()


def test_findings_command_lists_patch_and_test_per_finding() -> None:
    from kvverify.cli.findings import finding_rows

    rows = {r.finding: r for r in finding_rows()}
    for fix, name in overlay.PATCHES.items():
        row = rows[name.split("-", 1)[0]]
        assert fix in row.fixes and row.patch == name and row.test is not None


def test_pytest_fix_option_validates_names() -> None:
    """``pytest --fix NAME``: an unknown fix is a usage error naming the known ones."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "pytest", "properties/test_plan.py", "--co", "-q",
                           "-p", "no:xdist", "--fix", "no_such_fix"],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "unknown fix" in done.stderr and "concurrency_counts_usable_blocks" in done.stderr
