"""Startup planning: block count, tensors, the startup check, auto-fit, concurrency.

Mirrors upstream's ``kv_cache_planning.py`` (``get_kv_cache_configs``,
``get_kv_cache_config_from_groups``, ``_check_enough_kv_cache_memory``,
``estimate_max_model_len``, ``_auto_fit_max_model_len``) and ``kv_cache_utils.py``
(``get_max_concurrency_for_kv_cache_config``). The capacity arithmetic itself lives in
:mod:`kvverify.reference.arith`, shared with the Z3 lemmas.

Net effect of the check (PR #47272): ``sum_g blocks_g(L) <= N - 1`` — the null block
BlockPool keeps is reserved.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from kvverify import fixes
from kvverify.reference import arith
from kvverify.reference.config import VllmConfig
from kvverify.errors import ConfigError, StartupCheckError, MAX_BYTES
from kvverify.reference.engine_validation import validate_engine_config
from kvverify.reference.validation import evolve, require_int
from kvverify.reference.grouping import (
    KVCacheGroupSpec,
    get_global_kv_cache_groups,
    get_kv_cache_groups,
    project_groups_to_worker,
)
from kvverify.reference.specs import KVCacheSpec, UniformTypeKVCacheSpecs, iter_layer_specs


@dataclass(frozen=True)
class KVCacheTensor:
    """One placement of same-shaped layers in the KV cache backing (upstream ``KVCacheTensor``).

    Layer ``layers[l]``'s page for block ``b`` starts at
    ``offset + l * layer_stride + b * block_stride`` bytes into a backing of ``size``
    bytes. Tensors of different groups alias the same bytes from offset 0: a block id
    is owned by one group at a time. Layout is layer-outermost (each layer's blocks
    contiguous), the default on the platforms modelled here.
    """

    size: int
    layers: tuple[str, ...]
    layer_stride: int
    block_stride: int
    offset: int = 0


@dataclass(frozen=True)
class KVCacheConfig:
    """A worker's plan: ``num_blocks`` (null block included), tensors and groups."""

    num_blocks: int
    kv_cache_tensors: tuple[KVCacheTensor, ...]
    kv_cache_groups: tuple[KVCacheGroupSpec, ...]


def per_layer_spec(group: KVCacheGroupSpec, layer_name: str) -> KVCacheSpec:
    spec = group.kv_cache_spec
    if isinstance(spec, UniformTypeKVCacheSpecs):
        return spec.specs[layer_name]
    return spec


def bytes_per_block(groups: Sequence[KVCacheGroupSpec]) -> int:
    """``_get_kv_cache_bytes_per_block``: the largest group's sum of layer pages."""
    if not groups:
        return 0
    return max(sum(per_layer_spec(g, n).page_size_bytes for n in g.layer_names) for g in groups)


def pool_bytes_per_block(groups: Sequence[KVCacheGroupSpec]) -> int:
    """``_pool_bytes_per_block_from_builder``: the builder places one block
    (``get_kv_cache_config_from_groups`` with ``1 * bytes_per_block`` bytes, whose
    ``available_memory // bytes_per_block`` divides by zero when the groups hold no layer: a
    pipeline stage without KV cache layers, finding F15) and reads its backing's size."""
    if not groups:
        return 0
    size = bytes_per_block(groups)
    arith.num_blocks_from_memory(size, size)  # the probe's one block: ZeroDivisionError at 0 bytes
    return size


def holds_kv_cache(groups: Sequence[KVCacheGroupSpec]) -> bool:
    """Whether a worker's projected groups hold any layer (a pipeline stage that owns none of
    the model's KV cache layers gets every group with an empty layer list, never no groups)."""
    return any(g.layer_names for g in groups)


def group_blocks_per_request(group: KVCacheGroupSpec, vllm_config: VllmConfig) -> int:
    """Blocks one max_model_len request holds in ``group`` (the startup bound)."""
    planned = arith.planned_request_tokens(vllm_config.max_model_len, vllm_config.num_lookahead_tokens)
    if planned != vllm_config.max_model_len:
        vllm_config = vllm_config.with_max_model_len(planned)
    return group.kv_cache_spec.max_blocks_per_request(vllm_config)


def blocks_per_request(groups: Sequence[KVCacheGroupSpec], vllm_config: VllmConfig, *,
                       in_memory_helper: bool = False) -> int:
    """``sum_g blocks_g(L)`` over all groups (PR #36030); ``in_memory_helper``: the count of
    ``_max_memory_usage_bytes_from_groups`` (auto-fit and the startup check), where flaw
    ``autofit_first_group_only`` counts only the first group."""
    return arith.total_blocks_per_request([group_blocks_per_request(g, vllm_config) for g in groups],
                                          in_memory_helper=in_memory_helper)


