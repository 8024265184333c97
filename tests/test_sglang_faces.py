"""SGLang through the faces: the CLI (check, zoo, fuzz), the registry, the overlay, the stubs,
the release matrix's rendering — without an installed SGLang."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvverify.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_check_engine_sglang_finds_sg1_and_passes_under_its_fix(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["check", "--engine", "sglang", "--model", "llama-3.1-8b", "--num-gpu-blocks-override", "4",
            "--block-size", "16", "--max-model-len", "4096", "--json"]
    assert main(args) == 1
    hang = json.loads(capsys.readouterr().out)
    assert hang["starts"] and not hang["servable"] and hang["max_req_input_len"] == 58
    assert hang["run"]["verdict"] == "head_of_line"
    assert main([*args, "--fix", "sglang_input_bound_page_aware"]) == 0
    assert json.loads(capsys.readouterr().out)["max_req_input_len"] == 48


def test_check_engine_sglang_bad_input_names_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--engine", "sglang", "--model", "gemma-3-12b", "--num-gpu-blocks-override", "4"]) == 2
    assert "model" in capsys.readouterr().err
    assert main(["check", "--engine", "sglang", "--model", "llama-3.1-8b"]) == 2
    assert "kv_cache_memory_bytes" in capsys.readouterr().err


def test_zoo_lists_each_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "--list", "--json", "--engine", "sglang"]) == 0
    names = {f["name"] for f in json.loads(capsys.readouterr().out)}
    assert names and all(n.startswith("sglang_") for n in names)
    assert main(["zoo", "--list", "--json", "--engine", "vllm"]) == 0
    assert not any(f["name"].startswith("sglang_") for f in json.loads(capsys.readouterr().out))


def test_fuzz_gives_each_engine_its_own_target() -> None:
    from kvverify.cli.fuzz import _engine_targets, discover_properties
    props = discover_properties("properties")
    kept, targets = _engine_targets(props, "reference")
    assert set(targets) == {"vllm", "sglang"} and targets["sglang"].name == "sglang-reference"
    assert not any(p.module == "kvverify.sglang.differential" for p in kept)
    kept, targets = _engine_targets(props, "sglang-reference")
    assert set(targets) == {"sglang"} and kept and all(p.module.startswith("kvverify.sglang.") for p in kept)


def test_registry_names_each_targets_engine() -> None:
    from kvverify.engines import ENGINES
    from kvverify.errors import ConfigError
    from kvverify.targets import TARGETS, engine_of, get_sglang_target, get_target, reference_of, targets_for
    assert engine_of("vllm") == "vllm" and engine_of("sglang") == "sglang"
    assert {e.engine for e in TARGETS.values()} == set(ENGINES)
    assert all(sum(e.reference for e in TARGETS.values() if e.engine == eng) == 1 for eng in ENGINES)
    with pytest.raises(ConfigError):
        engine_of("tgi")
    assert get_sglang_target(reference_of("sglang")).name == "sglang-reference"
    assert targets_for("reference") == {"vllm": "reference", "sglang": "sglang-reference"}
    assert targets_for("sglang") == {"sglang": "sglang"} and targets_for("vllm") == {"vllm": "vllm"}
    with pytest.raises(ConfigError, match="offers SGLang's contract, not vLLM's"):
        get_target("sglang-reference")
    with pytest.raises(ConfigError, match="offers vLLM's contract, not SGLang's"):
        get_sglang_target("reference")


def test_sglang_patch_touches_sglang_only() -> None:
    from kvverify.sglang import fixes
    from kvverify.targets.sglang import overlay
    for fix in fixes.CATALOG:
        assert overlay.touched_files(overlay.patch_for(fix)) == ["sglang/srt/managers/tp_worker.py"]


def test_stubs_import_and_refuse_to_launch_kernels() -> None:
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import triton, triton.language as tl, torchvision\n"
            "from triton.runtime.jit import JITFunction\n"
            "@triton.jit\ndef k(x): pass\n"
            "assert isinstance(k, JITFunction) and triton.cdiv(7, 2) == 4 and triton.next_power_of_2(5) == 8\n"
            "import triton.compiler.compiler\n"
            "try:\n    k[(1,)](0)\nexcept RuntimeError as e:\n    print('raised', e)\n") % str(ROOT / "stubs" / "sglang-cpu")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "raised triton stub" in done.stdout


def test_release_rendering_from_stored_runs() -> None:
    from kvverify.sglang.releases import Failure, ReleaseRun, render_md, zoo_rows
    runs = [ReleaseRun("0.5.1", {"test_a": "failed", "test_b": "xfailed"},
                       [Failure("test_a", "r.json", "v", attributed=["sglang_retract_raises_last_request"],
                                replays={"0.5.1": 1, "0.5.2": 0}, first_pass="0.5.2")], 1.0),
            ReleaseRun("0.5.2", {"test_a": "passed", "test_b": "xfailed"}, [], 1.0)]
    md = render_md(runs)
    assert "| `test_a` | failed | passed |" in md and "known finding" in md
    rows = {r[0]: r[2] for r in zoo_rows(runs)}
    assert rows["sglang_retract_raises_last_request"].startswith("0.5.1 (1 failures; first pass (exit 0) on 0.5.2)")
    assert rows["sglang_profiled_tokens_negative"] == "not found in the releases run"


def test_install_script_help_and_unknown_release() -> None:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "install-sglang-target.sh"), "--version", "9.9.9",
                           "/tmp/kvverify-no-such-venv"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "no lock for SGLang 9.9.9" in done.stderr


def test_check_plot_draws_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.svg"
    assert main(["check", "--engine", "sglang", "--model", "llama-3.1-8b", "--num-gpu-blocks-override", "4",
                 "--block-size", "16", "--max-model-len", "4096", "--plot", str(out)]) == 1
    svg = out.read_text()
    assert svg.startswith("<svg") and "head_of_line" in svg and "pool 64" in svg


def test_pytest_flaw_option_routes_sglang_flaws(tmp_path: Path) -> None:
    """``pytest --flaw sglang_...`` switches the SGLang flaw on (its own catalogue): the pool
    property then fails; without it, it passes."""
    base = [sys.executable, "-m", "pytest", "properties/test_sglang.py", "-q", "-p", "no:cacheprovider",
            "-k", "pool_size", "--hypothesis-profile=ci"]
    env = {**__import__("os").environ, "KVVERIFY_REPORTS_DIR": str(tmp_path / "reports")}
    flawed = subprocess.run([*base, "--flaw", "sglang_profiled_tokens_negative"], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=False)
    assert flawed.returncode == 1, flawed.stdout[-2000:]
    assert "sglang_pool_not_positive" in flawed.stdout or "sglang_pool" in flawed.stdout
    clean = subprocess.run(base, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert clean.returncode == 0, clean.stdout[-2000:]


def test_flaw_names_route_to_their_engine(capsys: pytest.CaptureFixture[str]) -> None:
    """``--flaw`` takes every engine's names (kvverify/engines.py); a command that runs one
    engine refuses another engine's flaw, naming it, instead of running unflawed."""
    base = ["check", "--model", "llama-3.1-8b", "--max-model-len", "512", "--num-gpu-blocks-override", "64"]
    assert main([*base, "--flaw", "sglang_retract_counts_tokens"]) == 2
    assert "sglang_retract_counts_tokens" in capsys.readouterr().err
    assert main([*base, "--flaw", "null_block_not_reserved", "--json"]) in (0, 1)
    capsys.readouterr()
    from kvverify import engines
    assert main(["zoo", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(engines.flaw_catalog())
    assert {r["engine"] for r in rows} == set(engines.ENGINES)
