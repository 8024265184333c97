"""Every Hypothesis name the project uses is on an allow-list of public API.

An AST scan of every Python file of the project (``kvverify/``, ``tests/``, ``properties/``,
``benchmarks/``, ``scripts/``, ``conftest.py``) collects each way code reaches into Hypothesis:

* an import (``import hypothesis.x``, ``from hypothesis.x import y``) and every attribute
  read through the imported name (``st.integers``, ``settings.register_profile``);
* an attribute Hypothesis puts on a test function, read or written on any object
  (``fn.hypothesis.inner_test``; ``getattr`` / ``hasattr`` / ``setattr`` with its name as a string);
* a string naming a Hypothesis module (``importlib.import_module("hypothesis.x")``);
* a test of a class or module *name* against Hypothesis's (``type(e).__name__ == "StopTest"``,
  ``type(e).__module__.startswith("hypothesis")``): never public API, always a finding.

Each use must be in :data:`PUBLIC`, names Hypothesis documents, or be made by
:data:`ADAPTER`, the one module allowed past the public API (it says why, and
``tests/test_hypothesis_hooks.py`` pins what it reads). An entry nobody uses any more is
stale and fails too, so the list stays the project's real surface.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import hypothesis

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("kvverify", "tests", "properties", "benchmarks", "scripts")

#: the one module allowed to reach past the public API, and what for
ADAPTER = {
    "kvverify/hypothesis_statistics.py": (
        "hypothesis.statistics.collector",
        "per-run test-case statistics (what --hypothesis-show-statistics prints) for the benchmarks: "
        "no documented API hands them to a program; Hypothesis's pytest plugin reads them here too"),
}

#: the public Hypothesis API the project uses: names of Hypothesis's reference documentation
PUBLIC = {
    # `hypothesis` (its __all__): decorators, in-test functions, settings and their enums
    "hypothesis", "hypothesis.__version__", "hypothesis.given", "hypothesis.example", "hypothesis.settings",
    "hypothesis.seed", "hypothesis.reproduce_failure", "hypothesis.assume", "hypothesis.reject", "hypothesis.event",
    "hypothesis.note", "hypothesis.target", "hypothesis.find", "hypothesis.is_hypothesis_test",
    "hypothesis.settings.register_profile", "hypothesis.settings.load_profile", "hypothesis.settings.get_profile",
    "hypothesis.settings.get_current_profile_name",
    "hypothesis.settings.default.max_examples",
    "hypothesis.HealthCheck", "hypothesis.HealthCheck.too_slow", "hypothesis.HealthCheck.data_too_large",
    "hypothesis.Phase", "hypothesis.Phase.explicit", "hypothesis.Phase.reuse", "hypothesis.Phase.generate",
    "hypothesis.Phase.target", "hypothesis.Phase.shrink", "hypothesis.Phase.explain",
    "hypothesis.Verbosity", "hypothesis.Verbosity.quiet",
    # `hypothesis.strategies` (its __all__)
    "hypothesis.strategies", "hypothesis.strategies.SearchStrategy", "hypothesis.strategies.DrawFn",
    "hypothesis.strategies.composite", "hypothesis.strategies.data", "hypothesis.strategies.integers",
    "hypothesis.strategies.booleans", "hypothesis.strategies.just", "hypothesis.strategies.none",
    "hypothesis.strategies.sampled_from", "hypothesis.strategies.one_of", "hypothesis.strategies.lists",
    "hypothesis.strategies.tuples", "hypothesis.strategies.frozensets", "hypothesis.strategies.builds",
    "hypothesis.strategies.dictionaries",
    "hypothesis.strategies.floats", "hypothesis.strategies.text",
    # stateful testing
    "hypothesis.stateful.RuleBasedStateMachine", "hypothesis.stateful.rule", "hypothesis.stateful.invariant",
    "hypothesis.stateful.initialize", "hypothesis.stateful.Bundle", "hypothesis.stateful.consumes",
    "hypothesis.stateful.multiple", "hypothesis.stateful.run_state_machine_as_test",
    # the errors the documentation names for users to catch or expect
    "hypothesis.errors.HypothesisException", "hypothesis.errors.UnsatisfiedAssumption",
    "hypothesis.errors.Unsatisfiable", "hypothesis.errors.DidNotReproduce", "hypothesis.errors.InvalidArgument",
    # documented at these paths
    "hypothesis.control.currently_in_test_context", "hypothesis.database.DirectoryBasedExampleDatabase",
    # the example databases of the documentation's "The Hypothesis example database" page
    "hypothesis.currently_in_test_context", "hypothesis.database.ExampleDatabase",
    "hypothesis.database.InMemoryExampleDatabase", "hypothesis.database.ReadOnlyDatabase",
    "hypothesis.database.MultiplexedDatabase", "hypothesis.database.GitHubArtifactDatabase",
    "hypothesis.extra.redis.RedisExampleDatabase",
    # documented attributes: a @given test's handle for plugins (``.hypothesis.inner_test``), a
    # state machine's unittest class (``Machine.TestCase``)
    "<test>.hypothesis", "<test>.hypothesis.inner_test", "<machine>.TestCase",
}

CLASS_OR_MODULE_NAME = {"__name__", "__qualname__", "__module__"}


@dataclass(frozen=True)
class Use:
    path: str
    line: int
    name: str  # "hypothesis.x.y", "<test>.attr", or "name-test:<value>"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name}"


def _hypothesis_class_names() -> set[str]:
    """The names of every class Hypothesis defines (public modules and internal ones)."""
    names = set()
    for info in pkgutil.walk_packages(hypothesis.__path__, "hypothesis."):
        if ".extra." in info.name or ".vendor" in info.name:
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - an optional extra
            continue
        names.update(n for n, v in vars(module).items()
                     if isinstance(v, type) and getattr(v, "__module__", "").startswith("hypothesis"))
    return names


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.add(id(node.value))
    return out


def _involves_a_name(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in CLASS_OR_MODULE_NAME for n in ast.walk(node))


def uses_in(source: str, path: str, class_names: set[str]) -> list[Use]:
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # local name -> the Hypothesis object it is
    out: list[Use] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "hypothesis":
                    out.append(Use(path, node.lineno, a.name))
                    aliases[a.asname or "hypothesis"] = a.name if a.asname else "hypothesis"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "hypothesis":
            for a in node.names:
                out.append(Use(path, node.lineno, f"{node.module}.{a.name}"))
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    docstrings = _docstrings(tree)
    seen_chains: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in seen_chains:
            inner: ast.AST = node
            while isinstance(inner, ast.Attribute):  # the chain's own links, not what a call inside holds
                seen_chains.add(id(inner))
                inner = inner.value
            chain = _dotted(node)
            while chain and len(chain) > 1 and chain[-1].startswith("__") and chain[-1] != "__version__":
                chain = chain[:-1]  # Python's own (``__subclasses__``, ``__name__``), not Hypothesis's
            if chain and chain[0] in aliases:
                out.append(Use(path, node.lineno, ".".join([aliases[chain[0]], *chain[1:]])))
                continue
            attrs = []
            n: ast.AST = node
            while isinstance(n, ast.Attribute):
                attrs.append(n.attr)
                n = n.value
            attrs.reverse()
            for i, attr in enumerate(attrs):
                if "hypothesis" in attr.lower():
                    out.append(Use(path, node.lineno, "<test>." + ".".join(attrs[i:i + 2])))
                    break
                if attr == "TestCase" and i == len(attrs) - 1:
                    out.append(Use(path, node.lineno, "<machine>.TestCase"))
        elif isinstance(node, ast.Call):
            func = node.func
            fname = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if fname in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
                    and "hypothesis" in node.args[1].value.lower():
                out.append(Use(path, node.lineno, f"<test>.{node.args[1].value}"))
            if fname in ("startswith", "endswith") and isinstance(func, ast.Attribute) and _involves_a_name(func.value):
                for arg in node.args:
                    for c in ast.walk(arg):
                        if isinstance(c, ast.Constant) and isinstance(c.value, str) and (
                                c.value.startswith("hypothesis") or c.value in class_names):
                            out.append(Use(path, node.lineno, f"name-test:{c.value}"))
        elif isinstance(node, ast.Compare) and _involves_a_name(node):
            for c in ast.walk(node):
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and (
                        c.value.startswith("hypothesis") or c.value in class_names):
                    out.append(Use(path, node.lineno, f"name-test:{c.value}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and re.fullmatch(r"_?hypothesis(\.\w+)+", node.value):
            out.append(Use(path, node.lineno, node.value))  # a module or name spelled as a string
    return out


def project_uses() -> list[Use]:
    class_names = _hypothesis_class_names()
    files = [ROOT / "conftest.py"] + [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]
    out = []
    for path in files:
        if path.is_file() and path != Path(__file__).resolve():  # this file's names are data
            out += uses_in(path.read_text(), path.relative_to(ROOT).as_posix(), class_names)
    return out


def _allowed(use: Use) -> bool:
    if use.name in PUBLIC:
        return True
    exception = ADAPTER.get(use.path)
    return exception is not None and (use.name == exception[0] or use.name.startswith(exception[0] + "."))


def test_every_hypothesis_name_used_is_public() -> None:
    bad = [str(u) for u in project_uses() if not _allowed(u)]
    assert not bad, ("Hypothesis names outside the public allow-list (use public API, or add a documented "
                     "public name to PUBLIC):\n" + "\n".join(bad))


def test_the_allow_list_is_what_the_project_uses() -> None:
    used = {u.name for u in project_uses()}
    stale = sorted(PUBLIC - used)
    assert not stale, f"allow-listed but unused (drop them): {stale}"
    for path, (name, _why) in ADAPTER.items():
        assert any(u.path == path and u.name == name for u in project_uses()), f"{path} no longer uses {name}"


#: allow-listed modules that need an optional dependency (the extra that brings it)
OPTIONAL = {"hypothesis.extra.redis": "redis"}


def test_the_allow_list_is_public_and_resolves() -> None:
    for name in sorted(n for n in PUBLIC if not n.startswith("<")):
        needs = next((dep for mod, dep in OPTIONAL.items() if name.startswith(mod + ".")), None)
        if needs and importlib.util.find_spec(needs) is None:
            continue  # resolved where the `redis` extra is installed (.ci/run installs it)
        parts = name.split(".")
        assert not any(p.startswith("_") and p != "__version__" for p in parts) and "internal" not in parts, name
        obj = importlib.import_module(parts[0])
        for i, part in enumerate(parts[1:], 1):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(".".join(parts[:i + 1]))
        assert obj is not None, name


def test_the_scan_sees_every_trick() -> None:
    """Planted: each way of reaching into Hypothesis is found, public or not."""
    source = '''
import hypothesis.strategies as st
from hypothesis import settings as S
from hypothesis.internal.conjecture.data import ConjectureData
import importlib

st.integers(0, 1).map(str)
S.register_profile("x")
fn.hypothesis.inner_test
getattr(obj, "_hypothesis_state_machine_class", None)
type(e).__name__ in ("StopTest", "Frozen")
type(e).__module__.startswith("hypothesis")
importlib.import_module("hypothesis.internal.escalation")
x = "plain text about hypothesis"
'''
    names = [u.name for u in uses_in(source, "planted.py", {"StopTest", "Frozen", "ConjectureData"})]
    assert names.count("name-test:StopTest") == 1 and "name-test:Frozen" in names
    assert "name-test:hypothesis" in names
    assert "<test>._hypothesis_state_machine_class" in names and "<test>.hypothesis.inner_test" in names
    assert "hypothesis.strategies.integers" in names and "hypothesis.settings.register_profile" in names
    assert "hypothesis.internal.conjecture.data.ConjectureData" in names
    assert "hypothesis.internal.escalation" in names
    assert not any("plain text" in n for n in names)
    bad = [n for n in names if not _allowed(Use("planted.py", 0, n))]
    assert len(bad) == 6, bad
