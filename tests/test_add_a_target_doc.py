"""``docs/add-a-target.md`` matches the code, and no caller goes round the Target contract.

Every name the how-to writes in inline code resolves (a member of the contract's modules, a
protocol member, an enum member, a test it names); every member of the contract is in it;
its ``TARGETS`` snippet is the registry plus the worked example. (Paths: ``tests/test_doc_paths.py``.)
Then the rule the how-to states: properties, the CLI and the reports never ask a target its
name nor probe it with ``getattr``.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import re
import typing
from pathlib import Path

from kvverify.targets import TARGETS, base

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "add-a-target.md"
#: modules whose names the how-to may cite bare
NAMESPACES = ("kvverify.targets", "kvverify.targets.base", "kvverify.targets.conformance",
              "kvverify.targets.vllm.support", "kvverify.targets.vllm.compat", "kvverify.targets.vllm.refusals",
              "kvverify.reference.planner", "kvverify.reference.driver")
#: roots a dotted name may start from
ROOTS = {"hypothesis": "hypothesis", "flaws": "kvverify.flaws"}
#: words in inline code that are no kvverify name, and why
NOT_NAMES = {"SglangTarget": "the worked example's class", "sglang": "the worked example's engine",
             "mypy": "the type checker", "KVVERIFY_TARGET": "an environment variable (checked below)"}
IDENT = re.compile(r"^[A-Za-z_][\w.]*(\([^()]*\))?$")


def _doc() -> str:
    return DOC.read_text()


def _inline_code(text: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.findall(r"`([^`\n]+)`", prose)


def _protocol_names() -> set[str]:
    protos = [base.TargetBase, *base.CAPABILITY_PROTOCOLS.values()]
    return {n for p in protos for n in base.protocol_members(p)}


def _resolves(name: str) -> bool:
    head, *rest = name.split(".")
    candidates: list[object] = []
    if head in ROOTS:
        candidates.append(importlib.import_module(ROOTS[head]))
    for mod in NAMESPACES:
        m = importlib.import_module(mod)
        if head in vars(m):
            candidates.append(vars(m)[head])
    for enum in (base.Feature, base.Capability):
        if head in enum.__members__:
            candidates.append(enum[head])
    for mod in (builtins, typing):
        if head in vars(mod):
            candidates.append(vars(mod)[head])
    if not rest and head in _protocol_names():
        return True
    for obj in candidates:
        for attr in rest:
            fields = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
            if attr in fields or (isinstance(obj, type) and attr in base.protocol_members(obj)):
                obj = object()  # a field / protocol member: the end of the path
                continue
            if not hasattr(obj, attr):
                break
            obj = getattr(obj, attr)
        else:
            return True
    return False


def test_every_name_the_howto_cites_exists() -> None:
    tests = (ROOT / "tests" / "test_target_conformance.py").read_text()
    fixtures = (ROOT / "properties" / "conftest.py").read_text()
    unknown = []
    for code in _inline_code(_doc()):
        if not IDENT.match(code) or code in NOT_NAMES:
            continue
        name = code.split("(")[0]
        if name.startswith("test_"):
            if f"def {name}(" not in tests:
                unknown.append(code)
        elif f"def {name}(" in fixtures:
            continue  # a pytest fixture of the properties
        elif not _resolves(name):
            unknown.append(code)
    assert not unknown, f"names in docs/add-a-target.md that the code does not have: {unknown}"
    assert "KVVERIFY_TARGET" in (ROOT / "kvverify" / "pytest_plugin.py").read_text()


def test_the_howto_covers_every_member_feature_and_capability() -> None:
    cited = set(re.findall(r"[A-Za-z_]\w*", " ".join(_inline_code(_doc()))))
    needed = {*base.BASE_MEMBERS, *_protocol_names(), *base.Feature.__members__, *base.Capability.__members__,
              *(p.__name__ for p in base.CAPABILITY_PROTOCOLS.values())}
    assert not needed - cited, f"docs/add-a-target.md does not mention {sorted(needed - cited)}"


def test_the_registry_snippet_is_the_registry() -> None:
    entries = dict(re.findall(r'^\s*"(\w+)": "([\w.]+:\w+)",$', _doc(), flags=re.M))
    assert {k: v for k, v in entries.items() if k in TARGETS} == TARGETS
    assert set(entries) - set(TARGETS) == {"sglang"}  # the worked example


# ------------------------------------------------------------ the rule the how-to states

CALLERS = ("kvverify/props", "kvverify/invariants", "kvverify/reports", "kvverify/cli", "properties", "tests")


def _sources(*dirs: str) -> list[Path]:
    return [p for d in dirs for p in sorted((ROOT / d).rglob("*.py")) if p.resolve() != Path(__file__).resolve()]


def test_no_caller_asks_a_target_its_name() -> None:
    asks = re.compile(r"\btarget\w*\.name\s*[!=]=")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _sources(*CALLERS)
             for n, line in enumerate(p.read_text().splitlines(), 1) if asks.search(line)]
    assert not found, "ask a Feature (kvverify/targets/base.py) instead of the target's name:\n" + "\n".join(found)


def test_no_getattr_probing_of_a_target() -> None:
    probe = re.compile(r"getattr\(\w*target\w*\s*,")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _sources("kvverify", "properties", "tests", "scripts")
             for n, line in enumerate(p.read_text().splitlines(), 1) if probe.search(line)]
    assert not found, "a member callers use belongs on the contract (kvverify/targets/base.py):\n" + "\n".join(found)
