"""Unknown drift is a clear error (issue 27): the history check over ``Compat.absent``.

:mod:`kvverify.targets.vllm.history` places a release by the newest layer of the KV-cache API
it has and explains each absent symbol by that place (a release older than the symbol, a
symbol upstream replaced); anything else is a :class:`~kvverify.targets.vllm.compat.DriftError`
naming the symbol and the release. Checked on layer histories built from the table itself
(every measured release, releases between two measured ones, dev builds, backports) and on the
0.33-like fake of ``tests/vllm_fakes.py``.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap

import pytest

from kvverify.targets.vllm import compat, history
from vllm_fakes import module, new_release

LAYERS = history.LAYERS
NEWEST = len(LAYERS) - 1


def _release(i: int, extra: frozenset[str] = frozenset()) -> tuple[set[str], set[str]]:
    """(absent, present) of a release that has layers 0..i (what it looks for and finds), plus ``extra``."""
    present = {s for k in range(i + 1) for s in LAYERS[k][1]} | set(extra)
    removed = {s for s, r in history.REPLACED.items() if r in present}
    present -= removed
    absent = ({s for k in range(i + 1, len(LAYERS)) for s in LAYERS[k][1]} | removed) - present
    return absent, present


@pytest.mark.parametrize("i", range(len(LAYERS)), ids=[name for name, _ in LAYERS])
def test_every_measured_release_is_explained(i: int) -> None:
    absent, present = _release(i)
    assert history.unexplained_absences(absent, present) == []
    assert history.newest_layer(present) == i


@pytest.mark.parametrize("i", range(len(LAYERS) - 2), ids=[name for name, _ in LAYERS[:-2]])
def test_a_release_between_two_measured_ones_is_explained(i: int) -> None:
    """A release after layer i may have part of layer i + 1 (upstream adds a layer's symbols
    over several releases), never a later layer's. (Part of the *newest* layer is drift:
    ``test_the_newest_layer_must_be_whole``; a build between the last two measured releases
    is told apart from a later one that lost a symbol by nothing but its version.)"""
    part = frozenset(sorted(LAYERS[i + 1][1])[:1])
    absent, present = _release(i, part)
    assert history.unexplained_absences(absent, present) == []


def test_a_dev_build_that_lost_an_older_symbol_is_drift() -> None:
    absent, present = _release(NEWEST)
    lost = "vllm.v1.core.block_pool.BlockPool.cached_block_hashes_by_block"
    present.discard(lost)
    absent.add(lost)
    assert history.unexplained_absences(absent, present) == [lost]
    msg = history.drift_message("0.33.1.dev3+g1a2b3c4", [lost], present)
    assert lost in msg and "0.33.1.dev3+g1a2b3c4" in msg and "0.22.0 layer" in msg
    assert "not a defect" in msg


def test_the_newest_layer_must_be_whole() -> None:
    """No release after the pin is measured: a build with part of the pin's layer lacks the rest."""
    absent, present = _release(NEWEST)
    lost = "vllm.v1.core.kv_cache_planning._pool_bytes_per_block_from_builder"
    present.discard(lost)
    absent.add(lost)
    assert history.unexplained_absences(absent, present) == [lost]


def test_a_base_symbol_is_needed_by_every_release() -> None:
    absent, present = _release(0)
    present.discard("vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots")
    absent.add("vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots")
    drift = history.unexplained_absences(absent, present)
    assert drift == ["vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots"]
    assert "every release the adapter was measured on has it" in history.drift_message("0.10.0", drift, present)


def _index(name: str) -> int:
    return next(i for i, (n, _) in enumerate(LAYERS) if n == name)


def test_a_backported_symbol_makes_the_skipped_layers_drift() -> None:
    """A 0.20-shaped release with one 0.31 symbol: everything of 0.22 ... 0.29 it lacks is drift
    (the adapter would otherwise treat it as a 0.31 release in some places, a 0.20 one in others)."""
    backport = frozenset({"vllm.v1.core.sched.scheduler.Scheduler.kv_holding_waiting"})
    absent, present = _release(_index("0.20.0"), backport)
    drift = history.unexplained_absences(absent, present)
    skipped = {s for k in range(_index("0.22.0"), _index("0.31.0")) for s in LAYERS[k][1]}
    assert skipped <= set(drift)
    assert not {s for k in range(_index("0.31.0") + 1, len(LAYERS)) for s in LAYERS[k][1]} & set(drift)


def test_a_replaced_symbol_is_explained_by_its_replacement_only() -> None:
    old = "vllm.v1.core.kv_cache_manager.KVCacheManager.can_fit_full_sequence"
    absent, present = _release(NEWEST)
    assert old in absent and history.why_absent(old, present) is not None
    present.discard(history.REPLACED[old])
    absent.add(history.REPLACED[old])
    assert old in history.unexplained_absences(absent, present)


