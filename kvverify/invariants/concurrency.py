"""Reported max concurrency >= 1 <=> one full request is servable.

Upstream (``get_max_concurrency_for_kv_cache_config``) divides ``N`` rather than the
usable ``N - 1`` blocks, so it logs 1.00x for a pool that cannot serve one request:
finding F1, fixed under ``fixes.enabled("concurrency_counts_usable_blocks")``.
"""

from __future__ import annotations

from kvverify.reference import arith
from kvverify.invariants.base import Violation
from kvverify.reference.planner import StartupPlan, get_max_concurrency_for_kv_cache_config


def check_concurrency(plan: StartupPlan) -> list[Violation]:
    cfg = plan.kv_cache_config
    if not cfg.kv_cache_groups:
        return []
    reported = get_max_concurrency_for_kv_cache_config(plan.vllm_config, cfg)
    needed = plan.blocks_needed_per_request
    servable = bool(arith.servable_alone(cfg.num_blocks, needed))
    if (reported >= 1.0) != servable:
        return [Violation("concurrency.reported_vs_servable",
                          "reported concurrency >= 1.00x disagrees with servability",
                          {"reported": round(reported, 4), "num_blocks": cfg.num_blocks,
                           "usable_blocks": cfg.num_blocks - 1, "blocks_per_request": needed,
                           "servable": servable})]
    return []
