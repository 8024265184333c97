"""Hypothesis strategies: spec mixes, startup configurations and workloads.

Every composite documents the shape it draws and its knobs. Boundaries (block counts
at exactly the needed number, +-1; lengths at block multiples +-1) sit in the *first*
branch of a ``one_of``, so they are drawn often and the shrinker can still move to
the plain branch — or back to the boundary, which is usually the minimal example.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from hypothesis import strategies as st

from kvverify.reference import arith
from kvverify.reference.config import VllmConfig
from kvverify.reference.driver import WorkloadSpec
from kvverify.errors import KVVerifyError
from kvverify.reference.grouping import get_global_kv_cache_groups
from kvverify.reference.planner import KVCacheConfig, blocks_per_request, bytes_per_block
from kvverify.reference import kinds as spec_kinds
from kvverify.reference.specs import AttentionSpec, FullAttentionSpec, KVCacheSpec, MambaSpec

BLOCK_SIZES = (16, 8, 4, 32, 1, 2, 64)  # shrinks toward 16, the upstream default
#: Kinds with a registered layer builder (``kvverify.reference.kinds``), in registry order;
#: the ``kinds`` knobs below accept any of a kind's spellings.
ATTENTION_KINDS = tuple(k.name for k in spec_kinds.SPEC_KINDS if k.build_layer is not None)
SOURCES = ("override", "memory", "profiled")


def _memoized(factory: Callable[..., Any]) -> Callable[..., Any]:
    """Reuse the strategy a factory built for the same (hashable) arguments.

    Composites draw inner strategies built from earlier draws (``lengths(block_size)``,
    ``model_specs(...)``, ``workloads(L)``); a fresh strategy object is validated and
    analysed by Hypothesis on its first draw, which cost more than the draw itself.
    Strategies are immutable descriptions, so reusing one draws exactly the same values.
    (No new literals here: Hypothesis mines this module's constants into generation.)
    """
    cache: dict[Any, Any] = {}

    @functools.wraps(factory)
    def memo(*args: Any, **kwargs: Any) -> Any:
        try:
            key = (args, tuple(sorted(kwargs.items())))
            strategy = cache.get(key)
        except TypeError:  # an unhashable argument (a list of kinds): build it afresh
            return factory(*args, **kwargs)
        if strategy is None:
            if len(cache) >= 4096:
                cache.clear()
            strategy = cache[key] = factory(*args, **kwargs)
        return strategy

    return memo


@dataclass(frozen=True)
class StartupCase:
    """A generated deployment: config, per-worker layer specs, and how it was drawn."""

    vllm_config: VllmConfig
    kv_cache_specs: tuple[dict[str, KVCacheSpec], ...]
    source: str
    available_memory: tuple[int, ...] | None = None
    target_blocks: int = 0
    needed_blocks: int = 0

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        return tuple(s.kind for w in self.kv_cache_specs for s in w.values())


_sampled = _memoized(st.sampled_from)  # sampled_from is not cached by Hypothesis itself
_BLOCK_SIZES = _sampled(BLOCK_SIZES)
_BUDGET_PRESETS = _sampled((2048, 8, 256, 64, 16))
_OFFSETS = _sampled((0, 1, -1))
_HEADS = _sampled((1, 2))
_HEAD_SIZES = _sampled((8, 2, 4))
_DTYPES = _sampled(("bfloat16", "float32", "fp8"))
_RETENTION = _sampled((0, None))
_WATERMARKS = st.one_of(st.just(0.0), _sampled((0.01, 0.1, 0.5)))  # off half the time
#: kinds a disabled hybrid manager promotes to full attention (the recycling ones)
_LOCAL_KINDS = frozenset(k.name for k in spec_kinds.recycling_kinds())


@_memoized
def _patterns(pool: tuple[str, ...], max_size: int) -> st.SearchStrategy[list[str]]:
    return st.lists(_sampled(pool), min_size=1, max_size=max_size)


@_memoized
def boundary_int(center: int, *, low: int, high: int, spread: int = 2) -> st.SearchStrategy[int]:
    """``center + d`` for small ``d`` (first branch), else any value in ``[low, high]``."""
    near = st.integers(-spread, spread).map(lambda d: min(high, max(low, center + d)))
    return st.one_of(near, st.integers(low, high))


@_memoized
def lengths(block_size: int, *, low: int = 2, high: int = 1024) -> st.SearchStrategy[int]:
    """Lengths at block multiples +-1 (first branch) or anywhere in ``[low, high]``."""
    multiples = st.builds(lambda k, d: min(high, max(low, k * block_size + d)),
                          st.integers(1, max(1, high // block_size)), _OFFSETS)
    return st.one_of(multiples, st.integers(low, high))


@_memoized
@st.composite
def layer_kinds(draw, *, max_layers: int = 6, kinds: Sequence[str] = ATTENTION_KINDS,
                allow_mamba: bool = True, hybrid: bool = False, require_mamba: bool = False) -> list[str]:
    """A layer pattern: 1..max_layers kinds; at least one attention layer unless pure Mamba
    (``hybrid``: two or three distinct kinds, so two or more KV cache groups; ``require_mamba``:
    a Mamba layer in every pattern, as the pattern's last kind when none was drawn, instead of
    a filter that would reject most draws)."""
    pool = tuple(spec_kinds.resolve(k).name for k in kinds) + (("mamba",) if allow_mamba else ())
    if hybrid:
        pattern = draw(st.lists(_sampled(pool), min_size=2, max_size=min(3, max(2, max_layers)), unique=True))
        n = draw(st.integers(len(pattern), max(len(pattern), max_layers)))
    else:
        n = draw(st.integers(1, max_layers))
        pattern = draw(_patterns(pool, min(3, n)))
    if require_mamba and "mamba" not in pattern:
        pattern = [*pattern[:max(0, min(len(pattern), max_layers) - 1)], "mamba"]
        n = max(n, len(pattern))
    if "mla" in pattern and "chunked_local" in pattern:
        # MLA next to full / SWA / Mamba is drawn (MLA + SWA drafts are real). MLA's half-size
        # page doubles its block size next to other attention, which upstream's chunked-local
        # lookup asserts against on the first request (finding F7, a known failure of its own).
        pattern = [k if k != "chunked_local" else "mla" for k in pattern]
    return [pattern[i % len(pattern)] for i in range(n)]


@_memoized
@st.composite
def model_specs(draw, block_size: int, max_model_len: int, *, mamba_mode: str = "none",
                max_layers: int = 6, kinds: Sequence[str] = ATTENTION_KINDS,
                allow_mamba: bool = True, hybrid: bool = False,
                require_mamba: bool = False) -> dict[str, KVCacheSpec]:
    """Layer name -> spec for one model drawn from a spec mix (``hybrid``: of two or more kinds).

    Attention layers share heads x dims (tiny: 1-2 heads, 2-8 dims, so pages unify
    as in real models); windows and chunks are drawn around block multiples. Mamba
    layers follow the hybrid page rule (``arith.hybrid_attention_block_size``): the
    attention block grows until its page covers the Mamba state, which is padded up.
    """
    kinds_drawn = draw(layer_kinds(max_layers=max_layers, kinds=kinds, allow_mamba=allow_mamba, hybrid=hybrid,
                                   require_mamba=require_mamba))
    heads = draw(_HEADS)
    head_size = draw(_HEAD_SIZES)
    dtype = draw(_DTYPES)
    window = draw(_window_or_chunk(block_size, max_model_len))
    chunk = draw(_window_or_chunk(block_size, max_model_len))
    # the window-like sizes a registered layer builder may use, by spec field name
    sizes = {"sliding_window": window, "attention_chunk_size": chunk}
    attn_block = block_size
    has_attention = any(k != "mamba" for k in kinds_drawn)
    mamba_state = None
    mamba_blocks: dict[str, int] = {}
    if "mamba" in kinds_drawn:
        conv = draw(st.integers(1, 4))
        state = draw(st.integers(1, 64))
        mamba_state = ((conv, 4), (state,))
        mamba_page = MambaSpec(block_size=1, shapes=mamba_state, dtypes=(dtype, "float32")).real_page_size_bytes
        if has_attention:
            p1 = FullAttentionSpec(block_size=1, num_kv_heads=heads, head_size=head_size, dtype=dtype).page_size_bytes
            attn_block = arith.hybrid_attention_block_size(mamba_page, p1, block_size, block_size)
        # MambaSpec.num_speculative_blocks (upstream: num_speculative_tokens) and
        # num_prefill_checkpoint_blocks (layers that export a prefill checkpoint): 0 first
        mamba_blocks = dict(num_speculative_blocks=draw(st.integers(0, 3)),
                            num_prefill_checkpoint_blocks=draw(st.integers(0, 1)))
    # AttentionSpec.page_size_padded (upstream: an aligned MLA page, a layer padded to a shared
    # page): the kinds drawn padded (none first), each page grown by `pad` bytes (0 first)
    attention_kinds = sorted({k for k in kinds_drawn if k != "mamba"})
    padded_kinds = draw(st.frozensets(_sampled(tuple(attention_kinds)))) if attention_kinds else frozenset()
    pad = draw(st.integers(0, 2 * FullAttentionSpec(block_size=attn_block, num_kv_heads=heads, head_size=head_size,
                                                    dtype=dtype).page_size_bytes)) if padded_kinds else 0
    specs: dict[str, KVCacheSpec] = {}
    for i, kind in enumerate(kinds_drawn):
        name = f"model.layers.{i}"
        common = dict(block_size=attn_block, num_kv_heads=heads, head_size=head_size, dtype=dtype)
        registered = spec_kinds.resolve(kind)
        if registered.build_layer is not None:
            layer = registered.build_layer(common, sizes)
            if kind in padded_kinds and isinstance(layer, AttentionSpec):
                layer = replace(layer, page_size_padded=layer.real_page_size_bytes + pad)
            specs[name] = layer
        elif registered.spec_cls is not MambaSpec:
            raise ValueError(f"kinds: {kind!r} has no generator ({registered.no_generator_reason})")
        else:
            assert mamba_state is not None
            mamba_block = attn_block if mamba_mode == "align" else max_model_len
            spec = MambaSpec(block_size=mamba_block, shapes=mamba_state, dtypes=(dtype, "float32"),
                             mamba_cache_mode=mamba_mode, **mamba_blocks)
            if has_attention:
                attn_page = FullAttentionSpec(**common).page_size_bytes
                if attn_page > spec.page_size_bytes:
                    spec = replace(spec, page_size_padded=attn_page)
            specs[name] = spec
    if padded_kinds and not _groupable(specs):
        # a padded page that the others' cannot be unified with (an MLA page, which upstream
        # never pads at unification, not dividing the largest): upstream refuses such a model
        # at startup; draw it unpadded instead
        specs = {n: replace(s, page_size_padded=None) if isinstance(s, AttentionSpec) else s
                 for n, s in specs.items()}
    return specs


def _groupable(specs: dict[str, KVCacheSpec], vllm_config: VllmConfig | None = None) -> bool:
    """Whether upstream's grouping accepts the layers (``get_kv_cache_groups`` raises otherwise)."""
    try:
        get_global_kv_cache_groups(vllm_config or VllmConfig(), [specs])
    except KVVerifyError:
        return False
    return True


@_memoized
def _window_or_chunk(block_size: int, max_model_len: int) -> st.SearchStrategy[int]:
    """A window / chunk size around block multiples, or within a couple of blocks."""
    near_block = st.integers(1, 2 * block_size)
    return st.one_of(lengths(block_size, low=1, high=max(2, 2 * max_model_len)), near_block)


def effective_block_size(specs: dict[str, KVCacheSpec], block_size: int, max_model_len: int,
                         mamba_mode: str) -> int:
    """``cache_config.block_size`` after the model's config hook, as upstream sets it.

    Hybrid attention+Mamba models raise it to the unified attention block size; a pure
    Mamba model outside ``align`` mode uses ``max_model_len`` (one block holds the state).
    """
    attention = [s for s in specs.values() if not isinstance(s, MambaSpec)]
    if attention:
        return attention[0].block_size
    return block_size if mamba_mode == "align" else max_model_len


@st.composite
def startup_cases(draw, *, sources: Sequence[str] = SOURCES, max_layers: int = 6,
                  kinds: Sequence[str] = ATTENTION_KINDS, allow_mamba: bool = True,
                  allow_auto: bool = True, max_len: int = 1024, workers: bool = True,
                  lookahead: bool = False, prefix_caching: bool | None = None,
                  hybrid: bool = False, starting: bool = False, max_blocks: int | None = None,
                  prefix_match_unit: bool = False, require_mamba: bool = False) -> StartupCase:
    """A deployment whose block count lands at the startup boundary more often than not.

    Draws block size, max_model_len, token budget, a spec mix, a block source
    (``override`` / ``memory`` / ``profiled``) and a target ``N = needed + 1 + delta``
    with ``delta`` in ``{0, -1, +1, +-2}`` first. Knobs: ``sources``, ``max_layers``,
    ``kinds``, ``allow_mamba``, ``allow_auto`` (``max_model_len=-1``), ``max_len``,
    ``workers`` (sometimes two workers with different memory), ``lookahead`` (draw
    ``num_lookahead_tokens`` in 1..8, as speculative decoding reserves, and
    ``num_prefill_lookahead_tokens`` below both it and the budget), ``prefix_caching``
    (``None``: drawn; ``True`` / ``False``: fixed), ``hybrid`` (two or more layer kinds),
    ``starting`` (``delta >= 0`` only: the tightest pools that start, for properties that
    ``assume`` a started deployment and would otherwise reject the ``delta < 0`` draws),
    ``max_blocks`` (``max_model_len`` at most this many blocks of the drawn block size: pools
    of a few blocks), ``require_mamba`` (a Mamba layer in every model, :func:`layer_kinds`).
    ``prefix_match_unit`` (with prefix caching and two or more groups, hash finer than the
    block: upstream's ``cache_config.prefix_match_unit``, a divisor below the gcd of the
    prefix-cacheable groups' block sizes; next to a Mamba ``align`` layer this turns on
    fine-grained partial hits, the partial-tail-block cache and its copy-on-write).
    Also drawn, each shrinking to upstream's default: ``disable_hybrid_kv_cache_manager`` (where it changes the plan), the scheduling
    policy, ``max_num_seqs`` and ``watermark``.
    """
    block_size = draw(_BLOCK_SIZES)
    high = max_len if max_blocks is None else max(2, min(max_len, max_blocks * block_size))
    max_model_len = draw(lengths(block_size, low=2, high=high))
    prefix_caching = draw(st.booleans()) if prefix_caching is None else prefix_caching
    # MambaModelConfig.verify_and_update_config: prefix caching <=> align mode.
    mamba_mode = "align" if prefix_caching else "none"
    specs = draw(model_specs(block_size, max_model_len, mamba_mode=mamba_mode, max_layers=max_layers,
                             kinds=kinds, allow_mamba=allow_mamba, hybrid=hybrid,
                             require_mamba=require_mamba))
    block_size = effective_block_size(specs, block_size, max_model_len, mamba_mode)
    budget = draw(_budgets(block_size))
    auto = allow_auto and draw(st.booleans()) and draw(st.booleans())
    # --disable-hybrid-kv-cache-manager (off first): drawn where it changes the plan (local
    # layers next to other attention: promoted to full attention, keeping their window as
    # FullAttentionSpec.sliding_window / attention_chunk_size) and upstream accepts the layers
    disable_hybrid = False
    kinds_present = {s.kind for s in specs.values()}
    if kinds_present & _LOCAL_KINDS and kinds_present - _LOCAL_KINDS and draw(st.booleans()):
        disable_hybrid = _groupable(specs, VllmConfig(disable_hybrid_kv_cache_manager=True))
    base = VllmConfig(block_size=block_size, max_model_len=max_model_len, max_num_batched_tokens=budget,
                      enable_prefix_caching=prefix_caching, mamba_cache_mode=mamba_mode,
                      num_gpu_blocks_override=1, disable_hybrid_kv_cache_manager=disable_hybrid)
    try:
        groups = get_global_kv_cache_groups(base, [specs])
    except KVVerifyError:
        groups = []
    needed = blocks_per_request(groups, base) if groups else 1
    unit = draw(_finer_units(tuple(g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable))) \
        if prefix_match_unit and prefix_caching and len(groups) > 1 else None
    bpb = max(1, bytes_per_block(groups))
    target = draw(boundary_int(needed + 1, low=needed + 1 if starting else 1, high=3 * needed + 8))
    source = draw(_sampled(tuple(sources)))
    extra = draw(_extra_bytes(bpb))
    memory = target * bpb + extra
    kw: dict = dict(block_size=block_size, max_num_batched_tokens=budget,
                    enable_prefix_caching=prefix_caching, mamba_cache_mode=mamba_mode,
                    disable_hybrid_kv_cache_manager=disable_hybrid,
                    num_lookahead_tokens=draw(st.integers(1, 8)) if lookahead else 0,
                    # upstream's default 0 (sparse SWA / Mamba retention) first, else dense
                    prefix_cache_retention_interval=draw(_RETENTION), prefix_match_unit=unit)
    if auto:
        kw.update(max_model_len=-1, max_position_embeddings=max_model_len)
    else:
        kw.update(max_model_len=max_model_len)
    available = None
    worker_specs: tuple[dict[str, KVCacheSpec], ...] = (specs,)
    if source == "override":
        kw["num_gpu_blocks_override"] = target
        # ignored for the count; generous first (the #27181 setting: a tiny override on a big GPU)
        kw["kv_cache_memory_bytes"] = draw(_override_memory(memory, bpb))
    elif source == "memory":
        kw["kv_cache_memory_bytes"] = memory
        if workers and draw(st.integers(0, 4)) == 0:
            worker_specs = (specs, specs)
            available = (memory, memory + draw(st.integers(0, 3 * bpb)))
    else:
        kw["gpu_memory_bytes"] = 2 * memory
        kw["gpu_memory_utilization"] = 0.5
    # upstream SchedulerConfig.policy (last draw: shrinks to fcfs, leaves earlier draws alone)
    kw["scheduling_policy"] = draw(_sampled(("fcfs", "priority")))
    kw["max_num_seqs"] = draw(_sampled((128, 1, 2)))  # 1-2: the running cap binds (<= 4 requests)
    # upstream SchedulerConfig.watermark (0 first): headroom kept when admitting next to running work
    kw["watermark"] = draw(_WATERMARKS)
    if lookahead:
        # VllmConfig.num_prefill_lookahead_tokens (0 without a drafter, 1 for EAGLE, up to the
        # speculative tokens for multi-module MTP); grouping retains `n - 1` more SWA tokens.
        # Below the token budget: upstream refuses max_num_batched_tokens <= num_lookahead_tokens
        # (>= this) with a drafter (VllmConfig._set_max_num_scheduled_tokens)
        kw["num_prefill_lookahead_tokens"] = draw(st.integers(0, min(kw["num_lookahead_tokens"], budget - 1)))
    return StartupCase(VllmConfig(**kw), worker_specs, source, available, target, needed)


@functools.cache
def fine_hash_cases() -> st.SearchStrategy[StartupCase]:
    """The layouts upstream's fine-grained prefix caching exists for: a Mamba ``align`` layer next
    to attention, prefix caching on, hashed finer than the block (a ``prefix_match_unit`` is
    drawn): fine-grained partial hits, the partial-tail-block cache and its copy-on-write
    (``SingleTypeKVCacheManager._apply_cow``, ``KVCacheManager.take_kv_cache_block_copies``)."""
    return startup_cases(allow_auto=False, max_len=256, prefix_caching=True, hybrid=True,
                         prefix_match_unit=True).filter(
        lambda c: c.vllm_config.prefix_match_unit is not None and "mamba" in c.layer_kinds)


@_memoized
def _finer_units(sizes: tuple[int, ...]) -> st.SearchStrategy[int | None]:
    """A ``prefix_match_unit`` below the gcd of ``sizes`` that divides it (1 first: every token
    hashed); ``None`` (unset) where there is none (a gcd of 1, no prefix-cacheable group).
    ``resolve_kv_cache_block_sizes`` accepts exactly the divisors of every such size."""
    g = math.gcd(*sizes) if sizes else 1
    divisors = tuple(d for d in range(1, g) if g % d == 0)
    return _sampled(divisors) if divisors else st.none()


@_memoized
def _budgets(block_size: int) -> st.SearchStrategy[int]:
    """Token budgets: common values, block multiples +-1, or at most one block (chunks that
    do not fill a block: the Mamba-align rounding of #34445, misaligned chunked prefill)."""
    return st.one_of(_BUDGET_PRESETS, lengths(block_size, low=1, high=2048), st.integers(1, max(1, block_size)))


@_memoized
def _extra_bytes(bpb: int) -> st.SearchStrategy[int]:
    return st.one_of(st.just(0), st.integers(0, bpb - 1))


@_memoized
def _override_memory(memory: int, bpb: int) -> st.SearchStrategy[int]:
    return st.one_of(st.just(4 * memory + bpb), st.integers(1, 4 * memory + 1))


def override_memory(memory: int, bpb: int) -> st.SearchStrategy[int]:
    """The profiled KV memory beside ``num_gpu_blocks_override`` (``memory``: the override's
    blocks in bytes): generous first (``4 * memory + bpb``, the #27181 setting: a small
    override on a big GPU), else 1 .. that. The count comes from the override; a release whose
    check reads the profiled memory instead (<= 0.20) is judged on it."""
    return _override_memory(memory, bpb)


@_memoized
@st.composite
def workloads(draw, max_model_len: int, *, max_requests: int = 4, max_outputs: int = 64,
              shared_prefix: bool = True, turns: bool = False) -> list[WorkloadSpec]:
    """Arrival lists of (prompt, max_tokens), ``prompt + max_tokens <= max_model_len``.

    Prompts may share a prefix (prefix-cache hits); arrival steps are small so
    requests overlap. Knobs: ``max_requests``, ``max_outputs``, ``shared_prefix``,
    ``turns`` (a request may start with an earlier request's whole prompt, as a
    conversation's next turn or a resend does: hits that end where that prompt ended,
    inside a block as often as not).
    """
    n = draw(st.integers(1, max_requests))
    prefix_len = draw(st.integers(0, max_model_len - 1)) if shared_prefix and draw(st.booleans()) else 0
    out: list[WorkloadSpec] = []
    for i in range(n):
        total = draw(st.integers(2, max_model_len))
        outputs = draw(st.integers(1, max(1, min(max_outputs, total - 1))))
        prompt_len = total - outputs
        common = min(prefix_len, prompt_len)
        prompt = tuple(range(common)) + tuple(10_000 * (i + 1) + j for j in range(prompt_len - common))
        if turns and out and draw(st.booleans()):
            earlier = out[draw(st.integers(0, len(out) - 1))].prompt_token_ids
            prompt = earlier[:prompt_len] + prompt[len(earlier):]
        arrival = draw(st.integers(0, 8))
        priority = draw(st.integers(0, 2))  # read by the priority policy only
        out.append(WorkloadSpec(f"r{i}", prompt, outputs, arrival, priority=priority))
    return out


REAL_GROUP_BLOCK_SIZES = (16, 544, 181, 32, 64, 128, 256, 48, 80, 560, 1072)


@dataclass(frozen=True)
class BlockSizeCase:
    """Groups with given block sizes (attention first, then optional Mamba) and a config."""

    kv_cache_config: KVCacheConfig
    vllm_config: VllmConfig


@st.composite
def block_size_cases(draw) -> BlockSizeCase:
    """Group block-size lists as upstream produces them (e.g. the seed [544]*4 + [181]).

    Attention groups: the cache block size times a page-unification ratio; a Mamba group
    (prefix caching on => ``align``, off => ``none``) with an independent block size.
    ``prefix_match_unit``: unset first, else a divisor of the gcd, else anything.
    """
    from kvverify.reference.grouping import KVCacheGroupSpec
    from kvverify.reference.planner import KVCacheConfig

    size = st.one_of(st.sampled_from(REAL_GROUP_BLOCK_SIZES), st.integers(1, 600))
    cache_bs = draw(size)
    # the first group holds the cache block size (a single group always does)
    ratios = [1] + draw(st.lists(st.sampled_from((1, 2, 4, 3)), max_size=3))
    caching = draw(st.booleans())
    groups = [KVCacheGroupSpec((f"attn{i}",), FullAttentionSpec(block_size=cache_bs * r, num_kv_heads=1,
                                                                 head_size=8)) for i, r in enumerate(ratios)]
    if draw(st.booleans()):
        mamba_bs = draw(st.one_of(st.just(cache_bs), size))
        groups.append(KVCacheGroupSpec(("mamba",), MambaSpec(
            block_size=mamba_bs, shapes=((4, 4),), dtypes=("float32",),
            mamba_cache_mode="align" if caching else "none")))
    if len(groups) > 1 and len({g.kv_cache_spec for g in groups}) == 1:
        # Several groups that all have ONE spec are built by no engine: every release's planner
        # (get_kv_cache_groups: is_kv_cache_spec_uniform -> _get_kv_cache_groups_uniform_spec,
        # measured on every supported release) puts the layers of a uniform spec into one group; equal-spec groups
        # only arise next to a group of another spec (hybrid page split). 0.28.0's
        # HybridKVCacheCoordinator asserts on such a list ("at least two attention groups"),
        # which is no release defect (docs/vllm-target.md, "0.28.0").
        groups = groups[:1]
    sizes = [g.kv_cache_spec.block_size for g in groups]
    from math import gcd
    g = gcd(*sizes)
    divisors = [d for d in range(1, min(g, 64) + 1) if g % d == 0]
    unit = draw(st.one_of(st.none(), st.sampled_from(divisors), st.integers(1, 600)))
    config = VllmConfig(block_size=cache_bs, max_model_len=4096, enable_prefix_caching=caching,
                        mamba_cache_mode="align" if caching else "none", prefix_match_unit=unit)
    return BlockSizeCase(KVCacheConfig(num_blocks=8, kv_cache_tensors=(), kv_cache_groups=tuple(groups)), config)


#: how an engine-core deployment's attention is drawn: causal layers, every attention layer
#: non-causal (a prefix LM: ``AttentionSpec.non_causal``), or no KV cache at all
ENGINE_CORE_ATTENTION = ("causal", "non_causal", "no_kv_cache")


@dataclass(frozen=True)
class EngineCoreCase:
    """A deployment as the engine core starts it (:mod:`kvverify.reference.engine_core`) and the
    prompt sent to it: ``prompt_len`` ``None`` is the longest admitted (``max_model_len - 1``),
    else any length in ``[1, max_model_len - 1]`` (taken modulo once the length is resolved)."""

    startup: StartupCase
    attention: str
    prompt_len: int | None

    @property
    def vllm_config(self) -> VllmConfig:
        return self.startup.vllm_config

    @property
    def kv_cache_specs(self) -> tuple[dict[str, KVCacheSpec], ...]:
        return self.startup.kv_cache_specs


@st.composite
def engine_core_cases(draw, *, max_len: int = 256) -> EngineCoreCase:
    """A :func:`startup_cases` deployment (``max_len``: its longest ``max_model_len``), then: the
    attention (:data:`ENGINE_CORE_ATTENTION`), ``enable_chunked_prefill`` (on first), a token budget
    around the planned ``max_model_len`` (+-2 first, else anywhere in ``[1, 2L]``) and
    ``max_num_seqs`` (1 first, else up to the budget + 1: the ``max_num_seqs`` rule's edge), and a
    prompt (the longest admitted first)."""
    case = draw(startup_cases(max_len=max_len, workers=False))
    attention = draw(_sampled(ENGINE_CORE_ATTENTION))
    specs = case.kv_cache_specs
    if attention == "non_causal":
        specs = tuple({n: replace(s, non_causal=True) if isinstance(s, AttentionSpec) else s
                       for n, s in w.items()} for w in specs)
    elif attention == "no_kv_cache":
        specs = ({},)
    length = case.vllm_config.planning_max_model_len
    budget = draw(boundary_int(length, low=1, high=2 * length))
    seqs = draw(st.one_of(st.just(1), st.integers(1, budget + 1)))
    config = replace(case.vllm_config, enable_chunked_prefill=not draw(st.booleans()),
                     max_num_batched_tokens=budget, max_num_seqs=seqs)
    prompt = draw(st.one_of(st.none(), st.integers(1, 1 << 20)))
    return EngineCoreCase(replace(case, vllm_config=config, kv_cache_specs=specs, available_memory=None),
                          attention, prompt)