def max_memory_usage_bytes_from_groups(groups: Sequence[KVCacheGroupSpec],
                                       vllm_config: VllmConfig) -> int:
    """``_max_memory_usage_bytes_from_groups``: ``bytes_per_block * sum_g blocks_g(L)`` (flaw
    ``autofit_first_group_only``: the first group's blocks only, for every caller)."""
    if not groups:
        return 0
    return arith.needed_memory(bytes_per_block(groups),
                               blocks_per_request(groups, vllm_config, in_memory_helper=True))


def estimate_max_model_len_from_groups(groups: Sequence[KVCacheGroupSpec], vllm_config: VllmConfig,
                                       available_memory: int, upper: int | None = None) -> int:
    """Binary search on ``[1, upper]`` for the largest length whose need fits; 0 if none."""
    hi = vllm_config.planning_max_model_len if upper is None else upper

    def fits(length: int) -> bool:
        return max_memory_usage_bytes_from_groups(
            groups, vllm_config.with_max_model_len(length)) <= available_memory

    return binary_search_max(fits, hi)


def binary_search_max(fits: Callable[[int], bool], upper: int) -> int:
    """Largest ``v`` in ``[1, upper]`` with ``fits(v)`` for a monotone predicate; 0 if none."""
    left, right = 1, upper
    if not fits(left):
        return 0
    result = 1
    while left <= right:
        mid = (left + right) // 2
        if fits(mid):
            result, left = mid, mid + 1
        else:
            right = mid - 1
    return result


def check_enough_kv_cache_memory_for_groups(available_memory: int, groups: Sequence[KVCacheGroupSpec],
                                            vllm_config: VllmConfig) -> None:
    """``_check_enough_kv_cache_memory`` as ``get_kv_cache_configs`` calls it: raise unless one
    max_model_len request fits ``available_memory`` (already less the null block). The
    no-memory refusal names only ``gpu_memory_utilization``, as upstream's does, also where an
    override <= 0 caused it (finding F16)."""
    if available_memory <= 0:
        raise StartupCheckError(
            "No available memory for the cache blocks. "
            "Try increasing `gpu_memory_utilization` when initializing the engine.",
            max_model_len=vllm_config.max_model_len, needed_bytes=0,
            available_bytes=available_memory, estimated_max_model_len=0)
    needed = max_memory_usage_bytes_from_groups(groups, vllm_config)
    if needed > available_memory:
        estimate = estimate_max_model_len_from_groups(groups, vllm_config, available_memory,
                                                      upper=vllm_config.max_model_len)
        estimated_msg = (f"Based on the available memory, the estimated maximum model length "
                         f"is {estimate}. " if estimate > 0 else "")
        raise StartupCheckError(
            f"To serve at least one request with the model's max seq len "
            f"({vllm_config.max_model_len}), {needed} bytes of KV cache are needed, which is "
            f"larger than the available KV cache memory ({available_memory} bytes). "
            f"{estimated_msg}Try increasing `gpu_memory_utilization` or decreasing "
            f"`max_model_len` when initializing the engine.",
            max_model_len=vllm_config.max_model_len, needed_bytes=needed,
            available_bytes=available_memory, estimated_max_model_len=estimate)


def get_kv_cache_config_from_groups(groups: Sequence[KVCacheGroupSpec], num_blocks: int) -> KVCacheConfig:
    """Tensors for ``num_blocks`` blocks (``get_kv_cache_config_from_groups``, layer-outer)."""
    if not groups:
        return KVCacheConfig(num_blocks=1, kv_cache_tensors=(), kv_cache_groups=())
    size = arith.kv_cache_tensor_bytes(bytes_per_block(groups), num_blocks)
    tensors: list[KVCacheTensor] = []
    for g in groups:
        by_spec: dict[KVCacheSpec, list[str]] = defaultdict(list)
        for name in g.layer_names:
            by_spec[per_layer_spec(g, name)].append(name)
        offset = 0
        for spec, names in by_spec.items():
            page = spec.page_size_bytes
            layer_stride = page * num_blocks
            tensors.append(KVCacheTensor(size=size, layers=tuple(names), layer_stride=layer_stride,
                                         block_stride=page, offset=offset))
            offset += len(names) * layer_stride
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tuple(tensors),
                         kv_cache_groups=tuple(groups))


