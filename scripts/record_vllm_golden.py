#!/usr/bin/env python
"""Record the offline differential corpus from the real, pinned vLLM 0.33.0.

    VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 /work/venvs/vllm-0.33.0/bin/python \\
        scripts/record_vllm_golden.py [--out properties/data/vllm-0.33.0-golden.json.gz] [--scale 1.0]

Cases are drawn DETERMINISTICALLY (Hypothesis, ``derandomize=True``, no database) from the
suite's own strategies — ``startup_cases``, ``wide_startup_cases``, ``block_size_cases``,
``workloads`` and the live differential's workload / SWA-prefix-caching generators — and run on
the vLLM target only; each record keeps the inputs and upstream's outputs as
``properties/test_recorded_differential.py``'s ``observe_*`` functions define them. Inputs the
target cannot express (``TargetUnsupported``) are skipped. While recording, upstream's
``format_gib`` prints exact bytes, so the numbers a startup-check refusal states (needed /
available memory) are recorded exactly. The file is written atomically (docs/recorded-differential.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "properties")]

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvverify import golden  # noqa: E402
from kvverify.connector_strategies import connector_cases, connector_workloads  # noqa: E402
from kvverify.strategies import block_size_cases, startup_cases, workloads  # noqa: E402
from kvverify.targets.base import TargetUnsupported  # noqa: E402
from test_differential import wide_startup_cases  # noqa: E402
from test_recorded_differential import (  # noqa: E402
    CORPUS,
    observe_block_sizes,
    observe_capacity,
    observe_connector_workload,
    observe_startup,
    observe_workload,
)

#: kind -> (examples at scale 1, the strategy as drawn, for the record)
PLAN: dict[str, tuple[int, str]] = {
    "startup": (420, "startup_cases(); num_tokens: one_of(just(L - 1), integers(1, L - 1))"),
    "wide": (160, "test_differential.wide_startup_cases(); num_tokens as startup"),
    "block_sizes": (220, "block_size_cases()"),
    "capacity": (160, "startup_cases(sources=('memory',), workers=False, max_len=512, allow_mamba=False); "
                      "auto: booleans() -> max_model_len=-1, max_position_embeddings=planning_max_model_len; "
                      "memory: the case's, or (1..4) x the layers' page sum + (0, 1, -1) (estimates of a block or two)"),
    "workload": (260, "startup_cases(allow_auto=False, max_len=256); lookahead: sampled_from((0, 0, 1, 3)); "
                      "max_num_seqs clamped to max_num_batched_tokens; workloads(L)"),
    "lookahead": (100, "startup_cases(lookahead=True) (num_lookahead_tokens / num_prefill_lookahead_tokens); "
                       "num_tokens as startup"),
    "mamba_workload": (120, "startup_cases(allow_auto=False, max_len=160, allow_mamba=True, prefix_caching=True, "
                            "sources=('override',), workers=False) with a Mamba layer; as swa_workload"),
    "swa_workload": (110, "startup_cases(allow_auto=False, max_len=160, kinds=('full', 'sliding_window'), "
                          "allow_mamba=True, prefix_caching=True, sources=('override',), workers=False); "
                          "workloads(L, max_requests=4, max_outputs=24) + optional resend of the first prompt"),
    "connector_workload": (180, "connector_strategies.connector_cases() (connector on / off, 1-2 batches in "
                                "flight, speculative padding), max_num_seqs clamped to max_num_batched_tokens; "
                                "connector_workloads(L, B, pool_tokens=(N - 1) // groups * B)"),
}


def exact_gib() -> None:
    """Have upstream's ``format_gib`` print exact bytes (its messages are otherwise rounded to 0.01 GiB)."""
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and module is not None and hasattr(module, "format_gib"):
            module.format_gib = lambda b: str(int(b))  # type: ignore[attr-defined]


