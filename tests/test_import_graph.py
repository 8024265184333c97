"""No circle of imports in the package but type-only ones.

Every ``import`` of a kvverify module, at module level or inside a function (a late import
still ties the two modules), except those under ``if TYPE_CHECKING:``, is an arrow; a
strongly connected set of more than one module is a circle. The foundations (``errors``,
``switches``) must not reach up into the zoo, the reference's ``config`` not into its
``specs``, the reports' ``render`` not into its ``store``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: circles known and being broken elsewhere, each with who breaks it (drop the entry then)
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def import_graph() -> dict[str, set[str]]:
    modules: dict[str, Path] = {}
    for path in (ROOT / "kvverify").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def module_of(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        type_only = {id(n) for node in ast.walk(tree)
                     if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                     for n in ast.walk(node)}
        targets: set[str | None] = set()
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                targets.update(module_of(a.name) for a in node.names if a.name.startswith("kvverify"))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kvverify"):
                targets.update(module_of(f"{node.module}.{a.name}") for a in node.names)
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected sets of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    members.add(m)
                    if m == node:
                        break
                if len(members) > 1:
                    out.append(frozenset(members))
    return out


def test_no_circle_but_the_known_ones() -> None:
    found = circles(import_graph())
    unknown = [sorted(c) for c in found if c not in KNOWN_CIRCLES]
    assert not unknown, f"import circles: {unknown}"
    stale = [sorted(c) for c in KNOWN_CIRCLES if c not in found]
    assert not stale, f"KNOWN_CIRCLES entries no longer circles (drop them): {stale}"


def test_the_scan_sees_circles_and_late_imports() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    graph = import_graph()
    assert len(graph) > 100 and "kvverify.flaws" in graph["kvverify.reference.validation"]
    assert "kvverify.flaws" not in graph["kvverify.errors"] and "kvverify.flaws" not in graph["kvverify.switches"]
    assert "kvverify.reference.specs" not in graph["kvverify.reference.config"]
    assert "kvverify.reports.store" not in graph["kvverify.reports.render"]
    assert "kvverify.zoo" in graph["kvverify.cli.commands"]  # a late import counts
