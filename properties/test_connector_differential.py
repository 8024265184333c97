"""Differential on the KV-transfer paths: the reference and vLLM 0.33.0 with the same scripted connector.

Both schedulers get the same deployment (:func:`kvverify.connector_strategies.connector_cases`:
connector on or off, one or two batches in flight, speculative padding), the same workload and
the same :class:`~kvverify.reference.connector.ConnectorScript`; the connector is the same state
machine on both sides (upstream builds it as a ``KVConnectorBase_V1`` through its factory).
They must make the same connector calls in the same order (``get_num_new_matched_tokens``
answers, ``update_state_after_alloc`` token counts, ``request_finished`` verdicts) and give the
same run: steps, preemptions, per-request finish step, stall verdict, error and the per-step
trace. Skipped, with the reason, without the pinned vLLM.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event
from hypothesis import strategies as st

from kvverify.connector_strategies import connector_cases, connector_workloads
from kvverify.hypothesis_hooks import given
from kvverify.invariants.base import assert_no_violations
from kvverify.props.recorder import recorded
from kvverify.strategies import StartupCase
from properties.test_differential import (  # noqa: F401  (vllm_target: the fixture)
    REFERENCE,
    _outcome,
    _pinned_release_only,
    diff_plans,
    diff_traces,
    diff_values,
    vllm_target,
)


def run_connector_traced(target: Any, plan: Any, workload: Any, script: Any) -> tuple[tuple[str, Any], list]:
    """Run through the connector scheduler: ``((outcome, (result, finish steps)), connector calls)``."""
    sched = target.connector_scheduler(plan, script)
    finish: dict[str, int] = {}

    def on_step(s: Any, step: int) -> None:
        for rid in s.finished:
            finish.setdefault(rid, step)

    out = _outcome(lambda: target.run_connector_workload(plan, workload, script, scheduler=sched, on_step=on_step))
    state = sched.connector_state
    calls = list(state.calls) if state is not None else []
    return ((out[0], (out[1], dict(sorted(finish.items())))) if out[0] == "ok" else out), calls


@given(case=connector_cases(), data=st.data())
@recorded
def test_reference_and_vllm_agree_on_connector_workloads(vllm_target, case: StartupCase, data) -> None:
    """Same deployment, workload and connector script -> the same connector calls and the same run."""
    _pinned_release_only(vllm_target)
    from dataclasses import replace

    config = replace(case.vllm_config,
                     max_num_seqs=min(case.vllm_config.max_num_seqs, case.vllm_config.max_num_batched_tokens))
    ref = REFERENCE.plan(config, case.kv_cache_specs, case.available_memory)
    if not ref.starts or not ref.groups or ref.num_blocks < 2 or ref.vllm_config.max_model_len < 2:
        return
    up = vllm_target.plan(config, case.kv_cache_specs, case.available_memory)
    assert_no_violations(diff_plans(ref, up))
    cfg = ref.vllm_config
    work, script = data.draw(connector_workloads(cfg.max_model_len, cfg.block_size), label="connector_workload")
    script = script if cfg.kv_connector else None
    a, calls_a = run_connector_traced(REFERENCE, ref, work, script)
    b, calls_b = run_connector_traced(vllm_target, up, work, script)
    event(f"connector={'on' if script else 'off'} batches={cfg.max_concurrent_batches} "
          f"spec={cfg.num_speculative_tokens}")
    if a[0] == "ok":
        event(f"completed={a[1][0].completed}; stall={a[1][0].stall_reason}")
    context = dict(num_blocks=ref.num_blocks, max_model_len=cfg.max_model_len,
                   groups=[(g.kv_cache_spec.kind, g.kv_cache_spec.block_size) for g in ref.groups])
    first = next((i for i, (x, y) in enumerate(zip(calls_a, calls_b)) if x != y), None)
    if first is not None or len(calls_a) != len(calls_b):
        i = first if first is not None else min(len(calls_a), len(calls_b))
        assert_no_violations(diff_values("connector.calls", calls_a[i:i + 3], calls_b[i:i + 3],
                                         first_differing_call=i, **context))
    assert_no_violations(diff_traces(a, b, **context))
