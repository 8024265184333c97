"""The multi-release vLLM adapter's logic, on small fakes (no vLLM needed).

Capability detection (:func:`kvverify.targets.vllm.compat.detect`) reads fake module objects
whose functions carry the signatures of an old (0.19-like) and a new (0.33-like) release;
the keyword fitting, the supported range, the findings-per-release table, the tensor
translation between ``KVCacheTensor(size, shared_by)`` and the strided layout, the spec
translation's field drift, the refusals and the CPU platform selection are checked the same way.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from types import SimpleNamespace
from typing import Any

import pytest

from kvverify.reference import specs as kv
from kvverify.reference.grouping import KVCacheGroupSpec
from kvverify.reference.planner import KVCacheConfig
from kvverify.targets.vllm import compat, findings, late, names
from kvverify.targets.vllm.refusals import ReleaseLacks, TargetUnsupported, lacks
from kvverify.targets.vllm.specs import Translator, shared_by_tensors, strided_from_shared_by
from vllm_fakes import SharedTensor
from vllm_fakes import caps_on_allocation_release as _caps_on_allocation_release
from vllm_fakes import fake_up as _fake_up
from vllm_fakes import module as _module
from vllm_fakes import new_release as _new_release
from vllm_fakes import old_iface as _old_iface
from vllm_fakes import old_release as _old_release
from vllm_fakes import release_0_25 as _release_0_25


@pytest.fixture(autouse=True)
def _probes_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fakes here are partial on purpose (each test exercises one probe); the drift check
    over ``Compat.absent`` (:mod:`kvverify.targets.vllm.history`) is tested on its own, on
    fakes that hold a whole layer history (``tests/test_vllm_history.py``)."""
    from kvverify.targets.vllm import history
    monkeypatch.setattr(history, "unexplained_absences", lambda absent, present: [])


# ------------------------------------------------------------------- detection

def test_detect_new_release() -> None:
    caps = compat.detect("0.33.0", _new_release())
    assert caps.planner_module == "vllm.v1.core.kv_cache_planning"
    assert caps.config_builder and caps.global_groups and caps.layout_resolution and caps.spec_registry
    assert caps.tensor_layout == "strided"
    assert caps.block_size_resolution
    assert caps.admission_gate == "full_sequence_must_fit"
    assert caps.has("get_num_blocks_to_allocate", "apply_admission_cap")
    assert caps.admission_caps == "admission_only"
    assert caps.has("KVCacheManager", "watermark") and caps.has("Scheduler", "hash_block_size")
    assert caps.lacking() == {}


def test_detect_old_release() -> None:
    caps = compat.detect("0.19.1", _old_release())
    assert caps.planner_module == "vllm.v1.core.kv_cache_utils"
    assert not (caps.config_builder or caps.global_groups or caps.layout_resolution or caps.spec_registry)
    assert caps.tensor_layout == "shared_by"
    assert not caps.block_size_resolution
    assert caps.admission_gate == "can_fit_full_sequence"
    assert not caps.has("get_num_blocks_to_allocate", "apply_admission_cap")
    assert caps.admission_caps == "none"
    assert not caps.has("KVCacheManager", "scheduler_block_size")
    assert "resolve_kv_cache_block_sizes" in caps.lacking()["block_sizes"]


def test_detect_admission_caps_per_release() -> None:
    assert compat.detect("0.19.1", _old_release()).admission_caps == "none"
    assert compat.detect("0.20.0", _caps_on_allocation_release()).admission_caps == "on_allocation"
    assert compat.detect("0.33.0", _new_release()).admission_caps == "admission_only"
    # a chunked-local spec with the method is enough (the SWA class may be absent)
    mods = _old_release()

    class ChunkedLocalAttentionSpec:
        def max_admission_blocks_per_request(self, max_num_batched_tokens, max_model_len): ...

    mods["vllm.v1.kv_cache_interface"] = _module("i", KVCacheTensor=SharedTensor,
                                                 ChunkedLocalAttentionSpec=ChunkedLocalAttentionSpec)
    assert compat.detect("0.20.0", mods).admission_caps == "on_allocation"


def test_detect_refuses_unknown_shapes() -> None:
    mods = _old_release()
    mods["vllm.v1.core.kv_cache_utils"] = _module("u")  # no planner anywhere
    with pytest.raises(compat.DriftError, match="get_kv_cache_configs"):
        compat.detect("0.19.1", mods)
    mods = _old_release()
    mods["vllm.v1.kv_cache_interface"] = _module("i", KVCacheTensor=dataclasses.make_dataclass("T", ["size"]))
    with pytest.raises(compat.DriftError, match="KVCacheTensor"):
        compat.detect("0.19.1", mods)


