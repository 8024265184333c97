"""kvverify specs and plans <-> upstream specs and plans, both ways, for any supported release.

The spec table is the kinds registry (:mod:`kvverify.reference.kinds`): a registered kind
names its upstream class (``SpecKind.vllm_class``) and its spec's constructor fields are
copied across (``kinds.spec_fields``), so every registered kind translates both ways with
no list kept here. Only the uniform-type group spec (a structural wrapper, not a kind) is
special. A field the installed release's class lacks is dropped when it holds kvverify's
default (it then means what the release did before the field existed) and refused
otherwise (:func:`~.refusals.unsupported`: the example is rejected, with the reason); read
back, a missing field is kvverify's default. Which classes and fields the release has is
detected once (``Compat.spec_fields`` / ``spec_attrs``). Tensors translate between kvverify's
strided ``KVCacheTensor`` and the release's (:mod:`.compat`, ``tensor_layout``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from kvverify.errors import ConfigError, KVVerifyError
from kvverify.reference import kinds
from kvverify.reference import specs as kv
from kvverify.reference.grouping import KVCacheGroupSpec
from kvverify.reference.planner import KVCacheConfig, KVCacheTensor
from kvverify.targets.vllm.compat import DriftError
from kvverify.targets.vllm.env import Upstream
from kvverify.targets.vllm.refusals import unsupported

#: the structural group spec (not a registered kind): kvverify class <-> upstream class name
UNIFORM_TYPE_CLASS = "UniformTypeKVCacheSpecs"


def upstream_class_name(spec_cls: type[kv.KVCacheSpec]) -> str:
    """The upstream class a kvverify spec class translates to (from the kinds registry)."""
    if spec_cls is kv.UniformTypeKVCacheSpecs:
        return UNIFORM_TYPE_CLASS
    kind = kinds.kind_of(spec_cls)
    if kind is None:
        raise KVVerifyError(f"the vllm target cannot translate spec {spec_cls.__name__}: no registered kind")
    return kind.vllm_class


def kvverify_class(upstream_name: str) -> type[kv.KVCacheSpec]:
    """The kvverify spec class an upstream class name translates back to."""
    if upstream_name == UNIFORM_TYPE_CLASS:
        return kv.UniformTypeKVCacheSpecs
    kind = kinds.by_vllm_class().get(upstream_name)
    if kind is None:
        raise KVVerifyError(f"upstream produced a spec the vllm target cannot translate: {upstream_name}")
    return kind.spec_cls


_TORCH_DTYPE_NAMES = {
    "float32": "float32", "fp32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2",
    "int8": "int8", "uint8": "uint8",
}


#: field -> the value a release without the field implies (besides the field's default)
IMPLIED_WHEN_ABSENT: dict[str, Callable[[Any], Any]] = {
    "head_size_v": lambda s: s.head_size,  # before head_size_v: V heads are head_size wide
}


def _means_absent(s: kv.KVCacheSpec, name: str, defaults: dict[str, Any]) -> bool:
    """Whether ``s.name`` holds what a release without the field did anyway."""
    value = getattr(s, name)
    if name in defaults and value == defaults[name]:
        return True
    implied = IMPLIED_WHEN_ABSENT.get(name)
    return implied is not None and bool(value == implied(s))


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


class Translator:
    """kvverify specs <-> upstream specs for one call (remembers the dtype names used)."""

    def __init__(self, up: Upstream) -> None:
        self.up = up
        self.names: dict[Any, str] = {}

    @property
    def version(self) -> str:
        return self.up.compat.version

    # -- to upstream --

    def dtype(self, name: str) -> Any:
        if name not in _TORCH_DTYPE_NAMES:
            raise ConfigError("dtype", name, f"no torch dtype known for it; allowed: {sorted(_TORCH_DTYPE_NAMES)}")
        dt = getattr(self.up.torch, _TORCH_DTYPE_NAMES[name])
        self.names.setdefault(dt, name)
        return dt

    def _build(self, s: kv.KVCacheSpec, upstream_name: str, values: dict[str, Any]) -> Any:
        known = self.up.compat.spec_fields.get(upstream_name)
        if known is None:
            unsupported(f"vLLM {self.version} has no {upstream_name}")
        cls = getattr(self.up.iface, upstream_name)
        defaults = _defaults(type(s))
        kwargs = {}
        for name, value in values.items():
            if name in known:
                kwargs[name] = value
            elif _means_absent(s, name, defaults):
                continue  # the release predates the field; the value is what it did then
            else:
                unsupported(f"vLLM {self.version} has no {upstream_name}.{name} "
                            f"(the spec sets {name}={getattr(s, name)!r})")
        return cls(**kwargs)

    def _values_to(self, s: kv.KVCacheSpec) -> dict[str, Any]:
        values = {f: getattr(s, f) for f in kinds.spec_fields(type(s))}
        if "dtype" in values:
            values["dtype"] = self.dtype(values["dtype"])
        if "dtypes" in values:
            values["dtypes"] = tuple(self.dtype(d) for d in values["dtypes"])
        if "shapes" in values:
            values["shapes"] = tuple(tuple(x) for x in values["shapes"])
        return values

    def spec(self, s: kv.KVCacheSpec) -> Any:
        """kvverify spec -> the installed release's spec (same class name, same fields)."""
        if isinstance(s, kv.UniformTypeKVCacheSpecs):
            return self._build(s, UNIFORM_TYPE_CLASS, {
                "block_size": s.block_size, "kv_cache_specs": {n: self.spec(x) for n, x in s.kv_cache_specs}})
        if isinstance(s, kv.MLAAttentionSpec) and (s.sliding_window is not None or s.attention_chunk_size is not None):
            unsupported("MLAAttentionSpec with a window or chunk")
        return self._build(s, upstream_class_name(type(s)), self._values_to(s))

    def groups(self, groups: Sequence[KVCacheGroupSpec]) -> list[Any]:
        return [self.up.iface.KVCacheGroupSpec(list(g.layer_names), self.spec(g.kv_cache_spec))
                for g in groups]

    def kv_cache_config(self, cfg: KVCacheConfig) -> Any:
        i = self.up.iface
        if self.up.compat.tensor_layout == "strided":
            tensors = [i.KVCacheTensor(size=t.size, layers=list(t.layers), layer_stride=t.layer_stride,
                                       block_stride=t.block_stride, offset=t.offset)
                       for t in cfg.kv_cache_tensors]
        else:
            tensors = [i.KVCacheTensor(size=size, shared_by=list(layers))
                       for size, layers in shared_by_tensors(cfg)]
        return i.KVCacheConfig(num_blocks=cfg.num_blocks, kv_cache_tensors=tensors,
                               kv_cache_groups=self.groups(cfg.kv_cache_groups))

    # -- back to kvverify --

    def dtype_name(self, dt: Any) -> str:
        if dt in self.names:
            return self.names[dt]
        name = str(dt).removeprefix("torch.")
        return {"float8_e4m3fn": "fp8", "float8_e5m2": "fp8_e5m2"}.get(name, name)

    def spec_back(self, s: Any) -> kv.KVCacheSpec:
        """The release's spec -> kvverify's (by exact class name; a field the release lacks: the default)."""
        upstream_name = type(s).__name__
        cls = kvverify_class(upstream_name)
        attrs = self.up.compat.spec_attrs.get(upstream_name)
        if attrs is None:
            raise DriftError(f"vLLM {self.version}: upstream produced a {upstream_name}, which "
                             f"vllm.v1.kv_cache_interface does not define")
        if cls is kv.UniformTypeKVCacheSpecs:
            return kv.UniformTypeKVCacheSpecs(
                block_size=s.block_size,
                kv_cache_specs=tuple((n, self.spec_back(x)) for n, x in s.kv_cache_specs.items()))
        defaults = _defaults(cls)
        values: dict[str, Any] = {}
        for f in kinds.spec_fields(cls):
            value = getattr(s, f) if f in attrs else defaults[f]
            if value is None and defaults.get(f) is not None:
                value = defaults[f]  # e.g. an older MLAAttentionSpec's head_size_v=None: no V heads (0)
            values[f] = value
        if "dtype" in values:
            values["dtype"] = self.dtype_name(s.dtype)
        if "dtypes" in values:
            values["dtypes"] = tuple(self.dtype_name(d) for d in s.dtypes)
        if "shapes" in values:
            values["shapes"] = tuple(tuple(x) for x in s.shapes)
        page = s.page_size_bytes if "page_size_bytes" in attrs else None
        try:
            out = cls(**values)
        except KVVerifyError:
            if "head_size_v" not in defaults:
                raise
            # the release's field, read as kvverify reads it, makes the spec invalid (0.20's
            # padded MLA page: head_size_v = head_size counted, the padding below that page)
            out = cls(**{**values, "head_size_v": defaults["head_size_v"]})
        if isinstance(page, int) and out.page_size_bytes != page and "head_size_v" in defaults:
            # a release whose page ignores the field (0.27.1's MLA: head_size_v set, no V heads):
            # kvverify's default is what the release's page means
            alt = cls(**{**values, "head_size_v": defaults["head_size_v"]})
            out = alt if alt.page_size_bytes == page else out
        if isinstance(page, int) and out.page_size_bytes != page:  # the translation must keep the page
            raise KVVerifyError(f"vllm adapter: {type(s).__name__} of vLLM {self.version} has a {page}-byte page, "
                                f"its translation {out!r} {out.page_size_bytes} bytes")
        return out

    def groups_back(self, groups: Sequence[Any]) -> tuple[KVCacheGroupSpec, ...]:
        return tuple(KVCacheGroupSpec(tuple(g.layer_names), self.spec_back(g.kv_cache_spec)) for g in groups)

    def kv_cache_config_back(self, cfg: Any) -> KVCacheConfig:
        groups = self.groups_back(cfg.kv_cache_groups)
        if self.up.compat.tensor_layout == "strided":
            tensors = tuple(KVCacheTensor(size=t.size, layers=tuple(t.layers), layer_stride=t.layer_stride,
                                          block_stride=t.block_stride, offset=t.offset)
                            for t in cfg.kv_cache_tensors)
        else:
            tensors = strided_from_shared_by(cfg.num_blocks,
                                             [(t.size, tuple(t.shared_by)) for t in cfg.kv_cache_tensors])
        return KVCacheConfig(num_blocks=cfg.num_blocks, kv_cache_tensors=tensors, kv_cache_groups=groups)


