"""The subset of upstream's ``VllmConfig`` that decides KV-cache capacity and admission.

Flat and frozen: one object carries the cache, scheduler and model-length knobs
(upstream spreads them over ``CacheConfig``, ``SchedulerConfig`` and ``ModelConfig``).
Every field is validated on construction with an error naming it and its range.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvverify.errors import MAX_BLOCKS, MAX_BYTES, MAX_TOKENS, ConfigError
from kvverify.reference.validation import evolve, require_int

AUTO_MAX_MODEL_LEN = -1  # upstream's ``max_model_len=-1`` ("auto")
MAMBA_CACHE_MODES = ("none", "align")  # upstream's ``CacheConfig.mamba_cache_mode`` values
#: the integer fields checked by range, field -> (minimum, maximum): one table for kvverify's own
#: construction check and the engine's mirror of upstream's checks (``VllmConfig.check_int``)
INT_RANGES: dict[str, tuple[int, int]] = {
    "block_size": (1, MAX_TOKENS), "max_model_len": (1, MAX_TOKENS),
    "max_num_batched_tokens": (1, MAX_TOKENS), "max_num_seqs": (1, 2**31),
    "num_gpu_blocks_override": (1, MAX_BLOCKS), "kv_cache_memory_bytes": (1, MAX_BYTES),
    "prefix_match_unit": (1, MAX_TOKENS)}
#: the fields of :data:`INT_RANGES` that may be ``None`` (unset)
OPTIONAL_INTS = frozenset({"num_gpu_blocks_override", "kv_cache_memory_bytes", "prefix_match_unit"})


@dataclass(frozen=True, kw_only=True)
class VllmConfig:
    """Engine knobs. ``max_model_len=-1`` asks for auto-fit up to ``max_position_embeddings``.

    Block-count sources (first that is set wins for the *count*; the check always uses
    the effective capacity, as upstream does since PR #41069):
    ``num_gpu_blocks_override`` > ``kv_cache_memory_bytes`` > profiled memory
    (``gpu_memory_bytes * gpu_memory_utilization - non_kv_cache_memory_bytes``).
    """

    block_size: int = 16
    max_model_len: int = 2048
    max_position_embeddings: int | None = None
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    max_concurrent_batches: int = 1
    num_gpu_blocks_override: int | None = None
    kv_cache_memory_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.92
    non_kv_cache_memory_bytes: int = 0
    enable_prefix_caching: bool = True
    kv_connector: bool = False
    prefix_match_unit: int | None = None
    watermark: float = 0.0
    mamba_cache_mode: str = "none"
    disable_hybrid_kv_cache_manager: bool = False
    max_num_encoder_input_tokens: int | None = None
    num_lookahead_tokens: int = 0
    num_prefill_lookahead_tokens: int = 0
    #: upstream ``VllmConfig.num_speculative_tokens`` (a speculative config's draft tokens, e.g.
    #: MTP): the scheduler pads a new one-token decode to ``1 + n`` slots and reserves the
    #: blocks of a speculative step for async KV loads; the fake model runner accepts no draft
    num_speculative_tokens: int = 0
    #: upstream ``CacheConfig.prefix_cache_retention_interval``: 0 (default) keeps only the
    #: replay-boundary / shared-prefix checkpoints of SWA and Mamba groups, ``k > 0`` also
    #: one per ``k`` tokens, ``None`` caches densely
    prefix_cache_retention_interval: int | None = 0
    #: upstream ``SchedulerConfig.policy``: ``"fcfs"`` or ``"priority"``
    scheduling_policy: str = "fcfs"
    #: upstream ``SchedulerConfig.enable_chunked_prefill``: off, a prompt is scheduled whole or
    #: not at all (``SchedulerConfig.verify_max_model_len`` and the engine core's late hooks:
    #: :mod:`kvverify.reference.engine_core`)
    enable_chunked_prefill: bool = True

    def __post_init__(self) -> None:
        self.check_int("block_size")
        self.check_model_len()
        if self.max_position_embeddings is not None:
            require_int("max_position_embeddings", self.max_position_embeddings, minimum=1,
                        maximum=MAX_TOKENS)
        self.check_int("max_num_batched_tokens")
        self.check_int("max_num_seqs")
        require_int("max_concurrent_batches", self.max_concurrent_batches, minimum=1, maximum=64)
        self.check_int("num_gpu_blocks_override")
        self.check_int("kv_cache_memory_bytes")
        if self.gpu_memory_bytes is not None:
            require_int("gpu_memory_bytes", self.gpu_memory_bytes, minimum=1, maximum=MAX_BYTES)
        if not isinstance(self.gpu_memory_utilization, (int, float)) or isinstance(
                self.gpu_memory_utilization, bool) or not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError("gpu_memory_utilization", self.gpu_memory_utilization, "must be in (0, 1]")
        require_int("non_kv_cache_memory_bytes", self.non_kv_cache_memory_bytes, minimum=0, maximum=MAX_BYTES)
        for name in ("enable_prefix_caching", "kv_connector", "disable_hybrid_kv_cache_manager",
                     "enable_chunked_prefill"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be a bool")
        self.check_int("prefix_match_unit")
        if not isinstance(self.watermark, (int, float)) or isinstance(self.watermark, bool) \
                or not 0 <= self.watermark < 1:
            raise ConfigError("watermark", self.watermark, "must be in [0, 1)")
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise ConfigError("mamba_cache_mode", self.mamba_cache_mode, f"must be one of {MAMBA_CACHE_MODES}")
        if self.max_num_encoder_input_tokens is not None:
            require_int("max_num_encoder_input_tokens", self.max_num_encoder_input_tokens, minimum=1,
                        maximum=MAX_TOKENS)
        require_int("num_lookahead_tokens", self.num_lookahead_tokens, minimum=0, maximum=MAX_TOKENS)
        require_int("num_prefill_lookahead_tokens", self.num_prefill_lookahead_tokens, minimum=0,
                    maximum=MAX_TOKENS)
        require_int("num_speculative_tokens", self.num_speculative_tokens, minimum=0, maximum=MAX_TOKENS)
        if self.prefix_cache_retention_interval is not None:
            require_int("prefix_cache_retention_interval", self.prefix_cache_retention_interval,
                        minimum=0, maximum=MAX_TOKENS)
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ConfigError("scheduling_policy", self.scheduling_policy, "must be one of ('fcfs', 'priority')")

    def check_int(self, name: str, *, bounded_below: bool = True) -> None:
        """Field ``name`` of :data:`INT_RANGES` an integer in its range (``None`` passes for an
        optional one). ``bounded_below=False``: the type and the upper bound only, for a field the
        engine leaves unbounded below (finding F16). The one check, shared by kvverify's own
        construction check and the engine's mirror (:mod:`kvverify.reference.engine_validation`)."""
        value = getattr(self, name)
        if value is None and name in OPTIONAL_INTS:
            return
        low, high = INT_RANGES[name]
        require_int(name, value, minimum=low if bounded_below else None, maximum=high)

    def check_model_len(self) -> None:
        """``max_model_len`` a positive integer, or ``-1`` (auto) with ``max_position_embeddings``
        to fit under (upstream ``ModelConfig``'s check)."""
        if self.max_model_len != AUTO_MAX_MODEL_LEN:
            self.check_int("max_model_len")
        elif self.max_position_embeddings is None:
            raise ConfigError("max_position_embeddings", None,
                              "must be set (>= 1) when max_model_len is -1 (auto): it bounds auto-fit")

    @property
    def auto_max_model_len(self) -> bool:
        """``original_max_model_len == -1``: auto-fit the length at startup."""
        return self.max_model_len == AUTO_MAX_MODEL_LEN

    @property
    def planning_max_model_len(self) -> int:
        """The length planned for: the given one, or the auto-fit upper bound."""
        if self.auto_max_model_len:
            assert self.max_position_embeddings is not None
            return self.max_position_embeddings
        return self.max_model_len

    @property
    def max_in_flight_tokens(self) -> int:
        """``VllmConfig.max_in_flight_tokens``: ``max_concurrent_batches * max_num_batched_tokens``.

        Under the proposed fix for finding F4 the lookahead slots each step reserves count too.
        """
        from kvverify.reference import arith
        return arith.max_in_flight_tokens(self.max_concurrent_batches, self.max_num_batched_tokens,
                                          self.num_lookahead_tokens)

    @property
    def encoder_tokens(self) -> int:
        """``max_num_encoder_input_tokens`` (defaults to ``max_num_batched_tokens``)."""
        if self.max_num_encoder_input_tokens is None:
            return self.max_num_batched_tokens
        return self.max_num_encoder_input_tokens

    def profiled_memory_bytes(self) -> int | None:
        """Memory left for the KV cache after profiling, or ``None`` when not modelled."""
        if self.gpu_memory_bytes is None:
            return None
        return int(self.gpu_memory_bytes * self.gpu_memory_utilization) - self.non_kv_cache_memory_bytes

    def available_kv_cache_memory(self) -> int:
        """Bytes the planner divides into blocks: explicit KV memory, else profiled memory."""
        if self.kv_cache_memory_bytes is not None:
            return self.kv_cache_memory_bytes
        profiled = self.profiled_memory_bytes()
        if profiled is not None:
            return profiled
        if self.num_gpu_blocks_override is not None:
            return 0  # the override alone decides the count
        raise ConfigError("kv_cache_memory_bytes", None,
                          "one of kv_cache_memory_bytes, gpu_memory_bytes or num_gpu_blocks_override "
                          "must be set")

    def with_max_model_len(self, max_model_len: int) -> VllmConfig:
        """A copy planning for ``max_model_len`` (used by auto-fit and length searches); an
        unchecked copy (:func:`~kvverify.reference.validation.unchecked`) stays unchecked."""
        return evolve(self, max_model_len=max_model_len)