def test_resolve_names_says_what_is_missing() -> None:
    caps = compat.detect("0.19.1", _old_release())
    with pytest.raises(compat.DriftError, match="not found where the adapter looks: .*SchedulerConfig"):
        names.resolve_names(caps, _old_release())


# ------------------------------------------------- every probe, named, both ways

def _yes_no_probes() -> list[str]:
    """Compat's yes / no capabilities (``bool`` fields)."""
    return [f.name for f in dataclasses.fields(compat.Compat) if f.type == "bool"]


def test_every_yes_no_probe_reads_both_ways_on_the_fakes() -> None:
    """Each probe is seen to answer yes (the 0.33-like fake) and no (the 0.19-like one): none is
    a constant, none reads the version."""
    new, old = compat.detect("0.33.0", _new_release()), compat.detect("0.33.0", _old_release())
    probes = _yes_no_probes()
    assert len(probes) >= 20, probes
    assert [p for p in probes if getattr(new, p) is not True] == []
    assert [p for p in probes if getattr(old, p) is not False] == []


def test_multi_valued_probes_per_release() -> None:
    new, old = compat.detect("0.33.0", _new_release()), compat.detect("0.19.1", _old_release())
    assert new.check_helpers == ("_check_enough_kv_cache_memory", "_auto_fit_max_model_len")
    assert old.check_helpers == ("check_enough_kv_cache_memory",)  # <= 0.32: the public one, called inside
    assert new.capacity_helpers == {"estimate_max_model_len", "check_enough_kv_cache_memory"}
    assert old.capacity_helpers == {"check_enough_kv_cache_memory"}
    assert (new.pool_bytes, old.pool_bytes) == ("builder", "page_times_layers")
    assert compat.detect("0.25.0", _release_0_25()).pool_bytes == "vllm_config"
    assert set(new.spec_fields) == {"KVCacheSpec", "SlidingWindowSpec", "UniformTypeKVCacheSpecs"}
    assert "prefix_cacheable" in new.spec_attrs["SlidingWindowSpec"]
    assert "prefix_cacheable" not in old.spec_attrs["SlidingWindowSpec"]
    assert new.coordinator_block_sizes and not old.coordinator_block_sizes
    # the waiting queue drained first: 0.31+ block holders, 0.27 - 0.29 every skipped request
    assert new.waiting_queues() == ("kv_holding_waiting", "waiting") and old.waiting_queues() == ("", "waiting")
    mods = _old_release()

    class Scheduler:
        def __init__(self) -> None:
            self.skipped_waiting: list = []

    mods["vllm.v1.core.sched.scheduler"] = _module("s", Scheduler=Scheduler)
    assert compat.detect("0.28.0", mods).waiting_queues() == ("skipped_waiting", "waiting")


def test_every_symbol_the_release_lacks_is_named_with_its_module() -> None:
    """``Compat.absent``: where a later DriftError will name what an unknown release lacks."""
    new, old = compat.detect("0.33.0", _new_release()), compat.detect("0.19.1", _old_release())
    lacking = {"vllm.v1.core.kv_cache_utils.resolve_kv_cache_block_sizes",
               "vllm.v1.core.kv_cache_utils.resolve_cache_hit_alignment_tokens",
               "vllm.v1.core.sched.scheduler.Scheduler.kv_holding_waiting",
               "vllm.v1.kv_cache_interface.KVCacheSpec.prefix_cacheable",
               "vllm.config.VllmConfig.num_lookahead_tokens",
               "vllm.v1.core.kv_cache_config_builder"}
    assert lacking <= old.absent
    assert not lacking & new.absent


def test_instance_attributes_are_read_off_the_class_code() -> None:
    class Pool:
        def __init__(self) -> None:
            self.set_here = 1
            self.helper()

        def helper(self) -> None:
            self.set_in_a_helper = [x for x in ()]

        @property
        def read_in_a_property(self) -> int:
            return self.other

    names = compat.class_code_names(Pool)
    assert {"set_here", "set_in_a_helper", "other"} <= names and "never_named" not in names


