"""Spec kinds, registered once (upstream: ``KVCacheSpecRegistry`` / ``register_all_kvcache_specs``).

Each :class:`SpecKind` says, in one place, everything the suite needs to know about a kind
of layer: its spec class, its manager class, whether its manager recycles blocks and with
which admission cap (a formula in :mod:`~kvverify.reference.arith`), how the lemmas model
the blocks it holds, how :mod:`kvverify.strategies` builds a generated layer of it, the
other spellings it is known by (catalog files, Hugging Face ``layer_types``, lemma labels)
and the name of the upstream class the vLLM adapter translates it to.

Every other list of kinds is derived from :data:`SPEC_KINDS` (through the functions below,
at call time, so a kind registered later — a test's toy kind — is seen everywhere):
the spec -> manager lookup (``managers/registry.py``), the recycling specs of
``grouping.py`` and the invariants, the lemmas' held-block models
(``lemmas/recycling.py``), the strategies' layer builders and the catalog's layer kinds.
How to add one: ``docs/add-a-spec-kind.md``.

Import order: this module imports the specs and the per-kind manager modules; nothing it
imports imports it back at import time (``managers/registry.py`` reads it at call time).
No Hypothesis here: a layer builder is a plain function of values the strategy drew.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

from kvverify.errors import ConfigError
from kvverify.reference import arith
from kvverify.reference.managers.base import SingleTypeKVCacheManager
from kvverify.reference.managers.chunked_local import ChunkedLocalAttentionManager
from kvverify.reference.managers.cross_attention import CrossAttentionManager
from kvverify.reference.managers.full_attention import FullAttentionManager
from kvverify.reference.managers.mamba import MambaManager
from kvverify.reference.managers.sliding_window import SlidingWindowManager
from kvverify.reference.ops import Num
from kvverify.reference.specs import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)

#: A layer builder: (attention fields drawn for the model, drawn window-like sizes by spec
#: field name) -> one layer's spec. Used by ``kvverify.strategies.model_specs``.
LayerBuilder = Callable[[Mapping[str, Any], Mapping[str, int]], KVCacheSpec]


@dataclass(frozen=True)
class WindowParam:
    """A spec field that sizes a recycling kind's window (``sliding_window``...).

    ``symbol`` is the lemmas' variable name (``W``), ``minimum`` its least value and
    ``maximum`` its largest one in the lemmas (``None``: the lemmas' window bound).
    """

    symbol: str
    field: str
    minimum: int
    maximum: int | None = None


@dataclass(frozen=True)
class HeldBlockModel:
    """How a recycling kind recycles, as formulas on ints or z3 terms (``lemmas/recycling.py``).

    ``params[0]`` is the window (or chunk) size; more params may follow (``extra_retained_tokens``).
    ``admission_cap(p, F, L, B)`` is ``max_admission_blocks_per_request`` and
    ``skipped_tokens(n, p)`` the manager's ``get_num_skipped_tokens``, both with the window
    params ``p`` by spec field name (a missing optional param counts as its minimum).
    ``label`` names the kind in lemma case names and layer names (``swa``).
    """

    label: str
    params: tuple[WindowParam, ...]
    admission_cap: Callable[[Mapping[str, Num], Num, Num, Num], Num]
    skipped_tokens: Callable[[Num, Mapping[str, Num]], Num]

    def values(self, spec_or_values: object) -> dict[str, Num]:
        """The window params by spec field, from a spec (its fields) or a mapping."""
        if isinstance(spec_or_values, Mapping):
            return {p.field: spec_or_values.get(p.field, p.minimum) for p in self.params}
        return {p.field: getattr(spec_or_values, p.field) for p in self.params}


@dataclass(frozen=True)
class SpecKind:
    """One kind of layer, registered once (see the module docstring).

    * ``name``: the canonical name, the spec class's ``kind``;
    * ``manager_cls``: its ``SingleTypeKVCacheManager`` (``None`` with ``no_manager_reason``);
    * ``recycles_blocks``: its manager frees blocks behind the attended window; with
      ``held`` (the formulas the runtime cap and the lemmas use) when the cap applies;
    * ``build_layer``: how the strategies build a generated layer of this kind (``None``
      with ``no_generator_reason``: an explicit, reasoned exclusion);
    * ``layout_name``: its spelling in model catalog files and ``ModelLayout.layer_kinds``
      (``None``: the catalog has no such layers);
    * ``aliases``: every other accepted spelling (Hugging Face ``layer_types`` values, the
      strategies' and lemmas' short names), all resolving to this kind;
    * ``vllm_class``: the upstream ``vllm.v1.kv_cache_interface`` class name.
    """

    name: str
    spec_cls: type[KVCacheSpec]
    manager_cls: type[SingleTypeKVCacheManager] | None
    vllm_class: str
    recycles_blocks: bool = False
    held: HeldBlockModel | None = None
    build_layer: LayerBuilder | None = None
    layout_name: str | None = None
    aliases: tuple[str, ...] = ()
    is_attention: bool = True
    no_manager_reason: str | None = None
    no_generator_reason: str | None = None

    def __post_init__(self) -> None:
        if self.spec_cls.kind != self.name:
            raise ValueError(f"kind {self.name!r}: {self.spec_cls.__name__}.kind is {self.spec_cls.kind!r}")
        if (self.manager_cls is None) == (self.no_manager_reason is None):
            raise ValueError(f"kind {self.name!r}: give a manager class or a reason for none")
        if (self.build_layer is None) == (self.no_generator_reason is None):
            raise ValueError(f"kind {self.name!r}: give a layer builder or a reason for none")
        if self.held is not None and not self.recycles_blocks:
            raise ValueError(f"kind {self.name!r}: a held-block model needs recycles_blocks")
        if self.manager_cls is not None and self.manager_cls.recycles_blocks != self.recycles_blocks:
            raise ValueError(f"kind {self.name!r}: recycles_blocks differs from "
                             f"{self.manager_cls.__name__}.recycles_blocks")

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every name this kind resolves from: canonical, catalog, aliases."""
        names = (self.name,) + ((self.layout_name,) if self.layout_name else ()) + self.aliases
        return tuple(dict.fromkeys(names))

    def admission_cap(self, spec: KVCacheSpec, max_in_flight_tokens: int, max_model_len: int) -> int | None:
        """The spec's runtime admission cap (``max_admission_blocks_per_request``), or ``None``."""
        if self.held is None:
            return None
        return self.held.admission_cap(self.held.values(spec), max_in_flight_tokens, max_model_len,
                                       spec.block_size)


def _attention_layer(spec_cls: type[KVCacheSpec], *sized_by: str) -> LayerBuilder:
    """A builder: the model's attention fields plus the drawn sizes named by ``sized_by``."""
    def build(common: Mapping[str, Any], sizes: Mapping[str, int]) -> KVCacheSpec:
        return spec_cls(**common, **{f: sizes[f] for f in sized_by})
    return build


SWA_HELD = HeldBlockModel(
    label="swa",
    params=(WindowParam("W", "sliding_window", 1), WindowParam("E", "extra_retained_tokens", 0, 2**10)),
    admission_cap=lambda p, f, length, b: arith.sliding_window_admission_blocks(
        p["sliding_window"], p["extra_retained_tokens"], f, length, b),
    skipped_tokens=lambda n, p: arith.sliding_window_skipped_tokens(
        n, p["sliding_window"], p["extra_retained_tokens"]))

CHUNKED_HELD = HeldBlockModel(
    label="chunked",
    params=(WindowParam("C", "attention_chunk_size", 1),),
    admission_cap=lambda p, f, length, b: arith.chunked_local_admission_blocks(
        p["attention_chunk_size"], f, length, b),
    skipped_tokens=lambda n, p: arith.chunked_local_skipped_tokens(n, p["attention_chunk_size"]))

#: The registry. Order matters only for derived display lists (the catalog's kinds, the
#: strategies' default kinds); lookups go by spec class (most derived first, as upstream's MRO walk).
SPEC_KINDS: list[SpecKind] = [
    SpecKind("full_attention", FullAttentionSpec, FullAttentionManager, "FullAttentionSpec",
             build_layer=_attention_layer(FullAttentionSpec), layout_name="full",
             aliases=("full", "attention", "global")),
    SpecKind("sliding_window", SlidingWindowSpec, SlidingWindowManager, "SlidingWindowSpec",
             recycles_blocks=True, held=SWA_HELD,
             build_layer=_attention_layer(SlidingWindowSpec, "sliding_window"), layout_name="sliding",
             aliases=("sliding", "swa", "sliding_attention", "local")),
    SpecKind("chunked_local", ChunkedLocalAttentionSpec, ChunkedLocalAttentionManager,
             "ChunkedLocalAttentionSpec", recycles_blocks=True, held=CHUNKED_HELD,
             build_layer=_attention_layer(ChunkedLocalAttentionSpec, "attention_chunk_size"),
             layout_name="chunked", aliases=("chunked", "chunked_attention", "chunked_local_attention")),
    SpecKind("mla", MLAAttentionSpec, FullAttentionManager, "MLAAttentionSpec",
             build_layer=_attention_layer(MLAAttentionSpec), layout_name="mla",
             aliases=("mla_attention",)),
    SpecKind("mamba", MambaSpec, MambaManager, "MambaSpec", is_attention=False,
             layout_name="mamba", aliases=("linear_attention", "gdn"),
             no_generator_reason=("drawn by kvverify.strategies.model_specs' Mamba branch: its state "
                                  "shape and page follow the hybrid page rule, not the attention fields")),
    SpecKind("cross_attention", CrossAttentionSpec, CrossAttentionManager, "CrossAttentionSpec",
             aliases=("cross",),
             no_generator_reason=("not a layer of model_specs' decoder-only mixes: a cross-attention "
                                  "layer needs an encoder-decoder deployment (encoder tokens in the "
                                  "config and in the workload), drawn by "
                                  "kvverify.props.encoder_decoder.encoder_decoder_cases")),
    SpecKind("encoder_only", EncoderOnlyAttentionSpec, None, "EncoderOnlyAttentionSpec",
             aliases=("encoder_only_attention",),
             no_manager_reason=("encoder-only layers keep no KV cache and form no group "
                                "(upstream registers no manager for them)"),
             no_generator_reason=("keeps no KV cache (0 blocks per request): a generated layer "
                                  "would exercise nothing the planner or the managers size")),
]


def _check_unique() -> None:
    seen: dict[str, str] = {}
    classes: set[type[KVCacheSpec]] = set()
    for kind in SPEC_KINDS:
        if kind.spec_cls in classes:
            raise ValueError(f"spec class {kind.spec_cls.__name__} registered twice")
        classes.add(kind.spec_cls)
        if seen.setdefault(f"vllm:{kind.vllm_class}", kind.name) != kind.name:
            raise ValueError(f"vLLM class {kind.vllm_class} named by two kinds")
        for spelling in kind.spellings:
            if seen.setdefault(spelling, kind.name) != kind.name:
                raise ValueError(f"spelling {spelling!r} names both {seen[spelling]!r} and {kind.name!r}")


_check_unique()


# --- lookups ------------------------------------------------------------------------------


def kind_names() -> tuple[str, ...]:
    """Canonical names of every registered kind."""
    return tuple(k.name for k in SPEC_KINDS)


def resolve(spelling: str) -> SpecKind:
    """The kind a name (canonical, catalog spelling or alias; any case) stands for."""
    if isinstance(spelling, str):
        low = spelling.lower()
        for kind in SPEC_KINDS:
            if low in kind.spellings:
                return kind
    raise ConfigError("kind", spelling, f"unknown spec kind; allowed: {', '.join(kind_names())}")


def spec_class(kind: str) -> type[KVCacheSpec]:
    """Look a spec type up by any of its kind's names; unknown kinds are a clear error."""
    return resolve(kind).spec_cls


def kind_of(spec: KVCacheSpec | type[KVCacheSpec]) -> SpecKind | None:
    """The registered kind of a spec (or spec class): the nearest registered class in its MRO."""
    cls = spec if isinstance(spec, type) else type(spec)
    by_class = {k.spec_cls: k for k in SPEC_KINDS}
    for base in cls.__mro__:
        if base in by_class:
            return by_class[base]
    return None


def recycling_kinds() -> tuple[SpecKind, ...]:
    """Kinds whose managers recycle blocks and whose admission cap applies (SWA, chunked)."""
    return tuple(k for k in SPEC_KINDS if k.held is not None)


def recycling_spec_types() -> tuple[type[KVCacheSpec], ...]:
    """The spec classes with an admission cap: for ``isinstance`` checks."""
    return tuple(k.spec_cls for k in recycling_kinds())


def is_recycling(spec: KVCacheSpec) -> bool:
    """The spec's kind recycles blocks under an admission cap (SWA / chunked local)."""
    kind = kind_of(spec)
    return kind is not None and kind.held is not None


def admission_cap(spec: KVCacheSpec, max_in_flight_tokens: int, max_model_len: int) -> int | None:
    """``max_admission_blocks_per_request`` of a recycling spec, else ``None``."""
    kind = kind_of(spec)
    return None if kind is None else kind.admission_cap(spec, max_in_flight_tokens, max_model_len)


def by_vllm_class() -> dict[str, SpecKind]:
    """Upstream class name -> kind: the table the vLLM adapter translates with, both ways."""
    return {k.vllm_class: k for k in SPEC_KINDS}


def layout_kinds() -> tuple[SpecKind, ...]:
    """Kinds a model catalog layout may use (those with a ``layout_name``)."""
    return tuple(k for k in SPEC_KINDS if k.layout_name is not None)


def spec_fields(spec_cls: type[KVCacheSpec]) -> tuple[str, ...]:
    """Constructor field names of a spec class (the adapter copies these across)."""
    return tuple(f.name for f in fields(spec_cls) if f.init)


@contextmanager
def registered(kind: SpecKind) -> Iterator[SpecKind]:
    """Register ``kind`` for the extent of a block (tests: a toy kind seen by every derived list)."""
    SPEC_KINDS.append(kind)
    try:
        _check_unique()
        yield kind
    finally:
        SPEC_KINDS.remove(kind)
