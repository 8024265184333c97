"""Guarantee 2: the startup check agrees with the runtime pool's usable blocks.

For every block source (override, explicit KV memory, profiled memory):

* check passes => one max_model_len request, run alone on the runtime pool, completes
  (catches ``null_block_not_reserved`` #35541, ``override_ignored_in_check`` #27181);
* check fails on capacity => that request does not complete (the check is not
  needlessly strict). Judged where the worst case is one deterministic schedule (no
  recycling groups, no Mamba prefill checkpoint blocks); SWA / chunked bounds cover
  the worst chunk schedule by design (their slack: the lemmas, finding F5). Mamba
  ``align`` is judged: its ``2 + S`` is one block too many for a request whose computed
  tokens stay within one block (finding F9);
* auto-fit: the chosen length is servable and maximal (``L*`` passes, ``L* + 1`` does
  not, unless capped by the model's length) — ``autofit_ignores_null_block`` #48724,
  ``autofit_first_group_only`` #36030.
"""

from __future__ import annotations

from dataclasses import replace

from kvverify.reference.driver import WorkloadResult
from kvverify.invariants.base import Violation
from kvverify.reference.planner import StartupPlan
from kvverify.reference import kinds
from kvverify.reference.specs import MambaSpec, iter_layer_specs
from kvverify.targets.base import Target
from kvverify.reference.workloads import full_length_request


def _evidence(plan: StartupPlan, result: WorkloadResult | None = None) -> dict:
    ev = {"num_blocks": plan.num_blocks, "usable_blocks": plan.usable_blocks,
          "blocks_needed": plan.blocks_needed_per_request, "blocks_per_group": plan.blocks_per_group,
          "max_model_len": plan.vllm_config.max_model_len, "block_size": plan.vllm_config.block_size}
    if result is not None:
        ev.update(stall=result.stall_reason, error=result.error, steps=result.steps,
                  running=result.running, waiting=result.waiting, free_blocks=result.free_blocks,
                  preemptions=result.preemptions)
    return ev


def run_full_length(target: Target, plan: StartupPlan, num_outputs: int = 1) -> WorkloadResult:
    """Run one full-length request (prompt + outputs = max_model_len) alone."""
    length = plan.vllm_config.max_model_len
    outputs = max(1, min(num_outputs, length - 1))
    return target.run_workload(plan, [full_length_request(length, outputs)])


def has_recycling_groups(plan: StartupPlan) -> bool:
    return any(kinds.is_recycling(s) for g in plan.groups for s in iter_layer_specs(g.kv_cache_spec))


def has_schedule_dependent_bound(plan: StartupPlan) -> bool:
    """Whether the startup bound covers a worst case that one lone full-length request need
    not reach: recycling groups (SWA / chunked local: the window placed at the worst block
    offset), or Mamba groups in ``align`` mode with prefill checkpoint blocks (``P``: taken
    for a checkpoint inside a chunk, a schedule the reference does not model). Mamba
    ``align`` without them is judged: ``2 + S`` is one lone request's need once its computed
    tokens span two blocks, and one block too many below that (finding F9)."""
    if has_recycling_groups(plan):
        return True
    return plan.vllm_config.mamba_cache_mode == "align" and any(
        isinstance(s, MambaSpec) and s.num_prefill_checkpoint_blocks > 0
        for g in plan.groups for s in iter_layer_specs(g.kv_cache_spec))


def check_startup_vs_runtime(target: Target, plan: StartupPlan, num_outputs: int = 1,
                             check_strictness: bool = True) -> list[Violation]:
    """Check passes => the full-length request completes; refuses => it would not."""
    if not plan.groups or plan.vllm_config.max_model_len < 2:
        return []
    if plan.starts:
        result = run_full_length(target, plan, num_outputs)
        if not result.completed:
            return [Violation("startup.too_loose",
                              "startup check passed but a max_model_len request does not complete "
                              "on the runtime pool", _evidence(plan, result))]
        return []
    if not check_strictness or plan.num_blocks < 2 or has_schedule_dependent_bound(plan) \
            or plan.auto_fit_max_model_len is None and plan.vllm_config.auto_max_model_len:
        return []
    result = run_full_length(target, plan, 1)
    if result.completed:
        return [Violation("startup.needlessly_strict",
                          "startup check refused, yet a max_model_len request completes alone "
                          "on the runtime pool", _evidence(plan, result))]
    return []


def check_auto_fit(target: Target, plan: StartupPlan, kv_cache_specs, available_memory=None,
                   num_outputs: int = 1) -> list[Violation]:
    """Auto-fit picks a servable and maximal length (``max_model_len=-1``)."""
    config = plan.vllm_config
    if plan.auto_fit_max_model_len is None or not plan.groups:
        return []
    chosen = plan.auto_fit_max_model_len
    out: list[Violation] = []
    if not plan.starts:
        out.append(Violation("autofit.refused", f"auto-fit chose {chosen} but the check then refused",
                             _evidence(plan)))
        return out
    if chosen >= 2:
        result = run_full_length(target, plan, num_outputs)
        if not result.completed:
            out.append(Violation("autofit.not_servable",
                                 f"auto-fit chose max_model_len={chosen}, which does not complete",
                                 _evidence(plan, result)))
    cap = config.max_position_embeddings or chosen
    if chosen < cap:
        explicit = replace(config, max_model_len=chosen + 1, max_position_embeddings=None)
        bigger = target.plan(explicit, kv_cache_specs, available_memory)
        if bigger.starts:
            out.append(Violation("autofit.not_maximal",
                                 f"auto-fit chose {chosen} but {chosen + 1} also passes the check",
                                 _evidence(bigger)))
    return out
