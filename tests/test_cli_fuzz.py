"""The command line, fuzzed: generated argv and mangled ``config.json`` files never crash it.

Every run must end with exit status 0, 1 or 2, print no traceback, and stay bounded: a
runaway guard (an alarm far above any honest run) and the process's peak memory. Inputs:
``check`` with catalog models or ``config.json`` files mangled from real shapes (truncated,
wrong types, huge and negative numbers, unknown keys, missing keys, NaN, deep nesting), flags
drawn around and far beyond their ranges (lengths up to 10**12, byte sizes with bad units,
output paths of every kind); ``replay`` of garbage; ``models``, ``zoo --list``.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import signal
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvverify import catalog
from kvverify.cli import main

RUNAWAY_SECONDS = 120
PEAK_RSS_LIMIT_MB = 3000

BASES: list[dict[str, Any]] = [
    {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
     "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
     "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                              "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
    {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584,
     "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "sliding_window": 4096,
     "max_position_embeddings": 8192},
    {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_hidden_layers": 48, "hidden_size": 5120,
     "num_attention_heads": 40, "num_key_value_heads": 8, "max_position_embeddings": 32768, "sliding_window": 131072,
     "use_sliding_window": False, "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768,
                                                   "type": "yarn"}},
    {"architectures": ["JambaForCausalLM"], "model_type": "jamba", "num_hidden_layers": 8, "hidden_size": 4096,
     "num_attention_heads": 32, "num_key_value_heads": 8, "attn_layer_period": 8, "attn_layer_offset": 4,
     "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "max_position_embeddings": 262144},
    {"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba", "num_hidden_layers": 64,
     "hidden_size": 4096, "state_size": 16, "conv_kernel": 4, "expand": 2},
    {"model_type": "gemma3", "vision_config": {"image_size": 896}, "mm_tokens_per_image": 256,
     "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 12, "hidden_size": 2560,
                     "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 1024,
                     "sliding_window_pattern": 6, "max_position_embeddings": 131072,
                     "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}},
]
WEIRD = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
                  st.text(max_size=8), st.lists(st.integers(-3, 3), max_size=3), st.just({"x": [1, {"y": None}]}),
                  st.sampled_from([0, -1, 1, 2**31, 2**63, 10**12, 1e30, "4096", "bfloat16", "sliding_attention"]))


@st.composite
def mangled_configs(draw) -> str:
    """A ``config.json`` text: a real shape with some keys replaced, dropped or added, sometimes
    truncated or not an object at all."""
    cfg = json.loads(json.dumps(draw(st.sampled_from(BASES))))
    target = cfg.get("text_config", cfg) if draw(st.booleans()) else cfg
    for _ in range(draw(st.sampled_from((0, 0, 1, 1, 2, 4)))):
        how = draw(st.sampled_from(("replace", "drop", "add", "nest")))
        keys = sorted(target)
        if how == "replace" and keys:
            target[draw(st.sampled_from(keys))] = draw(WEIRD)
        elif how == "drop" and keys:
            target.pop(draw(st.sampled_from(keys)))
        elif how == "add":
            target[draw(st.sampled_from(("layer_types", "n_positions", "seq_length", "model_max_length",
                                         "attention_chunk_size", "kv_lora_rank", "qk_rope_head_dim",
                                         "no_rope_layers", "full_attention_interval", "unknown_key")))] = draw(WEIRD)
        elif how == "nest" and "rope_scaling" in target and isinstance(target["rope_scaling"], dict):
            target["rope_scaling"][draw(st.sampled_from(("factor", "type", "rope_type", "original_max_position_embeddings")))] = draw(WEIRD)
    text = json.dumps(cfg, allow_nan=True)
    shape = draw(st.sampled_from(("whole",) * 6 + ("truncated", "array", "empty", "binary")))
    if shape == "truncated":
        return text[: draw(st.integers(0, max(0, len(text) - 1)))]
    if shape == "array":
        return json.dumps([cfg])
    if shape == "empty":
        return ""
    if shape == "binary":
        return "\x00\xff" + text
    return text


def _mostly(good: st.SearchStrategy[str], bad: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A valid value seven times in eight, else one far outside the range (or malformed)."""
    return st.one_of(*([good] * 7), bad)


SIZES = _mostly(st.sampled_from(["20GiB", "512MiB", "1.5GiB", "20G", "80GiB", "2TiB", "1MiB", "8GiB"]),
                st.one_of(st.sampled_from(["0", "-5GiB", "7XB", "nan", "inf", "1e40", "20g"]),
                          st.integers(-5, 2**60).map(str)))