@dataclass(frozen=True)
class StartupPlan:
    """What the engine decides at startup, for every worker, whether or not the check passes.

    ``vllm_config`` carries the resolved ``max_model_len`` (after auto-fit). ``error`` is
    the startup check's message when it refused to start (``starts`` is then False).
    """

    vllm_config: VllmConfig
    groups: tuple[KVCacheGroupSpec, ...]
    kv_cache_configs: tuple[KVCacheConfig, ...]
    available_memory: tuple[int, ...]
    check_memory: tuple[int, ...]
    bytes_per_block: int
    blocks_per_group: tuple[int, ...]
    starts: bool
    error: str | None = None
    auto_fit_max_model_len: int | None = None
    worker_groups: tuple[tuple[KVCacheGroupSpec, ...], ...] = field(default=())

    @property
    def num_blocks(self) -> int:
        return self.kv_cache_configs[0].num_blocks

    @property
    def usable_blocks(self) -> int:
        return arith.usable_blocks(self.num_blocks)

    @property
    def blocks_needed_per_request(self) -> int:
        return sum(self.blocks_per_group)

    @property
    def kv_cache_config(self) -> KVCacheConfig:
        return self.kv_cache_configs[0]


def _available_memory(vllm_config: VllmConfig, available_memory: Sequence[int] | None,
                      num_workers: int) -> list[int]:
    if available_memory is None:
        return [vllm_config.available_kv_cache_memory()] * num_workers
    if len(available_memory) != num_workers:
        raise ConfigError("available_memory", list(available_memory),
                          f"must give one value per worker ({num_workers})")
    for i, m in enumerate(available_memory):
        require_int(f"available_memory[{i}]", m, minimum=0, maximum=MAX_BYTES)
    return list(available_memory)


def get_kv_cache_configs(vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]],
                         available_memory: Sequence[int] | None = None) -> StartupPlan:
    """Plan every worker's KV cache and run the startup check (``get_kv_cache_configs``).

    Raises :class:`StartupCheckError` when the check refuses (as upstream raises
    ``ValueError``); use :func:`plan_kv_cache` for a plan that records the refusal.
    """
    plan = plan_kv_cache(vllm_config, kv_cache_specs, available_memory)
    if not plan.starts:
        raise StartupCheckError(plan.error or "startup check failed",
                                max_model_len=plan.vllm_config.max_model_len,
                                needed_bytes=plan.bytes_per_block * plan.blocks_needed_per_request,
                                available_bytes=min(plan.check_memory),
                                estimated_max_model_len=0)
    return plan


def plan_kv_cache(vllm_config: VllmConfig, kv_cache_specs: Sequence[Mapping[str, KVCacheSpec]],
                  available_memory: Sequence[int] | None = None) -> StartupPlan:
    """Like :func:`get_kv_cache_configs`, but returns the plan with ``starts=False`` on refusal.

    First the checks upstream's config objects run (:func:`validate_engine_config`): a config
    built past kvverify's own validation (the bad-input property) meets the engine's."""
    validate_engine_config(vllm_config)
    if not kv_cache_specs:
        raise ConfigError("kv_cache_specs", [], "must list at least one worker's specs")
    global_groups = get_global_kv_cache_groups(vllm_config, kv_cache_specs)
    worker_groups = [project_groups_to_worker(global_groups, w) for w in kv_cache_specs]
    memory = _available_memory(vllm_config, available_memory, len(kv_cache_specs))
    # the groups each worker is planned by: upstream's guards (`if not groups`) never fire for a
    # pipeline stage without KV cache layers, whose groups are there with no layers (F15); under
    # the fix such a worker is planned as holding no KV cache
    kv_groups = ([g if holds_kv_cache(g) else [] for g in worker_groups]
                 if fixes.is_on("kv_less_stage_planned") else worker_groups)

    override = vllm_config.num_gpu_blocks_override
    raw = memory
    bpbs = [pool_bytes_per_block(g) for g in kv_groups]
    memory = [arith.startup_available_memory(m, b, override) if g else m
              for g, m, b in zip(kv_groups, raw, bpbs)]
    check_mem = [arith.startup_check_memory(m, b, override) if g else m
                 for g, m, b in zip(kv_groups, raw, bpbs)]

    config = vllm_config
    auto_fit_len: int | None = None
    error: str | None = None
    if vllm_config.auto_max_model_len:
        config = vllm_config.with_max_model_len(vllm_config.planning_max_model_len)
        search_mem = [arith.auto_fit_search_memory(m, b, override) if g else m
                      for g, m, b in zip(kv_groups, raw, bpbs)]
        try:
            auto_fit_len = _auto_fit_max_model_len(config, kv_groups, search_mem)
            config = config.with_max_model_len(auto_fit_len)
        except StartupCheckError as e:
            error = str(e)

    if error is None:
        for groups, mem in zip(kv_groups, check_mem):
            if not groups:
                continue
            try:
                check_enough_kv_cache_memory_for_groups(mem, groups, config)
            except StartupCheckError as e:
                error = str(e)
                break

    configs = []
    for groups, planned, mem, bpb in zip(worker_groups, kv_groups, raw, bpbs):
        num_blocks = arith.runtime_num_blocks(mem, bpb, override) if planned else 1
        configs.append(get_kv_cache_config_from_groups(groups, num_blocks))
    min_blocks = min_num_blocks(configs, kv_groups)
    configs = [c if c.num_blocks == min_blocks else
               get_kv_cache_config_from_groups(c.kv_cache_groups, min_blocks) for c in configs]

    config = _engine_block_size(config, global_groups)
    return StartupPlan(
        vllm_config=config, groups=tuple(global_groups), kv_cache_configs=tuple(configs),
        available_memory=tuple(memory), check_memory=tuple(check_mem),
        bytes_per_block=bytes_per_block(global_groups),
        blocks_per_group=tuple(group_blocks_per_request(g, config) for g in global_groups),
        starts=error is None, error=error, auto_fit_max_model_len=auto_fit_len,
        worker_groups=tuple(tuple(g) for g in worker_groups))


