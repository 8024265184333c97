"""Bad input gets a clear ValueError naming the field — never a crash, a hang or a wrong plan.

Guards ``no_positive_validation`` (#43496, #43521, #43842: ZeroDivisionError / infinite
loop on ``block_size=0``, ``hash_block_size=0``, override 0) and finding F16.

The bad value reaches the **engine's** validation, not kvverify's: kvverify's own config objects
refuse it on construction (for kvverify's users), so the config is built past them
(:func:`~kvverify.reference.validation.unchecked`) and the target decides, the reference through
its mirror of upstream's config checks, a real release through its own ``CacheConfig`` /
``SchedulerConfig`` and planner. A startup refusal counts as the engine's answer too, and must
name the field as well.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import traceback
from collections.abc import Iterator

from hypothesis import event, example
from hypothesis import strategies as st
from hypothesis.errors import UnsatisfiedAssumption

from kvverify.hypothesis_hooks import given
from kvverify.errors import KVVerifyError
from kvverify.invariants.base import Violation, assert_no_violations
from kvverify.props.recorder import recorded
from kvverify.reference.config import VllmConfig
from kvverify.reference.specs import FullAttentionSpec
from kvverify.reference.validation import unchecked
from kvverify.strategies import StartupCase, startup_cases
from kvverify.reference.workloads import full_length_request
from kvverify.targets.base import Target, TargetUnsupported

#: the fields the general property makes non-positive (``num_gpu_blocks_override`` has its own
#: property below: every supported release has finding F16 there, and its strict xfail must not
#: hide a crash on another field, e.g. ``block_size=0`` on a release before #43794)
BAD_FIELDS = ("block_size", "kv_cache_memory_bytes", "max_model_len",
              "max_num_batched_tokens", "prefix_match_unit", "max_num_seqs")
#: wall-clock seconds one bad input may take before it counts as a hang (an endless loop is
#: one of the defects guarded: #43521)
HANG_SECONDS = 120

BAD_VALUES = st.one_of(st.sampled_from((0, -1)), st.integers(-2**40, 0))


class _Hang(Exception):
    """Raised by :func:`_deadline` in the property's thread."""


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Raise :class:`_Hang` after ``seconds`` (``SIGALRM``; a no-op off the main thread)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def _alarm(signum: int, frame: object) -> None:
        raise _Hang(f"no answer after {seconds} s")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _pipeline(target: Target, case: StartupCase, field: str, value: int) -> str | None:
    """Plan, resolve block sizes and serve with one bad field, built past kvverify's validation;
    the engine's startup refusal (its message), or ``None`` if it started (and served)."""
    base = case.vllm_config
    if field == "max_model_len":
        base = unchecked(base, max_position_embeddings=None)
    config: VllmConfig = unchecked(base, **{field: value})
    specs = case.kv_cache_specs
    if field == "block_size":
        specs = tuple({n: unchecked(s, block_size=value) for n, s in w.items()} for w in specs)
    plan = target.plan(config, specs, case.available_memory)
    if not plan.starts:
        return plan.error or "startup refused"
    if plan.groups:
        target.resolve_block_sizes(plan.kv_cache_config, plan.vllm_config)
    length = plan.vllm_config.max_model_len
    if length >= 2:
        target.run_workload(plan, [full_length_request(min(length, 64), 1)], max_steps=200)
    return None


def _short(path: str) -> str:
    """``vllm/v1/core/kv_cache_utils.py`` for a file in a venv, ``kvverify/...`` for kvverify's own:
    where the crash was raised, the engine or the adapter, without the machine's paths."""
    for marker in ("site-packages/", "/kvverify/"):
        if marker in path:
            head = "" if marker == "site-packages/" else "kvverify/"
            return head + path.rsplit(marker, 1)[1]
    return path


def _names(field: str, message: str) -> bool:
    return field in message or (field == "prefix_match_unit" and "hash_block_size" in message)


def bad_input_violations(target: Target, case: StartupCase, field: str, value: int) -> list[Violation]:
    """What is wrong with the target's answer to ``field=value`` (empty: a clear error naming it)."""
    detail: dict[str, object] = {"field": field, "value": value}
    try:
        with _deadline(HANG_SECONDS):
            refusal = _pipeline(target, case, field, value)
    except _Hang as e:
        return [Violation("validation.hang", f"a non-positive {field} hangs the engine", {**detail, "error": str(e)})]
    except (KVVerifyError, ValueError) as e:  # kvverify's ConfigError, upstream's ValidationError
        if _names(field, str(e)):
            return []
        return [Violation("validation.unnamed_field", "the error does not name the bad field",
                          {**detail, "error": type(e).__name__, "message": str(e)[:200]})]
    except (UnsatisfiedAssumption, TargetUnsupported, ImportError):
        # the target cannot express this input (a knob the release lacks), or adapter drift
        # (DriftError, an ImportError): not the engine's answer, never a defect or a pass
        raise
    except Exception as e:  # noqa: BLE001 - any other exception is the violation itself
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return [Violation("validation.crash", f"{type(e).__name__} instead of a clear ValueError",
                          {**detail, "error": str(e)[:200], "where": f"{_short(frame.filename)}:{frame.lineno}"})]
    if refusal is not None:
        if _names(field, refusal):
            return []
        return [Violation("validation.unnamed_field", "the startup refusal does not name the bad field",
                          {**detail, "message": refusal[:200]})]
    return [Violation("validation.accepted", "a non-positive value was silently accepted", detail)]


@given(case=startup_cases(allow_auto=False, max_len=128, sources=("override", "memory")),
       field=st.sampled_from(BAD_FIELDS), value=BAD_VALUES)
@recorded
def test_bad_input_is_a_clear_error(target: Target, case: StartupCase, field: str, value: int) -> None:
    """A non-positive field is refused with a ValueError naming it, by the engine's own checks."""
    event(f"field={field}")
    assert_no_violations(bad_input_violations(target, case, field, value))


#: F16's minimal case: one full-attention layer of 16-token blocks, max_model_len 16, an override
#: (of 2 here; the property makes it ``value``)
F16_CASE = StartupCase(
    vllm_config=VllmConfig(block_size=16, max_model_len=16, max_num_batched_tokens=16, num_gpu_blocks_override=2),
    kv_cache_specs=({"layer.0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)},),
    source="override")


@given(case=startup_cases(allow_auto=False, max_len=128, sources=("override", "memory")), value=BAD_VALUES)
@example(case=F16_CASE, value=0)
@recorded
def test_bad_block_override_is_a_clear_error(target: Target, case: StartupCase, value: int) -> None:
    """A non-positive ``num_gpu_blocks_override`` is refused naming it (finding F16: 0.33.0's
    ``CacheConfig`` has no check, and its startup check blames ``gpu_memory_utilization``)."""
    assert_no_violations(bad_input_violations(target, case, "num_gpu_blocks_override", value))
