"""The runtime on upstream: the pool, the KV cache manager and empty-pool admission.

Upstream objects are rebuilt from the plan on every call (a fresh ``VllmConfig`` each
time: upstream mutates it), as ``EngineCore._initialize_kv_caches`` leaves them for the
installed release: the cache block size set from the groups, then the block sizes the
release resolves (``resolve_kv_cache_block_sizes`` where it has one; before 0.20 the
engine uses the cache block size for both, inline). What the release has is asked of
:class:`~.compat.Compat` (``up.compat``), never probed here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvverify.reference import specs as kv
from kvverify.reference.block_sizes import BlockSizeError
from kvverify.reference.planner import StartupPlan
from kvverify.targets.vllm import compat
from kvverify.targets.vllm.config import runtime_len, upstream_config
from kvverify.targets.vllm.env import LOCK, Upstream, preserved_environ
from kvverify.targets.vllm.knobs import apply_kv_cache_config_knobs
from kvverify.targets.vllm.refusals import unsupported
from kvverify.targets.vllm.specs import Translator

if TYPE_CHECKING:
    from kvverify.targets.vllm.target import VllmTarget

#: a block hasher upstream's ``Request`` takes (``get_request_block_hasher(...)``), or none
BlockHasher = Callable[..., Any] | None


@dataclass
class PlanObjects:
    """Upstream objects for one plan (rebuilt per call)."""

    vc: Any
    translator: Translator
    worker_configs: list[Any]
    scheduler_config: Any
    scheduler_block_size: int
    hash_block_size: int


def build(target: VllmTarget, plan: StartupPlan, resolve_block_sizes: bool = True) -> PlanObjects:
    """Upstream objects for a plan, as ``EngineCore._initialize_kv_caches`` leaves them."""
    up = target.up
    tr = Translator(up)
    config = plan.vllm_config
    with preserved_environ():
        vc = upstream_config(config, max_model_len=runtime_len(config))
    workers = [tr.kv_cache_config(c) for c in plan.kv_cache_configs]
    sched_cfg = apply_kv_cache_config_knobs(up.compat, up.generate_scheduler_kv_cache_config(workers), config)
    vc.cache_config.num_gpu_blocks = sched_cfg.num_blocks
    groups = sched_cfg.kv_cache_groups
    if groups:
        # The engine sets the cache block size to the smallest group's (>= 0.32: smallest
        # prefix-cacheable group's; a pure-Mamba model in mode none: max_model_len).
        sizes = [g.kv_cache_spec.block_size for g in groups
                 if not up.compat.prefix_cacheable or g.kv_cache_spec.prefix_cacheable]
        vc.cache_config.block_size = min(sizes or [g.kv_cache_spec.block_size for g in groups])
    sbs = hbs = 0
    if resolve_block_sizes:
        if up.compat.block_size_resolution:
            try:
                sbs, hbs = (int(x) for x in up.resolve_kv_cache_block_sizes(sched_cfg, vc))
            except ValueError as e:
                raise BlockSizeError(str(e)) from e
        else:  # EngineCore before resolve_kv_cache_block_sizes: the cache block size, both
            sbs = hbs = int(vc.cache_config.block_size)
    return PlanObjects(vc, tr, workers, sched_cfg, sbs, hbs)


def block_hasher(target: VllmTarget, vc: Any, hash_block_size: int) -> BlockHasher:
    if not vc.cache_config.enable_prefix_caching:
        return None
    up = target.up
    algo = vc.cache_config.prefix_caching_hash_algo
    with LOCK:
        fn = up.hash_fns.get(algo)
        if fn is None:
            fn = up.get_hash_fn_by_name(algo)
            up.init_none_hash(fn)
            up.hash_fns[algo] = fn
    hasher: BlockHasher = up.get_request_block_hasher(hash_block_size, fn)
    return hasher


#: KVCacheManager keywords a release may lack, with the value meaning "as before it existed"
MANAGER_NEUTRAL = {"scheduler_block_size": None, "max_in_flight_tokens": None, "watermark": 0.0}


def kv_cache_manager(target: VllmTarget, plan: StartupPlan) -> UpstreamKVCacheManager:
    """A fresh upstream ``KVCacheManager`` over the plan's pool, built as the Scheduler builds it."""
    up = target.up
    caps = up.compat
    u = build(target, plan)
    cfg = plan.vllm_config
    kw: dict[str, Any] = dict(
              kv_cache_config=u.scheduler_config, max_model_len=u.vc.model_config.max_model_len,
              scheduler_block_size=u.scheduler_block_size, hash_block_size=u.hash_block_size,
              max_in_flight_tokens=u.vc.max_in_flight_tokens if caps.in_flight_tokens else None,
              enable_caching=cfg.enable_prefix_caching, watermark=cfg.watermark)
    if not caps.has("KVCacheManager", "scheduler_block_size"):
        kw["scheduler_block_size"] = None  # one block size: the hash block size is the cache's
    if not caps.has("KVCacheManager", "max_in_flight_tokens"):
        kw["max_in_flight_tokens"] = None
        if caps.in_flight_param("KVCacheManager") == "max_num_batched_tokens":
            # 0.20 - 0.25: their Scheduler passes scheduler_config.max_num_batched_tokens
            kw["max_num_batched_tokens"] = u.vc.scheduler_config.max_num_batched_tokens
    try:
        kw = compat.fit_kwargs(caps, "KVCacheManager", kw, MANAGER_NEUTRAL)
    except compat.KnobMissing as e:
        unsupported(f"vLLM {caps.version}: {e}")
    kvm = up.KVCacheManager(**kw)
    return UpstreamKVCacheManager(kvm, u.translator, block_hasher(target, u.vc, u.hash_block_size), caps)


