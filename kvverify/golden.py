"""JSON codec for the recorded differential corpus (``scripts/record_vllm_golden.py``).

Encodes the frozen dataclasses a recorded case is made of (``VllmConfig``, the
``KVCacheSpec`` subclasses, ``KVCacheConfig`` / groups / tensors, ``WorkloadSpec``,
``ConnectorScript`` / ``RequestScript``, ``StartupCase``, ``BlockSizeCase``) as plain JSON, by an explicit allow-list of type
names: no pickle, no ``eval``. Tuples stay tuples and dicts keep their key order and key
types. An unknown type, or a field a class no longer has, is a :class:`GoldenFormatError`
naming it (re-record with ``scripts/record_vllm_golden.py``).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from kvverify.reference import specs as _specs
from kvverify.reference.config import VllmConfig
from kvverify.reference.connector import ConnectorScript, RequestScript
from kvverify.reference.driver import WorkloadSpec
from kvverify.reference.grouping import KVCacheGroupSpec
from kvverify.reference.planner import KVCacheConfig, KVCacheTensor
from kvverify.strategies import BlockSizeCase, StartupCase

#: Bumped whenever the record layout changes; the replay refuses any other version.
FORMAT_VERSION = 1
RERECORD = "re-record with scripts/record_vllm_golden.py"

#: The dataclasses a corpus may hold, by name (the allow-list).
TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (VllmConfig, WorkloadSpec, ConnectorScript, RequestScript, KVCacheGroupSpec, KVCacheConfig,
                KVCacheTensor, StartupCase,
                BlockSizeCase, _specs.FullAttentionSpec, _specs.MLAAttentionSpec, _specs.SlidingWindowSpec,
                _specs.ChunkedLocalAttentionSpec, _specs.CrossAttentionSpec, _specs.EncoderOnlyAttentionSpec,
                _specs.MambaSpec, _specs.UniformTypeKVCacheSpecs)
}


class GoldenFormatError(ValueError):
    """A corpus entry this code cannot decode (unknown type, vanished field, bad shape)."""


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data: ``{"$t": [...]}`` tuples, ``{"$d": [[k, v], ...]}`` dicts,
    ``{"$c": name, "f": {...}}`` allow-listed dataclasses (init fields only)."""
    if value is None or type(value) in (bool, int, float, str):  # exact types: no enums, no subclasses
        return value
    if type(value) is tuple:
        return {"$t": [encode(v) for v in value]}
    if type(value) is list:
        return [encode(v) for v in value]
    if type(value) is dict:
        return {"$d": [[encode(k), encode(v)] for k, v in value.items()]}
    name = type(value).__name__
    if dataclasses.is_dataclass(value) and TYPES.get(name) is type(value):
        return {"$c": name, "f": {f.name: encode(getattr(value, f.name))
                                  for f in dataclasses.fields(value) if f.init}}
    raise GoldenFormatError(f"cannot encode a {type(value).__module__}.{name}: not in kvverify.golden.TYPES")


def decode(data: Any, where: str = "record") -> Any:
    """The inverse of :func:`encode`; ``where`` names the place in errors."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v, f"{where}[{i}]") for i, v in enumerate(data)]
    if not isinstance(data, dict):
        raise GoldenFormatError(f"{where}: unexpected {type(data).__name__}; {RERECORD}")
    if "$t" in data:
        return tuple(decode(v, f"{where}[{i}]") for i, v in enumerate(data["$t"]))
    if "$d" in data:
        return {decode(k, f"{where}.key"): decode(v, f"{where}[{k!r}]") for k, v in data["$d"]}
    if "$c" in data:
        name = data["$c"]
        cls = TYPES.get(name)
        if cls is None:
            raise GoldenFormatError(f"{where}: unknown type {name!r} (allowed: {sorted(TYPES)}); {RERECORD}")
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        gone = sorted(set(data["f"]) - known)
        if gone:
            raise GoldenFormatError(f"{where}: {name} has no field {', '.join(gone)} any more; {RERECORD}")
        fields = {k: decode(v, f"{where}.{name}.{k}") for k, v in data["f"].items()}
        try:
            return cls(**fields)
        except (TypeError, ValueError) as e:
            raise GoldenFormatError(f"{where}: cannot rebuild {name}: {e}; {RERECORD}") from e
    raise GoldenFormatError(f"{where}: an object that is no tuple, dict or known type; {RERECORD}")


def write_corpus(path: Path, corpus: dict[str, Any]) -> None:
    """Write ``corpus`` (already encoded) as gzip JSON, atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(json.dumps(corpus, separators=(",", ":"), sort_keys=False).encode())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would follow the file into git
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_corpus(path: Path) -> dict[str, Any]:
    """The corpus at ``path`` (encoded records; decode the parts you need with :func:`decode`)."""
    with gzip.open(path, "rb") as f:
        corpus = json.loads(f.read())
    if not isinstance(corpus, dict) or corpus.get("format_version") != FORMAT_VERSION:
        found = corpus.get("format_version") if isinstance(corpus, dict) else None
        raise GoldenFormatError(f"{path}: format version {found!r}, this code reads {FORMAT_VERSION}; {RERECORD}")
    return corpus