def min_num_blocks(configs: Sequence[KVCacheConfig], kv_groups: Sequence[Sequence[KVCacheGroupSpec]]) -> int:
    """``min_num_blocks``: every worker takes the smallest block count. Under the F15 fix a worker
    planned without KV cache (its 1 block) is left out, which would leave the others only the null
    block (all workers without KV cache: 1, as upstream)."""
    counted = [c for c, planned in zip(configs, kv_groups) if planned or not fixes.is_on("kv_less_stage_planned")]
    return min(c.num_blocks for c in counted or configs)


def _engine_block_size(config: VllmConfig, groups: Sequence[KVCacheGroupSpec]) -> VllmConfig:
    """``EngineCore._initialize_kv_caches``: ``cache_config.block_size`` becomes the smallest
    prefix-cacheable group block size before block sizes are resolved (all groups if none)."""
    if not groups:
        return config
    cacheable = [g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable]
    block_size = min(cacheable or [g.kv_cache_spec.block_size for g in groups])
    return config if block_size == config.block_size else evolve(config, block_size=block_size)


def _auto_fit_max_model_len(config: VllmConfig, worker_groups: Sequence[Sequence[KVCacheGroupSpec]],
                            check_memory: Sequence[int]) -> int:
    """``_auto_fit_max_model_len``: the largest length every worker fits; only ever lowers L."""
    original = config.max_model_len
    if all(not g for g in worker_groups):
        return original
    best = original
    for groups, mem in zip(worker_groups, check_memory):
        if groups:
            best = min(best, estimate_max_model_len_from_groups(groups, config, mem, upper=original))
    if best <= 0:
        raise StartupCheckError(
            "Cannot auto-fit max_model_len: not enough KV cache memory to serve even a single "
            "token. Try increasing `gpu_memory_utilization`.",
            max_model_len=original, needed_bytes=0, available_bytes=min(check_memory),
            estimated_max_model_len=0)
    return best


def per_layer_memory_usage_bytes(kv_cache_spec: Mapping[str, KVCacheSpec], vllm_config: VllmConfig) -> int:
    """``max_memory_usage_bytes(vllm_config, kv_cache_spec.values())``: the per-layer sum the
    public helpers compare. Under ``check_plans_computed_tokens`` (finding F3) each spec sizes
    the tokens whose KV is written, as the patch's ``max_kv_tokens_per_request`` does."""
    planned = arith.planned_request_tokens(vllm_config.max_model_len, vllm_config.num_lookahead_tokens)
    if planned != vllm_config.max_model_len:
        vllm_config = vllm_config.with_max_model_len(planned)
    return sum(s.max_memory_usage_bytes(vllm_config) for s in kv_cache_spec.values())


