"""KV cache spec types (upstream: ``vllm/v1/kv_cache_interface.py``).

A spec says how many bytes one block of one layer takes (``page_size_bytes``) and
the most one request can ever hold (``max_memory_usage_bytes``). SWA and
chunked-local specs derive both the startup bound and the runtime admission cap
from one method, ``max_admission_blocks_per_request`` (PR #40946). All arithmetic
comes from :mod:`kvverify.reference.arith`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import ClassVar, Mapping

from kvverify import fixes
from kvverify.reference import arith
from kvverify.reference.dtypes import get_dtype_size
from kvverify.errors import MAX_BYTES, MAX_TOKENS, ConfigError
from kvverify.reference.validation import require_int
from kvverify.reference.config import MAMBA_CACHE_MODES, VllmConfig


@dataclass(frozen=True, kw_only=True)
class KVCacheSpec:
    """One layer's KV cache format. ``block_size`` is tokens per block."""

    block_size: int
    kind: ClassVar[str] = "base"

    def __post_init__(self) -> None:
        require_int(f"{type(self).__name__}.block_size", self.block_size,
                    minimum=1, maximum=MAX_TOKENS)

    @property
    def page_size_bytes(self) -> int:
        raise NotImplementedError

    @property
    def real_page_size_bytes(self) -> int:
        return self.page_size_bytes

    @property
    def prefix_cacheable(self) -> bool:
        return True

    def max_memory_usage_bytes(self, vllm_config: VllmConfig) -> int:
        raise NotImplementedError

    def max_blocks_per_request(self, vllm_config: VllmConfig) -> int:
        """The startup bound in blocks: ``cdiv(max_memory_usage_bytes, page_size_bytes)``."""
        return arith.pages_for_bytes(self.max_memory_usage_bytes(vllm_config), self.page_size_bytes)

    def copy_with_new_block_size(self, block_size: int) -> KVCacheSpec:
        return replace(self, block_size=block_size)

    @classmethod
    def uniform_type_base(cls) -> type[KVCacheSpec]:
        """Specs sharing this base may share one "uniform type" group (upstream registry)."""
        return cls

    def is_uniform_with_collection(self, specs: Mapping[str, KVCacheSpec]) -> bool:
        base = self.uniform_type_base()
        return all(isinstance(s, base) for s in specs.values())

    @classmethod
    def merge(cls, specs: list[KVCacheSpec]) -> KVCacheSpec:
        """Merge the specs of one group; they must all be equal."""
        if not all(s == specs[0] for s in specs[1:]):
            raise AssertionError("All layers in the same KV cache group must be the same.")
        return specs[0]


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    """Paged attention: page = ``B * H_kv * (D + D_v) * dtype_bytes`` (``D_v`` defaults to ``D``)."""

    num_kv_heads: int
    head_size: int
    dtype: str = "bfloat16"
    head_size_v: int | None = None
    page_size_padded: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        require_int(f"{name}.num_kv_heads", self.num_kv_heads, minimum=1, maximum=2**20)
        require_int(f"{name}.head_size", self.head_size, minimum=1, maximum=2**20)
        get_dtype_size(self.dtype, f"{name}.dtype")
        if self.head_size_v is None:
            object.__setattr__(self, "head_size_v", self.head_size)
        require_int(f"{name}.head_size_v", self.head_size_v, minimum=0, maximum=2**20)
        real = self.real_page_size_bytes
        if real > MAX_BYTES:
            raise ConfigError(f"{name}.page_size_bytes", real, f"must be <= {MAX_BYTES}")
        if self.page_size_padded is not None:
            require_int(f"{name}.page_size_padded", self.page_size_padded, minimum=real,
                        maximum=MAX_BYTES)

    @property
    def real_page_size_bytes(self) -> int:
        head_size_v = self.head_size if self.head_size_v is None else self.head_size_v  # set by __post_init__
        return self.block_size * self.num_kv_heads * (self.head_size + head_size_v) * get_dtype_size(self.dtype)

    @property
    def page_size_bytes(self) -> int:
        if self.page_size_padded is not None:
            return self.page_size_padded
        return self.real_page_size_bytes


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    """Full attention: a request of length ``L`` holds ``cdiv(L, B)`` blocks.

    With the hybrid manager disabled, SWA / chunked layers are promoted to this spec
    and keep their window only as a record (``sliding_window``, ``attention_chunk_size``).
    """

    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    kind: ClassVar[str] = "full_attention"

    @classmethod
    def uniform_type_base(cls) -> type[KVCacheSpec]:
        return FullAttentionSpec

    def max_memory_usage_bytes(self, vllm_config: VllmConfig) -> int:
        return arith.full_attention_blocks(vllm_config.max_model_len, self.block_size) * self.page_size_bytes

    @classmethod
    def merge(cls, specs: list[KVCacheSpec]) -> KVCacheSpec:
        """``FullAttentionSpec.merge``: equal attention fields; one window size at most."""
        if not all(type(s) is type(specs[0]) for s in specs):
            raise AssertionError("All layers in the same KV cache group must be the same type.")
        windows = {s.sliding_window for s in specs if s.sliding_window is not None}  # type: ignore[attr-defined]
        chunks = {s.attention_chunk_size for s in specs if s.attention_chunk_size is not None}  # type: ignore[attr-defined]
        if len(windows) > 1 or len(chunks) > 1:
            raise ValueError("All attention layers in the same KV cache group must have the same window size.")
        if windows and chunks:
            raise AssertionError("Model with both sliding window layers and chunked local attention layers is not supported.")
        base = specs[0]
        merged = replace(base, sliding_window=next(iter(windows), None),  # type: ignore[call-arg]
                         attention_chunk_size=next(iter(chunks), None))
        for s in specs:
            for f in fields(AttentionSpec):
                if getattr(s, f.name) != getattr(merged, f.name):
                    raise AssertionError("All attention layers in the same KV cache group must have the same attention spec.")
        return merged


