"""Every spec kind is registered once (``kvverify.reference.kinds``) and every list of kinds
is derived from that registry.

For each registered kind: a manager (or a reasoned exclusion), a vLLM translation both ways
(the adapter's table keyed by the registry's ``vllm_class``), a generator (or a reasoned
exclusion) and, where it recycles blocks, the lemmas' held-block model. Then a toy kind —
its spec, its manager, its formula (an existing one from ``arith``) and one registry
entry, nothing else — is seen by every derived list (``docs/add-a-spec-kind.md``).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from hypothesis import find

from kvverify import strategies
from kvverify.catalog import LAYER_KIND_ALIASES, LAYER_KINDS
from kvverify.invariants.caps import check_held_within_caps
from kvverify.invariants.startup import has_recycling_groups
from kvverify.lemmas import LEMMAS, prove, recycling
from kvverify.lemmas.replay import mix_specs
from kvverify.reference import arith, kinds
from kvverify.reference.config import VllmConfig
from kvverify.reference.grouping import get_kv_cache_groups
from kvverify.reference.managers.base import SingleTypeKVCacheManager
from kvverify.reference.managers.full_attention import FullAttentionManager
from kvverify.reference.managers.registry import get_manager_class, get_manager_for_kv_cache_spec
from kvverify.reference.planner import plan_kv_cache
from kvverify.reference.pool import BlockPool
from kvverify.reference.specs import AttentionSpec, FullAttentionSpec, KVCacheSpec, MambaSpec

COMMON: dict[str, Any] = dict(block_size=16, num_kv_heads=1, head_size=8, dtype="bfloat16")
SIZES = {"sliding_window": 40, "attention_chunk_size": 48}
CONFIG = VllmConfig(block_size=16, max_model_len=256, max_num_batched_tokens=32, kv_cache_memory_bytes=2**24)


def sample(kind: kinds.SpecKind) -> KVCacheSpec:
    """One layer of the kind: its registered builder, else its bare class."""
    if kind.build_layer is not None:
        return kind.build_layer(COMMON, SIZES)
    if issubclass(kind.spec_cls, AttentionSpec):
        return kind.spec_cls(**COMMON)
    assert kind.spec_cls is MambaSpec, f"add a sample for {kind.name}"
    return MambaSpec(block_size=16, shapes=((3, 8), (8, 4)), dtypes=("bfloat16", "float32"))


ALL = [pytest.param(k, id=k.name) for k in kinds.SPEC_KINDS]


# --- the registry itself ------------------------------------------------------------------


def test_registry_covers_every_spec_class_and_names_each_once() -> None:
    import kvverify.reference.specs as specs
    concrete = {c for c in vars(specs).values() if isinstance(c, type) and issubclass(c, KVCacheSpec)
                and c.kind not in ("base", "uniform_type") and c is not AttentionSpec}
    assert concrete == {k.spec_cls for k in kinds.SPEC_KINDS}
    spellings = [s for k in kinds.SPEC_KINDS for s in k.spellings]
    assert len(spellings) == len(set(spellings))


def test_the_four_sliding_window_spellings_are_aliases_of_one_kind() -> None:
    for spelling in ("sliding_window", "sliding", "swa", "sliding_attention", "SWA"):
        assert kinds.resolve(spelling).name == "sliding_window"
    with pytest.raises(ValueError, match="unknown spec kind"):
        kinds.resolve("ring_attention")


@pytest.mark.parametrize("kind", ALL)
def test_kind_has_a_manager_or_a_reason(kind: kinds.SpecKind) -> None:
    spec = sample(kind)
    assert kinds.kind_of(spec) is kind
    if kind.manager_cls is None:
        assert kind.no_manager_reason and len(kind.no_manager_reason) > 20
        with pytest.raises(Exception, match="no KV cache manager"):
            get_manager_class(spec)
        return
    assert get_manager_class(spec) is kind.manager_cls
    assert kind.manager_cls.recycles_blocks == kind.recycles_blocks


@pytest.mark.parametrize("kind", ALL)
def test_kind_has_a_generator_or_a_reason(kind: kinds.SpecKind) -> None:
    if kind.build_layer is None:
        assert kind.no_generator_reason and len(kind.no_generator_reason) > 20
        for dotted in re.findall(r"kvverify(?:\.\w+)+", kind.no_generator_reason):
            module, _, name = dotted.rpartition(".")
            assert hasattr(importlib.import_module(module), name), f"{dotted} named by {kind.name}"
        return
    assert kind.name in strategies.ATTENTION_KINDS
    specs = find(strategies.model_specs(16, 256, kinds=(kind.name,), allow_mamba=False), lambda s: True)
    assert {type(s) for s in specs.values()} == {kind.spec_cls}


@pytest.mark.parametrize("kind", ALL)
def test_recycling_kind_is_covered_by_the_lemmas_held_block_models(kind: kinds.SpecKind) -> None:
    if not kind.recycles_blocks:
        assert kind.held is None and kinds.admission_cap(sample(kind), 32, 256) is None
        return
    held = kind.held
    assert held is not None and held.label in recycling.recycling_labels()
    covering = [lem for lem in LEMMAS if lem.name.endswith("held_within_cap")
                and held.label in recycling.held_lemma_labels(lem)]
    assert covering, f"no held-within-cap lemma covers {kind.name}"
    spec = sample(kind)
    # the registered formulas are the spec's and the manager's
    for f, length in ((1, 1), (32, 256), (7, 100), (300, 256)):
        assert kind.admission_cap(spec, f, length) == spec.max_admission_blocks_per_request(f, length)  # type: ignore[attr-defined]
    pool = BlockPool(64, enable_caching=False, hash_block_size=16)
    manager = get_manager_for_kv_cache_spec(spec, pool, max_in_flight_tokens=32, max_model_len=256,
                                            enable_caching=False, kv_cache_group_id=0,
                                            scheduler_block_size=16)
    assert manager.max_admission_blocks_per_request == kind.admission_cap(spec, 32, 256)
    for n in range(0, 200, 7):
        assert held.skipped_tokens(n, held.values(spec)) == manager.get_num_skipped_tokens(n)


def test_derived_lists_of_the_suite() -> None:
    assert set(kinds.recycling_spec_types()) == {k.spec_cls for k in kinds.SPEC_KINDS if k.held}
    assert LAYER_KINDS == tuple(k.layout_name for k in kinds.layout_kinds())
    for spelling, layout_name in LAYER_KIND_ALIASES.items():
        assert kinds.resolve(spelling).layout_name == layout_name


# --- the vLLM adapter translates every kind, both ways, by the registry's class name ------


def _adapter_table() -> Any:
    try:
        module = importlib.import_module("kvverify.targets.vllm.specs")
    except ImportError as e:  # pragma: no cover - the adapter's layout changed
        pytest.fail(f"the vLLM adapter's translation module moved: {e}")
    return module


@pytest.mark.parametrize("kind", ALL)
def test_vllm_adapter_translates_kind_both_ways(kind: kinds.SpecKind) -> None:
    adapter = _adapter_table()
    assert adapter.upstream_class_name(kind.spec_cls) == kind.vllm_class
    assert adapter.kvverify_class(kind.vllm_class) is kind.spec_cls


@pytest.mark.parametrize("kind", ALL)
def test_vllm_round_trip(kind: kinds.SpecKind) -> None:
    pytest.importorskip("vllm", reason="vLLM is not installed (see docs/vllm-target.md)")
    from kvverify.targets.vllm.env import upstream
    translator = _adapter_table().Translator(upstream())
    spec = sample(kind)
    theirs = translator.spec(spec)
    assert type(theirs).__name__ == kind.vllm_class
    assert translator.spec_back(theirs) == spec


# --- a toy kind: registered once, picked up everywhere -------------------------------------


@dataclass(frozen=True, kw_only=True)
class ToyWindowSpec(AttentionSpec):
    """A sliding window without lookahead retention, under its own name (formula: arith's SWA)."""

    toy_window: int
    kind: ClassVar[str] = "toy_window"

    def max_admission_blocks_per_request(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        return arith.sliding_window_admission_blocks(self.toy_window, 0, max_in_flight_tokens,
                                                     max_model_len, self.block_size)

    def max_memory_usage_bytes(self, vllm_config: VllmConfig) -> int:
        return self.max_admission_blocks_per_request(
            vllm_config.max_in_flight_tokens, vllm_config.max_model_len) * self.page_size_bytes


class ToyWindowManager(FullAttentionManager):
    """Recycles the blocks behind the toy window; prefix hits as full attention (toy)."""

    recycles_blocks: ClassVar[bool] = True

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return arith.sliding_window_skipped_tokens(num_computed_tokens, self.spec.toy_window)  # type: ignore[attr-defined]


TOY = kinds.SpecKind(
    "toy_window", ToyWindowSpec, ToyWindowManager, "ToyWindowSpec", recycles_blocks=True,
    held=kinds.HeldBlockModel(
        label="toy", params=(kinds.WindowParam("T", "toy_window", 1),),
        admission_cap=lambda p, f, length, b: arith.sliding_window_admission_blocks(
            p["toy_window"], 0, f, length, b),
        skipped_tokens=lambda n, p: arith.sliding_window_skipped_tokens(n, p["toy_window"])),
    build_layer=lambda common, sizes: ToyWindowSpec(**common, toy_window=sizes["sliding_window"]),
    aliases=("toy",))


def test_toy_kind_is_seen_by_every_derived_list() -> None:
    toy = ToyWindowSpec(**COMMON, toy_window=40)
    full = FullAttentionSpec(**COMMON)
    assert kinds.kind_of(toy) is None
    with kinds.registered(TOY):
        # names, manager, admission cap
        assert kinds.resolve("toy") is TOY and kinds.spec_class("toy_window") is ToyWindowSpec
        assert get_manager_class(toy) is ToyWindowManager
        manager = get_manager_for_kv_cache_spec(toy, BlockPool(64, enable_caching=False, hash_block_size=16),
                                                max_in_flight_tokens=32, max_model_len=256,
                                                enable_caching=False, kv_cache_group_id=0,
                                                scheduler_block_size=16)
        assert manager.max_admission_blocks_per_request == toy.max_admission_blocks_per_request(32, 256)
        # grouping: promoted to full attention when the hybrid manager is disabled
        assert ToyWindowSpec in kinds.recycling_spec_types()
        groups = get_kv_cache_groups(VllmConfig(block_size=16, max_model_len=256, kv_cache_memory_bytes=2**24,
                                                disable_hybrid_kv_cache_manager=True),
                                     {"a": full, "b": toy})
        assert all(isinstance(g.kv_cache_spec, FullAttentionSpec) for g in groups)
        # invariants: a recycling group, its caps checked
        plan = plan_kv_cache(CONFIG, [{"a": full, "b": toy}])
        assert has_recycling_groups(plan)
        manager.allocate_new_blocks("r", 256)  # no recycling step: holds every block
        fake = SimpleNamespace(coordinator=SimpleNamespace(single_type_managers=[manager]))
        assert [v.name for v in check_held_within_caps(fake, CONFIG, 0)] == ["caps.held_exceeds_cap"]
        # lemmas: labels, a generated held-within-cap lemma that proves, mixes
        assert "toy" in recycling.recycling_labels()
        [lemma] = recycling.generated_held_lemmas()
        assert lemma.name == "toy_window_held_within_cap"
        assert prove(lemma).result == "proved"
        assert isinstance(mix_specs("full+toy", 16, 40)["layers.1.toy"], ToyWindowSpec)
        # strategies: a generated model of toy layers
        specs = find(strategies.model_specs(16, 256, kinds=("toy",), allow_mamba=False), lambda s: True)
        assert {type(s) for s in specs.values()} == {ToyWindowSpec}
    assert kinds.kind_of(toy) is None and "toy" not in recycling.recycling_labels()


def test_registration_refuses_incomplete_or_clashing_kinds() -> None:
    with pytest.raises(ValueError, match="reason"):
        kinds.SpecKind("toy_window", ToyWindowSpec, None, "ToyWindowSpec",
                       build_layer=TOY.build_layer)
    with pytest.raises(ValueError, match="recycles_blocks"):
        kinds.SpecKind("toy_window", ToyWindowSpec, ToyWindowManager, "ToyWindowSpec",
                       build_layer=TOY.build_layer)
    clash = kinds.SpecKind("toy_window", ToyWindowSpec, ToyWindowManager, "ToyWindowSpec",
                           recycles_blocks=True, build_layer=TOY.build_layer, aliases=("swa",))
    with pytest.raises(ValueError, match="swa"):
        with kinds.registered(clash):
            pass
    assert clash not in kinds.SPEC_KINDS
    assert issubclass(ToyWindowManager, SingleTypeKVCacheManager)
