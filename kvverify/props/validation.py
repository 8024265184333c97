"""Bad input gets a clear ValueError naming the field — never a crash, a hang or a wrong plan.

Guards ``no_positive_validation`` (#43496, #43521, #43842: ZeroDivisionError / infinite
loop on ``block_size=0``, ``hash_block_size=0``, override 0).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event
from hypothesis import strategies as st

from kvverify.hypothesis_hooks import given
from kvverify.reference.config import VllmConfig
from kvverify.errors import KVVerifyError
from kvverify.invariants.base import Violation, assert_no_violations
from kvverify.props.recorder import recorded
from kvverify.strategies import StartupCase, startup_cases
from kvverify.reference.workloads import full_length_request
from kvverify.targets.base import Target

BAD_FIELDS = ("block_size", "num_gpu_blocks_override", "kv_cache_memory_bytes", "max_model_len",
              "max_num_batched_tokens", "prefix_match_unit", "max_num_seqs")


def _pipeline(target: Target, case: StartupCase, field: str, value: int) -> None:
    """Build the config with one bad field, then plan, resolve block sizes and serve."""
    kw = {f: getattr(case.vllm_config, f) for f in VllmConfig.__dataclass_fields__}
    kw[field] = value
    if field == "max_model_len":
        kw["max_position_embeddings"] = None
    specs = case.kv_cache_specs
    if field == "block_size":
        specs = tuple({n: replace(s, block_size=value) for n, s in w.items()} for w in specs)
    config = VllmConfig(**kw)
    plan = target.plan(config, specs, case.available_memory)
    if plan.groups:
        target.resolve_block_sizes(plan.kv_cache_config, plan.vllm_config)
    length = plan.vllm_config.max_model_len
    if plan.starts and length >= 2:
        target.run_workload(plan, [full_length_request(min(length, 64), 1)], max_steps=200)


@given(case=startup_cases(allow_auto=False, max_len=128, sources=("override", "memory")),
       field=st.sampled_from(BAD_FIELDS), value=st.one_of(st.sampled_from((0, -1)), st.integers(-2**40, 0)))
@recorded
def test_bad_input_is_a_clear_error(target: Target, case: StartupCase, field: str, value: int) -> None:
    """A non-positive field is refused with a ValueError naming it."""
    event(f"field={field}")
    try:
        _pipeline(target, case, field, value)
    except KVVerifyError as e:
        if field not in str(e) and not (field == "prefix_match_unit" and "hash_block_size" in str(e)):
            assert_no_violations([Violation("validation.unnamed_field",
                                            "the error does not name the bad field",
                                            {"field": field, "value": value, "message": str(e)[:200]})])
        return
    except Exception as e:  # noqa: BLE001 - any other exception is the violation itself
        assert_no_violations([Violation("validation.crash", f"{type(e).__name__} instead of a clear ValueError",
                                        {"field": field, "value": value, "error": str(e)[:200]})])
    assert_no_violations([Violation("validation.accepted", "a non-positive value was silently accepted",
                                    {"field": field, "value": value})])
