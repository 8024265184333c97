"""The cases issue 25 reported, each behaving as described now (one test each).

Lengths (as vLLM 0.33.0 derives them — where the issue expected otherwise, the engine wins: 0.33.0
takes YaRN's ``max_position_embeddings`` as already scaled, so Qwen2.5-14B's YaRN recipe keeps
32,768 and ``--max-model-len 131072`` needs ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``, as vLLM says),
messages that name what the user gave, and lengths that never run away.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvverify.cli import main

ROOT = Path(__file__).resolve().parents[1]
QWEN14 = str(ROOT / "docs" / "examples" / "qwen2.5-14b-yarn" / "config.json")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def check_json(capsys, *args: str) -> tuple[int, dict]:
    code, out, _ = run(capsys, "check", *args, "--json")
    return code, json.loads(out)


def test_a_budget_below_one_block_is_vllms_refusal(capsys) -> None:
    code, r = check_json(capsys, "--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "1MiB")
    assert code == 1 and r["headline"] == "REFUSED" and "No available memory" in r["error"]
    assert "num_gpu_blocks=" not in json.dumps(r)  # the old "num_gpu_blocks=0 is invalid"


def test_a_negative_profiled_budget_is_vllms_refusal(capsys) -> None:
    code, r = check_json(capsys, "--model", "llama-3.1-8b", "--gpu-memory-bytes", "10GiB",
                         "--non-kv-cache-memory-bytes", "20GiB")
    assert code == 1 and r["headline"] == "REFUSED" and "-" not in r["verdict"].split("usable block")[0][-12:]


def test_max_model_len_1_is_bad_input(capsys) -> None:
    code, _, err = run(capsys, "check", "--model", "llama-3.1-8b", "--max-model-len", "1",
                       "--kv-cache-memory-bytes", "20GiB")
    assert code == 2 and "must be >= 2" in err and "HANG" not in err


def test_singular_words(capsys) -> None:
    code, out, _ = run(capsys, "check", "--model", "llama-3.1-8b", "--max-model-len", "2",
                       "--kv-cache-memory-bytes", "20GiB")
    assert code == 0 and "1 prompt token + 1 output token, 1 step" in " ".join(out.split())
    assert "1 tokens" not in out and "1 steps" not in out


def test_a_refused_run_mentions_no_run_it_does_not_show(capsys) -> None:
    code, r = check_json(capsys, "--model", "llama-3.1-8b", "--max-model-len", "131072",
                         "--kv-cache-memory-bytes", "8GiB")
    assert code == 1 and [x["split"] for x in r["servable_runs"]] == ["prompt-heavy"]
    assert not any("decode-heavy" in n for n in r["notes"])


@pytest.mark.parametrize("args,field", [
    (["--block-size", "17", "--kv-cache-memory-bytes", "20GiB"], "block_size=17"),
    (["--gpu-memory-bytes", "80GiB"], "non_kv_cache_memory_bytes"),
    (["--kv-cache-memory-bytes", "20GiB", "--gpu-memory-utilization", "0.9"], "kv_cache_memory_bytes"),
    (["--gpu-memory-utilization", "0.9"], "gpu_memory_bytes"),
])
def test_what_was_silently_accepted_is_now_refused(capsys, args: list[str], field: str) -> None:
    code, _, err = run(capsys, "check", "--model", "llama-3.1-8b", "--max-model-len", "4096", *args)
    assert code == 2 and field in err and "Traceback" not in err


def test_fuzz_refuses_a_negative_budget(capsys) -> None:
    code, _, err = run(capsys, "fuzz", "--seconds", "-1")
    assert code == 2 and "seconds" in err


def test_kv_cache_dtype_in_the_table_and_the_json(capsys) -> None:
    code, r = check_json(capsys, "--model", "llama-3.1-8b", "--max-model-len", "4096", "--kv-cache-memory-bytes",
                         "8GiB", "--kv-cache-dtype", "fp8")
    assert r["kv_cache_dtype"] == "fp8" and r["bytes_per_block"] == 1 << 20
    code, out, _ = run(capsys, "check", "--model", "llama-3.1-8b", "--max-model-len", "4096",
                       "--kv-cache-memory-bytes", "8GiB", "--kv-cache-dtype", "fp8")
    assert "kv_cache_dtype" in out and "fp8" in out


def test_yarn_recipe_lengths_as_vllm_0_33_0(capsys, monkeypatch) -> None:
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    code, r = check_json(capsys, "--config-json", QWEN14, "--kv-cache-memory-bytes", "40GiB")
    assert r["max_model_len"] == 32768 and r["derived_max_model_len"]["value"] == 32768
    code, r = check_json(capsys, "--config-json", QWEN14, "--max-model-len", "131072", "--kv-cache-memory-bytes", "40GiB")
    assert code == 1 and r["headline"] == "REFUSED" and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in r["verdict"]
    assert any("yarn factor 4" in n for n in r["notes"])
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    code, r = check_json(capsys, "--config-json", QWEN14, "--max-model-len", "131072", "--kv-cache-memory-bytes", "40GiB")
    assert code == 0 and r["headline"] == "OK" and any("accepted because" in n for n in r["notes"])


def test_a_length_above_the_derived_one_is_not_ok(capsys, monkeypatch) -> None:
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    code, r = check_json(capsys, "--model", "mistral-7b-v0.1", "--max-model-len", "65536",
                         "--kv-cache-memory-bytes", "20GiB")
    assert code == 1 and not r["starts"] and r["startup_checks"][0]["check"] == "max_model_len"


@pytest.mark.parametrize("model,length", [("llama-3.1-8b", 10**11), ("falcon-mamba-7b", 10**11),
                                          ("llama-4-scout-17b-16e", 10**9)])
def test_huge_lengths_are_decided_not_run_away(capsys, monkeypatch, model: str, length: int) -> None:
    """Refusals at step 1, and (falcon-mamba states no length: any is taken) a whole run, decided
    by events: the process stays small (its peak is recorded by the benchmark, not asserted)."""
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    code, r = check_json(capsys, "--model", model, "--max-model-len", str(length), "--kv-cache-memory-bytes", "80GiB")
    assert code in (0, 1) and r["headline"] in ("OK", "REFUSED")


def test_a_late_chunked_prefill_off_is_a_hang(capsys, tmp_path: Path) -> None:
    """#55130: HRM-Text (prefix-LM attention) at 4,096 tokens with the default budget of 2,048."""
    cfg = {"architectures": ["HRMTextForCausalLM"], "model_type": "hrm_text", "num_hidden_layers": 16,
           "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
           "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, r = check_json(capsys, "--config-json", str(tmp_path), "--kv-cache-memory-bytes", "8GiB")
    assert code == 1 and r["headline"] == "HANG" and r["starts"]
    (trap,) = [t for t in r["traps"] if t["name"] == "token_budget"]
    assert trap["stage"] == "runtime" and not trap["passes"]
    code, r = check_json(capsys, "--config-json", str(tmp_path), "--kv-cache-memory-bytes", "8GiB",
                         "--max-num-batched-tokens", "4096")
    assert code == 0


def test_the_help_examples_do_what_they_say(capsys, monkeypatch) -> None:
    """Every worked example of ``check --help`` ends as its comment says (the traps, the length)."""
    import re
    import shlex

    from kvverify.cli.check import _EPILOG

    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    text = _EPILOG.split("examples:")[0].replace("\\\n", " ")
    commands = re.findall(r"kvverify (check [^\n#]+?)\s*(?:#\s*(\w+)[^\n]*)?\n", text)
    assert len(commands) == 4
    for command, said in commands:
        code, out, _ = run(capsys, *shlex.split(command))
        assert code == 1 and "REFUSED" in out and (not said or said in out), (command, out[-400:])


def test_a_run_the_event_model_declines_beyond_the_step_limit_is_undecided(capsys, monkeypatch) -> None:
    """F2's chunked-local livelock: the lone request would preempt itself, the event-based run hands
    it to the driver — which, past the step-by-step limit (lowered here), is not run: UNDECIDED, exit 1,
    a note that says why, and the same in the JSON (``completed: null``)."""
    import kvverify.check.runs as runs

    args = ["--config-json", str(ROOT / "docs" / "timelines" / "f2-chunked-local-config.json"), "--block-size", "32",
            "--max-model-len", "64", "--max-num-batched-tokens", "8", "--num-gpu-blocks-override", "2",
            "--no-enable-prefix-caching"]
    code, r = check_json(capsys, *args)
    assert code == 1 and r["headline"] == "HANG" and r["servable_runs"][0]["how"] == "step by step"
    monkeypatch.setattr(runs, "STEPWISE_MAX_TOKENS", 32)
    code, r = check_json(capsys, *args)
    assert code == 1 and r["headline"] == "UNDECIDED" and r["servable"] is None
    assert r["servable_runs"][0]["completed"] is None and r["servable_runs"][0]["stall"] == "preempted_alone"
    assert any("not simulated step by step" in n for n in r["notes"])
