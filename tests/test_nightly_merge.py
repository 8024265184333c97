"""The nightly merge (kvverify/nightly/merge.py): starts empty, takes each key from the shards
that own it, deletions survive, a target's keys stay its own, unowned keys age out."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase, InMemoryExampleDatabase

from kvverify.errors import ConfigError
from kvverify.exampledb import ScopedDatabase, read_owned_keys, scope_for, value_digest, write_owned_keys
from kvverify.nightly.merge import INDEX_KEY, Shard, merge, merge_directories, read_index

ROOT = Path(__file__).resolve().parents[1]


def _copy_db(src: Path, dst: Path) -> DirectoryBasedExampleDatabase:
    if src.exists():
        shutil.copytree(src, dst)
    else:
        dst.mkdir(parents=True)
    return DirectoryBasedExampleDatabase(dst)


def _shard_dir(root: Path, name: str, previous: Path | None, scope: str, owner: str,
               work: list[tuple[str, bytes, bytes]]) -> Path:
    """A shard as the workflow uploads it: last night's database restored, then ``work``
    (``("fetch"|"save"|"delete", key, value)``) done through a ScopedDatabase, its manifest."""
    shard = root / name
    db = _copy_db(previous, shard / "nightly-db") if previous is not None else _copy_db(root / "none", shard / "nightly-db")
    scoped = ScopedDatabase(db, scope)
    for op, key, value in work:
        if op == "fetch":
            list(scoped.fetch(key))
        elif op == "save":
            scoped.save(key, value)
        else:
            scoped.delete(key, value)
    write_owned_keys(shard / "nightly-owned.json", scoped, owner=owner)
    return shard


def _values(path: Path, scope: str, key: bytes) -> set[bytes]:
    return set(ScopedDatabase(DirectoryBasedExampleDatabase(path), scope).fetch(key))


def _night0(root: Path) -> Path:
    """Last night's merged database: reference keys K1 = {a, b}, K2 = {c}, K5 = {f}; vLLM key
    V1 = {v} (a vLLM-only known failure); all in the index."""
    prev = root / "previous"
    db = DirectoryBasedExampleDatabase(prev)
    stats = merge([], db)  # an empty merge writes an empty database
    assert stats.values == 0
    ref, vllm = ScopedDatabase(db, "reference"), ScopedDatabase(db, "vllm==0.33.0")
    for key, values in ((b"K1", (b"a", b"b")), (b"K2", (b"c",)), (b"K5", (b"f",))):
        for v in values:
            ref.save(key, v)
    vllm.save(b"V1", b"v")
    for k in sorted(ref.touched | vllm.touched):
        db.save(INDEX_KEY, json.dumps({"key": k.hex(), "unowned": 0}).encode())
    return prev


def test_merge_of_synthetic_shards_keeps_deletions(tmp_path: Path) -> None:
    prev = _night0(tmp_path)
    shards = [
        # two random runs of reference shard 1/2 co-own K1: both replayed `a` (no longer fails:
        # Hypothesis deleted it), run 1 found a new failure `d`
        _shard_dir(tmp_path, "s1", prev, "reference", "reference 1/2",
                   [("fetch", b"K1", b""), ("delete", b"K1", b"a"), ("save", b"K1", b"d")]),
        _shard_dir(tmp_path, "s2", prev, "reference", "reference 1/2",
                   [("fetch", b"K1", b""), ("delete", b"K1", b"a")]),
        # reference shard 2/2 owns K5 but its cache restore failed (started empty): it deleted
        # nothing, so last night's `f` stays; it still holds no stale K1 copy to resurrect
        _shard_dir(tmp_path, "s3", None, "reference", "reference 2/2", [("fetch", b"K5", b"")]),
        # the vLLM shard owns V1 and V2 and keeps its known failure `v`: it never lands on the
        # reference's keys; its restored copy of K1 (with `a`!) is stale and ignored
        _shard_dir(tmp_path, "s4", prev, "vllm==0.33.0", "vllm 1/1",
                   [("fetch", b"V1", b""), ("save", b"V2", b"w")]),
    ]
    (tmp_path / "failed-shard").mkdir()  # a shard that uploaded nothing usable: no manifest
    out = tmp_path / "merged"
    stats = merge_directories([*shards, tmp_path / "failed-shard"], out, previous=prev)

    assert _values(out, "reference", b"K1") == {b"b", b"d"}, "a deleted example came back (or a new one was lost)"
    assert _values(out, "reference", b"K5") == {b"f"}
    assert _values(out, "reference", b"K2") == {b"c"}  # nobody owned K2 tonight: carried over
    assert _values(out, "vllm==0.33.0", b"V1") == {b"v"} and _values(out, "vllm==0.33.0", b"V2") == {b"w"}
    assert _values(out, "reference", b"V1") == set(), "the vLLM known failure leaked onto the reference"
    assert (stats.owned_keys, stats.carried_keys, stats.deletions_kept) == (4, 1, 1)
    index = read_index(DirectoryBasedExampleDatabase(out))
    k2 = next(k for k in index if k.endswith(b":K2"))
    assert index[k2] == 1 and sorted(v for k, v in index.items() if k != k2) == [0, 0, 0, 0]

    # the next nights: nobody owns K2 any more (its property went away): carried 3 nights, then dropped
    night = out
    for n in range(2, 5):
        nxt = tmp_path / f"night{n}"
        merge_directories([], nxt, previous=night)
        night = nxt
    assert _values(tmp_path / "night3", "reference", b"K2") == {b"c"}
    assert _values(tmp_path / "night4", "reference", b"K2") == set()


def test_a_value_deleted_then_found_again_stays() -> None:
    """The last operation on a value wins: deleted (passed), then saved again (failed again)."""
    db = ScopedDatabase(InMemoryExampleDatabase(), "reference")
    db.save(b"K", b"x")
    db.delete(b"K", b"x")
    db.save(b"K", b"x")
    shard = Shard("s", db.inner, frozenset(db.touched), {k: frozenset(v) for k, v in db.deleted.items()})
    into = InMemoryExampleDatabase()
    merge([shard], into)
    assert set(ScopedDatabase(into, "reference").fetch(b"K")) == {b"x"}


def test_a_real_hypothesis_deletion_survives_the_merge(tmp_path: Path) -> None:
    """Hypothesis itself deletes: a property fails at night 1 (saved), is fixed; at night 2 the
    shard that owns it replays the example, which passes, and Hypothesis deletes it. Another
    shard restored the same database (a stale copy with the example) but owns other keys.
    After the merge the example is gone."""
    broken = {"on": True}

    def body(n: int) -> None:
        assert not (broken["on"] and n >= 3), "planted flaw"

    def run(db: ScopedDatabase) -> bool:
        test = settings(database=db, max_examples=60, phases=list(Phase), derandomize=False)(given(st.integers(0, 10))(body))
        try:
            test()
        except AssertionError:
            return True
        return False

    night1 = ScopedDatabase(DirectoryBasedExampleDatabase(tmp_path / "night1"), "reference")
    assert run(night1), "the planted flaw was not found"
    key = next(k for k in night1.touched if not k.endswith((b".secondary", b".pareto")))
    saved = set(night1.inner.fetch(key))
    assert saved, "Hypothesis saved no counterexample"
    for k in night1.touched:
        night1.inner.save(INDEX_KEY, json.dumps({"key": k.hex(), "unowned": 0}).encode())

    broken["on"] = False  # the fix lands
    owner_dir, other_dir = tmp_path / "owner", tmp_path / "other"
    owner = ScopedDatabase(_copy_db(tmp_path / "night1", owner_dir / "nightly-db"), "reference")
    assert not run(owner)
    assert not set(owner.inner.fetch(key)), "Hypothesis did not delete the example that passes now"
    assert {value_digest(v) for v in saved} <= owner.deleted[key]
    write_owned_keys(owner_dir / "nightly-owned.json", owner, owner="reference 1/2")
    other = ScopedDatabase(_copy_db(tmp_path / "night1", other_dir / "nightly-db"), "reference")
    list(other.fetch(b"another property"))
    write_owned_keys(other_dir / "nightly-owned.json", other, owner="reference 2/2")
    assert set(other.inner.fetch(key)) == saved  # the stale copy

    out = tmp_path / "night2"
    merge_directories([owner_dir, other_dir], out, previous=tmp_path / "night1")
    assert not set(DirectoryBasedExampleDatabase(out).fetch(key)), "the deleted example came back"


def test_merge_cli_and_bad_input(tmp_path: Path) -> None:
    prev = _night0(tmp_path)
    shard = _shard_dir(tmp_path, "s1", prev, "reference", "reference 1/1", [("fetch", b"K1", b""),
                                                                              ("delete", b"K1", b"b")])
    out = subprocess.run([sys.executable, "-m", "kvverify.nightly", "merge", "--previous", str(prev),
                          "--into", str(tmp_path / "m"), str(shard)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "merged 1 shard(s): 1 owned key(s), 3 carried over" in out.stdout
    assert _values(tmp_path / "m", "reference", b"K1") == {b"a"}
    again = subprocess.run([sys.executable, "-m", "kvverify.nightly", "merge", "--into", str(tmp_path / "m")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "must be a new or empty directory" in again.stderr
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "nightly-owned.json").write_text("{\"schema\": \"other\"}")
    with pytest.raises(ConfigError, match="owned-keys"):
        merge_directories([tmp_path / "bad"], tmp_path / "m2")
    with pytest.raises(ConfigError, match="owned-keys"):
        read_owned_keys(tmp_path / "missing.json")


def test_scopes_keep_targets_apart() -> None:
    inner = InMemoryExampleDatabase()
    ref, vllm = ScopedDatabase(inner, scope_for("reference")), ScopedDatabase(inner, "vllm==0.33.0")
    vllm.save(b"K", b"vllm-only failure")
    assert list(ref.fetch(b"K")) == [] and list(vllm.fetch(b"K")) == [b"vllm-only failure"]
    assert scope_for("reference", ["b", "a"], ["f"]) == "reference+flaw=a,b+fix=f"
    with pytest.raises(ConfigError, match="scope"):
        scope_for("reference", ["a b"])
