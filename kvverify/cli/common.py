"""Shared pieces of the command line: byte sizes, argument types, consoles, exit codes, the
flaw switches, the model loader both engines' checks use."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
from typing import Any, Iterator, Sequence

from kvverify.errors import ConfigError, KVVerifyError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

_BINARY = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_DECIMAL = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
# vLLM's human_readable_int: lower-case k/m/g/t are decimal, upper-case K/M/G/T binary
_VLLM_LETTERS = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
                 "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE_RE = re.compile(r"^\s*(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$")


def parse_bytes(text: str, field: str = "bytes", minimum: int = 1) -> int:
    """``20GiB``, ``512MiB``, ``1.5GiB``, ``20GB``, ``20G`` (vLLM style) or plain bytes -> int >= ``minimum``."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ConfigError(field, text, "must be a byte count, optionally with a unit: B, KiB, MiB, GiB, "
                          "TiB (binary), KB, MB, GB, TB (decimal), e.g. 20GiB or 512MiB")
    unit = m.group("unit")
    if unit in ("", "B", "b"):
        scale = 1
    elif unit.lower() in _BINARY:
        scale = _BINARY[unit.lower()]
    elif unit.lower() in _DECIMAL:
        scale = _DECIMAL[unit.lower()]
    elif unit in _VLLM_LETTERS:
        scale = _VLLM_LETTERS[unit]
    else:
        raise ConfigError(field, text, f"unknown unit {unit!r}; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB "
                          "(e.g. 20GiB)")
    value = float(m.group("num")) * scale
    if not math.isfinite(value) or value < minimum or (minimum >= 1 and value <= 0):
        raise ConfigError(field, text, "must be a positive number of bytes" if minimum >= 1 else
                          f"must be a number of bytes >= {minimum}")
    if value != int(value) and scale == 1:
        raise ConfigError(field, text, "must be a whole number of bytes")
    return int(round(value))


def human_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def arg_type(fn, field: str):
    def parse(text: str):
        try:
            return fn(text)
        except (KVVerifyError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = field  # argparse names the type in its messages
    return parse


def bytes_arg(field: str, minimum: int = 1):
    return arg_type(lambda t: parse_bytes(t, field, minimum), field)


def int_arg(field: str, minimum: int = 1):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(field, text, "must be an integer") from None
        if value < minimum:
            raise ConfigError(field, value, f"must be >= {minimum}")
        return value
    return arg_type(parse, field)


def length_arg(text: str) -> int | str:
    if str(text).strip().lower() in ("auto", "-1"):
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"max_model_len={text!r} is invalid: must be an integer or 'auto'") \
            from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"max_model_len={value} is invalid: must be >= 2, a request needs one "
                                         "prompt token and one output token (or 'auto')")
    return value


def fraction_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"gpu_memory_utilization={text!r} is invalid: must be a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"gpu_memory_utilization={value} is invalid: must be in (0, 1]")
    return value


def esc(text: Any) -> str:
    from rich.markup import escape
    return escape(str(text))


def make_console(stderr: bool = False):
    """A rich console; 120 columns when the output is not a terminal (CI logs, pipes)."""
    from rich.console import Console
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(stderr=stderr, highlight=False, width=120)
    return console


def flaw_names() -> list[str]:
    """Every engine's flaws (vLLM's first; :mod:`kvverify.engines`)."""
    from kvverify import engines
    return list(engines.flaw_catalog())


@contextlib.contextmanager
def flaws_on(names: Sequence[str] | None, engine: str | None = "vllm") -> Iterator[None]:
    """These flaws on, each in its engine's catalogue. ``engine``: the one engine the command
    runs (another engine's flaw would change nothing: a ``ConfigError`` naming it); ``None``:
    any engine's (``kvverify fuzz`` runs both)."""
    from kvverify import engines
    for name in names or ():
        owner = engines.engine_of_flaw(name)
        if engine is not None and owner.name != engine:
            raise ConfigError("flaw", name, f"a {owner.title} flaw; this runs {engines.get(engine).title}'s "
                              f"reference (its flaws: {', '.join(engines.get(engine).flaw_catalog)})")
    with engines.enabled(flaws=names or ()):
        yield


def load_layout(model: str | None = None, config_json: str | None = None) -> Any:
    """A catalog model by name, or a Hugging Face ``config.json`` (file or directory)."""
    from pathlib import Path

    from kvverify import catalog

    if (model is None) == (config_json is None):
        raise ConfigError("model", None, "give exactly one of --model NAME or --config-json PATH")
    if model is not None:
        return catalog.load_model(model)
    path = Path(config_json)  # type: ignore[arg-type]
    if not path.exists():
        raise catalog.CatalogError(str(path), "no such file (expected a Hugging Face config.json, or a "
                                   "directory holding one)")
    return catalog.read_hf_config(path)


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Help text as written (examples keep their layout), 100 columns."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34, width=100)