def test_upstream_holds_every_name_the_adapter_resolves() -> None:
    from kvverify.targets.vllm.env import Upstream

    class Anything(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            return object()

    caps = compat.detect("0.33.0", _new_release())
    ns = names.resolve_names(caps, {name: Anything(name) for name in compat.MODULES})
    own = {"torch", "vllm", "compat", "default_layouts", "hash_fns", "memory_rules"}
    assert set(ns) == {f.name for f in dataclasses.fields(Upstream)} - own


def test_adapter_asks_compat_for_the_startup_check_helpers_and_pages() -> None:
    from kvverify.targets.vllm.planner import group_blocks, startup_checks_disabled

    calls: list[str] = []
    planning = _module("p", _check_enough_kv_cache_memory=lambda *a: calls.append("check"),
                       check_enough_kv_cache_memory=lambda *a: calls.append("public"))
    caps = dataclasses.replace(compat.detect("0.33.0", _new_release()), check_helpers=("_check_enough_kv_cache_memory",))
    up = SimpleNamespace(planning=planning, compat=caps)
    with startup_checks_disabled(up):  # type: ignore[arg-type]
        planning._check_enough_kv_cache_memory()
        planning.check_enough_kv_cache_memory()
    planning._check_enough_kv_cache_memory()
    assert calls == ["public", "check"]  # neutralised inside, restored after; the public one untouched

    class Uniform:
        page_size_bytes = 10

        def max_memory_usage_pages(self, vc: object) -> int:
            return 3

        def max_memory_usage_bytes(self, vc: object) -> int:
            return 45

    up = SimpleNamespace(iface=SimpleNamespace(UniformTypeKVCacheSpecs=Uniform), compat=caps)
    assert group_blocks(Uniform(), None, up) == 3  # type: ignore[arg-type]
    up.compat = dataclasses.replace(caps, uniform_pages=False)
    assert group_blocks(Uniform(), None, up) == 5  # type: ignore[arg-type]  # cdiv(45, 10)


def test_retention_knob_passed_only_where_the_release_has_it() -> None:
    from kvverify.reference.config import VllmConfig
    from kvverify.targets.vllm.knobs import apply_kv_cache_config_knobs, cache_config_kwargs

    new, old = compat.detect("0.33.0", _new_release()), compat.detect("0.19.1", _old_release())
    config = VllmConfig(prefix_cache_retention_interval=None)
    assert cache_config_kwargs(new, config) == {"prefix_cache_retention_interval": None}
    assert cache_config_kwargs(old, config) == {}
    cfg = SimpleNamespace(num_blocks=4)
    assert apply_kv_cache_config_knobs(new, cfg, config).prefix_cache_retention_interval is None
    assert not hasattr(apply_kv_cache_config_knobs(old, SimpleNamespace(), config), "prefix_cache_retention_interval")


def test_cached_entries_read_the_pool_shape_the_release_has() -> None:
    from kvverify.targets.vllm.runtime import BlockPoolView

    block = SimpleNamespace(block_id=3, block_hash="h1")
    new, old = compat.detect("0.33.0", _new_release()), compat.detect("0.19.1", _old_release())
    pool = SimpleNamespace(cached_block_hash_to_block=SimpleNamespace(_cache={"h1": {3: block}}),
                           cached_block_hashes_by_block={3: {"h2"}})
    (key, view), = BlockPoolView(pool, new).cached_entries()
    assert key == "h1" and view.block_hash == "h2" and view.block_hash == "h1"  # filed under both keys
    (key, view), = BlockPoolView(SimpleNamespace(cached_block_hash_to_block={"h1": block}), old).cached_entries()
    assert key == "h1" and view.block_hash == "h1"


# ------------------------------------------------------------------ keyword fit

def test_fit_kwargs_drops_neutral_refuses_others() -> None:
    old = compat.detect("0.19.1", _old_release())
    new = compat.detect("0.33.0", _new_release())
    kw = dict(kv_cache_config=1, max_model_len=2, hash_block_size=16, enable_caching=True, watermark=0.0)
    assert compat.fit_kwargs(new, "KVCacheManager", kw, {"watermark": 0.0}) == kw
    assert "watermark" not in compat.fit_kwargs(old, "KVCacheManager", kw, {"watermark": 0.0})
    with pytest.raises(compat.KnobMissing, match="watermark=0.1"):
        compat.fit_kwargs(old, "KVCacheManager", {**kw, "watermark": 0.1}, {"watermark": 0.0})
    with pytest.raises(compat.DriftError, match="no neutral value"):
        compat.fit_kwargs(old, "KVCacheManager", {**kw, "brand_new": 1})


def test_fit_kwargs_passes_everything_to_open_signatures() -> None:
    caps = dataclasses.replace(compat.detect("0.19.1", _old_release()), open_params=frozenset({"Scheduler"}))
    assert compat.fit_kwargs(caps, "Scheduler", {"anything": 1}) == {"anything": 1}


def test_params_of_classes_and_functions() -> None:
    def f(a, b=1, *args, c, **kw): ...
    assert compat.params(f) == {"a", "b", "c"}
    assert compat.params(SharedTensor) == {"size", "shared_by"}
    assert compat.accepts_any_keyword(f) and not compat.accepts_any_keyword(SharedTensor)


# -------------------------------------------------------------- supported range

@pytest.mark.parametrize("version", ["0.19.1", "0.27.1", "0.33.0", "0.25.0+cpu"])
def test_measured_releases_get_no_notice(version: str) -> None:
    assert compat.outside_measured_range(version) is None


@pytest.mark.parametrize("version", ["0.10.0", "0.34.0", "0.33.1.dev3+g1a2b3c4", "0.33.0rc1", "1.0.0"])
def test_releases_outside_the_measured_range_get_a_notice_not_a_refusal(version: str) -> None:
    """A dev build or an unmeasured release is judged by capability detection (issue 27): the
    notice names the release and the measured range; nothing refuses it by its version."""
    why = compat.outside_measured_range(version)
    assert why is not None and version in why and compat.SUPPORTED in why and "capability detection" in why


def test_unreadable_version_gets_a_notice() -> None:
    assert "cannot be read" in (compat.outside_measured_range("dev") or "")


# ---------------------------------------------------------- findings per release

def test_findings_follow_capabilities() -> None:
    new = compat.detect("0.33.0", _new_release())
    old = compat.detect("0.19.1", _old_release())
    reserving = findings.CheckRules(override_counted=True, reserves_null_block=True)
    loose = findings.CheckRules(override_counted=True, reserves_null_block=False)
    assert all(findings.finding_expected(f, new, reserving) for f in findings.FINDING_CAPABILITY)
    on_alloc = compat.detect("0.20.0", _caps_on_allocation_release())
    # no admission caps: no F2 (the gate charges the full sequence); F4 stays (the SWA startup
    # bound ignores lookahead as the caps do); F1 (concurrency) everywhere
    assert not findings.finding_expected("F2", old, loose) and findings.finding_expected("F4", old, loose)
    assert findings.finding_expected("F2", on_alloc, loose) and findings.finding_expected("F4", on_alloc, loose)
    # no cap and no gate at all (<= 0.18): the startup bound's missing block is F2's livelock
    ungated = dataclasses.replace(old, admission_gate="none")
    assert findings.finding_expected("F2", ungated, loose)
    assert findings.finding_expected("F1", old, loose)
    # a check that counts the null block as usable: no F3, no F6-estimate, F6-check stays
    assert not findings.finding_expected("F3", new, loose)
    assert not findings.finding_expected("F6-estimate", new, loose)
    assert findings.finding_expected("F6-check", new, loose) and findings.finding_expected("F6", new, loose)
    assert findings.finding_expected("F99", old, loose)  # unknown findings stay strict
    # a check that sizes every group by the first (<= 0.18, before #36030) is as lax as the public
    # check: no F6-check there; F6-estimate follows the null block alone
    first_only = findings.CheckRules(override_counted=False, reserves_null_block=True, counts_every_group=False)
    assert not findings.finding_expected("F6-check", new, first_only)
    assert findings.finding_expected("F6-estimate", new, first_only) and findings.finding_expected("F6", new, first_only)


def test_cap_findings_masked_where_the_cap_clamps_the_allocation() -> None:
    on_alloc = compat.detect("0.20.0", _caps_on_allocation_release())
    for finding in ("F2", "F4"):
        why = findings.finding_replay_masked(finding, on_alloc)
        assert why is not None and "swa_cap_on_allocation" in why and "#39866" in why
        assert findings.finding_replay_masked(finding, compat.detect("0.33.0", _new_release())) is None
        assert findings.finding_replay_masked(finding, compat.detect("0.19.1", _old_release())) is None
    assert findings.finding_replay_masked("F1", on_alloc) is None


def test_known_failures_name_their_finding() -> None:
    from kvverify.props.findings import KNOWN_FAILURES, finding_of, present_on
    assert finding_of("test_startup_refusal_is_necessary") == "F3"
    assert all(finding_of(n).startswith("F") for n in KNOWN_FAILURES)
    assert all(present_on(n, "reference") for n in KNOWN_FAILURES)


# ------------------------------------------------------- tensors across layouts

def _groups() -> tuple[KVCacheGroupSpec, ...]:
    full = kv.FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8)
    swa = kv.SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=8, sliding_window=32)
    return (KVCacheGroupSpec(("f.0", "f.1"), full), KVCacheGroupSpec(("s.0", "s.1"), swa))


