"""Deliberately wrong plans, each of which one named harness check must catch.

Pure functions over a :class:`~kvverify.reference.planner.KVCacheConfig` (no torch), used by the
mutation tests and available to anyone checking that the harness still has teeth.

=======================  ===================================  ==============================
mutation                 what is wrong                        caught by
=======================  ===================================  ==============================
``one_block_short``      the backing holds ``N - 1`` blocks   ``harness.num_blocks``
                         but the plan says ``N``
``tensor_too_small``     one tensor's size is one page short  ``harness.tensor_size``
``layers_share_in_group``  two layers of one group overlaid   ``harness.views_disjoint``
``groups_misaligned``    group 1 overlaid on group 0 shifted  ``harness.views_disjoint``
                         by one block (block b on b + 1)
``no_blocks``            ``num_blocks = 0``                   ``harness.null_block``
=======================  ===================================  ==============================
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from kvverify.errors import ConfigError
from kvverify.harness.geometry import layer_group_index, resolve_layer_specs
from kvverify.reference.planner import KVCacheConfig


def _with_tensors(config: KVCacheConfig, tensors: list) -> KVCacheConfig:
    return replace(config, kv_cache_tensors=tuple(tensors))


def one_block_short(config: KVCacheConfig) -> KVCacheConfig:
    """Every tensor (the one backing) sized for ``num_blocks - 1`` blocks, strides unchanged."""
    if not config.kv_cache_tensors or config.num_blocks < 1:
        raise ConfigError("config", "no tensors", "one_block_short needs a plan with tensors and blocks")
    shrink = max(t.size for t in config.kv_cache_tensors) // config.num_blocks
    return _with_tensors(config, [replace(t, size=t.size - shrink) for t in config.kv_cache_tensors])


def tensor_too_small(config: KVCacheConfig, tensor_index: int = -1) -> KVCacheConfig:
    """One tensor declares a size one page smaller than its layers need."""
    if not config.kv_cache_tensors:
        raise ConfigError("config", "no tensors", "tensor_too_small needs a plan with tensors")
    tensors = list(config.kv_cache_tensors)
    t = tensors[tensor_index]
    specs = resolve_layer_specs(config)
    page = specs[t.layers[-1]].real_page_size_bytes
    tensors[tensor_index] = replace(t, size=t.size - page)
    return _with_tensors(config, tensors)


def layers_share_in_group(config: KVCacheConfig) -> KVCacheConfig:
    """Overlay two layers of the same group (layer stride 0, or one tensor on another)."""
    tensors = list(config.kv_cache_tensors)
    for i, t in enumerate(tensors):
        if len(t.layers) >= 2:
            tensors[i] = replace(t, layer_stride=0)
            return _with_tensors(config, tensors)
    groups = layer_group_index(config)
    for i, t in enumerate(tensors):
        for j in range(i + 1, len(tensors)):
            u = tensors[j]
            if t.layers and u.layers and groups.get(t.layers[0]) == groups.get(u.layers[0]):
                tensors[j] = replace(u, offset=t.offset)
                return _with_tensors(config, tensors)
    raise ConfigError("config", "no two layers in one group",
                      "layers_share_in_group needs a group with at least two layers")


def groups_misaligned(config: KVCacheConfig) -> KVCacheConfig:
    """Overlay group 1 on group 0 shifted by one block: group 1's block b on group 0's b + 1."""
    groups = layer_group_index(config)
    tensors = list(config.kv_cache_tensors)
    for i, t in enumerate(tensors):
        if t.layers and groups.get(t.layers[0], 0) >= 1:
            tensors[i] = replace(t, offset=t.offset + t.block_stride)
            return _with_tensors(config, tensors)
    raise ConfigError("config", "one group", "groups_misaligned needs a plan with two groups")


def no_blocks(config: KVCacheConfig) -> KVCacheConfig:
    """A plan with no blocks at all, so not even the null block."""
    return replace(config, num_blocks=0,
                   kv_cache_tensors=tuple(replace(t, size=0, layer_stride=0) for t in config.kv_cache_tensors))


MUTATIONS: dict[str, tuple[Callable[[KVCacheConfig], KVCacheConfig], str]] = {
    "one_block_short": (one_block_short, "harness.num_blocks"),
    "tensor_too_small": (tensor_too_small, "harness.tensor_size"),
    "layers_share_in_group": (layers_share_in_group, "harness.views_disjoint"),
    "groups_misaligned": (groups_misaligned, "harness.views_disjoint"),
    "no_blocks": (no_blocks, "harness.null_block"),
}
"""Mutation name -> (function, the check that must catch it)."""

__all__ = ["MUTATIONS", "groups_misaligned", "layers_share_in_group", "no_blocks", "one_block_short",
           "tensor_too_small"]
