"""``SglangConfig``: the server arguments SGLang's capacity and admission code reads.

Names are SGLang's ``ServerArgs`` fields where one exists (``page_size``,
``context_length`` -> ``context_len``, ``max_total_tokens``, ``chunked_prefill_size``,
``max_prefill_tokens``, ``max_running_requests``, ``schedule_conservativeness`` is not
modelled). The pool comes from either a token count (``max_total_num_tokens``, what the
memory profile yields) or a byte budget (``available_bytes`` / ``cell_size``, the
profiling path of ``pool_configurator``). Every field is validated, a bad one is a
:class:`~kvverify.errors.ConfigError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvverify.errors import ConfigError, require_int

#: ``SGLANG_INIT_NEW_TOKEN_RATIO``, ``..._MIN_NEW_TOKEN_RATIO_FACTOR``, ``..._NEW_TOKEN_RATIO_DECAY_STEPS``
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
#: ``global_config.retract_decode_steps``: decode steps a retraction estimate leaves room for
RETRACT_DECODE_STEPS = 20
#: ``CLIP_MAX_NEW_TOKENS`` (``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``)
CLIP_MAX_NEW_TOKENS = 4096


@dataclass(frozen=True)
class SglangConfig:
    """One engine's capacity-relevant settings (single worker, no speculative tree, no SWA)."""

    page_size: int = 1
    context_len: int = 4096
    #: the pool in tokens; ``None``: derive it from ``available_bytes`` / ``cell_size``
    max_total_num_tokens: int | None = None
    available_bytes: int | None = None
    cell_size: int | None = None
    #: ``--max-total-tokens``: caps the derived pool
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = 8192
    max_prefill_tokens: int = 16384
    max_running_requests: int = 64
    #: tokens one decode step writes per request (1; ``num_draft_tokens`` under speculation)
    tokens_per_step: int = 1
    init_new_token_ratio: float = INIT_NEW_TOKEN_RATIO

    def __post_init__(self) -> None:
        require_int("page_size", self.page_size, minimum=1, maximum=1 << 16)
        require_int("context_len", self.context_len, minimum=2)
        require_int("max_prefill_tokens", self.max_prefill_tokens, minimum=1)
        require_int("max_running_requests", self.max_running_requests, minimum=1)
        require_int("tokens_per_step", self.tokens_per_step, minimum=1, maximum=64)
        if self.chunked_prefill_size is not None:
            require_int("chunked_prefill_size", self.chunked_prefill_size, minimum=1)
        if self.max_total_tokens is not None:
            require_int("max_total_tokens", self.max_total_tokens, minimum=1)
        if self.max_total_num_tokens is None:
            if self.available_bytes is None or self.cell_size is None:
                raise ConfigError("max_total_num_tokens", None,
                                  "give a pool in tokens, or available_bytes and cell_size to derive it")
            require_int("available_bytes", self.available_bytes)
            require_int("cell_size", self.cell_size, minimum=1)
        else:
            require_int("max_total_num_tokens", self.max_total_num_tokens, minimum=1)
        if not 0.0 < self.init_new_token_ratio <= 1.0:
            raise ConfigError("init_new_token_ratio", self.init_new_token_ratio, "must be in (0, 1]")

    @property
    def min_new_token_ratio(self) -> float:
        return min(self.init_new_token_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)

    @property
    def new_token_ratio_decay(self) -> float:
        return (self.init_new_token_ratio - self.min_new_token_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS

    def describe(self) -> str:
        pool = (f"C={self.max_total_num_tokens} pages={self.max_total_num_tokens // self.page_size}"
                if self.max_total_num_tokens is not None else f"bytes={self.available_bytes} cell={self.cell_size}")
        return (f"P={self.page_size} ctx={self.context_len} {pool} chunk={self.chunked_prefill_size} "
                f"k={self.tokens_per_step}")