def estimate_max_model_len(vllm_config: VllmConfig, kv_cache_spec: Mapping[str, KVCacheSpec],
                           available_memory: int) -> int:
    """Public ``estimate_max_model_len``, as upstream: the largest length in ``[1, L]`` whose
    per-*layer* sum of ``max_memory_usage_bytes`` fits ``available_memory``; 0 if none.

    Upstream's public helper neither reserves the null block nor pads layers into groups,
    so it can disagree with the planner (finding F6); the planner uses
    :func:`estimate_max_model_len_from_groups`. Under the proposed fix
    ``capacity_helpers_plan_like_engine`` it plans as the engine does: grouped specs, null
    block reserved.
    """
    if fixes.is_on("capacity_helpers_plan_like_engine"):
        groups = get_kv_cache_groups(vllm_config, kv_cache_spec)
        return estimate_max_model_len_from_groups(groups, vllm_config, available_memory - bytes_per_block(groups))

    def fits(length: int) -> bool:
        return per_layer_memory_usage_bytes(kv_cache_spec, vllm_config.with_max_model_len(length)) <= available_memory

    return binary_search_max(fits, vllm_config.planning_max_model_len)


def check_enough_kv_cache_memory(vllm_config: VllmConfig, kv_cache_spec: Mapping[str, KVCacheSpec],
                                 available_memory: int) -> None:
    """Public ``check_enough_kv_cache_memory``, as upstream: reserve one pool block for the
    null block, then compare the per-*layer* sum of ``max_memory_usage_bytes`` (finding F6:
    the planner compares padded groups). Raises :class:`StartupCheckError`.

    ``max_model_len=-1`` (auto) is checked at what upstream's ``ModelConfig`` resolves it to
    before any check runs, the derived maximum (``max_position_embeddings``), as
    :func:`estimate_max_model_len` searches up to it — not at ``-1`` (which would need ~0
    blocks and pass everything).
    """
    if not kv_cache_spec:
        return
    groups = get_kv_cache_groups(vllm_config, kv_cache_spec)
    check = available_memory - bytes_per_block(groups) if groups else available_memory
    config = vllm_config.with_max_model_len(vllm_config.planning_max_model_len)
    if check <= 0:
        raise StartupCheckError("No available memory for the cache blocks.", max_model_len=config.max_model_len,
                                needed_bytes=0, available_bytes=check, estimated_max_model_len=0)
    needed = per_layer_memory_usage_bytes(kv_cache_spec, config)
    fixed = fixes.is_on("capacity_helpers_plan_like_engine")  # F6: the planner's grouped need
    if fixed:
        needed = max_memory_usage_bytes_from_groups(groups, config)
    if needed > check:
        estimate = (estimate_max_model_len_from_groups(groups, config, check) if fixed
                    else estimate_max_model_len(config, kv_cache_spec, check))
        raise StartupCheckError(
            f"To serve at least one request with the model's max seq len ({config.max_model_len}), "
            f"{needed} bytes of KV cache are needed, which is larger than the available KV cache "
            f"memory ({check} bytes). "
            + (f"Based on the available memory, the estimated maximum model length is {estimate}. "
               if estimate > 0 else ""),
            max_model_len=config.max_model_len, needed_bytes=needed, available_bytes=check,
            estimated_max_model_len=estimate)


def get_max_concurrency_for_kv_cache_config(vllm_config: VllmConfig,
                                            kv_cache_config: KVCacheConfig) -> float:
    """``N / sum_g blocks_g(L)``: upstream divides by ``N``, not the usable ``N - 1``."""
    per_request = sum(group_blocks_per_request(g, vllm_config) for g in kv_cache_config.kv_cache_groups)
    if per_request == 0:
        return float("inf")
    return arith.concurrency_blocks(kv_cache_config.num_blocks) / per_request


def layer_specs(groups: Sequence[KVCacheGroupSpec]) -> dict[str, KVCacheSpec]:
    """Layer name -> the (unified) spec it is planned with."""
    return {n: per_layer_spec(g, n) for g in groups for n in g.layer_names}


__all__ = [
    "KVCacheConfig", "KVCacheTensor", "StartupPlan", "bytes_per_block", "blocks_per_request",
    "check_enough_kv_cache_memory", "check_enough_kv_cache_memory_for_groups", "estimate_max_model_len", "estimate_max_model_len_from_groups",
    "get_kv_cache_config_from_groups", "get_kv_cache_configs", "get_max_concurrency_for_kv_cache_config",
    "holds_kv_cache", "max_memory_usage_bytes_from_groups", "min_num_blocks", "plan_kv_cache",
    "pool_bytes_per_block", "iter_layer_specs", "layer_specs",
]