def record(target: Any, scale: float) -> tuple[list[dict[str, Any]], Counter[str]]:
    records: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()

    def keep(kind: str, inputs: dict[str, Any], outputs: dict[str, Any] | None) -> None:
        if outputs is None:
            skipped[f"{kind}: not runnable"] += 1
            return
        records.append({"kind": kind, "inputs": golden.encode(inputs), "outputs": golden.encode(outputs)})

    def guarded(kind: str, fn: Any) -> None:
        try:
            fn()
        except TargetUnsupported:
            skipped[f"{kind}: TargetUnsupported"] += 1

    def run(kind: str, test: Any) -> None:
        n = max(1, round(PLAN[kind][0] * scale))
        before, t0 = len(records), time.monotonic()
        settings(derandomize=True, database=None, max_examples=n, deadline=None, phases=[Phase.generate],
                 suppress_health_check=list(HealthCheck))(test)()
        print(f"{kind}: {len(records) - before} records in {time.monotonic() - t0:.1f}s", file=sys.stderr)

    def tokens(data: Any) -> Any:
        return lambda length: data.draw(st.one_of(st.just(length - 1), st.integers(1, length - 1)),
                                        label="num_tokens")

    @given(case=startup_cases(), data=st.data())
    def rec_startup(case: Any, data: Any) -> None:
        guarded("startup", lambda: keep("startup", {"case": case}, observe_startup(target, case, tokens(data))))

    @given(case=wide_startup_cases(), data=st.data())
    def rec_wide(case: Any, data: Any) -> None:
        guarded("wide", lambda: keep("wide", {"case": case}, observe_startup(target, case, tokens(data))))

    @given(case=startup_cases(lookahead=True), data=st.data())
    def rec_lookahead(case: Any, data: Any) -> None:
        guarded("lookahead", lambda: keep("lookahead", {"case": case}, observe_startup(target, case, tokens(data))))

    @given(case=block_size_cases())
    def rec_block_sizes(case: Any) -> None:
        guarded("block_sizes", lambda: keep("block_sizes", {"case": case}, observe_block_sizes(target, case)))

    @given(case=startup_cases(sources=("memory",), workers=False, max_len=512, allow_mamba=False),
           auto=st.booleans(), data=st.data())
    def rec_capacity(case: Any, auto: bool, data: Any) -> None:
        config = case.vllm_config
        if auto:
            config = replace(config, max_model_len=-1, max_position_embeddings=config.planning_max_model_len)
        specs, memory = case.kv_cache_specs[0], config.kv_cache_memory_bytes
        if data.draw(st.booleans(), label="small_memory"):  # a block or two of every layer, +-1 byte
            pages = sum(s.page_size_bytes for s in specs.values())
            memory = max(0, pages * data.draw(st.integers(1, 4), label="blocks")
                         + data.draw(st.sampled_from((0, 1, -1)), label="delta"))
            config = replace(config, kv_cache_memory_bytes=memory)
        inputs = {"config": config, "specs": specs, "memory": memory}
        guarded("capacity", lambda: keep("capacity", inputs, observe_capacity(target, config, specs, memory)))

    @given(case=startup_cases(allow_auto=False, max_len=256), lookahead=st.sampled_from((0, 0, 1, 3)),
           data=st.data())
    def rec_workload(case: Any, lookahead: int, data: Any) -> None:
        config = case.vllm_config
        config = replace(config, max_num_seqs=min(config.max_num_seqs, config.max_num_batched_tokens),
                         num_lookahead_tokens=lookahead)
        case = replace(case, vllm_config=config)
        pick = lambda length: data.draw(workloads(length), label="workload")  # noqa: E731
        guarded("workload", lambda: keep("workload", {"case": case}, observe_workload(target, case, pick)))

    def prefix_caching_workload(kind: str, case: Any, data: Any) -> None:
        config = replace(case.vllm_config, max_num_seqs=min(case.vllm_config.max_num_seqs,
                                                             case.vllm_config.max_num_batched_tokens))
        case = replace(case, vllm_config=config)

        def pick(length: int) -> list[Any]:
            work = data.draw(workloads(length, max_requests=4, max_outputs=24), label="workload")
            if data.draw(st.booleans(), label="resend"):  # the same prompt again: a replay-boundary hit
                first = work[0]
                work = [*work, replace(first, request_id="again", arrival_step=first.arrival_step + data.draw(
                    st.integers(0, 12), label="resend_after"))]
            return work

        guarded(kind, lambda: keep(kind, {"case": case}, observe_workload(target, case, pick)))

    @given(case=startup_cases(allow_auto=False, max_len=160, kinds=("full", "sliding_window"), allow_mamba=True,
                              prefix_caching=True, sources=("override",), workers=False),
           data=st.data())
    def rec_swa(case: Any, data: Any) -> None:
        prefix_caching_workload("swa_workload", case, data)

    @given(case=startup_cases(allow_auto=False, max_len=160, allow_mamba=True, prefix_caching=True,
                              sources=("override",), workers=False).filter(lambda c: "mamba" in c.layer_kinds),
           data=st.data())
    def rec_mamba(case: Any, data: Any) -> None:
        prefix_caching_workload("mamba_workload", case, data)

    @given(case=connector_cases(), data=st.data())
    def rec_connector(case: Any, data: Any) -> None:
        config = replace(case.vllm_config, max_num_seqs=min(case.vllm_config.max_num_seqs,
                                                             case.vllm_config.max_num_batched_tokens))
        case = replace(case, vllm_config=config)

        def pick(length: int, block_size: int) -> tuple[Any, Any]:
            plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
            pool = (plan.num_blocks - 1) // max(1, len(plan.groups)) * block_size
            work, script = data.draw(connector_workloads(length, block_size, pool_tokens=pool), label="workload")
            return work, (script if config.kv_connector else None)

        guarded("connector_workload", lambda: keep("connector_workload", {"case": case},
                                                   observe_connector_workload(target, case, pick)))

    for kind, test in (("startup", rec_startup), ("wide", rec_wide), ("block_sizes", rec_block_sizes),
                       ("capacity", rec_capacity), ("workload", rec_workload), ("swa_workload", rec_swa),
                       ("lookahead", rec_lookahead), ("mamba_workload", rec_mamba),
                       ("connector_workload", rec_connector)):
        run(kind, test)
    return records, skipped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--out", type=Path, default=CORPUS)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every kind's example count")
    args = parser.parse_args()

    from kvverify.targets.vllm import REFERENCE_RELEASE, VllmTarget, vllm_available

    ok, why = vllm_available()
    if not ok:
        print(f"vLLM is not importable here: {why}", file=sys.stderr)
        return 2
    target = VllmTarget()
    if target.version != REFERENCE_RELEASE:
        print(f"the corpus records vLLM {REFERENCE_RELEASE} (the release the reference mirrors), found {target.version}",
              file=sys.stderr)
        return 2
    exact_gib()
    t0 = time.monotonic()
    records, skipped = record(target, args.scale)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    corpus = {
        "format_version": golden.FORMAT_VERSION,
        "vllm_version": target.version,
        "kvverify_commit": commit + ("+dirty" if dirty else ""),
        "strategies": {kind: {"max_examples": max(1, round(n * args.scale)), "drawn_from": how,
                              "settings": "derandomize=True, database=None, phases=[generate]"}
                       for kind, (n, how) in PLAN.items()},
        "notes": "format_gib patched to print exact bytes while recording; refusals: ('raises', class)",
        "skipped": dict(skipped),
        "records": records,
    }
    golden.write_corpus(args.out, corpus)
    counts = Counter(r["kind"] for r in records)
    print(f"wrote {len(records)} records {dict(counts)} to {args.out} ({args.out.stat().st_size} bytes) "
          f"in {time.monotonic() - t0:.0f}s; skipped {dict(skipped)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