LENGTHS = _mostly(st.sampled_from(["auto", "2", "17", "512", "4096", "131072", "131073", "10000000", "100000000",
                                   "1000000000000"]),
                  st.one_of(st.sampled_from(["-1", "0", "1", "x", "1e5"]), st.integers(-10, 10**12).map(str)))


@st.composite
def check_argvs(draw, config_path: str, out_dir: str) -> list[str]:
    argv = ["check"]
    if draw(st.booleans()):
        argv += ["--model", draw(_mostly(st.sampled_from(catalog.list_models()), st.just("no-such-model")))]
    else:
        argv += ["--config-json", config_path]
    source = draw(st.sampled_from(("memory", "override", "profiled", "none", "both")))
    if source in ("memory", "both"):
        argv += ["--kv-cache-memory-bytes", draw(SIZES)]
    if source == "override":
        argv += ["--num-gpu-blocks-override", draw(_mostly(st.integers(1, 10**8).map(str),
                                                            st.integers(-3, 0).map(str)))]
    if source in ("profiled", "both"):
        argv += ["--gpu-memory-bytes", draw(SIZES), "--non-kv-cache-memory-bytes",
                 draw(_mostly(st.sampled_from(["0", "8GiB", "16GiB", "60GiB"]), SIZES))]
    flags = {
        "--max-model-len": LENGTHS,
        "--block-size": _mostly(st.sampled_from(["16", "32", "64", "544"]), st.sampled_from(["17", "0", "-16", "x"])),
        "--gpu-memory-utilization": _mostly(st.sampled_from(["0.9", "0.5", "1"]), st.sampled_from(["0", "1.5", "x", "nan"])),
        "--max-num-batched-tokens": _mostly(st.sampled_from(["8", "128", "2048", "100000"]), st.sampled_from(["0", "x"])),
        "--max-num-seqs": _mostly(st.sampled_from(["1", "128", "1024"]), st.just("0")),
        "--kv-cache-dtype": _mostly(st.sampled_from(["auto", "fp8", "bfloat16"]), st.just("int3")),
        "--mamba-cache-mode": _mostly(st.sampled_from(["none", "align"]), st.just("other")),
        "--plot": st.sampled_from([f"{out_dir}/p.svg", f"{out_dir}/p.svg", f"{out_dir}/p.json", f"{out_dir}/p.png",
                                   f"{out_dir}", "/dev/null", f"{out_dir}/missing/p.svg", f"{out_dir}/link.svg"]),
        "--json": st.sampled_from([f"{out_dir}/r.json", f"{out_dir}/r.txt"]),
        "--flaw": _mostly(st.just("null_block_not_reserved"), st.just("no_such_flaw")),
    }
    for flag in draw(st.lists(st.sampled_from(sorted(flags)), max_size=4, unique=True)):
        argv += [flag, draw(flags[flag])]
    for switch in draw(st.lists(st.sampled_from(["--json", "--no-enable-prefix-caching",
                                                 "--no-enable-chunked-prefill", "--enforce-eager"]),
                                max_size=2, unique=True)):
        argv.append(switch)
    if "--json" in argv and draw(st.booleans()):
        argv.append("--trace")
    return argv


class Runaway(Exception):
    pass


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()

    def alarm(signum, frame):  # noqa: ANN001
        raise Runaway(f"{argv} ran past {RUNAWAY_SECONDS} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(RUNAWAY_SECONDS)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(text=mangled_configs(), data=st.data())
def test_the_cli_never_crashes(text: str, data) -> None:
    with tempfile.TemporaryDirectory() as where:
        config = Path(where) / "config.json"
        config.write_text(text, encoding="utf-8", errors="surrogateescape")
        (Path(where) / "link.svg").symlink_to(Path(where) / "victim")
        argv = data.draw(st.one_of(check_argvs(str(config), where),
                                   st.just(["replay", str(config)]), st.just(["models"]), st.just(["zoo", "--list"])),
                         label="argv")
        code, out, err = run_cli(argv)
        event(f"{argv[0]}: exit {code}")
        assert code in (0, 1, 2), (argv, code, err[-2000:])
        assert "Traceback" not in out + err, (argv, err[-3000:])
        if code == 2:
            assert "error:" in err, (argv, err[-500:])
        assert not (Path(where) / "victim").exists(), "wrote through a symlink"
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert peak_mb < PEAK_RSS_LIMIT_MB, f"peak memory {peak_mb:.0f} MB after {argv}"
