"""Properties that fail on the faithful reference — and on vLLM 0.33.0 — on the KV-transfer paths:
findings F10–F13 (``reports/findings/``), each a strict known failure with its fix option.

Each is the general liveness (or predictor == allocator) property drawn where the finding lives,
not a single case: the generators keep their boundary bias (a pool at the startup boundary,
prompts at block multiples +-1, the smallest prompt first).

* F10 — a fully cached prompt under speculative decoding whose padded step ``1 + S`` exceeds the
  token budget is never scheduled (``test_cached_prompt_is_scheduled_under_speculative_decoding``);
* F11 — an async load on a pool sized for one request is refused forever: the constant
  ``_spec_decode_step_blocks`` reservation (``test_async_load_is_admitted_on_a_pool_that_fits``);
* F12 — a one-token prompt fully held by the connector is loaded again and again
  (``test_fully_loaded_prompt_completes``);
* F13 — Mamba ``align``: the state block of connector-loaded tokens is not predicted
  (``test_loaded_mamba_state_is_predicted``).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume, note
from hypothesis import strategies as st

from kvverify.connector_strategies import connector_cases
from kvverify.hypothesis_hooks import given
from kvverify.invariants.base import assert_no_violations
from kvverify.props.connector import allocation_violations, completion_violations, pool_tokens
from kvverify.props.recorder import recorded
from kvverify.reference.connector import ConnectorScript, RequestScript
from kvverify.reference.driver import WorkloadSpec
from kvverify.strategies import StartupCase, lengths, startup_cases
from kvverify.targets.base import Capability, Target, require_capability

_SPEC = st.integers(1, 4)
_LOAD = st.sampled_from((1, 2, 0))


@given(case=startup_cases(allow_auto=False, max_len=128, workers=False, prefix_caching=True,
                          allow_mamba=False), spec=_SPEC, data=st.data())
@recorded
def test_cached_prompt_is_scheduled_under_speculative_decoding(target: Target, case: StartupCase, spec: int,
                                                               data) -> None:
    """A prompt sent again (every block but its last token cached) completes under speculative
    decoding whatever the token budget (a drafter without its own KV: no lookahead slots)."""
    require_capability(target, Capability.KV_CONNECTOR)  # the connector scheduler runs it (no connector)
    plan = target.plan(replace(case.vllm_config, num_speculative_tokens=spec), case.kv_cache_specs,
                       case.available_memory)
    cfg = plan.vllm_config
    assume(plan.starts and plan.groups and cfg.max_model_len >= 3)
    length = data.draw(lengths(cfg.block_size, low=2, high=cfg.max_model_len - 1), label="prompt_len")
    prompt = tuple(range(length))
    work = [WorkloadSpec("first", prompt, 1), WorkloadSpec("again", prompt, 1, arrival_step=4 * cfg.max_model_len)]
    note(f"budget={cfg.max_num_batched_tokens} spec={spec}")
    assert_no_violations(completion_violations(target, plan, work, None))


@given(case=connector_cases(drafter_slots=True, connector_off=False, batches=(1,)), data=st.data())
@recorded
def test_async_load_is_admitted_on_a_pool_that_fits(target: Target, case: StartupCase, data) -> None:
    """A lone full-length request whose prompt the connector holds (async load) completes on a
    pool the startup check sized for it (a drafter with its own KV: MTP-style)."""
    require_capability(target, Capability.KV_CONNECTOR)
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    cfg = plan.vllm_config
    assume(plan.starts and plan.groups and cfg.max_model_len >= 2)
    prompt_len = cfg.max_model_len - 1
    hit = data.draw(st.one_of(st.sampled_from((prompt_len, prompt_len - 1)),
                              lengths(cfg.block_size, low=1, high=prompt_len)), label="hit_tokens")
    script = ConnectorScript.of({"full": RequestScript(hit_tokens=hit, load_steps=data.draw(st.integers(1, 2)))})
    assert_no_violations(completion_violations(target, plan, [WorkloadSpec("full", tuple(range(prompt_len)), 1)],
                                               script))


@given(case=connector_cases(connector_off=False, speculative=False), data=st.data())
@recorded
def test_fully_loaded_prompt_completes(target: Target, case: StartupCase, data) -> None:
    """A prompt whose every token the connector holds (the smallest prompt first) completes."""
    require_capability(target, Capability.KV_CONNECTOR)
    plan = target.plan(case.vllm_config, case.kv_cache_specs, case.available_memory)
    cfg = plan.vllm_config
    assume(plan.starts and plan.groups and cfg.max_model_len >= 2)
    prompt_len = data.draw(st.one_of(st.just(1), lengths(cfg.block_size, low=1, high=cfg.max_model_len - 1)),
                           label="prompt_len")
    script = ConnectorScript.of({"r": RequestScript(hit_tokens=prompt_len, load_steps=data.draw(st.integers(1, 2)))})
    work = [WorkloadSpec("r", tuple(range(prompt_len)), data.draw(st.integers(1, cfg.max_model_len - prompt_len)))]
    assert_no_violations(completion_violations(target, plan, work, script))


@given(case=startup_cases(allow_auto=False, max_len=128, workers=False, prefix_caching=True, require_mamba=True),
       data=st.data())
@recorded
def test_loaded_mamba_state_is_predicted(target: Target, case: StartupCase, data) -> None:
    """Mamba ``align`` layouts (prefix caching on) with the connector: every allocation with
    connector-loaded tokens pulls what it predicted and no admitted step raises."""
    require_capability(target, Capability.KV_CONNECTOR)
    plan = target.plan(replace(case.vllm_config, kv_connector=True), case.kv_cache_specs, case.available_memory)
    cfg = plan.vllm_config
    assume(plan.starts and plan.groups and cfg.max_model_len >= 3)
    work = []
    scripts = {}
    for i in range(data.draw(st.integers(1, 3), label="requests")):
        prompt_len = data.draw(lengths(cfg.block_size, low=1, high=cfg.max_model_len - 1), label="prompt_len")
        rid = f"r{i}"
        work.append(WorkloadSpec(rid, tuple(range(1000 * i, 1000 * i + prompt_len)), 1))
        hit = data.draw(st.integers(0, prompt_len), label="hit_tokens")
        scripts[rid] = RequestScript(hit_tokens=hit, load_steps=data.draw(_LOAD))
    note(f"pool_tokens={pool_tokens(plan)}")
    assert_no_violations(allocation_violations(target, plan, work, ConnectorScript.of(scripts)))


__all__ = ["test_async_load_is_admitted_on_a_pool_that_fits", "test_cached_prompt_is_scheduled_under_speculative_decoding",
           "test_fully_loaded_prompt_completes", "test_loaded_mamba_state_is_predicted"]
