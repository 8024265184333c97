"""The engine-core startup property catches finding F14 and a planted mutation of the early check.

* from a cold start (derandomized, no database, no explicit example) the property fails on the
  faithful reference with a deployment whose chunked prefill a late hook turned off, and the
  shrunk counterexample is F14's (``kvverify.props.engine_core.F14_CASE``);
* under the fix option it passes the same run, and that run does reach the late hooks: it counts
  deployments the re-check refuses (both hooks: non-causal attention, no KV cache groups);
* the fix alone is not what the property checks: planted mutation "``verify_max_model_len`` forgets
  the chunked-prefill rule" fails it even under the fix (the user's ``--no-enable-chunked-prefill``);
* each hook directly: 0.33.0's reference starts and hangs, the fix refuses with the check's message.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import Phase, settings

from kvverify import fixes
from kvverify.hypothesis_hooks import rebuild
from kvverify.props import engine_core as ec
from kvverify.reference import engine_core
from kvverify.reference.driver import WorkloadSpec
from kvverify.strategies import EngineCoreCase

FIX = "budget_rechecked_after_late_chunked_prefill_off"
COLD = settings(max_examples=200, derandomize=True, database=None, deadline=None,
                phases=[Phase.generate, Phase.shrink])


def _run(counts: Counter[str], failing: list[EngineCoreCase]) -> None:
    def inner(case: EngineCoreCase) -> None:
        plan = engine_core.initialize_engine_core(case.vllm_config, case.kv_cache_specs)
        hook = ec.late_hook(case)
        counts["examples"] += 1
        if hook and not plan.starts and "max_model_len" in (plan.error or ""):
            counts[f"refused after {hook}"] += 1
        if ec.engine_core_violations(case):
            failing.append(case)
            raise AssertionError(case)
    rebuild(ec.test_started_engine_admits_only_what_it_completes, inner=inner, settings=COLD)()


def test_property_finds_F14_from_a_cold_start_and_passes_under_the_fix() -> None:
    counts: Counter[str] = Counter()
    failing: list[EngineCoreCase] = []
    with pytest.raises(AssertionError):
        _run(counts, failing)
    shrunk = failing[-1]
    assert ec.late_hook(shrunk) == "non_causal_attention"
    key = ("block_size", "max_model_len", "max_num_batched_tokens", "max_num_seqs",
           "enable_chunked_prefill")
    assert {k: getattr(shrunk.vllm_config, k) for k in key} == {k: getattr(ec.F14_CASE.vllm_config, k) for k in key}
    assert shrunk.kv_cache_specs[0].keys() and shrunk.prompt_len is None
    counts.clear()
    with fixes.enabled(FIX):
        _run(counts, failing)  # passes
    assert counts["examples"] >= 150
    assert counts["refused after non_causal_attention"] > 0, counts
    assert counts["refused after no_kv_cache_groups"] > 0, counts


def test_planted_mutation_early_check_without_chunked_rule_is_caught(monkeypatch) -> None:
    """Mutation: ``verify_max_model_len`` keeps only the ``max_num_seqs`` rule. The user's own
    ``enable_chunked_prefill=False`` then starts with a short budget and hangs, fix or not."""
    real = engine_core.verify_max_model_len

    def forgetful(config, max_model_len):
        return real(replace(config, enable_chunked_prefill=True), max_model_len)

    monkeypatch.setattr(engine_core, "verify_max_model_len", forgetful)
    failing: list[EngineCoreCase] = []
    with fixes.enabled(FIX), pytest.raises(AssertionError):
        _run(Counter(), failing)
    assert not failing[-1].vllm_config.enable_chunked_prefill  # turned off by the user, early


@pytest.mark.parametrize("attention", ["non_causal", "no_kv_cache"])
def test_each_late_hook_starts_and_hangs_on_0_33_0_and_is_refused_under_the_fix(attention) -> None:
    specs = ec.F14_CASE.kv_cache_specs if attention == "non_causal" else ({},)
    config = replace(ec.F14_CASE.vllm_config, max_model_len=64, max_num_batched_tokens=32,
                     num_gpu_blocks_override=8)
    plan = engine_core.initialize_engine_core(config, specs)
    assert plan.starts and not plan.vllm_config.enable_chunked_prefill
    short = ec.REFERENCE.run_workload(plan, [WorkloadSpec("r0", tuple(range(32)), 1)], keep_trace=False)
    long = ec.REFERENCE.run_workload(plan, [WorkloadSpec("r0", tuple(range(33)), 1)], keep_trace=False)
    assert short.completed and not long.completed and long.stall_reason == "head_of_line"
    with fixes.enabled(FIX):
        refused = engine_core.initialize_engine_core(config, specs)
    assert not refused.starts
    assert refused.error is not None and "max_num_batched_tokens (32) is smaller than max_model_len (64)" in refused.error
    # chunked prefill left on by the user: the late hook is the only way it goes off
    assert engine_core.initialize_engine_core(replace(config, max_num_batched_tokens=64), specs).starts


def test_kvverify_check_names_F14_and_refuses_under_its_fix(capsys, tmp_path) -> None:
    """HRM-Text (prefix LM) at 4,096 tokens with the default budget of 2,048: ``HANG`` whose note names
    F14; with ``--fix budget_rechecked_after_late_chunked_prefill_off`` the check says vLLM refuses."""
    import json

    from kvverify.cli import main

    cfg = {"architectures": ["HRMTextForCausalLM"], "model_type": "hrm_text", "num_hidden_layers": 16,
           "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
           "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    args = ["check", "--config-json", str(tmp_path), "--kv-cache-memory-bytes", "8GiB", "--json"]
    assert main(args) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["headline"] == "HANG"
    assert any("finding F14" in n for n in report["notes"]), report["notes"]
    assert main(args + ["--fix", FIX]) == 1
    report = json.loads(capsys.readouterr().out)
    (trap,) = [t for t in report["traps"] if t["name"] == "token_budget"]
    assert report["headline"] == "REFUSED" and not report["starts"] and not trap["passes"]
    assert "max_num_batched_tokens (2048) is smaller than max_model_len (4096)" in trap["message"]
