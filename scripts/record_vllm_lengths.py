#!/usr/bin/env python
"""Record what the real, pinned vLLM 0.33.0 answers on max_model_len derivation and the startup traps.

    VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 /work/venvs/vllm-0.33.0/bin/python \\
        scripts/record_vllm_lengths.py [--out properties/data/vllm-0.33.0-lengths.json.gz] [--examples 1500]

Cases: every catalog model x (no length, -1, the derived length, one more, 10**7) x
VLLM_ALLOW_LONG_MAX_MODEL_LEN off / on; then ``--examples`` generated configs drawn
DETERMINISTICALLY (Hypothesis, ``derandomize=True``) from ``length_configs()`` and
``requested_lengths()`` — the live differential's strategies; then the trap rules
(``properties/test_traps.py``'s ``trap_cases``). Each record keeps the inputs and vLLM's answer as
``properties/test_differential_lengths.py::vllm_outcome`` and ``test_traps.py::vllm_trap`` give
them; ``properties/test_recorded_lengths.py`` replays them on kvverify, offline.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "properties")]

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvverify import catalog, golden  # noqa: E402
from kvverify.catalog import lengths  # noqa: E402
from kvverify.catalog_strategies import length_configs, requested_lengths  # noqa: E402
from kvverify.errors import ConfigError  # noqa: E402
from test_differential_lengths import CATALOG_LENGTHS, catalog_config, vllm_outcome  # noqa: E402
from test_recorded_lengths import CORPUS  # noqa: E402
from test_traps import trap_cases, vllm_trap  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=CORPUS)
    ap.add_argument("--examples", type=int, default=1500)
    ap.add_argument("--trap-examples", type=int, default=600)
    args = ap.parse_args()
    t0 = time.time()
    records: list[dict[str, Any]] = []
    for name in catalog.list_models():
        cfg = catalog_config(name)
        default = lengths.derive(lengths.length_config(cfg)).default
        for requested in CATALOG_LENGTHS:
            value = default if requested == "derived" else default + 1 if requested == "derived+1" else requested
            for allow in (False, True):
                records.append({"kind": "length", "source": f"catalog:{name}", "config": cfg, "requested": value,
                                "allow_long": allow, "vllm": list(vllm_outcome(cfg, value, allow))})

    @settings(max_examples=args.examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(cfg=length_configs(), data=st.data(), allow=st.booleans())
    def draw(cfg, data, allow) -> None:
        try:
            derived = lengths.derive(lengths.length_config(cfg)).default
        except ConfigError:
            derived = None
        requested = data.draw(requested_lengths(derived))
        records.append({"kind": "length", "source": "length_configs()", "config": cfg, "requested": requested,
                        "allow_long": allow, "vllm": list(vllm_outcome(cfg, requested, allow))})

    draw()

    @settings(max_examples=args.trap_examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(case=trap_cases())
    def traps(case) -> None:
        records.append({"kind": "trap", "source": "trap_cases()", "case": case, "vllm": vllm_trap(case)})

    traps()
    corpus = {"format_version": golden.FORMAT_VERSION, "vllm": "0.33.0", "records": [golden.encode(r) for r in records],
              "strategies": {"length": "length_configs(); requested_lengths(derived); allow: booleans()",
                             "trap": "test_traps.trap_cases()"}}
    golden.write_corpus(args.out, corpus)
    kinds = {k: sum(1 for r in records if r["kind"] == k) for k in ("length", "trap")}
    print(f"wrote {args.out}: {kinds} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
