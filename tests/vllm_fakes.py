"""Fake vLLM releases for the adapter's tests (``tests/test_vllm_compat.py``): plain module
objects whose functions and classes carry the shapes of an old (0.19-like), a 0.20-like, a
0.25-like and a new (0.33-like) release, so every capability probe of
:func:`kvverify.targets.vllm.compat.detect` is exercised both ways without installing vLLM.
"""

from __future__ import annotations

import dataclasses
import types
from types import SimpleNamespace
from typing import Any

from kvverify.targets.vllm import compat


def module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    return mod


@dataclasses.dataclass
class StridedTensor:
    size: int
    layers: list
    layer_stride: int
    block_stride: int
    offset: int = 0


@dataclasses.dataclass
class SharedTensor:
    size: int
    shared_by: list


Modules = dict[str, types.ModuleType | None]


def new_release() -> Modules:
    """The shapes of vLLM 0.33.0: planning module, global groups, strided tensors, resolver, and
    every knob and attribute the adapter asks about."""

    def get_kv_cache_configs(vllm_config, kv_cache_specs, available_memory, global_kv_cache_groups): ...

    def get_global_kv_cache_groups(vllm_config, kv_cache_specs): ...

    def get_kv_cache_coordinator(kv_cache_config, max_model_len, max_in_flight_tokens, use_eagle, enable_caching,
                                 enable_kv_cache_events, dcp_world_size, pcp_world_size, scheduler_block_size,
                                 hash_block_size, metrics_collector=None): ...

    def resolve_kv_cache_block_sizes(kv_cache_config, vllm_config): ...

    def resolve_cache_hit_alignment_tokens(kv_cache_config, vllm_config, scheduler_block_size, hash_block_size): ...

    def resolve_kv_cache_layout(vllm_config, layouts, specs): ...

    def get_supported_kv_cache_layouts(preferences): ...

    class KVCacheCoordinator:
        def get_num_blocks_to_allocate(self, request_id, num_tokens, new_computed_blocks, num_encoder_tokens,
                                       total_computed_tokens, num_local_computed_tokens, num_tokens_main_model,
                                       apply_admission_cap=False, prefill_end=0): ...

    class KVCacheManager:
        def __init__(self, kv_cache_config, max_model_len, scheduler_block_size, hash_block_size,
                     max_in_flight_tokens=None, enable_caching=True, watermark=0.0): ...

        def allocate_slots(self, request, num_new_tokens, num_new_computed_tokens=0, new_computed_blocks=None,
                           full_sequence_must_fit=False, has_scheduled_reqs=True): ...

    class Scheduler:
        def __init__(self, vllm_config, kv_cache_config, structured_output_manager, block_size,
                     hash_block_size=None, log_stats=False):
            self.kv_holding_waiting: list = []
            self._spec_decode_step_blocks = 0
            # the KV-transfer state the connector adapter reads (compat.TRANSFER_STATE_ATTRS)
            self.finished_recving_kv_req_ids: set = set()
            self.failed_recving_kv_req_ids: set = set()
            self.processed_step_seq = self.sched_step_seq = 0
            self.deferred_frees: list = []
            self.defer_block_free = False
            self._inflight_prefills: set = set()
            self.deferred_waiting: set = set()

        def schedule(self, scheduled_running_reqs=(), num_computed_tokens=0):
            pad_spec_decode = False
            if scheduled_running_reqs or num_computed_tokens > 0:
                pad_spec_decode = True
            return pad_spec_decode

    class KVConnectorBase_V1:
        pass

    class SupportsHMA:
        pass

    class KVConnectorMetadata:
        pass

    @dataclasses.dataclass
    class KVConnectorOutput:
        finished_sending: set | None = None
        finished_recving: set | None = None
        failed_recving: set | None = None

    @dataclasses.dataclass
    class KVTransferConfig:
        kv_connector: str | None = None
        kv_connector_module_path: str | None = None

    @dataclasses.dataclass
    class SchedulerOutput:
        num_scheduled_tokens: dict
        preempted_req_ids: set | None = None

    class Request:
        def __init__(self, request_id):
            self.shared_prefix_boundary = 0

    class BlockHashToBlockMap:
        def __init__(self):
            self._cache: dict = {}

    class BlockPool:
        def __init__(self, num_gpu_blocks):
            self.cached_block_hash_to_block = BlockHashToBlockMap()
            self.cached_block_hashes_by_block: dict = {}

    class KVCacheSpec:
        @property
        def prefix_cacheable(self) -> bool:
            return True

    class SlidingWindowSpec(KVCacheSpec):
        def max_admission_blocks_per_request(self, max_in_flight_tokens, max_model_len): ...

    class UniformTypeKVCacheSpecs(KVCacheSpec):
        def max_memory_usage_pages(self, vllm_config): ...

    @dataclasses.dataclass
    class KVCacheConfig:
        num_blocks: int
        prefix_cache_retention_interval: int | None = None

    @dataclasses.dataclass
    class CacheConfig:
        block_size: int = 16
        prefix_cache_retention_interval: int | None = 0

    class VllmConfig:
        @property
        def max_in_flight_tokens(self) -> int: ...

        @property
        def num_lookahead_tokens(self) -> int: ...

        @property
        def num_prefill_lookahead_tokens(self) -> int: ...

        @property
        def num_speculative_tokens(self) -> int: ...

    planning = module("p", get_kv_cache_configs=get_kv_cache_configs,
                      get_global_kv_cache_groups=get_global_kv_cache_groups,
                      _check_enough_kv_cache_memory=lambda *a: None, _auto_fit_max_model_len=lambda *a: None,
                      _project_kv_cache_groups_to_worker=lambda groups, worker: groups,
                      _pool_bytes_per_block_from_builder=lambda builder, vc, groups: 1,
                      estimate_max_model_len=lambda vc, specs, memory: 1,
                      check_enough_kv_cache_memory=lambda vc, specs, memory: None)
    return {
        "vllm.config": module("cfg", CacheConfig=CacheConfig, VllmConfig=VllmConfig, KVTransferConfig=KVTransferConfig),
        "vllm.v1.core.kv_cache_planning": planning,
        "vllm.v1.core.kv_cache_config_builder": module("b", get_kv_cache_config_builder=lambda vc: None),
        "vllm.v1.core.kv_cache_utils": module("u", resolve_kv_cache_block_sizes=resolve_kv_cache_block_sizes,
                                              resolve_cache_hit_alignment_tokens=resolve_cache_hit_alignment_tokens),
        "vllm.v1.kv_cache_interface": module("i", KVCacheTensor=StridedTensor, KVCacheSpec=KVCacheSpec,
                                             SlidingWindowSpec=SlidingWindowSpec, KVCacheConfig=KVCacheConfig,
                                             UniformTypeKVCacheSpecs=UniformTypeKVCacheSpecs),
        "vllm.v1.attention.backends.utils": module("a", resolve_kv_cache_layout=resolve_kv_cache_layout,
                                                   get_supported_kv_cache_layouts=get_supported_kv_cache_layouts),
        "vllm.v1.core.kv_cache_coordinator": module("c", get_kv_cache_coordinator=get_kv_cache_coordinator,
                                                    KVCacheCoordinator=KVCacheCoordinator),
        "vllm.v1.core.kv_cache_manager": module("m", KVCacheManager=KVCacheManager),
        "vllm.v1.core.block_pool": module("bp", BlockPool=BlockPool, BlockHashToBlockMap=BlockHashToBlockMap),
        "vllm.v1.core.sched.output": module("o", SchedulerOutput=SchedulerOutput),
        "vllm.v1.core.sched.scheduler": module("s", Scheduler=Scheduler),
        "vllm.v1.core.single_type_kv_cache_manager": module("t", register_all_kvcache_specs=lambda vc: None),
        "vllm.v1.request": module("r", Request=Request),
        "vllm.v1.outputs": module("out", KVConnectorOutput=KVConnectorOutput),
        "vllm.distributed.kv_transfer.kv_connector.v1.base": module(
            "kvb", KVConnectorBase_V1=KVConnectorBase_V1, SupportsHMA=SupportsHMA,
            KVConnectorMetadata=KVConnectorMetadata),
    }


