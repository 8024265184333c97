"""Canonical workloads: the full-length request a startup check promises to serve.

A request of total length ``L`` (prompt + outputs = max_model_len) computes KV for
``L - 1`` tokens: the last sampled token is never fed back. Prompt-heavy and
decode-heavy splits stress different paths (chunked prefill vs decode growth).
"""

from __future__ import annotations

from kvverify.reference.driver import WorkloadSpec
from kvverify.reference.validation import require_int


def full_length_request(max_model_len: int, num_output_tokens: int = 1, *,
                        request_id: str = "full", arrival_step: int = 0,
                        token_offset: int = 0) -> WorkloadSpec:
    """One request with ``prompt + max_tokens == max_model_len`` (``max_tokens >= 1``)."""
    require_int("max_model_len", max_model_len, minimum=2)
    require_int("num_output_tokens", num_output_tokens, minimum=1, maximum=max_model_len - 1)
    prompt = tuple(token_offset + i for i in range(max_model_len - num_output_tokens))
    return WorkloadSpec(request_id, prompt, num_output_tokens, arrival_step)
