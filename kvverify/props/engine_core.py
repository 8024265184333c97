"""A deployment that starts admits only requests it can complete, after *every* startup hook.

The engine core changes the scheduling policy while it starts (:mod:`kvverify.reference.engine_core`:
chunked prefill off for encoder-decoder models, non-causal attention layers, models without KV
cache groups), some of it after the token budget was checked. Guarantee 1 must hold for the
engine as it then runs: if it starts, every prompt it accepts (up to ``max_model_len - 1``
tokens, one left for the output) finishes. Finding F14 (vLLM 0.33.0, upstream PR #55130): the
late hooks skip the budget check, so a prompt above ``max_num_batched_tokens`` waits forever.
"""

from __future__ import annotations

from hypothesis import event, example

from kvverify.hypothesis_hooks import given
from kvverify.invariants.admission import check_started_engine_serves
from kvverify.invariants.base import Violation
from kvverify.props.known import assert_or_known
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec
from kvverify.reference.engine_core import has_non_causal_attention
from kvverify.reference.specs import FullAttentionSpec
from kvverify.strategies import EngineCoreCase, StartupCase, engine_core_cases
from kvverify.targets.base import Target
from kvverify.targets.reference import ReferenceTarget

REFERENCE = ReferenceTarget()

#: F14's shrunk counterexample (``tests/test_engine_core_startup.py`` finds it from a cold start):
#: one non-causal full-attention layer, chunked prefill on, B = 16, L = 16, a budget of 1 token and
#: 2 blocks; 0.33.0 starts it, and the longest prompt (15 tokens) is never scheduled
F14_CASE = EngineCoreCase(
    StartupCase(VllmConfig(block_size=16, max_model_len=16, max_num_batched_tokens=1, max_num_seqs=1,
                           num_gpu_blocks_override=2, enable_prefix_caching=False),
                ({"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, non_causal=True)},),
                "override"),
    "non_causal", None)


def late_hook(case: EngineCoreCase) -> str | None:
    """Which late hook turns chunked prefill off for this deployment, if one does."""
    if not case.vllm_config.enable_chunked_prefill:
        return None
    if has_non_causal_attention(case.kv_cache_specs):
        return "non_causal_attention"
    if not any(case.kv_cache_specs[0]):
        return "no_kv_cache_groups"
    return None


def engine_core_violations(case: EngineCoreCase, target: Target = REFERENCE) -> list[Violation]:
    """Start the engine as ``target``'s engine core does; if it starts, send the case's prompt."""
    plan = target.initialize_engine_core(case.vllm_config, case.kv_cache_specs)
    if not plan.starts:
        return []
    length = plan.vllm_config.max_model_len
    if length < 2:
        return []  # no prompt leaves room for an output token
    n = length - 1 if case.prompt_len is None else (case.prompt_len - 1) % (length - 1) + 1
    return check_started_engine_serves(target, plan, [WorkloadSpec("r0", tuple(range(n)), 1)],
                                       late=late_hook(case))


@given(case=engine_core_cases())
@example(case=F14_CASE)
def test_started_engine_admits_only_what_it_completes(target: Target, case: EngineCoreCase) -> None:
    """A started engine finishes every prompt it admits, whatever chunked prefill ends up as (F14)."""
    hook = late_hook(case)
    event(f"{case.attention}; chunked prefill {'on' if case.vllm_config.enable_chunked_prefill else 'off'}"
          + (f", turned off late ({hook})" if hook else ""))
    assert_or_known(target, lambda: engine_core_violations(case, target),
                    lambda: engine_core_violations(case, REFERENCE))
