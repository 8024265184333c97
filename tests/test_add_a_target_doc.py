"""``docs/add-a-target.md`` matches the code, and no caller goes round the Target contract.

Every name the how-to writes in inline code resolves (a member of either engine's contract
modules, a protocol member, an enum member, a test it names); every member of both contracts
is in it; its ``TARGETS`` snippet is the registry. (Paths: ``tests/test_doc_paths.py``; the
excerpts' verbatim match: ``tests/test_howto_docs.py``.)
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

from kvverify.targets import TARGETS, base, sglang_contract

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "add-a-target.md"
#: modules whose names the how-to may cite bare
NAMESPACES = ("kvverify.targets", "kvverify.targets.base", "kvverify.targets.conformance",
              "kvverify.targets.vllm.support", "kvverify.targets.vllm.compat", "kvverify.targets.vllm.refusals",
              "kvverify.reference.planner", "kvverify.reference.driver", "kvverify.targets.sglang_contract",
              "kvverify.targets.sglang_conformance", "kvverify.targets.sglang", "kvverify.engines",
              "kvverify.sglang.config", "kvverify.sglang.driver")
#: roots a dotted name may start from
ROOTS = {"hypothesis": "hypothesis", "flaws": "kvverify.flaws"}
#: words in inline code that are no kvverify name, and why
NOT_NAMES = {"mypy": "the type checker", "KVVERIFY_TARGET": "an environment variable (checked below)",
             "reference": "the default --target name (DEFAULT_TARGET)"}
#: each engine's contract: its base protocol, its capability enum and sub-protocols
CONTRACTS = ((base.TargetBase, base.Capability, base.CAPABILITY_PROTOCOLS),
             (sglang_contract.SglangTargetBase, sglang_contract.SglangCapability,
              sglang_contract.SGLANG_CAPABILITY_PROTOCOLS))
IDENT = re.compile(r"^[A-Za-z_][\w.]*(\([^()]*\))?$")


def _doc() -> str:
    return DOC.read_text()


def _inline_code(text: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.findall(r"`([^`\n]+)`", prose)


def _protocol_names() -> set[str]:
    protos = [p for b, _, caps in CONTRACTS for p in (b, *caps.values())]
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
    for enum in (base.Feature, base.Capability, sglang_contract.SglangCapability):
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
    tests = "".join((ROOT / f).read_text() for f in ("tests/test_target_conformance.py",
                                                     "tests/test_sglang_target_conformance.py",
                                                     "properties/test_sglang_conformance.py"))
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
    needed = {*base.Feature.__members__, *_protocol_names()}
    for base_proto, capability, protocols in CONTRACTS:
        needed |= {base_proto.__name__, *base.protocol_members(base_proto), *capability.__members__,
                   *(p.__name__ for p in protocols.values())}
    assert not needed - cited, f"docs/add-a-target.md does not mention {sorted(needed - cited)}"


def test_the_registry_snippet_is_the_registry() -> None:
    snippet = re.search(r"^TARGETS: dict\[str, TargetEntry\] = \{\n(.*?)^\}", _doc(), flags=re.M | re.S)
    assert snippet, "docs/add-a-target.md shows no TARGETS snippet"
    entries = re.findall(r'"([\w-]+)": TargetEntry\("(\w+)", "([\w.]+:\w+)"(, reference=True)?\)',
                         re.sub(r"\n\s+", " ", snippet.group(1)))
    assert {n: (e, w, bool(r)) for n, e, w, r in entries} == {
        n: (t.engine, t.where, t.reference) for n, t in TARGETS.items()}


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
