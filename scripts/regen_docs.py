#!/usr/bin/env python
"""Regenerate the command outputs and measured tables that README.md and docs/ quote.

    .venv/bin/python scripts/regen_docs.py            # rewrite every marked block
    .venv/bin/python scripts/regen_docs.py --check    # exit 1 if a block is stale (what tests/test_docs_fresh.py asks)

A block is marked ``<!-- regen: NAME -->`` ... ``<!-- /regen -->``; NAME is a key of
:data:`EXAMPLES` (a ``kvverify`` command run in-process at 100 columns, shown as ``$ command``,
its output, ``exit N``) or of :data:`TABLES` (rendered from a committed measurement, e.g.
``docs/check-benchmark.json``, which ``python -m benchmarks.run --only check --doc-json`` writes).
An ``excerpt`` block (``<!-- regen-excerpt: NAME -->``) keeps the lines it shows, each of which
must still occur in the command's output. Volatile numbers (a run's ``seconds``) are normalised
when comparing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DOCS = ("README.md", "docs/cli.md", "docs/performance.md")
QWEN7 = "docs/examples/qwen2.5-7b-instruct/config.json"
QWEN14 = "docs/examples/qwen2.5-14b-yarn/config.json"

#: name -> (command line after ``kvverify``, extra environment)
EXAMPLES: dict[str, tuple[str, dict[str, str]]] = {
    "check-catalog": ("check --model llama-3.1-8b --kv-cache-memory-bytes 20GiB", {}),
    "check-hybrid": ("check --model gemma-3-27b --max-model-len 131072 --kv-cache-memory-bytes 8GiB", {}),
    "check-config-auto": (f"check --config-json {QWEN7} --max-model-len auto --gpu-memory-bytes 24GiB "
                          "--gpu-memory-utilization 0.9 --non-kv-cache-memory-bytes 17GiB", {}),
    "check-config-refused": (f"check --config-json {QWEN7} --gpu-memory-bytes 24GiB --gpu-memory-utilization 0.9 "
                             "--non-kv-cache-memory-bytes 20GiB", {}),
    "check-json": (f"check --config-json {QWEN7} --max-model-len 8192 --kv-cache-memory-bytes 1GiB --json", {}),
    "check-seed-hang": ("check --model llama-3.1-8b --max-model-len 512 --num-gpu-blocks-override 32 "
                        "--flaw null_block_not_reserved", {}),
    "check-long": ("check --model llama-4-scout-17b-16e --max-model-len 10000000 --num-gpu-blocks-override 2000000", {}),
    "length-yarn": (f"check --config-json {QWEN14} --max-model-len 131072 --kv-cache-memory-bytes 40GiB", {}),
    "length-yarn-allowed": (f"check --config-json {QWEN14} --max-model-len 131072 --kv-cache-memory-bytes 40GiB",
                            {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}),
    "trap-mamba": ("check --model qwen3-next-80b-a3b --max-model-len 262144 --gpu-memory-bytes 80GiB "
                   "--non-kv-cache-memory-bytes 65GiB", {}),
    "trap-budget": ("check --model llama-3.1-8b --max-model-len 8192 --kv-cache-memory-bytes 8GiB "
                    "--no-enable-chunked-prefill --max-num-batched-tokens 4096", {}),
    "trap-encoder": ("check --model gemma-3-27b --max-model-len 8192 --kv-cache-memory-bytes 8GiB "
                     "--max-num-batched-tokens 128", {}),
    "bad-input": ("check --config-json missing/config.json --kv-cache-memory-bytes 20GiB", {}),
    "bad-json": ("check --config-json docs/examples/broken/config.json --kv-cache-memory-bytes 20GiB", {}),
    "bad-bytes": ("check --model llama-3.1-8b --kv-cache-memory-bytes=-20GiB", {}),
    "bad-model": ("check --model llama-3.2-1b --kv-cache-memory-bytes 20GiB", {}),
    "bad-block": ("check --model llama-3.1-8b --block-size 17 --kv-cache-memory-bytes 20GiB", {}),
    "bad-plot": ("check --model llama-3.1-8b --kv-cache-memory-bytes 20GiB --plot check.png", {}),
}
TABLES: dict[str, Callable[[], str]] = {}


def _table(name: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    def register(fn: Callable[[], str]) -> Callable[[], str]:
        TABLES[name] = fn
        return fn
    return register


@_table("check-benchmark")
def _check_benchmark() -> str:
    from benchmarks.check import markdown
    return markdown(json.loads((ROOT / "docs" / "check-benchmark.json").read_text()))


def run_example(name: str) -> str:
    """``$ kvverify <command>``, the output (stdout then stderr) and ``exit N``."""
    from kvverify.cli import main

    command, env = EXAMPLES[name]
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (*env, "COLUMNS", "VLLM_ALLOW_LONG_MAX_MODEL_LEN")}
    os.environ.update({"COLUMNS": "100", **env})
    if "VLLM_ALLOW_LONG_MAX_MODEL_LEN" not in env:
        os.environ.pop("VLLM_ALLOW_LONG_MAX_MODEL_LEN", None)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(shlex.split(command))
    finally:
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    prefix = "".join(f"{k}={v} " for k, v in env.items())
    text = (out.getvalue() + err.getvalue()).rstrip("\n")
    text = re.sub(r"(?ms)^usage: .*?(?=^kvverify )", "", text)  # argparse's usage lines, trimmed
    return f"```text\n$ {prefix}kvverify {command}\n{text}\nexit {code}\n```"


def normalise(text: str) -> str:
    """Hide what changes from run to run: wall seconds."""
    text = re.sub(r'"seconds": [0-9.]+', '"seconds": S', text)
    return "\n".join(line.rstrip() for line in text.splitlines())


BLOCK = re.compile(r"<!-- regen(?P<excerpt>-excerpt)?: (?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /regen -->", re.S)


def blocks(doc: str) -> list[re.Match[str]]:
    return list(BLOCK.finditer((ROOT / doc).read_text()))


def fresh(name: str) -> str:
    return TABLES[name]() if name in TABLES else run_example(name)


def _squeeze(line: str) -> str:
    return " ".join(line.replace("│", " | ").split())


def excerpt_ok(shown: str, full: str) -> list[str]:
    """Lines of an excerpt block that do not occur in the full output (spacing aside; a shown
    line may stop where the output wraps it)."""
    have = [_squeeze(normalise(line)) for line in full.splitlines()]
    return [line for line in shown.splitlines() if line.strip() not in ("...", "…", "```", "```text")
            and not any(h.startswith(_squeeze(normalise(line))) for h in have)]


def regenerate(check: bool) -> list[str]:
    stale: list[str] = []
    for doc in DOCS:
        path = ROOT / doc
        text = path.read_text()
        out, pos = [], 0
        for m in BLOCK.finditer(text):
            name, body = m.group("name"), m.group("body")
            new = fresh(name)
            if m.group("excerpt"):
                missing = excerpt_ok(body.strip(), new)
                if missing:
                    stale.append(f"{doc}: excerpt {name}: no longer in the output: {missing[:3]}")
                replacement = body
            else:
                replacement = new.rstrip("\n") + "\n"
                if normalise(body) != normalise(replacement):
                    stale.append(f"{doc}: block {name} is stale")
            out.append(text[pos:m.start("body")] + replacement)
            pos = m.end("body")
        out.append(text[pos:])
        if not check:
            path.write_text("".join(out))
    return stale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="report stale blocks, change nothing")
    args = ap.parse_args()
    stale = regenerate(check=args.check)
    for s in stale:
        print(s)
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())
