"""The how-tos (``docs/add-a-*.md``) match the code they walk through.

Paths they mention are checked by ``tests/test_doc_paths.py``. Here: every code excerpt that
opens with a ``# <path>`` comment appears verbatim in that file; every dotted ``kvverify.…``
name resolves; every ``kvverify <command> --option`` they show is an option of that command;
and the table of ``docs/add-a-flaw.md`` names real ``Flaw`` fields.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from kvverify import flaws
from kvverify.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
HOWTOS = sorted((ROOT / "docs").glob("add-a-*.md"))
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
DOTTED = re.compile(r"`(kvverify(?:\.\w+)+)`")
COMMAND = re.compile(r"(?:^ {4}|`)(kvverify (?:[a-z]+)(?: [^`#\n]*)?)", re.M)


def _excerpts(text: str) -> list[tuple[str, str]]:
    out = []
    for block in BLOCK.findall(text):
        first, _, rest = block.partition("\n")
        if first.startswith("# ") and "/" in first:
            out.append((first[2:].strip(), rest))
    return out


def test_there_are_howtos() -> None:
    assert {p.name for p in HOWTOS} >= {"add-a-spec-kind.md", "add-a-flaw.md"}


@pytest.mark.parametrize("doc", HOWTOS, ids=lambda p: p.name)
def test_excerpts_are_the_code(doc: Path) -> None:
    text = doc.read_text()
    for path, excerpt in _excerpts(text):
        source = (ROOT / path).read_text()
        assert excerpt in source, f"{doc.name}: the excerpt of {path} is not in it any more:\n{excerpt}"


@pytest.mark.parametrize("doc", HOWTOS, ids=lambda p: p.name)
def test_dotted_names_resolve(doc: Path) -> None:
    for name in DOTTED.findall(doc.read_text()):
        parts = name.split(".")
        obj = importlib.import_module(parts[0])
        for i, part in enumerate(parts[1:], 1):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(".".join(parts[:i + 1]))


NAME = re.compile(r"`([A-Za-z_][\w.]*)(?:\([^`]*\))?`")


@pytest.mark.parametrize("doc", HOWTOS, ids=lambda p: p.name)
def test_every_name_cited_is_in_the_code(doc: Path) -> None:
    """Each identifier in backticks (``Flaw``, ``flaws.is_on``, ``test_predictor_equals_allocator``)
    is defined or used in the project's Python: a renamed function fails here."""
    code = "\n".join(p.read_text() for folder in ("kvverify", "tests", "properties", "benchmarks")
                     for p in (ROOT / folder).rglob("*.py"))
    words = set(re.findall(r"\w+", code))
    missing = sorted({n for n in NAME.findall(doc.read_text())
                      if not all(part in words for part in n.split(".") if part)})
    assert not missing, f"{doc.name} cites names the code does not have: {missing}"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers here (no public accessor)
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@pytest.mark.parametrize("doc", HOWTOS, ids=lambda p: p.name)
def test_commands_exist(doc: Path) -> None:
    subs = _subcommands(build_parser())
    for command in COMMAND.findall(doc.read_text()):
        words = command.split()
        sub = subs.get(words[1])
        assert sub is not None, f"{doc.name}: `{command}`: no command {words[1]!r}"
        options = {o for a in sub._actions for o in a.option_strings}
        for word in words[2:]:
            if word.startswith("--"):
                assert word in options, f"{doc.name}: `{command}`: {words[1]} has no option {word}"


def test_the_flaw_howto_names_real_fields() -> None:
    text = (ROOT / "docs" / "add-a-flaw.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line.split("|")[2]][1:]  # no header
    named = {n for line in rows for n in re.findall(r"`(\w+)`", line.split("|")[2])}
    fields = {f.name for f in dataclasses.fields(flaws.Flaw)} | {"Budget"}
    assert named and named <= fields, named - fields
    assert fields - {"name", "Budget"} <= named, "a Flaw field the how-to's table does not explain"
