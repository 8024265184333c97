"""SWA / chunked caps: blocks a request really holds never exceed the admission cap.

``max_admission_blocks_per_request`` is the startup bound and the runtime gate's cap
(PR #40946); if a request ever held more (after recycling), the pool sized by it could
run dry mid-request.
"""

from __future__ import annotations

from kvverify.invariants.base import Violation
from kvverify.reference import kinds


def check_held_within_caps(kv_cache_manager, vllm_config, step: int) -> list[Violation]:
    for gi, manager in enumerate(kv_cache_manager.coordinator.single_type_managers):
        spec = manager.kv_cache_spec
        cap = kinds.admission_cap(spec, vllm_config.max_in_flight_tokens, vllm_config.max_model_len)
        if cap is None:
            continue
        for rid, blocks in manager.req_to_blocks.items():
            held = sum(1 for b in blocks if not b.is_null)
            if held > cap:
                return [Violation("caps.held_exceeds_cap", "a request holds more blocks than the admission cap",
                                  {"group": gi, "kind": spec.kind, "request": rid, "held": held, "cap": cap,
                                   "step": step, "block_size": spec.block_size,
                                   "window_or_chunk": getattr(spec, "sliding_window", None)
                                   or getattr(spec, "attention_chunk_size", None),
                                   "max_in_flight_tokens": vllm_config.max_in_flight_tokens})]
    return []
