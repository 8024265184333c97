"""Release behaviours: upstream scheduling rules that changed between releases without being defects.

The reference mirrors the pin. Where an older release followed another rule that is not a
bug (so it is no bug-zoo flaw), the reference can follow the old rule too, as a named
switch here, off by default. It is used only to *attribute* a failure found on a release:
the failing example is replayed on the reference shaped like that release (the switches its
:class:`~kvverify.targets.vllm.compat.Compat` implies, :func:`for_compat`), so a pair of zoo
flaws that reproduces the release's schedule step for step under the release's rule is
named, instead of "explained by no zoo flaw" because the reference pads where the release
did not. Properties never run with these switches on by themselves: a counterexample report
records the switches of the target it was found on (``"behaviours"``) and its replay on the
reference applies them (:func:`kvverify.reports.replay.replay_report`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvverify.switches import Switches


@dataclass(frozen=True)
class Behaviour:
    """An old release's rule the reference can follow (``releases``: where upstream had it)."""

    name: str
    releases: str
    rule: str


CATALOG: dict[str, Behaviour] = {b.name: b for b in (
    Behaviour("no_spec_decode_padding", "<= 0.22",
              "the waiting scan never pads a new one-token decode to 1 + num_spec_tokens"),
    Behaviour("spec_pad_behind_running_only", "0.25 - 0.29",
              "the waiting scan pads a new one-token decode only when a running request was scheduled "
              "this step (``scheduled_running_reqs and not prefill_scheduled``); 0.31 also pads a "
              "request with computed tokens when nothing runs (a landed load, a resumed request)"),
    Behaviour("no_full_sequence_gate", "<= 0.18",
              "the waiting scan admits a request whose first chunk allocates: no full-sequence gate "
              "(``KVCacheManager.can_fit_full_sequence`` from 0.19, ``allocate_slots(full_sequence_must_fit)`` "
              "from 0.20)"),
)}

_SWITCHES = Switches("behaviour", CATALOG)
check_name = _SWITCHES.check_name
is_on = _SWITCHES.is_on  #: whether the reference follows old rule ``name`` in the current context
active = _SWITCHES.active
enabled = _SWITCHES.enabled
only = _SWITCHES.only  #: exactly these rules on (a replay shaped like one release)


def for_compat(caps: Any) -> frozenset[str]:
    """The rules a release follows, from its detected capabilities (a ``Compat``)."""
    rules: set[str] = set()
    if not caps.spec_decode_padding:
        rules.add("no_spec_decode_padding")
    elif not caps.spec_decode_padding_idle:
        rules.add("spec_pad_behind_running_only")
    if caps.admission_gate == "none":
        rules.add("no_full_sequence_gate")
    return frozenset(rules)