@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    """Multi-head latent attention: one latent vector per token, no separate V."""

    head_size_v: int | None = 0
    kind: ClassVar[str] = "mla"


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    """Sliding-window attention with window ``W`` (tokens), recycled behind the window."""

    sliding_window: int
    extra_retained_tokens: int = 0
    kind: ClassVar[str] = "sliding_window"

    def __post_init__(self) -> None:
        super().__post_init__()
        require_int("SlidingWindowSpec.sliding_window", self.sliding_window, minimum=1, maximum=MAX_TOKENS)
        require_int("SlidingWindowSpec.extra_retained_tokens", self.extra_retained_tokens, minimum=0,
                    maximum=MAX_TOKENS)

    def is_uniform_with_collection(self, specs: Mapping[str, KVCacheSpec]) -> bool:
        return all(isinstance(s, SlidingWindowSpec) and s.sliding_window == self.sliding_window
                   for s in specs.values())

    def max_admission_blocks_per_request(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """Per-request admission cap: startup bound and runtime gate share it (PR #40946)."""
        return arith.sliding_window_admission_blocks(self.sliding_window, self.extra_retained_tokens,
                                                     max_in_flight_tokens, max_model_len, self.block_size)

    def max_memory_usage_bytes(self, vllm_config: VllmConfig) -> int:
        return self.max_admission_blocks_per_request(
            vllm_config.max_in_flight_tokens, vllm_config.max_model_len) * self.page_size_bytes


@dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    """Chunked local attention (Llama 4): attends within chunks of ``C`` tokens."""

    attention_chunk_size: int
    kind: ClassVar[str] = "chunked_local"

    def __post_init__(self) -> None:
        super().__post_init__()
        require_int("ChunkedLocalAttentionSpec.attention_chunk_size", self.attention_chunk_size,
                    minimum=1, maximum=MAX_TOKENS)

    def is_uniform_with_collection(self, specs: Mapping[str, KVCacheSpec]) -> bool:
        return all(isinstance(s, ChunkedLocalAttentionSpec)
                   and s.attention_chunk_size == self.attention_chunk_size for s in specs.values())

    def max_admission_blocks_per_request(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """Per-request admission cap: ``cdiv(min(C + F, L), B)`` (no ``+1``, as upstream)."""
        return arith.chunked_local_admission_blocks(self.attention_chunk_size, max_in_flight_tokens,
                                                    max_model_len, self.block_size)

    def max_memory_usage_bytes(self, vllm_config: VllmConfig) -> int:
        return self.max_admission_blocks_per_request(
            vllm_config.max_in_flight_tokens, vllm_config.max_model_len) * self.page_size_bytes


@dataclass(frozen=True, kw_only=True)
class CrossAttentionSpec(AttentionSpec):
    """Cross attention (encoder-decoder): holds ``cdiv(max_encoder_tokens, B)`` blocks."""

    kind: ClassVar[str] = "cross_attention"

    def max_memory_usage_bytes(self, vllm_config: VllmConfig) -> int:
        return arith.cross_attention_blocks(vllm_config.encoder_tokens,
                                            self.block_size) * self.page_size_bytes


@dataclass(frozen=True, kw_only=True)
class EncoderOnlyAttentionSpec(AttentionSpec):
    """Encoder-only attention keeps no KV cache: 0 blocks per request."""

    kind: ClassVar[str] = "encoder_only"

    def max_memory_usage_bytes(self, vllm_config: VllmConfig) -> int:
        return 0


@dataclass(frozen=True, kw_only=True)
class MambaSpec(KVCacheSpec):
    """Mamba / linear-attention state. Page = ``sum(prod(shape) * dtype_bytes)``.

    ``block_size`` is not a storage granule: mode ``none`` defaults it to
    max_model_len; in ``align`` it equals the attention block size.
    """

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    page_size_padded: int | None = None
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0
    num_prefill_checkpoint_blocks: int = 0
    kind: ClassVar[str] = "mamba"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.shapes, tuple) or not self.shapes:
            raise ConfigError("MambaSpec.shapes", self.shapes, "must be a non-empty tuple of shapes")
        if not isinstance(self.dtypes, tuple) or len(self.dtypes) != len(self.shapes):
            raise ConfigError("MambaSpec.dtypes", self.dtypes, f"must be a tuple of {len(self.shapes)} dtypes")
        for i, shape in enumerate(self.shapes):
            if not isinstance(shape, tuple) or not shape:
                raise ConfigError(f"MambaSpec.shapes[{i}]", shape, "must be a non-empty tuple of ints")
            for d in shape:
                require_int(f"MambaSpec.shapes[{i}]", d, minimum=1, maximum=2**32)
        for i, dt in enumerate(self.dtypes):
            get_dtype_size(dt, f"MambaSpec.dtypes[{i}]")
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise ConfigError("MambaSpec.mamba_cache_mode", self.mamba_cache_mode,
                              f"must be one of {MAMBA_CACHE_MODES}")
        require_int("MambaSpec.num_speculative_blocks", self.num_speculative_blocks, minimum=0, maximum=1024)
        require_int("MambaSpec.num_prefill_checkpoint_blocks", self.num_prefill_checkpoint_blocks,
                    minimum=0, maximum=1)
        real = self.real_page_size_bytes
        if real > MAX_BYTES:
            raise ConfigError("MambaSpec.page_size_bytes", real, f"must be <= {MAX_BYTES}")
        if self.page_size_padded is not None:
            require_int("MambaSpec.page_size_padded", self.page_size_padded, minimum=real, maximum=MAX_BYTES)

    @property
    def real_page_size_bytes(self) -> int:
        return sum(math.prod(s) * get_dtype_size(d) for s, d in zip(self.shapes, self.dtypes))

    @property
    def page_size_bytes(self) -> int:
        if self.page_size_padded is not None:
            return self.page_size_padded
        return self.real_page_size_bytes

    def is_uniform_with_collection(self, specs: Mapping[str, KVCacheSpec]) -> bool:
        return all(isinstance(s, MambaSpec)
                   and s.num_speculative_blocks == self.num_speculative_blocks
                   and s.num_prefill_checkpoint_blocks == self.num_prefill_checkpoint_blocks
                   and s.page_size_bytes == self.page_size_bytes for s in specs.values())

    def max_memory_usage_bytes(self, vllm_config: VllmConfig) -> int:
        """Pages ``2 + S + P`` when the *engine's* cache mode is ``align``, else ``1 + S``
        (``1 + S`` for a one-block request under fix ``mamba_align_bound_exact``, F9)."""
        return self.page_size_bytes * arith.mamba_startup_blocks(
            vllm_config.mamba_cache_mode == "align", self.num_speculative_blocks,
            self.num_prefill_checkpoint_blocks, _mamba_state_tokens(vllm_config), self.block_size)


def _mamba_state_tokens(vllm_config: VllmConfig) -> int:
    """Tokens whose Mamba state one request computes: ``L - 1`` (its last sampled token is never
    fed back; ``align`` ignores lookahead), as F9's patch. ``vllm_config.max_model_len`` is the
    planned length: already ``L - 1`` under fix ``check_plans_computed_tokens`` without lookahead."""
    planned = vllm_config.max_model_len
    if fixes.is_on("check_plans_computed_tokens") and vllm_config.num_lookahead_tokens == 0:
        return planned
    return max(1, planned - 1)


@dataclass(frozen=True, kw_only=True)
class UniformTypeKVCacheSpecs(KVCacheSpec):
    """Several layers of one attention type with different page sizes, in one group."""

    kv_cache_specs: tuple[tuple[str, KVCacheSpec], ...]
    kind: ClassVar[str] = "uniform_type"

    @property
    def specs(self) -> dict[str, KVCacheSpec]:
        return dict(self.kv_cache_specs)

    @property
    def page_size_bytes(self) -> int:
        return sum(s.page_size_bytes for _, s in self.kv_cache_specs)

    @property
    def prefix_cacheable(self) -> bool:
        return all(s.prefix_cacheable for _, s in self.kv_cache_specs)

    @property
    def first_spec(self) -> KVCacheSpec:
        return self.kv_cache_specs[0][1]

    def max_memory_usage_pages(self, vllm_config: VllmConfig) -> int:
        return max(s.max_blocks_per_request(vllm_config) for _, s in self.kv_cache_specs)

    def max_blocks_per_request(self, vllm_config: VllmConfig) -> int:
        return self.max_memory_usage_pages(vllm_config)

    def max_memory_usage_bytes(self, vllm_config: VllmConfig) -> int:
        return self.max_memory_usage_pages(vllm_config) * self.page_size_bytes

    @staticmethod
    def is_uniform_type(specs: Mapping[str, KVCacheSpec]) -> bool:
        if len({s.block_size for s in specs.values()}) > 1:
            return False
        first = next(iter(specs.values()))
        return first.is_uniform_with_collection(specs)

    @classmethod
    def from_specs(cls, specs: Mapping[str, KVCacheSpec]) -> UniformTypeKVCacheSpecs | None:
        if not specs or not cls.is_uniform_type(specs):
            return None
        return cls(block_size=next(iter(specs.values())).block_size,
                   kv_cache_specs=tuple(specs.items()))


def iter_layer_specs(spec: KVCacheSpec) -> list[KVCacheSpec]:
    """The per-layer specs a group spec covers (upstream ``iter_layer_specs``)."""
    if isinstance(spec, UniformTypeKVCacheSpecs):
        return [s for _, s in spec.kv_cache_specs]
    return [spec]
