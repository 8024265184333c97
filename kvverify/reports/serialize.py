"""Tagged JSON: an example's objects survive the round trip to a report and back.

Tuples, dataclasses, enums, sets and non-string-keyed dicts keep their type, so an example
decodes to objects equal (and hashable) to the ones the property saw. Only classes from
``kvverify`` modules (or modules already imported, e.g. a loaded suite file) are rebuilt,
always through their validating constructors.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import math
import sys
from typing import Any

from kvverify.reports.capture import RecordingData, ReplayData
from kvverify.reports.common import ReportError, sanitize, short_repr


class NotSerializable(ReportError):
    pass


def encode(value: Any) -> Any:
    """``value`` as tagged JSON (raises :class:`NotSerializable` for opaque objects)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"__float__": repr(value)}
    if isinstance(value, RecordingData):
        return {"__data__": [{"label": d["label"], "value": encode(d["value"])} for d in value.draws]}
    if isinstance(value, ReplayData):
        return {"__data__": [{"label": d["label"], "value": encode(d["value"])} for d in value.draws]}
    if isinstance(value, enum.Enum):
        return {"__enum__": _class_path(type(value)), "value": encode(value.value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return {"__dataclass__": _class_path(type(value)), "fields": fields}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [encode(v) for v in value]
        items.sort(key=lambda x: json.dumps(x, sort_keys=True))
        return {"__frozenset__" if isinstance(value, frozenset) else "__set__": items}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    raise NotSerializable(f"cannot serialize {type(value).__name__} {short_repr(value)}")


def decode(data: Any) -> Any:
    """Inverse of :func:`encode`. Dataclasses are rebuilt through their constructors."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if "__tuple__" in data:
        return tuple(decode(v) for v in data["__tuple__"])
    if "__float__" in data:
        return float(data["__float__"])
    if "__frozenset__" in data:
        return frozenset(decode(v) for v in data["__frozenset__"])
    if "__set__" in data:
        return {decode(v) for v in data["__set__"]}
    if "__dict__" in data:
        return {decode(k): decode(v) for k, v in data["__dict__"]}
    if "__data__" in data:
        return ReplayData([{"label": d.get("label"), "value": decode(d.get("value"))}
                           for d in data["__data__"]])
    if "__enum__" in data:
        return _resolve_class(data["__enum__"])(decode(data["value"]))
    if "__dataclass__" in data:
        cls = _resolve_class(data["__dataclass__"])
        if not dataclasses.is_dataclass(cls):
            raise ReportError(f"{data['__dataclass__']} is not a dataclass")
        kwargs = {k: decode(v) for k, v in data.get("fields", {}).items()}
        try:
            return cls(**kwargs)  # type: ignore[operator]
        except TypeError as e:
            raise ReportError(f"cannot rebuild {data['__dataclass__']}: {e} "
                              "(has the class changed since the report was written?)") from None
    if "__repr__" in data:
        raise ReportError(f"the report holds an opaque value that cannot be rebuilt: {data['__repr__']}")
    return {k: decode(v) for k, v in data.items()}


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve_class(path: str) -> Any:
    """The class a tagged value names; a class of a module that moved is found at its new home
    (:func:`kvverify.reports.schema.moved_module`)."""
    from kvverify.reports.schema import moved_module

    module_name, _, qualname = str(path).partition(":")
    if not (module_name == "kvverify" or module_name.startswith("kvverify.") or module_name in sys.modules):
        raise ReportError(f"refusing to load class {path!r}: only kvverify classes are rebuilt")
    try:
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError:
            if moved_module(module_name) == module_name:
                raise
            obj = importlib.import_module(moved_module(module_name))
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ReportError(f"cannot find class {path!r}: {e}") from None
    return obj


def plain(value: Any) -> Any:
    """A JSON-safe, human-facing rendering (tuples as lists, objects as their repr)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        return plain(value.value)
    return sanitize(repr(value))


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