def test_an_unknown_symbol_is_drift_that_names_the_table() -> None:
    absent, present = _release(NEWEST)
    drift = history.unexplained_absences(absent | {"vllm.v1.core.block_pool.BlockPool.new_probe"}, present)
    assert drift == ["vllm.v1.core.block_pool.BlockPool.new_probe"]
    assert "history.py does not know" in history.drift_message("0.34.0", drift, present)


def test_every_symbol_is_in_one_layer() -> None:
    seen: dict[str, str] = {}
    for name, syms in LAYERS:
        for s in syms:
            assert s not in seen, f"{s} in both {seen[s]} and {name}"
            seen[s] = name
    assert set(history.REPLACED) | set(history.REPLACED.values()) <= set(seen)


# ------------------------------------------------------------ through detect()

def _complete_new_release() -> dict:
    """The 0.33-like fake with every symbol of the pin's history (the base-layer classes the
    probe tests leave out)."""
    mods = new_release()
    cfg = mods["vllm.config"]
    cfg.SchedulerConfig = dataclasses.make_dataclass("SchedulerConfig", [("max_num_seqs", int, 1)])
    iface = mods["vllm.v1.kv_cache_interface"]

    class ChunkedLocalAttentionSpec(iface.KVCacheSpec):
        def max_admission_blocks_per_request(self, max_in_flight_tokens, max_model_len): ...

    iface.ChunkedLocalAttentionSpec = ChunkedLocalAttentionSpec
    mods["vllm.v1.outputs"].ModelRunnerOutput = type("ModelRunnerOutput", (), {})
    mods["vllm.v1.core.kv_cache_planning"]._pool_bytes_per_block = lambda groups: 1
    return mods


def test_detect_accepts_a_dev_build_with_the_pins_api() -> None:
    caps = compat.detect("0.33.1.dev3+g1a2b3c4", _complete_new_release())
    assert history.unexplained_absences(caps.absent, caps.present) == []
    assert "vllm.v1.core.kv_cache_manager.KVCacheManager.can_fit_full_sequence" in caps.absent


def test_detect_names_the_symbol_a_dev_build_renamed() -> None:
    mods = _complete_new_release()

    class BlockPool:  # cached_block_hashes_by_block renamed
        def __init__(self, num_gpu_blocks):
            self.hashes_of_block: dict = {}

    mods["vllm.v1.core.block_pool"].BlockPool = BlockPool
    with pytest.raises(compat.DriftError, match=r"vLLM 0\.33\.1\.dev3\+g1a2b3c4: unknown drift .*"
                                                r"BlockPool\.cached_block_hashes_by_block"):
        compat.detect("0.33.1.dev3+g1a2b3c4", mods)


def test_detect_names_a_renamed_transfer_state_attribute() -> None:
    """The connector adapter's stall fingerprint reads the Scheduler's transfer state through
    ``Compat.transfer_state``: a dev build that renamed ``deferred_frees`` is drift naming it, not a
    fingerprint that silently leaves the fenced frees out (two states that differ would look alike)."""
    mods = _complete_new_release()
    pin = mods["vllm.v1.core.sched.scheduler"].Scheduler
    # the pin's Scheduler with ``self.deferred_frees`` renamed in its own code (detection reads the
    # names the code stores, so the rename has to be in the code, not in an instance)
    src = textwrap.dedent(inspect.getsource(pin.__init__))
    assert src.count("self.deferred_frees") == 1
    namespace: dict = {}
    exec(compile(src.replace("self.deferred_frees", "self.fenced_frees"), "<renamed>", "exec"), {}, namespace)
    Scheduler = type("Scheduler", (), {**{k: v for k, v in vars(pin).items() if k not in ("__dict__", "__weakref__")},
                                       "__init__": namespace["__init__"]})
    mods["vllm.v1.core.sched.scheduler"].Scheduler = Scheduler
    with pytest.raises(compat.DriftError, match=r"Scheduler\.deferred_frees"):
        compat.detect("0.33.1.dev3+g1a2b3c4", mods)
    assert "deferred_frees" in compat.detect("0.33.1.dev3+g1a2b3c4", _complete_new_release()).transfer_state


def test_detect_says_when_it_is_not_a_v1_engine() -> None:
    mods = _complete_new_release()
    mods["vllm.v1.kv_cache_interface"] = None
    with pytest.raises(compat.DriftError, match="not a v1 engine"):
        compat.detect("0.6.0", mods)


def test_every_symbol_detect_reads_has_a_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe added to :func:`compat.detect` says when upstream introduced its symbol: one the
    history does not know is drift on the first release that lacks it (the KV-transfer probes
    once made 0.14 - 0.29 fail to start for want of their history)."""
    seen: set[str] = set()
    original = compat._Release._seen

    def spy(self: compat._Release, key: str, found: bool) -> bool:
        seen.add(key)
        return original(self, key, found)

    monkeypatch.setattr(compat._Release, "_seen", spy)
    compat.detect("0.33.1.dev3+g1a2b3c4", _complete_new_release())
    unknown = sorted(k for k in seen if history.layer_of(k) is None and k not in history.REPLACED)
    assert unknown == [], f"symbols detect reads that kvverify/targets/vllm/history.py does not place: {unknown}"