def computed_blocks(kvm: Any, req: Any) -> tuple[Any, int]:
    """``get_computed_blocks``: ``(blocks, hits)`` (>= 0.20 adds a third value, the Marconi junction)."""
    got = kvm.get_computed_blocks(req)
    return got[0], got[1]


#: get_num_blocks_to_allocate keywords a release may lack and that can go (no cap, no end)
GATE_DROPPABLE = {"num_local_computed_tokens": None, "apply_admission_cap": True, "prefill_end": 0,
                  "num_tokens_main_model": None}  # the last: == num_tokens without speculation (absent in 0.14)


def gate_kwargs(caps: compat.Compat, kw: dict[str, Any]) -> dict[str, Any]:
    """``kw`` for the release's ``get_num_blocks_to_allocate``: the :data:`GATE_DROPPABLE`
    keywords it lacks are dropped (any other is passed, so a missing one is a clear TypeError)."""
    known = caps.params.get("get_num_blocks_to_allocate", frozenset())
    return {k: v for k, v in kw.items() if k in known or k not in GATE_DROPPABLE}


def admit_on_empty_pool(target: VllmTarget, plan: StartupPlan, num_tokens: int) -> tuple[bool, dict[str, int]]:
    """Ask the release's full-sequence gate to admit a prompt of ``num_tokens`` on an empty pool.

    >= 0.20: ``allocate_slots(full_sequence_must_fit=True)``; before: the scheduler's
    ``can_fit_full_sequence`` then ``allocate_slots`` for the first chunk.
    """
    up = target.up
    caps = up.compat
    view = kv_cache_manager(target, plan)
    kvm = view.upstream
    req = request(target, view, "probe", list(range(num_tokens)), 1)
    blocks, hit = computed_blocks(kvm, req)
    chunk = min(num_tokens - hit, plan.vllm_config.max_num_batched_tokens)
    full = min(req.num_tokens, kvm.max_model_len)
    local = req.num_computed_tokens + hit
    gate_kw: dict[str, Any] = dict(request_id=req.request_id, num_tokens=full, new_computed_blocks=blocks.blocks,
                   num_encoder_tokens=0, total_computed_tokens=min(local, kvm.max_model_len),
                   num_local_computed_tokens=local, num_tokens_main_model=full, apply_admission_cap=True,
                   prefill_end=max(req.num_prompt_tokens, req.num_tokens - 1))
    need = int(kvm.coordinator.get_num_blocks_to_allocate(**gate_kwargs(caps, gate_kw)))
    free = int(kvm.block_pool.get_num_free_blocks())
    if caps.admission_gate == "full_sequence_must_fit":
        alloc_kw: dict[str, Any] = dict(full_sequence_must_fit=True)
        if caps.has("allocate_slots", "has_scheduled_reqs"):
            alloc_kw["has_scheduled_reqs"] = False
        got = kvm.allocate_slots(req, chunk, hit, blocks, **alloc_kw)
    elif caps.admission_gate == "can_fit_full_sequence":
        got = None
        if kvm.can_fit_full_sequence(req, num_new_computed_tokens=hit, new_computed_blocks=blocks):
            got = kvm.allocate_slots(req, chunk, hit, blocks)
    else:  # <= 0.18: no full-sequence gate; the Scheduler admits a request whose first chunk allocates
        got = kvm.allocate_slots(req, chunk, hit, blocks)
    return got is not None, {"gate_charged_blocks": need, "free_blocks": free}


def request(target: VllmTarget, view: UpstreamKVCacheManager, request_id: str, prompt: Sequence[int],
            max_tokens: int, priority: int = 0, arrival_time: float | None = None) -> Any:
    up = target.up
    extra: dict[str, Any] = {}
    if up.compat.has("Request", "eos_token_id"):  # a required argument up to 0.16 (ignore_eos anyway)
        extra["eos_token_id"] = None
    return up.Request(request_id=request_id, prompt_token_ids=list(prompt),
                      sampling_params=up.SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                      pooling_params=None, block_hasher=view.block_hasher,
                      priority=priority, arrival_time=arrival_time, **extra)


# ------------------------------------------------------------------ runtime views