def test_shared_by_tensors_read_as_the_strided_layout() -> None:
    """Old ``(size, shared_by)`` buffers, end to end, are a layer-outer backing: sizes, bounds
    and per-group disjointness hold for kvverify's plan invariants."""
    from kvverify.invariants.plan import _overlaps
    from kvverify.reference.planner import bytes_per_block

    groups, n = _groups(), 10
    page = groups[0].kv_cache_spec.page_size_bytes
    old = [(page * n, ("f.0", "s.0")), (page * n, ("f.1", "s.1"))]
    tensors = strided_from_shared_by(n, old)
    cfg = KVCacheConfig(num_blocks=n, kv_cache_tensors=tensors, kv_cache_groups=groups)
    assert {t.size for t in tensors} == {bytes_per_block(groups) * n}
    assert all(t.offset + len(t.layers) * t.layer_stride <= t.size for t in tensors)
    assert _overlaps(0, cfg) == []
    assert shared_by_tensors(cfg) == old


def test_reference_plans_translate_to_shared_by() -> None:
    """A kvverify (reference-made) strided plan: each buffer holds layer j of every group."""
    from kvverify.reference.planner import get_kv_cache_config_from_groups

    cfg = get_kv_cache_config_from_groups(_groups(), 10)
    page = _groups()[0].kv_cache_spec.page_size_bytes
    assert shared_by_tensors(cfg) == [(page * 10, ("f.0", "s.0")), (page * 10, ("f.1", "s.1"))]


