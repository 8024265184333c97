"""Pool sizing: ``max_total_num_tokens`` as SGLang derives it at startup.

Mirrors ``model_executor/pool_configurator.py`` (``DefaultPoolConfigurator``): the
profiled count ``max(available_bytes, 0) // cell_size`` floored to whole pages, capped by
``--max-total-tokens`` (page-floored), and ``MemoryPoolConfig``'s refusal of a pool of
``<= 0`` tokens ("Not enough memory"). The allocator is then built with exactly this size
(:func:`build_allocator`), which is what ``test_sglang_pool_size_is_allocator_pool`` checks.
"""

from __future__ import annotations

from kvverify.errors import KVVerifyError
from kvverify.sglang import arith, flaws
from kvverify.sglang.allocator import BaseAllocator, PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from kvverify.sglang.config import SglangConfig


class SglangStartupError(KVVerifyError):
    """SGLang refuses to start (``MemoryPoolConfig``: "Not enough memory ...")."""


def check_server_args(config: SglangConfig) -> None:
    """The launch-time ``ServerArgs.check_server_args`` the reference models
    (``arg_groups/validation_hook.py``): ``chunked_prefill_size`` must be a multiple of
    ``page_size`` (else PrefillAdder would cut chunks shorter than a page to 0 tokens)."""
    if config.chunked_prefill_size is not None and config.chunked_prefill_size % config.page_size:
        raise SglangStartupError(f"chunked_prefill_size={config.chunked_prefill_size} must be divisible by "
                                 f"page_size={config.page_size}")


def resolve_max_total_num_tokens(config: SglangConfig) -> int:
    """The pool size in tokens the engine starts with (or :class:`SglangStartupError`).

    Flaw ``sglang_profiled_tokens_negative`` (#7691): the profiled count as SGLang computed it
    then, ``rest_memory * 2**30 // cell_size`` unclamped (Python floors a negative budget
    further down), and no refusal of a pool of ``<= 0`` tokens."""
    check_server_args(config)
    unchecked = flaws.is_on("sglang_profiled_tokens_negative")
    if config.max_total_num_tokens is not None:
        tokens = int(arith.floor_paged_tokens(config.max_total_num_tokens, config.page_size))
    else:
        assert config.available_bytes is not None and config.cell_size is not None  # validated
        tokens = (config.available_bytes // config.cell_size if unchecked else
                  int(arith.profiled_max_total_num_tokens(config.available_bytes, config.cell_size,
                                                          config.page_size)))
    if config.max_total_tokens is not None:
        tokens = int(arith.capped_max_total_num_tokens(tokens, config.max_total_tokens, config.page_size))
    if tokens <= 0 and not unchecked:
        raise SglangStartupError(f"Not enough memory: the KV pool would hold {tokens} tokens "
                                 f"(page_size={config.page_size}). Please try to increase --mem-fraction-static.")
    return tokens


def build_allocator(config: SglangConfig, max_total_num_tokens: int | None = None) -> BaseAllocator:
    """The token-to-KV allocator over the derived pool (``TokenToKVPoolAllocator`` for
    ``page_size == 1``, else ``PagedTokenToKVPoolAllocator``), as ``ModelRunner`` builds it."""
    size = resolve_max_total_num_tokens(config) if max_total_num_tokens is None else max_total_num_tokens
    if config.page_size == 1:
        return TokenToKVPoolAllocator(size)
    return PagedTokenToKVPoolAllocator(size, config.page_size)