def old_release() -> Modules:
    """The shapes of vLLM 0.19.1: planner in kv_cache_utils (3 arguments, the public check called
    inside), (size, shared_by) tensors, no resolver, ``can_fit_full_sequence``, one block size,
    none of the later knobs and attributes."""

    def get_kv_cache_configs(vllm_config, kv_cache_specs, available_memory): ...

    def get_kv_cache_coordinator(kv_cache_config, max_model_len, use_eagle, enable_caching, enable_kv_cache_events,
                                 dcp_world_size, pcp_world_size, hash_block_size, metrics_collector=None): ...

    class KVCacheCoordinator:
        def get_num_blocks_to_allocate(self, request_id, num_tokens, new_computed_blocks, num_encoder_tokens,
                                       total_computed_tokens, num_tokens_main_model): ...

    class KVCacheManager:
        def __init__(self, kv_cache_config, max_model_len, hash_block_size, enable_caching=True): ...

        def can_fit_full_sequence(self, request, num_new_computed_tokens=0, new_computed_blocks=None): ...

        def allocate_slots(self, request, num_new_tokens, num_new_computed_tokens=0, new_computed_blocks=None): ...

    class Scheduler:
        def __init__(self, vllm_config, kv_cache_config, structured_output_manager, block_size, log_stats=False):
            self.waiting: list = []

    @dataclasses.dataclass
    class SchedulerOutput:
        num_scheduled_tokens: dict

    class Request:
        def __init__(self, request_id):
            self.request_id = request_id

    class BlockPool:
        def __init__(self, num_gpu_blocks):
            self.cached_block_hash_to_block: dict = {}

    class KVCacheSpec:
        @property
        def page_size_bytes(self) -> int: ...

    class SlidingWindowSpec(KVCacheSpec):  # no admission cap: the startup bound is max_memory_usage_bytes alone
        def max_memory_usage_bytes(self, vllm_config): ...

    class UniformTypeKVCacheSpecs(KVCacheSpec):
        def max_memory_usage_bytes(self, vllm_config): ...

    @dataclasses.dataclass
    class KVCacheConfig:
        num_blocks: int

    @dataclasses.dataclass
    class CacheConfig:
        block_size: int = 16

    class VllmConfig:
        pass

    return {
        "vllm.config": module("cfg", CacheConfig=CacheConfig, VllmConfig=VllmConfig),
        "vllm.v1.core.kv_cache_planning": None,
        "vllm.v1.core.kv_cache_config_builder": None,
        "vllm.v1.core.kv_cache_utils": module("u", get_kv_cache_configs=get_kv_cache_configs,
                                              check_enough_kv_cache_memory=lambda vc, specs, memory: None),
        "vllm.v1.kv_cache_interface": module("i", KVCacheTensor=SharedTensor, KVCacheSpec=KVCacheSpec,
                                             SlidingWindowSpec=SlidingWindowSpec, KVCacheConfig=KVCacheConfig,
                                             UniformTypeKVCacheSpecs=UniformTypeKVCacheSpecs),
        "vllm.v1.attention.backends.utils": module("a"),
        "vllm.v1.core.kv_cache_coordinator": module("c", get_kv_cache_coordinator=get_kv_cache_coordinator,
                                                    KVCacheCoordinator=KVCacheCoordinator),
        "vllm.v1.core.kv_cache_manager": module("m", KVCacheManager=KVCacheManager),
        "vllm.v1.core.block_pool": module("bp", BlockPool=BlockPool),
        "vllm.v1.core.sched.output": module("o", SchedulerOutput=SchedulerOutput),
        "vllm.v1.core.sched.scheduler": module("s", Scheduler=Scheduler),
        "vllm.v1.core.single_type_kv_cache_manager": None,
        "vllm.v1.request": module("r", Request=Request),
    }