# ----------------------------------------------------------- spec field drift

def test_a_field_the_release_lacks_is_dropped_when_it_means_nothing() -> None:
    tr = Translator(_fake_up(_old_iface()))
    spec = kv.SlidingWindowSpec(block_size=16, num_kv_heads=2, head_size=8, sliding_window=64)
    up = tr.spec(spec)  # head_size_v == head_size and extra_retained_tokens == 0: as before them
    assert (up.sliding_window, up.dtype) == (64, "torch.bfloat16")
    assert tr.spec_back(up) == spec


def test_a_field_the_release_lacks_is_refused_when_set() -> None:
    tr = Translator(_fake_up(_old_iface()))
    with pytest.raises(TargetUnsupported, match="0.27.1 has no SlidingWindowSpec.extra_retained_tokens"):
        tr.spec(kv.SlidingWindowSpec(block_size=16, num_kv_heads=2, head_size=8, sliding_window=64,
                                     extra_retained_tokens=3))
    with pytest.raises(TargetUnsupported, match="head_size_v"):
        tr.spec(kv.SlidingWindowSpec(block_size=16, num_kv_heads=2, head_size=8, head_size_v=4, sliding_window=64))


def test_a_padded_page_read_back_with_the_release_meaning_of_head_size_v() -> None:
    """0.20's MLAAttentionSpec sets head_size_v = head_size, but its page counts no V heads: a
    padded page (256 B here) read back with head_size_v=8 would be below kvverify's real page
    (512 B) and invalid; kvverify's default (no V heads) is what the release means."""
    @dataclasses.dataclass(frozen=True)
    class MLAAttentionSpec:
        block_size: int
        num_kv_heads: int
        head_size: int
        dtype: str
        head_size_v: int | None = None
        page_size_padded: int | None = None

        @property
        def page_size_bytes(self) -> int:
            return self.page_size_padded or self.block_size * self.num_kv_heads * self.head_size * 2

    tr = Translator(_fake_up(_module("i", MLAAttentionSpec=MLAAttentionSpec)))
    back = tr.spec_back(MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, dtype="torch.bfloat16",
                                         head_size_v=8, page_size_padded=256))
    assert isinstance(back, kv.MLAAttentionSpec) and back.page_size_bytes == 256 and back.page_size_padded == 256


def test_a_class_the_release_lacks_is_refused() -> None:
    tr = Translator(_fake_up(_old_iface()))
    with pytest.raises(TargetUnsupported, match="has no ChunkedLocalAttentionSpec"):
        tr.spec(kv.ChunkedLocalAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, attention_chunk_size=32))


def test_every_registered_kind_translates_both_ways() -> None:
    """The translation is the kinds registry: each kind's upstream class name round-trips."""
    from kvverify.reference import kinds
    from kvverify.targets.vllm.specs import kvverify_class, upstream_class_name

    for kind in kinds.SPEC_KINDS:
        assert kvverify_class(upstream_class_name(kind.spec_cls)) is kind.spec_cls


# ------------------------------------------------------------------- refusals

