"""Mutants of one engine file, from mutmut 3's own mutation operators (its libcst node API).

mutmut runs on a project's own package (it copies it under ``mutants/`` with trampolines); an
installed vLLM is not that. Its operator layer is reusable as is: :class:`MutationVisitor`
walks a libcst module with ``mutation_operators`` (numbers, strings, names, comparison and
boolean operators, assignments, call arguments, ...) and returns (original node, mutated node,
enclosing top-level function) triples, with mutmut's skips (type annotations, decorated
functions, decorators, ``__repr__``-like names). Each triple becomes one standalone mutated
file here (``deep_replace``: the one node swapped), so a mutant is a plain file an overlay can
carry. mutmut's configuration reader is bypassed (it needs a ``[tool.mutmut]`` project): no
pragmas or pattern lines are honoured, nothing else changes.

Mutant names are ``<module>:<Class.method or function>:<n>`` (``n`` counts that function's
mutants in source order), stable for one vLLM file; the sample is seeded (``random.Random(seed)``).
"""

from __future__ import annotations

import difflib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvverify.errors import KVVerifyError
from kvverify.mutate.modules import EngineModule


@dataclass(frozen=True)
class Mutant:
    """One single-point change of ``module``'s file: ``source`` is the whole mutated file."""

    name: str
    module: str
    path: str
    function: str
    line: int
    source: str
    diff: str


def _mutmut() -> tuple[Any, Any, Any, Any, Any, Any]:
    try:
        import libcst as cst
        from libcst.metadata import MetadataWrapper, PositionProvider
        from mutmut.mutation.file_mutation import MutationVisitor, deep_replace
        from mutmut.mutation.mutators import mutation_operators
        from mutmut.mutation.pragma_handling import IgnoredCode
    except ImportError as e:
        raise KVVerifyError(f"`kvverify mutate` needs mutmut 3 (and libcst) in this interpreter: "
                            f"pip install 'kvverify[mutation]' ({e})") from e
    del cst
    return MetadataWrapper, PositionProvider, MutationVisitor, deep_replace, mutation_operators, IgnoredCode


@dataclass(frozen=True)
class Selection:
    """Which of a module's mutants to build: ``names`` (exact), else a seeded ``size`` sample
    (``None``: all of them)."""

    size: int | None = None
    seed: int = 0
    names: tuple[str, ...] = ()


def mutants(module: EngineModule, file: Path, selection: Selection = Selection()) -> tuple[int, list[Mutant]]:
    """``(number of in-scope mutants of file, the selected ones rendered)``, in source order."""
    MetadataWrapper, PositionProvider, MutationVisitor, deep_replace, operators, IgnoredCode = _mutmut()
    import libcst as cst
    code = file.read_text()
    lines = code.splitlines(keepends=True)
    visitor = MutationVisitor(operators, IgnoredCode(set(), set(), set()))
    tree = MetadataWrapper(cst.parse_module(code)).visit(visitor)
    positions = MetadataWrapper(tree, unsafe_skip_copy=True).resolve(PositionProvider)
    qual = {id(f): f"{c.name.value}.{f.name.value}" for c in tree.body if isinstance(c, cst.ClassDef)
            for f in c.body.body if isinstance(f, cst.FunctionDef)}
    counts: dict[str, int] = {}
    found: list[tuple[str, str, int, Any]] = []
    for m in visitor.mutations:
        func = m.contained_by_top_level_function
        if not isinstance(func, cst.FunctionDef):  # module or class level: constants, imports
            continue
        name = func.name.value
        pos = positions.get(m.original_node)
        line = pos.start.line if pos is not None else 0
        if not module.accepts(name, lines[line - 1] if 0 < line <= len(lines) else ""):
            continue
        where = qual.get(id(func), name)
        n = counts[where] = counts.get(where, 0) + 1
        found.append((f"{module.name}:{where}:{n}", where, line, m))
    if selection.names:
        index = {f[0]: f for f in found}
        missing = [n for n in selection.names if n not in index]
        if missing:
            raise KVVerifyError(f"unknown mutant(s) {', '.join(missing)} in module {module.name!r}; "
                                f"names look like {found[0][0] if found else module.name + ':FUNCTION:N'}")
        chosen = [index[n] for n in selection.names]
    elif selection.size is not None and selection.size < len(found):
        picked = set(random.Random(selection.seed).sample(range(len(found)), selection.size))
        chosen = [f for i, f in enumerate(found) if i in picked]
    else:
        chosen = found
    out: list[Mutant] = []
    for mname, func_name, line, m in chosen:
        new = deep_replace(tree, m.original_node, m.mutated_node).code
        diff = "".join(difflib.unified_diff(lines, new.splitlines(keepends=True), f"a/{module.path}",
                                            f"b/{module.path}", n=1))
        out.append(Mutant(mname, module.name, module.path, func_name, line, new, diff))
    return len(found), out


__all__ = ["Mutant", "Selection", "mutants"]
