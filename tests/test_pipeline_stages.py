"""The pipeline-split property catches finding F15 and a planted half-fix of it.

* from a cold start (derandomized, no database, no explicit example) the property fails on the
  faithful reference, and the shrunk counterexample is F15's shape: a stage without KV cache
  layers next to one with them, planning raises ``ZeroDivisionError``;
* under the fix option it passes the same run, and that run does reach the fixed path: it
  starts and serves deployments with a stage that holds no KV cache layer (also stages of only
  layers without KV cache, and three stages with an empty one);
* the crash is not all the property checks: planted mutation "the fix's guards, but the KV-less
  worker's 1 block still wins the cross-worker minimum" starts with a pool of only the null
  block, and the property fails on it even under the fix (its servability half);
* under the fix, the alternative scheduling policies pass it (it runs the scheduler);
* directly: 0.33.0's reference raises on every such split (with and without
  ``num_gpu_blocks_override``), the fix plans every worker with the KV workers' block count.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import Phase, settings

from kvverify import fixes
from kvverify.hypothesis_hooks import rebuild
from kvverify.props import pipeline as pp
from kvverify.props.known import check_or_known
from kvverify.reference import planner
from kvverify.reference.scheduler import VARIANT_POLICIES, scheduling_policy_override
from kvverify.reference.specs import FullAttentionSpec
from kvverify.targets import get_target

FIX = "kv_less_stage_planned"
REFERENCE = get_target("reference")
COLD = settings(max_examples=200, derandomize=True, database=None, deadline=None,
                phases=[Phase.generate, Phase.shrink])


def _run(counts: Counter[str], failing: list[tuple[pp.PipelineCase, str]]) -> None:
    def inner(target, case: pp.PipelineCase, outputs: int) -> None:
        counts["examples"] += 1
        violations = pp.pipeline_violations(target, case, outputs)
        if violations:
            try:  # as the property judges it: another known finding's shape (F2's) is explained
                check_or_known(target, lambda t: pp.pipeline_violations(t, case, outputs))
            except AssertionError:
                failing.append((case, violations[0].name))
                raise
            counts["explained by a known finding"] += 1
            return
        if any(not s for s in case.stages):
            try:
                starts = target.plan(case.vllm_config, case.stages, case.available_memory).starts
            except ValueError:
                starts = False
            if starts:
                counts["started with a stage without KV cache layers"] += 1
                if any(layers and all(n is None for n in layers) for layers in case.stage_layers):
                    counts["started with a stage of only layers without KV cache"] += 1
                if len(case.partition) == 3:
                    counts["started with 3 stages, one empty"] += 1
    rebuild(pp.test_pipeline_split_plans_clearly_and_serves, inner=inner, settings=COLD)(target=REFERENCE)


def test_property_finds_F15_from_a_cold_start_and_passes_under_the_fix() -> None:
    counts: Counter[str] = Counter()
    failing: list[tuple[pp.PipelineCase, str]] = []
    with pytest.raises(AssertionError, match="planning raised ZeroDivisionError"):
        _run(counts, failing)
    shrunk, name = failing[-1]
    assert name == "pipeline.crash"
    assert any(not s for s in shrunk.stages) and any(shrunk.stages)
    assert len(shrunk.partition) == 2 and len(shrunk.startup.kv_cache_specs[0]) == 1
    counts.clear()
    failing.clear()
    with fixes.enabled(FIX):
        _run(counts, failing)  # passes
    assert not failing and counts["examples"] >= 150
    assert counts["started with a stage without KV cache layers"] >= 50, counts
    assert counts["started with a stage of only layers without KV cache"] > 0, counts
    assert counts["started with 3 stages, one empty"] > 0, counts


def test_planted_mutation_kv_less_worker_wins_the_minimum_is_caught(monkeypatch) -> None:
    """Mutation: the fix's guards, but ``min_num_blocks`` over every worker (upstream's minimum):
    the KV-less worker's 1 block wins, the check passed on the KV worker, and the pool holds
    only the null block. The property's servability half fails it, fix on."""
    def every_worker(configs, kv_groups):
        return min(c.num_blocks for c in configs)

    monkeypatch.setattr(planner, "min_num_blocks", every_worker)
    failing: list[tuple[pp.PipelineCase, str]] = []
    with fixes.enabled(FIX):
        with pytest.raises(AssertionError, match="does not complete"):
            _run(Counter(), failing)
        shrunk, name = failing[-1]
        plan = REFERENCE.plan(shrunk.vllm_config, shrunk.stages, shrunk.available_memory)
    assert name == "startup.too_loose" and any(not s for s in shrunk.stages)
    assert plan.starts and plan.num_blocks == 1