def test_lacks_skips_the_property_with_the_reason() -> None:
    with pytest.raises(pytest.skip.Exception, match="vLLM 0.19.1 has no resolve_kv_cache_block_sizes"):
        lacks("0.19.1", "has no resolve_kv_cache_block_sizes")


def test_lacks_outside_pytest_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    with pytest.raises(ReleaseLacks) as e:
        lacks("0.19.1", "has no resolve_kv_cache_block_sizes")
    assert isinstance(e.value, TargetUnsupported) and e.value.version == "0.19.1"


# ------------------------------------------------------------ platform selection

def _fake_platforms(monkeypatch: pytest.MonkeyPatch, qualname: str) -> types.ModuleType:
    class CpuPlatform:
        device_type = "cpu"

    platforms = _module("vllm.platforms", _current_platform=None,
                        resolve_current_platform_cls_qualname=lambda: qualname)
    monkeypatch.setitem(sys.modules, "vllm", _module("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setitem(sys.modules, "vllm.platforms.cpu", _module("vllm.platforms.cpu", CpuPlatform=CpuPlatform))
    return platforms


def test_cpu_platform_selected_where_detection_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvverify.targets.vllm.env import select_cpu_platform

    platforms = _fake_platforms(monkeypatch, "vllm.platforms.interface.UnspecifiedPlatform")
    select_cpu_platform()
    assert platforms._current_platform.device_type == "cpu"


def test_cpu_platform_left_alone_where_detection_works(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvverify.targets.vllm.env import select_cpu_platform

    platforms = _fake_platforms(monkeypatch, "vllm.platforms.cpu.CpuPlatform")
    select_cpu_platform()
    assert platforms._current_platform is None  # resolved lazily by vLLM itself


# ------------------------------------- in-flight window keyword, pool bytes signature

def test_in_flight_window_keyword_per_release() -> None:
    assert compat.detect("0.33.0", _new_release()).in_flight_param("get_kv_cache_coordinator") == "max_in_flight_tokens"
    assert compat.detect("0.33.0", _new_release()).in_flight_param("KVCacheManager") == "max_in_flight_tokens"
    caps = compat.detect("0.25.0", _release_0_25())
    assert caps.in_flight_param("get_kv_cache_coordinator") == "max_num_batched_tokens"
    assert caps.in_flight_param("KVCacheManager") == "max_num_batched_tokens"
    assert compat.detect("0.19.1", _old_release()).in_flight_param("get_kv_cache_coordinator") is None


def test_coordinator_gets_the_scheduler_budget_where_the_window_is_max_num_batched_tokens() -> None:
    from kvverify.targets.vllm.planner import coordinator_kwargs
    vc = SimpleNamespace(max_in_flight_tokens=4096, max_num_batched_tokens=2048, enable_prefix_caching=True)
    target = SimpleNamespace(up=SimpleNamespace(compat=compat.detect("0.25.0", _release_0_25())))
    kw = coordinator_kwargs(target, "cfg", 100, vc, 16, 16)  # type: ignore[arg-type]
    assert kw["max_num_batched_tokens"] == 2048 and "max_in_flight_tokens" not in kw
    target = SimpleNamespace(up=SimpleNamespace(compat=compat.detect("0.33.0", _new_release())))
    kw = coordinator_kwargs(target, "cfg", 100, vc, 16, 16)  # type: ignore[arg-type]
    assert kw["max_in_flight_tokens"] == 4096 and "max_num_batched_tokens" not in kw
    target = SimpleNamespace(up=SimpleNamespace(compat=compat.detect("0.19.1", _old_release())))
    kw = coordinator_kwargs(target, "cfg", 100, vc, 16, 16)  # type: ignore[arg-type]
    assert "max_in_flight_tokens" not in kw and "max_num_batched_tokens" not in kw


@pytest.mark.parametrize("with_config", [True, False])
def test_pool_bytes_per_block_called_with_the_release_signature(with_config: bool) -> None:
    from kvverify.targets.vllm.planner import _bytes_per_block
    calls: list[tuple] = []
    if with_config:  # 0.25 - 0.28, 0.32
        def _pool_bytes_per_block(vllm_config, kv_cache_groups):
            calls.append((vllm_config, kv_cache_groups))
            return 7
    else:  # 0.22, 0.29 - 0.31
        def _pool_bytes_per_block(kv_cache_groups):  # type: ignore[misc]
            calls.append((kv_cache_groups,))
            return 7
    mods = _release_0_25()
    planner_mod = _module("u", get_kv_cache_configs=lambda vc, s, m: None, _pool_bytes_per_block=_pool_bytes_per_block)
    mods["vllm.v1.core.kv_cache_utils"] = planner_mod
    caps = compat.detect("0.29.0", mods)
    assert caps.has("_pool_bytes_per_block", "vllm_config") is with_config
    up = SimpleNamespace(compat=caps, planning=planner_mod, get_kv_cache_config_builder=None)
    assert _bytes_per_block(up, "vc", ["g"]) == 7
    assert calls == [("vc", ["g"])] if with_config else calls == [(["g"],)]


def test_model_config_stand_in_has_what_the_schedulers_read() -> None:
    """Attributes the Schedulers of every supported release read off ``vllm_config.model_config``
    (measured by grepping each release's ``v1/core``); 0.29.0 added ``uses_xdrope``."""
    from kvverify.targets.vllm.config import _model_config_stand_in
    mc = _model_config_stand_in(16, 16)
    for name in ("max_model_len", "original_max_model_len", "is_encoder_decoder", "enable_return_routed_experts",
                 "is_diffusion", "return_sampling_mask", "uses_mrope", "uses_xdrope", "supports_multimodal_inputs",
                 "runner_type", "supports_kv_cache_grouping", "skip_tokenizer_init"):
        assert hasattr(mc, name), name


def test_an_example_the_release_refuses_is_rejected_not_a_block_size_crash() -> None:
    """``unsupported()`` inside G3 (0.25.0 lacks ``prefix_match_unit``) rejects the example;
    ``check_block_sizes`` must not turn Hypothesis's rejection into ``block_sizes.crash``."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.errors import Unsatisfiable

    from kvverify.invariants.block_sizes import check_block_sizes
    from kvverify.reference.config import VllmConfig
    from kvverify.targets.vllm.refusals import unsupported

    class Release:
        def resolve_block_sizes(self, kv_cache_config, vllm_config):
            unsupported("vLLM 0.25.0: CacheConfig has no parameter prefix_match_unit")

    cfg = KVCacheConfig(num_blocks=8, kv_cache_tensors=(), kv_cache_groups=_groups())
    answers: list = []

    @settings(max_examples=3, database=None, suppress_health_check=list(HealthCheck))
    @given(st.just(None))
    def run(_: None) -> None:
        answers.append(check_block_sizes(cfg, VllmConfig(), Release()))

    with pytest.raises(Unsatisfiable):
        run()
    assert answers == []


def test_coordinator_without_scheduler_block_size_gets_the_hash_block_size_alone() -> None:
    """0.20 - 0.22: ``resolve_kv_cache_block_sizes`` exists, but the coordinator takes only
    ``hash_block_size`` (the scheduler block size goes to ``Scheduler(block_size=...)``)."""
    from kvverify.targets.vllm.planner import coordinator_kwargs
    mods = _release_0_25()

    def get_kv_cache_coordinator(kv_cache_config, max_model_len, max_num_batched_tokens, use_eagle, enable_caching,
                                 enable_kv_cache_events, dcp_world_size, pcp_world_size, hash_block_size,
                                 metrics_collector=None): ...

    mods["vllm.v1.core.kv_cache_coordinator"] = _module("c", get_kv_cache_coordinator=get_kv_cache_coordinator)
    caps = compat.detect("0.20.0", mods)
    assert caps.block_size_resolution and not caps.has("get_kv_cache_coordinator", "scheduler_block_size")
    vc = SimpleNamespace(max_in_flight_tokens=4096, max_num_batched_tokens=2048, enable_prefix_caching=True)
    kw = coordinator_kwargs(SimpleNamespace(up=SimpleNamespace(compat=caps)), "cfg", 100, vc, 48, 16)  # type: ignore[arg-type]
    assert kw["hash_block_size"] == 16 and "scheduler_block_size" not in kw


# ------------------------------- a known finding's property on a release without it

def test_a_failure_of_a_findings_property_is_attributed_with_the_finding_fixed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """F3's example fails on 0.19.1 (where F3 is absent) because its check ignores the
    override; the faithful reference fails it too (it has F3). The replays are repeated with
    F3's fix on, and the flaw that then reproduces names the release's defect."""
    from kvverify import reports
    from kvverify.releases import explain as attribution

    def fake_replay(report, *, target, flaw_names, fix_names):
        has_f3 = "check_plans_computed_tokens" not in fix_names
        ok = has_f3 or "override_ignored_in_check" in flaw_names
        return reports.ReplayOutcome(ok, "reproduced" if ok else "passes", "")
    monkeypatch.setattr(reports, "replay_report", fake_replay)
    report = {"property": "test_startup_refusal_is_necessary", "violation": {"name": "startup.needlessly_strict"}}
    out = attribution.explain_report(report, pairs=False)
    assert out["reference_reproduces"] and out["flaws"] == ["override_ignored_in_check"]
    assert "check_plans_computed_tokens" in out["fixes"]  # FIXED_BY of the property (F3's option among them)
    # a property that is no known finding's, or a failure the fixed reference still has: as before
    other = {"property": "test_startup_check_passes_implies_servable", "violation": {"name": "startup.too_loose"}}
    assert attribution.explain_report(other, pairs=False) == {
        "reference_reproduces": True, "flaws": [], "violation": "startup.too_loose", "fixes": []}
    monkeypatch.setattr(reports, "replay_report",
                        lambda report, **kw: reports.ReplayOutcome(True, "reproduced", ""))
    assert attribution.explain_report(report, pairs=False)["flaws"] == []


def test_absorbing_a_combination_absorbs_its_parts() -> None:
    """``kvverify releases`` passes the defects found so far to ``--absorb-flaws``, pairs
    (``A + B``) included; each part is absorbed (a pass used to stop: "unknown flaw")."""
    from kvverify.errors import ConfigError
    from kvverify.props import attribution

    before = attribution.mode()
    try:
        m = attribution.configure(absorb=["autofit_ignores_null_block + swa_admission_uncapped,null_block_not_reserved"])
        assert m.absorb == {"autofit_ignores_null_block", "swa_admission_uncapped", "null_block_not_reserved"}
        with pytest.raises(ConfigError):
            attribution.configure(absorb=["null_block_not_reserved + no_such_flaw"])
    finally:
        attribution.configure(name=before.name, absorb=before.absorb, log_path=before.log_path)


def test_late_capabilities_name_what_the_release_lacks() -> None:
    """The operator checks' late imports go through one reader: a lacking module or member
    skips with the capability, the symbol and the release named."""
    good = {module: types.SimpleNamespace(**{n.split(".")[0]: type(n, (), {}) for n in names})
            for module, names in late.LATE_CAPABILITIES["max_model_len_derivation"]}
    ns = late.late("max_model_len_derivation", "9.9.9", good.__getitem__)
    assert ns._get_and_verify_max_len is good["vllm.config.model"]._get_and_verify_max_len

    def no_convertor(module: str) -> Any:
        if module.endswith("model_arch_config_convertor"):
            raise ImportError(f"No module named {module!r}")
        return good[module]

    with pytest.raises(ReleaseLacks, match=r"vLLM 9\.9\.9 lacks max_model_len_derivation \(no module "
                                           r"vllm\.transformers_utils\.model_arch_config_convertor"):
        late.late("max_model_len_derivation", "9.9.9", no_convertor)
    bare_class = types.SimpleNamespace(CompilationConfig=type("CompilationConfig", (), {}),
                                       CUDAGraphMode=object, CompilationMode=object, AttentionCGSupport=object)
    with pytest.raises(ReleaseLacks, match=r"no vllm\.config\.compilation\.CompilationConfig"
                                           r"\.resolve_cudagraph_mode_and_sizes"):
        late.late("cudagraph_resolution", "9.9.9", lambda module: bare_class)


def test_f10_is_expected_only_where_an_idle_decode_is_padded() -> None:
    """F10 (a re-sent cached prompt's padded decode breaks the scan forever) needs the padding of a
    new one-token decode with nothing running (0.31+); 0.25 - 0.29 pad only behind a running
    request, where the replay completes (measured on 0.28.0 and 0.29.0): not expected there."""
    mods = _new_release()

    class Scheduler(mods["vllm.v1.core.sched.scheduler"].Scheduler):  # type: ignore[name-defined,misc]
        def schedule(self, scheduled_running_reqs=(), prefill_scheduled=False):
            pad_spec_decode = False
            if scheduled_running_reqs and not prefill_scheduled:
                pad_spec_decode = True
            return pad_spec_decode

    caps = compat.detect("0.33.0", _new_release())
    assert caps.spec_decode_padding and caps.spec_decode_padding_idle
    rules = findings.CheckRules(**{f.name: False for f in dataclasses.fields(findings.CheckRules)})
    assert findings.finding_expected("F10", caps, rules)
    mods["vllm.v1.core.sched.scheduler"].Scheduler = Scheduler
    old = compat.detect("0.29.0", mods)
    assert old.spec_decode_padding and not old.spec_decode_padding_idle
    assert not findings.finding_expected("F10", old, rules)
