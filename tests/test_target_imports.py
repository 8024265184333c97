"""``kvverify/targets/`` has no import circle but type-only ones.

The adapter's modules take a :class:`~kvverify.targets.vllm.target.VllmTarget` and import it
under ``TYPE_CHECKING`` only; every other import is an edge here (module level or lazy, inside
a function: it runs too), and the graph of those edges must be acyclic. The packages a module
lives in are no edge (Python has them half-imported already).
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "kvverify.targets"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.Module, here: str, is_package: bool) -> set[str]:
    """Every module an import statement names, at module level or inside a function (a lazy
    import runs too), except under ``if TYPE_CHECKING:``."""
    out: set[str] = set()
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            type_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".") if is_package else here.split(".")[:-1]
                base = ".".join(anchor[:len(anchor) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # a submodule imported by name
    return out


def runtime_graph() -> dict[str, set[str]]:
    files = sorted((ROOT / "kvverify" / "targets").rglob("*.py"))
    modules = {_module_name(p): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        own_packages = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
        imports = _runtime_imports(ast.parse(path.read_text()), name, path.name == "__init__.py")
        graph[name] = {m for m in imports if m in modules and m not in own_packages}
    return graph


def test_the_graph_sees_the_targets_modules() -> None:
    graph = runtime_graph()
    assert "kvverify.targets.vllm.compat" in graph["kvverify.targets.vllm.env"]
    # planner takes a VllmTarget, imported for type checking only: no runtime edge back
    assert "kvverify.targets.vllm.target" not in graph["kvverify.targets.vllm.planner"]
    assert "kvverify.targets.vllm.planner" in graph["kvverify.targets.vllm.target"]


def test_no_runtime_import_circle_in_the_target_layer() -> None:
    try:
        order = list(graphlib.TopologicalSorter(runtime_graph()).static_order())
    except graphlib.CycleError as e:
        raise AssertionError(f"runtime import circle in kvverify/targets/: {e.args[1]}") from None
    assert order