# ------------------------------------------------- tensors: (size, shared_by) <-> strided

def strided_from_shared_by(num_blocks: int, tensors: Sequence[tuple[int, tuple[str, ...]]]) -> tuple[KVCacheTensor, ...]:
    """Releases <= 0.28 plan ``KVCacheTensor(size, shared_by)``: buffer ``j`` of ``size_j``
    bytes, used whole by each layer in ``shared_by`` (one layer per group). Laid end to end,
    the buffers are one backing of ``sum(size_j)`` bytes in which layer ``l`` of buffer ``j``
    starts at ``offset_j`` with ``block_stride = size_j / num_blocks`` — kvverify's strided
    reading of the same address map (one placement per layer and buffer), so the plan
    invariants (sizes, bounds, disjoint layers per group) judge what the release planned.
    """
    total = sum(size for size, _ in tensors)
    out: list[KVCacheTensor] = []
    offset = 0
    for size, layers in tensors:
        for name in layers:
            out.append(KVCacheTensor(size=total, layers=(name,), layer_stride=size,
                                     block_stride=size // max(num_blocks, 1), offset=offset))
        offset += size
    return tuple(out)


def shared_by_tensors(cfg: KVCacheConfig) -> list[tuple[int, tuple[str, ...]]]:
    """The inverse of :func:`strided_from_shared_by`: every layer's region
    (``offset + l * layer_stride``, ``block_stride * num_blocks`` bytes) is a buffer, and the
    layers whose regions start at the same byte share it (one per group)."""
    buffers: dict[tuple[int, int], list[str]] = {}
    for t in cfg.kv_cache_tensors:
        for li, name in enumerate(t.layers):
            key = (t.offset + li * t.layer_stride, t.block_stride * cfg.num_blocks)
            buffers.setdefault(key, []).append(name)
    return [(size, tuple(names)) for (_, size), names in sorted(buffers.items())]


__all__ = ["UNIFORM_TYPE_CLASS", "Translator", "kvverify_class", "shared_by_tensors", "strided_from_shared_by",
           "upstream_class_name"]
