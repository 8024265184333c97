"""Proposed fixes for the SGLang findings (``reports/findings/SG*.md``), as named switches.

Its own catalogue next to vLLM's (:mod:`kvverify.fixes`): the reference runs with the fix
option on, ``--target sglang`` with the finding's patch applied (an overlay, never the venv).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvverify.switches import Switches


@dataclass(frozen=True)
class SglangFix:
    name: str
    finding: str
    what: str
    patch: str  # reports/findings/patches/<file>


CATALOG: dict[str, SglangFix] = {f.name: f for f in (
    SglangFix("sglang_input_bound_page_aware", "SG1",
              "validate_input_length bounds the input by what PrefillAdder can admit on an empty "
              "pool: max_req_input_len <= max_total_num_tokens - page_size - 1 (the prefill charge "
              "is input + max_new + page_size < rem_total_tokens)",
              "sglang/SG1-sglang-input-bound-page-aware.patch"),
)}

_SWITCHES = Switches("fix", CATALOG)
check_name = _SWITCHES.check_name
is_on = _SWITCHES.is_on
active = _SWITCHES.active
enabled = _SWITCHES.enabled
only = _SWITCHES.only
set_global = _SWITCHES.set_global