SPEC = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)


@pytest.mark.parametrize("stages", [({"l0": SPEC}, {}), ({}, {"l0": SPEC}), ({"l0": SPEC}, {}, {"l1": SPEC})],
                         ids=["1,0", "0,1", "1,0,1"])
@pytest.mark.parametrize("override", [None, 5])
def test_kv_less_stage_raises_on_0_33_0_and_is_planned_under_the_fix(stages, override) -> None:
    config = replace(pp.F15_CASE.vllm_config, max_model_len=64, num_gpu_blocks_override=override)
    with pytest.raises(ZeroDivisionError):
        REFERENCE.plan(config, stages)
    with fixes.enabled(FIX):
        plan = REFERENCE.plan(config, stages)
    expected = override if override is not None else config.kv_cache_memory_bytes // SPEC.page_size_bytes
    assert plan.starts and [c.num_blocks for c in plan.kv_cache_configs] == [expected] * len(stages)
    for spec, kv_config, memory, check in zip(stages, plan.kv_cache_configs, plan.available_memory,
                                              plan.check_memory):
        assert len(kv_config.kv_cache_groups) == len(plan.groups)  # the scheduler reads worker 0's
        if not spec:
            assert kv_config.kv_cache_tensors == () and memory == check == config.kv_cache_memory_bytes
    # the check still runs on the KV workers: a pool one block short of a request is refused
    tight = replace(config, num_gpu_blocks_override=4 if override else None,
                    kv_cache_memory_bytes=4 * SPEC.page_size_bytes)
    with fixes.enabled(FIX):
        assert not REFERENCE.plan(tight, stages).starts


def test_fix_leaves_plans_without_kv_less_stages_alone() -> None:
    """Every worker holding KV cache, or none (an attention-free model): the same plan, fix or not."""
    config = replace(pp.F15_CASE.vllm_config, max_model_len=64)
    for stages in (({"l0": SPEC}, {"l1": SPEC}), ({}, {}), ({"l0": SPEC},)):
        plain = REFERENCE.plan(config, stages)
        with fixes.enabled(FIX):
            assert REFERENCE.plan(config, stages) == plain


@pytest.mark.parametrize("policy", ["priority", *VARIANT_POLICIES])
def test_under_the_fix_the_property_passes_under_alternative_policies(policy: str) -> None:
    """It runs the scheduler, so, as ``tests/test_alternative_policies.py`` asks of every scheduler
    property, a live alternative policy passes it (under the fix: unfixed it is F15's xfail)."""
    with scheduling_policy_override(policy), fixes.enabled(FIX):
        pp.test_pipeline_split_plans_clearly_and_serves(target=REFERENCE)


def test_adapter_drift_is_not_a_pipeline_defect() -> None:
    """An adapter's DriftError (an ImportError) during planning propagates: it is never counted
    as the pipeline property's 'planning raised' violation."""
    from kvverify.props.pipeline import F15_CASE, pipeline_violations
    from kvverify.targets import get_target

    class Drifting:
        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(get_target("reference"), name)

        def plan(self, *a, **k):  # type: ignore[no-untyped-def]
            raise ImportError("vllm.v1.core.kv_cache_utils.get_kv_cache_configs: not found (drift)")

    with pytest.raises(ImportError, match="drift"):
        pipeline_violations(Drifting(), F15_CASE)  # type: ignore[arg-type]
