"""Merging the nightly shards' example databases into tomorrow's, so deletions survive.

Each shard restores last night's database, fuzzes its part of the properties under the
``nightly`` profile and writes a manifest (``kvverify fuzz --owned-keys``): the keys its
properties used (they are its keys; every key carries its target's scope, so a vLLM
shard's known failures never land on the reference's keys) and the values it deleted
(Hypothesis deletes a saved example that no longer fails). The merge:

1. starts from an **empty** database;
2. for every key some shard owns: last night's values plus every owner's values, minus
   each value an owner deleted (and did not save again) — an example deleted by the shard
   that replayed it does not come back, and a shard whose restore failed drops nothing;
3. a key nobody owned tonight (a shard that failed, a property that moved or went away)
   is carried over from last night's database, for at most ``max_carry`` nights in a row;
4. writes an index of its keys into the database itself (key :data:`INDEX_KEY`, outside
   every scope), which is how the next merge knows last night's keys: a Hypothesis
   database can fetch a key, not list them.

Only the public ``ExampleDatabase`` API is used (fetch / save): no file layout is assumed,
so a directory, Redis (where shards share one database live and no merge is needed) or any
other database merges alike.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from kvverify.errors import ConfigError
from kvverify.exampledb import read_owned_keys, value_digest

#: the merged database's own index of keys (JSON values ``{"key": hex, "unowned": nights}``)
INDEX_KEY = b"kvverify-index:keys"
#: nights in a row a key nobody owns is carried over before it is dropped
MAX_CARRY = 3
#: what a shard artifact holds (``.github/workflows/nightly.yml``)
SHARD_DB = "nightly-db"
SHARD_MANIFEST = "nightly-owned.json"


@dataclasses.dataclass(frozen=True)
class Shard:
    """One shard's result: its database, the keys it owns, the values it deleted per key."""

    owner: str
    db: ExampleDatabase
    keys: frozenset[bytes]
    deleted: dict[bytes, frozenset[str]]
    source: str = ""


@dataclasses.dataclass
class MergeStats:
    shards: int = 0
    owned_keys: int = 0
    carried_keys: int = 0
    dropped_keys: int = 0
    values: int = 0
    deletions_kept: int = 0

    def line(self) -> str:
        return (f"merged {self.shards} shard(s): {self.owned_keys} owned key(s), {self.carried_keys} carried over "
                f"from last night, {self.dropped_keys} dropped; {self.values} example(s) written, "
                f"{self.deletions_kept} deletion(s) kept")


def load_shard(directory: str | Path, *, db_name: str = SHARD_DB, manifest: str = SHARD_MANIFEST) -> Shard:
    """A downloaded shard artifact: ``<directory>/<db_name>/`` and ``<directory>/<manifest>``."""
    root = Path(directory)
    doc = read_owned_keys(root / manifest)
    db_dir = root / db_name
    if db_dir.exists() and not db_dir.is_dir():
        raise ConfigError("shard", str(db_dir), "the shard's database must be a directory")
    deleted = {k: frozenset(v) for k, v in doc["deleted"].items()}
    return Shard(str(doc.get("owner") or root.name), DirectoryBasedExampleDatabase(db_dir),
                 frozenset(doc["keys"]), deleted, str(root))


def read_index(db: ExampleDatabase | None) -> dict[bytes, int]:
    """Last night's keys and for how many nights each has gone unowned."""
    out: dict[bytes, int] = {}
    if db is None:
        return out
    for raw in db.fetch(INDEX_KEY):
        try:
            entry = json.loads(raw)
            out[bytes.fromhex(entry["key"])] = int(entry.get("unowned", 0))
        except (ValueError, KeyError, TypeError):
            continue  # a damaged entry names no key: nothing to carry
    return out


def merge(shards: Sequence[Shard], into: ExampleDatabase, *, previous: ExampleDatabase | None = None,
          max_carry: int = MAX_CARRY) -> MergeStats:
    """Write the merge of ``shards`` (over ``previous``, last night's database) into ``into``,
    which should be empty. Returns what was done."""
    if max_carry < 0:
        raise ConfigError("max_carry", max_carry, "must be >= 0")
    stats = MergeStats(shards=len(shards))
    owners: dict[bytes, list[Shard]] = {}
    for shard in shards:
        for key in shard.keys:
            if key != INDEX_KEY:
                owners.setdefault(key, []).append(shard)
    index: dict[bytes, int] = {}
    for key, owning in sorted(owners.items()):
        values = _values(previous, key)
        for shard in owning:
            values.update(_values(shard.db, key))
        dropped = {d for d, v in values.items()
                   if any(d in s.deleted.get(key, ()) and d not in _digests(s.db, key) for s in owning)}
        stats.deletions_kept += len(dropped)
        kept = [v for d, v in sorted(values.items()) if d not in dropped]
        _write(into, key, kept)
        stats.values += len(kept)
        stats.owned_keys += 1
        if kept:
            index[key] = 0
    for key, unowned in sorted(read_index(previous).items()):
        if key in owners:
            continue
        if unowned + 1 > max_carry:
            stats.dropped_keys += 1
            continue
        kept = list(_values(previous, key).values())
        if kept:
            _write(into, key, kept)
            stats.values += len(kept)
            stats.carried_keys += 1
            index[key] = unowned + 1
    for key, unowned in index.items():
        into.save(INDEX_KEY, json.dumps({"key": key.hex(), "unowned": unowned}, sort_keys=True).encode())
    return stats


def _values(db: ExampleDatabase | None, key: bytes) -> dict[str, bytes]:
    return {} if db is None else {value_digest(v): v for v in db.fetch(key)}


def _digests(db: ExampleDatabase, key: bytes) -> set[str]:
    return set(_values(db, key))


def _write(into: ExampleDatabase, key: bytes, values: Iterable[bytes]) -> None:
    for v in values:
        into.save(key, v)


def merge_directories(shard_dirs: Sequence[str | Path], into: str | Path, *, previous: str | Path | None = None,
                      max_carry: int = MAX_CARRY, db_name: str = SHARD_DB,
                      manifest: str = SHARD_MANIFEST) -> MergeStats:
    """:func:`merge` over directories: shard artifacts in, a fresh directory database out.

    A shard directory without a manifest (its job failed before writing one) is left out:
    its keys are then nobody's tonight and are carried over."""
    out = Path(into)
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise ConfigError("into", str(out), "must be a new or empty directory (the merge starts empty)")
    shards = [load_shard(d, db_name=db_name, manifest=manifest) for d in shard_dirs
              if (Path(d) / manifest).is_file()]
    prev = None
    if previous is not None and Path(previous).is_dir():
        prev = DirectoryBasedExampleDatabase(Path(previous))
    out.mkdir(parents=True, exist_ok=True)
    return merge(shards, DirectoryBasedExampleDatabase(out), previous=prev, max_carry=max_carry)


__all__ = ["INDEX_KEY", "MAX_CARRY", "MergeStats", "SHARD_DB", "SHARD_MANIFEST", "Shard", "load_shard", "merge",
           "merge_directories", "read_index"]
