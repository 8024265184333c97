"""The ``kvverify`` command line: ``check`` (JSON fields, exit codes, clear errors), ``--help``
of every command, ``fuzz`` writing a report, and the CI workflows (valid YAML, only
commands that exist)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from kvverify.cli import build_parser, main, parse_bytes
from kvverify.errors import KVVerifyError

ROOT = Path(__file__).resolve().parents[1]
CHECK_FIELDS = {"starts", "servable", "num_blocks", "usable_blocks", "blocks_needed_per_request",
                "blocks_per_group", "max_model_len", "max_concurrency", "error", "verdict"}

HF_CONFIG = {
    "_name_or_path": "acme/tiny-llama",
    "model_type": "llama",
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 4,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["check", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_check_catalog_model_starts_and_serves(capsys: pytest.CaptureFixture[str]) -> None:
    code, r = _check(capsys, "--model", "llama-3.1-8b", "--max-model-len", "8192", "--kv-cache-memory-bytes", "2GiB")
    assert code == 0
    assert CHECK_FIELDS <= set(r)
    # llama-3.1-8b: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes x 16 tokens = 2 MiB per block
    assert r["bytes_per_block"] == 2 * 2**20 and r["num_blocks"] == 1024 and r["usable_blocks"] == 1023
    assert r["blocks_needed_per_request"] == 512 and r["blocks_per_group"] == [512]
    assert r["starts"] and r["servable"] and r["error"] is None and r["max_model_len"] == 8192
    assert r["max_concurrency"] == 2.0 and r["concurrent_full_requests"] == 1
    assert [run["split"] for run in r["servable_runs"]] == ["prompt-heavy", "decode-heavy"]
    assert all(run["completed"] for run in r["servable_runs"])
    assert r["verdict"].startswith("OK")


def test_check_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--model", "gemma-3-27b", "--max-model-len", "4096", "--kv-cache-memory-bytes",
                 "4GiB"]) == 0
    out = capsys.readouterr().out
    for text in ("kvverify check", "num_blocks", "usable blocks", "blocks per request", "startup check",
                 "6 x 193 sliding_window + 256 full_attention", "max concurrency", "OK: starts"):
        assert text in out, text


def test_check_refusal_and_the_seed_hang_under_the_flaw(capsys: pytest.CaptureFixture[str]) -> None:
    seed = ["--model", "llama-3.1-8b", "--max-model-len", "512", "--num-gpu-blocks-override", "32"]
    code, r = _check(capsys, *seed)
    assert code == 1 and not r["starts"] and not r["servable"]
    assert r["blocks_needed_per_request"] == 32 and r["usable_blocks"] == 31
    assert r["error"] and r["suggested_max_model_len"] == 496 and r["verdict"].startswith("REFUSED")
    # #35541: with the null block not reserved, the check passes and the request hangs
    code, r = _check(capsys, *seed, "--flaw", "null_block_not_reserved")
    assert code == 1 and r["starts"] and not r["servable"] and r["flaws"] == ["null_block_not_reserved"]
    stalled = r["servable_runs"][-1]
    assert (stalled["stall"], stalled["running"], stalled["waiting"]) == ("head_of_line", 0, 1)
    assert r["verdict"].startswith("HANG") and r["max_concurrency"] == 1.0


def test_check_user_config_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_CONFIG))
    code, r = _check(capsys, "--config-json", str(path), "--max-model-len", "auto", "--kv-cache-memory-bytes",
                     "16MiB")
    assert code == 0 and r["model"] == "tiny-llama" and r["layers"] == {"full": 4}
    # 4 layers x 2 heads x 64 x 2 x 2 bytes x 16 tokens = 32 KiB per block -> 512 blocks, 511 usable
    assert r["bytes_per_block"] == 32 * 1024 and r["num_blocks"] == 512
    assert r["max_model_len_requested"] == "auto" and r["auto_fit_max_model_len"] == r["max_model_len"] == 4096
    # the directory works too, and a budget too small for 4096 tokens is refused (exit 1)
    code, r = _check(capsys, "--config-json", str(tmp_path), "--kv-cache-memory-bytes", "4MiB")
    assert code == 1 and not r["starts"] and r["suggested_max_model_len"] == 127 * 16


@pytest.mark.parametrize("args, message", [
    (["--config-json", "/nonexistent/config.json", "--kv-cache-memory-bytes", "1GiB"], "no such file"),
    (["--model", "no-such-model", "--kv-cache-memory-bytes", "1GiB"], "unknown catalog model"),
    (["--model", "llama-3.1-8b", "--kv-cache-memory-bytes=-5GiB"], "must be a positive number of bytes"),
    (["--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "-1"], "must be a positive number of bytes"),
    (["--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "20GQ"], "unknown unit 'GQ'"),
    (["--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "lots"], "must be a byte count"),
    (["--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "1GiB", "--max-model-len", "long"],
     "must be an integer or 'auto'"),
    (["--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "1GiB", "--block-size", "0"], "block_size=0"),
    (["--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "1GiB", "--gpu-memory-utilization", "1.5"],
     "must be in (0, 1]"),
    (["--model", "llama-3.1-8b"], "give a block source"),
    (["--kv-cache-memory-bytes", "1GiB"], "one of the arguments --model --config-json is required"),
    (["--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "1GiB", "--flaw", "nope"], "invalid choice"),
])
def test_check_bad_input_is_exit_2_with_a_clear_message(args: list[str], message: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_check_malformed_and_invalid_config_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"num_hidden_layers": 4,')
    assert main(["check", "--config-json", str(bad), "--kv-cache-memory-bytes", "1GiB"]) == 2
    err = capsys.readouterr().err
    assert "malformed JSON" in err and str(bad) in err
    bad.write_text(json.dumps({**HF_CONFIG, "num_key_value_heads": -2}))
    assert main(["check", "--config-json", str(bad), "--kv-cache-memory-bytes", "1GiB"]) == 2
    assert "num_key_value_heads=-2" in capsys.readouterr().err


@pytest.mark.parametrize("text, expected", [
    ("20GiB", 20 * 2**30), ("512MiB", 512 * 2**20), ("1.5GiB", 3 * 2**29), ("4096", 4096), ("1TiB", 2**40),
    ("20GB", 20 * 10**9), ("8KiB", 8192), ("2 GiB", 2 * 2**30), ("20G", 20 * 2**30), ("20g", 20 * 10**9),
])
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["0", "-1GiB", "1.5", "GiB", "3 parsecs", "nan"])
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(KVVerifyError):
        parse_bytes(text, "kv_cache_memory_bytes")


def _subcommands() -> list[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sorted(sub.choices)


def test_help_of_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    commands = _subcommands()
    assert {"check", "fuzz", "prove", "zoo", "replay", "report", "harness", "models"} <= set(commands)
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert "usage: kvverify" in top and "examples:" in top
    for cmd in commands:
        assert main([cmd, "--help"]) == 0, cmd
        assert f"usage: kvverify {cmd}" in capsys.readouterr().out


def test_unknown_command_and_option_are_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert main(["fuzz", "--seconds", "soon"]) == 2
    assert main(["fuzz", "--shard", "4/3", "--list"]) == 2
    assert "shard" in capsys.readouterr().err


def test_replay_of_a_missing_or_foreign_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "x.json").write_text("{}")
    assert main(["replay", str(tmp_path / "x.json")]) == 2
    assert "not a kvverify report" in capsys.readouterr().err


def test_zoo_list_and_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "--list", "--json"]) == 0
    flaws = json.loads(capsys.readouterr().out)
    assert any(f["name"] == "null_block_not_reserved" and "#35541" in f["upstream"] for f in flaws)
    assert main(["models", "--json"]) == 0
    assert "llama-3.1-8b" in {m["name"] for m in json.loads(capsys.readouterr().out)}


def test_fuzz_writes_a_report_for_a_flaw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # the dev profile's example database lands here, not in the repo
    code = main(["fuzz", "--seconds", "4", "--seed", "3", "--flaw", "null_block_not_reserved", "--no-progress",
                 "-k", "test_startup_check_passes_implies_servable", "--suite", str(ROOT / "properties"),
                 "--reports-dir", str(tmp_path / "reports"), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 1 and summary["failures"] >= 1 and summary["reports"]
    assert summary["flaws"] == ["null_block_not_reserved"] and summary["examples"] > 0
    report = json.loads(Path(summary["reports"][0]).read_text())
    assert report["run"]["found_by"] == "fuzz" and report["flaws"] == ["null_block_not_reserved"]
    assert main(["fuzz", "--list", "--suite", str(ROOT / "properties")]) == 0
    listing = capsys.readouterr().out
    assert "test_startup_refusal_is_necessary" in listing and "[xfail: known finding]" in listing


# --- the workflows -------------------------------------------------------------------------

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _run_lines(text: str) -> list[str]:
    """Shell commands of a ``run:`` block, continuation lines joined."""
    return [line.strip() for line in text.replace("\\\n", " ").splitlines() if line.strip()
            and not line.strip().startswith("#")]


def _placeholders(command: str) -> str:
    command = re.sub(r"\$\{\{[^}]*shard[^}]*\}\}", "1/2", command)  # a matrix shard is I/N
    command = re.sub(r"\$\{\{[^}]*\}\}", "1", command)
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "1", command)


def _check_command(command: str, where: str) -> None:
    words = shlex.split(_placeholders(command))
    for i, word in enumerate(words):
        if word in ("kvverify", ".venv/bin/kvverify"):
            args = [w for w in words[i + 1:] if w not in ("|", "&&", "||", ";")]
            stop = next((k for k, w in enumerate(args) if w.startswith((">", "2>", "&"))), len(args))
            args = args[:stop]
            try:
                build_parser().parse_args(args)
            except SystemExit as e:  # pragma: no cover - the failure message names the command
                raise AssertionError(f"{where}: `kvverify {' '.join(args)}` is not a valid command") from e
        if word == "bash" and i + 1 < len(words) and not words[i + 1].startswith("-"):
            assert (ROOT / words[i + 1]).is_file(), f"{where}: {words[i + 1]} does not exist"
        if word.startswith("scripts/") or word.startswith(".ci/"):
            assert (ROOT / word).is_file(), f"{where}: {word} does not exist"


def test_workflows_are_valid_yaml_and_name_only_real_commands() -> None:
    yaml = pytest.importorskip("yaml")
    names = {p.name for p in WORKFLOWS}
    assert {"ci.yml", "nightly.yml"} <= names
    for path in WORKFLOWS:
        doc = yaml.safe_load(path.read_text())
        triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as True
        assert doc["jobs"] and triggers, path.name
        for job_name, job in doc["jobs"].items():
            for step in job["steps"]:
                if "run" in step:
                    for command in _run_lines(step["run"]):
                        _check_command(command, f"{path.name}:{job_name}")
    nightly = yaml.safe_load((ROOT / ".github/workflows/nightly.yml").read_text())
    on = nightly.get("on", nightly.get(True))
    assert "schedule" in on and "workflow_dispatch" in on
    assert nightly["jobs"]["fuzz"]["strategy"]["matrix"]["shard"] and nightly["jobs"]["merge"]["needs"] == "fuzz"
    text = (ROOT / ".github/workflows/nightly.yml").read_text()
    assert "--profile nightly" in text and "actions/cache/restore" in text and "actions/cache/save" in text
    ci = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    assert any(step.get("run") == "bash .ci/run" for step in ci["jobs"]["test"]["steps"])


def test_nightly_script_names_only_real_commands() -> None:
    script = (ROOT / "scripts" / "nightly.sh").read_text()
    assert script.startswith("#!/usr/bin/env bash")
    commands = [line for line in _run_lines(script) if line.startswith('"$kv" ')]
    assert any(" fuzz --profile nightly " in c for c in commands) and any(" report" in c for c in commands)
    for line in commands:
        _check_command(line.replace('"$kv"', "kvverify"), "scripts/nightly.sh")