class BlockPoolView:
    """Upstream ``BlockPool`` with the read-only helpers kvverify's pool invariants use."""

    def __init__(self, pool: Any, caps: compat.Compat) -> None:
        self._pool = pool
        self._caps = caps

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def free_block_ids(self) -> list[int]:
        return [int(b.block_id) for b in self._pool.free_block_queue.get_all_free_blocks()]

    def held_block_ids(self) -> list[int]:
        return [int(b.block_id) for b in self._pool.blocks if b.ref_cnt > 0 and not b.is_null]

    def ref_counts(self) -> dict[int, int]:
        return {int(b.block_id): int(b.ref_cnt) for b in self._pool.blocks if not b.is_null}

    def cached_entries(self) -> Iterator[tuple[Any, Any]]:
        cache = self._pool.cached_block_hash_to_block
        # a BlockHashToBlockMap keeps its dict in ``_cache`` (Compat.hash_map); else a plain dict
        entries = cache._cache if self._caps.hash_map else cache
        # a block filed under several keys (Compat.pool_hash_sets): its other keys, by block id
        others = self._pool.cached_block_hashes_by_block if self._caps.pool_hash_sets else {}
        for key, blocks in entries.items():
            for block in (blocks.values() if isinstance(blocks, dict) else (blocks,)):
                yield key, CachedBlockView(block, others)


class CachedBlockView:
    """A cached block seen through one of its keys (upstream may file a block under several:
    ``others[block_id]``, ``BlockPool.cached_block_hashes_by_block``)."""

    def __init__(self, block: Any, others: Any) -> None:
        self._block, self._others = block, others

    def __getattr__(self, name: str) -> Any:
        return getattr(self._block, name)

    @property
    def block_hash(self) -> Any:
        extra = self._others.get(self._block.block_id)
        if not extra:
            return self._block.block_hash
        return AnyOf({self._block.block_hash, *extra} - {None})


class AnyOf:
    """Compares equal to any member (a block filed under several hash keys)."""

    def __init__(self, keys: Any) -> None:
        self.keys = set(keys)

    def __eq__(self, other: object) -> bool:
        return other in self.keys

    def __ne__(self, other: object) -> bool:
        return other not in self.keys

    __hash__ = None  # type: ignore[assignment]


class ManagerView:
    """One upstream single-type manager with its spec in kvverify's terms."""

    def __init__(self, manager: Any, spec: kv.KVCacheSpec) -> None:
        self._manager = manager
        self.kv_cache_spec = spec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)


class CoordinatorView:
    def __init__(self, coordinator: Any, translator: Translator) -> None:
        self._coordinator = coordinator
        self.single_type_managers = [ManagerView(m, translator.spec_back(m.kv_cache_spec))
                                     for m in coordinator.single_type_managers]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._coordinator, name)


class UpstreamKVCacheManager:
    """An upstream ``KVCacheManager`` seen through the reference manager's surface.

    ``allocate_slots`` is routed through this object (the upstream Scheduler's calls
    too), and every successful call records ``last_allocation = (predicted, pulled)``:
    the last ``get_num_blocks_to_allocate`` the call made (the per-step prediction) and
    the blocks the free queue lost from that moment to the end of the call — what
    :class:`kvverify.invariants.allocation.AllocationRecorder` reads on the reference.
    """

    def __init__(self, kvm: Any, translator: Translator, block_hasher: BlockHasher, caps: compat.Compat) -> None:
        self.upstream = kvm
        self.block_hasher = block_hasher
        self.request_block_hasher = block_hasher
        self.block_pool = BlockPoolView(kvm.block_pool, caps)
        self.coordinator = CoordinatorView(kvm.coordinator, translator)
        self.last_allocation: tuple[int, int] | None = None
        #: ``(reserved_blocks, free blocks at the per-step check)`` of the last successful call
        self.last_reservation: tuple[int, int] | None = None
        coordinator = kvm.coordinator
        predict = coordinator.get_num_blocks_to_allocate
        pool = kvm.block_pool
        state: dict[str, tuple[int, int]] = {}

        def counted(*args: Any, **kwargs: Any) -> int:
            n = int(predict(*args, **kwargs))
            state["last"] = (n, int(pool.get_num_free_blocks()))
            return n

        coordinator.get_num_blocks_to_allocate = counted
        original = kvm.allocate_slots

        def instrumented(*args: Any, **kwargs: Any) -> Any:
            state.clear()
            got = original(*args, **kwargs)
            if got is not None and "last" in state:
                n, free = state["last"]
                self.last_allocation = (n, free - int(pool.get_num_free_blocks()))
                self.last_reservation = (int(kwargs.get("reserved_blocks", 0) or 0), free)
            return got

        self.allocate_slots = instrumented
        kvm.allocate_slots = lambda *a, **k: self.allocate_slots(*a, **k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.upstream, name)

    def get_num_free_blocks(self) -> int:
        return int(self.upstream.block_pool.get_num_free_blocks())

    @property
    def usage(self) -> float:
        return float(self.upstream.usage)

    def num_held_blocks(self, request_id: str) -> int:
        return sum(1 for m in self.upstream.coordinator.single_type_managers
                   for b in m.req_to_blocks.get(request_id, ()) if not b.is_null)


__all__ = ["BlockHasher", "PlanObjects", "UpstreamKVCacheManager", "admit_on_empty_pool", "build", "kv_cache_manager", "request"]