def caps_on_allocation_release() -> Modules:
    """The shapes of vLLM 0.20.0's caps: the specs have ``max_admission_blocks_per_request``,
    the coordinator's ``get_num_blocks_to_allocate`` no ``apply_admission_cap`` (the cap is
    applied to every call, the per-step allocation included)."""
    mods = old_release()

    class SlidingWindowSpec:
        def max_admission_blocks_per_request(self, max_num_batched_tokens, max_model_len): ...

    mods["vllm.v1.kv_cache_interface"] = module("i", KVCacheTensor=SharedTensor, SlidingWindowSpec=SlidingWindowSpec)
    return mods


def release_0_25() -> Modules:
    """0.20 - 0.25 shapes: the coordinator / manager window is ``max_num_batched_tokens``,
    ``_pool_bytes_per_block(vllm_config, groups)`` in the planner module."""
    mods = old_release()

    def get_kv_cache_configs(vllm_config, kv_cache_specs, available_memory): ...

    def _pool_bytes_per_block(vllm_config, kv_cache_groups): ...

    def get_kv_cache_coordinator(kv_cache_config, max_model_len, max_num_batched_tokens, use_eagle, enable_caching,
                                 enable_kv_cache_events, dcp_world_size, pcp_world_size, scheduler_block_size,
                                 hash_block_size, metrics_collector=None): ...

    class KVCacheManager:
        def __init__(self, kv_cache_config, max_model_len, scheduler_block_size, hash_block_size,
                     max_num_batched_tokens=None, enable_caching=True): ...

        def allocate_slots(self, request, num_new_tokens, full_sequence_must_fit=False): ...

    mods["vllm.v1.core.kv_cache_utils"] = module("u", get_kv_cache_configs=get_kv_cache_configs,
                                                 _pool_bytes_per_block=_pool_bytes_per_block,
                                                 resolve_kv_cache_block_sizes=lambda c, vc: (16, 16))
    mods["vllm.v1.core.kv_cache_coordinator"] = module("c", get_kv_cache_coordinator=get_kv_cache_coordinator)
    mods["vllm.v1.core.kv_cache_manager"] = module("m", KVCacheManager=KVCacheManager)
    return mods


def fake_up(iface: types.ModuleType, version: str = "0.27.1") -> SimpleNamespace:
    """An ``Upstream`` stand-in for the spec translation: ``iface`` as the interface module, its
    spec classes and fields detected as :func:`~kvverify.targets.vllm.compat.detect` does."""
    mods = old_release()
    mods["vllm.v1.kv_cache_interface"] = module("i", KVCacheTensor=SharedTensor, **{
        n: v for n, v in vars(iface).items() if isinstance(v, type)})
    torch = SimpleNamespace(bfloat16="torch.bfloat16", float32="torch.float32", float16="torch.float16")
    return SimpleNamespace(iface=iface, torch=torch, compat=compat.detect(version, mods))


def old_iface() -> types.ModuleType:
    @dataclasses.dataclass(frozen=True)
    class SlidingWindowSpec:  # no extra_retained_tokens, no head_size_v
        block_size: int
        num_kv_heads: int
        head_size: int
        dtype: str
        sliding_window: int
        page_size_padded: int | None = None

    return module("i", SlidingWindowSpec=SlidingWindowSpec)
