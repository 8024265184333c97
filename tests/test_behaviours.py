"""Old release rules (kvverify/behaviours.py): the reference follows one only when told, a release's
capabilities name the rules it follows, and a report found on a release replays under them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvverify import behaviours
from kvverify.errors import ConfigError
from kvverify.targets import release_rules_of, replays_under_release_rules


def _f10_run():
    """F10's minimal case: a re-sent 17-token prompt (16 cached) decoded with 2 draft tokens on a
    token budget of 2, nothing else running: the pin pads it to 3 slots no step holds."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.driver import WorkloadSpec
    from kvverify.reference.specs import FullAttentionSpec
    from kvverify.targets import get_target

    t = get_target("reference")
    plan = t.plan(VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=2, num_speculative_tokens=2,
                             num_gpu_blocks_override=9, kv_cache_memory_bytes=1 << 24),
                  [{"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)}])
    prompt = tuple(range(17))
    return t.run_connector_workload(plan, [WorkloadSpec("a", prompt, 1), WorkloadSpec("b", prompt, 1, arrival_step=20)],
                                    None)


def test_the_pin_pads_an_idle_decode_and_older_rules_do_not() -> None:
    """The padding rule decides F10: the pin pads the idle one-token decode and stalls; 0.25-0.29's
    rule (pad only behind a scheduled running request) and <= 0.22's (never pad) finish it."""
    assert _f10_run().stall_reason == "head_of_line"  # the pin's rule: F10
    for rule in ("spec_pad_behind_running_only", "no_spec_decode_padding"):
        with behaviours.only(rule):
            result = _f10_run()
        assert result.stall_reason is None and result.finished == ("a", "b"), (rule, result.stall_reason)
    assert not behaviours.active()  # nothing leaks out of the block


def test_a_release_follows_the_rules_its_capabilities_imply() -> None:
    pin = SimpleNamespace(spec_decode_padding=True, spec_decode_padding_idle=True,
                          admission_gate="full_sequence_must_fit")
    mid = SimpleNamespace(spec_decode_padding=True, spec_decode_padding_idle=False,
                          admission_gate="full_sequence_must_fit")
    old = SimpleNamespace(spec_decode_padding=False, spec_decode_padding_idle=False,
                          admission_gate="can_fit_full_sequence")
    oldest = SimpleNamespace(spec_decode_padding=False, spec_decode_padding_idle=False, admission_gate="none")
    assert behaviours.for_compat(pin) == frozenset()
    assert behaviours.for_compat(mid) == {"spec_pad_behind_running_only"}
    assert behaviours.for_compat(old) == {"no_spec_decode_padding"}
    assert behaviours.for_compat(oldest) == {"no_spec_decode_padding", "no_full_sequence_gate"}
    for rules in map(behaviours.for_compat, (pin, mid, old, oldest)):
        assert set(rules) <= set(behaviours.CATALOG)


def test_without_the_full_sequence_gate_a_request_whose_first_chunk_fits_is_admitted() -> None:
    """<= 0.18 had no full-sequence gate: a 40-token prompt on 2 usable blocks of 16 is refused by
    the pin's gate (3 blocks) and admitted by the old rule (its first 16-token chunk allocates),
    which then stalls it: the old rule is a different schedule, not a fix."""
    from kvverify.reference.config import VllmConfig
    from kvverify.reference.driver import WorkloadSpec
    from kvverify.reference.specs import FullAttentionSpec
    from kvverify.targets import get_target

    t = get_target("reference")
    plan = t.plan(VllmConfig(block_size=16, max_model_len=64, max_num_batched_tokens=16, num_gpu_blocks_override=3),
                  [{"l0": FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)}])
    work = [WorkloadSpec("big", tuple(range(40)), 1)]
    pin = t.run_connector_workload(plan, work, None)
    assert pin.stall_reason == "head_of_line" and pin.trace[0][1] == 0  # never admitted
    with behaviours.only("no_full_sequence_gate"):
        old = t.run_connector_workload(plan, work, None)
    assert old.trace[0][1] == 1 and not old.completed  # admitted at step 1, then cannot grow


def test_a_target_without_rules_has_none() -> None:
    from kvverify.targets import get_target

    assert release_rules_of(get_target("reference")) == frozenset()
    assert release_rules_of(None) == frozenset()
    # another engine's target, or one the registry does not hold (a test's fake): none
    assert release_rules_of(SimpleNamespace(name="sglang", reference_behaviours=frozenset({"x"}))) == frozenset()
    assert release_rules_of(SimpleNamespace(name="fake", reference_behaviours=frozenset({"x"}))) == frozenset()
    release = SimpleNamespace(name="vllm", reference_behaviours=frozenset({"spec_pad_behind_running_only"}))
    assert release_rules_of(release) == {"spec_pad_behind_running_only"}
    assert replays_under_release_rules("reference") and not replays_under_release_rules("vllm")
    assert not replays_under_release_rules("sglang-reference")


def test_an_unknown_rule_is_an_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="behaviour"):
        behaviours.is_on("pad_everything")


def test_a_report_found_on_a_release_replays_under_its_rules(tmp_path) -> None:
    """A report records its target's rules (``"behaviours"``) and its replay on the reference applies
    them: F10's report, recorded as if found on a 0.29-shaped release, passes on the reference
    (0.29 does not pad the idle decode) and reproduces without the rule; a rule nobody knows is a
    ReportError naming it."""
    from kvverify import reports
    from kvverify.props import connector_findings as cf
    from kvverify.reports.common import ReportError

    found = _record_f10(tmp_path, cf)
    assert reports.replay_report(found, target="reference").reproduced
    shaped = dict(found, behaviours=["spec_pad_behind_running_only"])
    assert reports.replay_report(shaped, target="reference").status == "passes"
    with pytest.raises(ReportError, match="pad_everything"):
        reports.replay_report(dict(found, behaviours=["pad_everything"]), target="reference")


def _record_f10(tmp_path, cf):
    """F10's property run on the reference until it fails, its report read back."""
    import json

    from hypothesis import settings

    from kvverify.reports import capture
    from kvverify.targets import get_target

    prop = cf.test_cached_prompt_is_scheduled_under_speculative_decoding
    test = settings(max_examples=200, database=None, deadline=None, derandomize=True)(prop)
    with capture.instrument([test]) as sink:
        with pytest.raises(BaseException):
            test(target=get_target("reference"))
    assert sink.failures, "F10's property no longer fails on the reference"
    from kvverify.reports.build import build_report
    report = build_report(sink.failures[-1], found_by="test", directory=tmp_path)
    assert report["behaviours"] == []
    return json.loads(json.dumps(report))


def test_in_test_attribution_reruns_the_reference_under_the_release_rules() -> None:
    """``assert_or_known`` re-runs a release's failing case on the reference shaped like the release:
    the re-run sees the release's rules on, and the case still fails (the faithful, shaped
    reference passes it, so it is the release's own defect)."""
    from kvverify.invariants.base import Violation
    from kvverify.props.known import assert_or_known

    seen: list[frozenset[str]] = []

    def on_reference() -> list[Violation]:
        seen.append(behaviours.active())
        return []

    release = SimpleNamespace(name="vllm", reference_behaviours=frozenset({"spec_pad_behind_running_only"}),
                              lacks=lambda feature: "a release: no fix options")
    with pytest.raises(AssertionError, match="stall"):
        assert_or_known(release, lambda: [Violation("admission.stall.head_of_line", "stalled")], on_reference)
    assert seen == [frozenset({"spec_pad_behind_running_only"})]
    assert not behaviours.active()
