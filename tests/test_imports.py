"""Every module imports, and the module-level import graph of console/, widgets/ and themes/ has no cycle.

The graph is read from the source with ``ast``: imports at module level (also inside a module-level
``try``/``if``), not those inside functions or classes, nor under ``if TYPE_CHECKING:``. An edge goes to
the module named; ``from pkg import name`` goes to ``pkg.name`` when that is a submodule, else to ``pkg``.
Importing a submodule is no edge to its package (Python has that package in hand by then): a package
that re-exports its submodules is the normal shape, not a cycle.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("console", "widgets", "themes")


def module_files(root: Path, packages: tuple[str, ...]) -> Dict[str, Path]:
    """Dotted module name -> source file, for every .py file under the packages."""
    out: Dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level(body: List[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements run at import time: the body, and the bodies of module-level try/if (not TYPE_CHECKING)."""
    for node in body:
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _module_level(block)
        else:
            yield node


def _base(module: str, is_package: bool, level: int, name: Optional[str]) -> str:
    """The absolute module a (possibly relative) ``from`` import names."""
    if level == 0:
        return name or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, name] if name else parts)


def import_graph(root: Path, packages: tuple[str, ...]) -> Dict[str, Set[str]]:
    """Module -> the project modules it imports at module level."""
    files = module_files(root, packages)
    graph: Dict[str, Set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges: Set[str] = set()
        for node in _module_level(ast.parse(path.read_text(encoding="utf-8"), str(path)).body):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _base(module, is_package, node.level, node.module)
                for alias in node.names:  # a submodule, or else a name the package itself must define
                    sub = f"{base}.{alias.name}"
                    edges.add(sub if sub in files else base)
        graph[module] = {e for e in edges if e in files and e != module}
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One cycle as a path ``[a, b, ..., a]``, or None."""
    state: Dict[str, int] = {}  # 1: on the stack, 2: done
    stack: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


MODULES = sorted(m for m in module_files(ROOT, PACKAGES) if not m.endswith("__main__"))  # __main__ runs the CLI


@pytest.mark.parametrize("module", MODULES)
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph(ROOT, PACKAGES)
    assert "console.agent.ops" in graph and "console.agent.actions.restart" in graph["console.agent.ops"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_agent_ops_table_is_imported_by_no_domain_module() -> None:
    graph = import_graph(ROOT, PACKAGES)
    for domain in ("diagnosis.diagnose", "actions.probes", "actions.restart"):
        assert "console.agent.ops" not in graph[f"console.agent.{domain}"], domain


def _write(root: Path, files: Dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_a_cycle_and_ignores_what_does_not_run_at_import(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "from .a import thing\n",  # a package re-exporting: not a cycle with pkg.a
        "pkg/a.py": "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from . import b\n"
                    "def f():\n    from .b import g\nthing = 1\n",
        "pkg/b.py": "from pkg import a\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from .. import b\n",
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": set(), "pkg.b": {"pkg.a"}, "pkg.sub": set(),
                     "pkg.sub.c": {"pkg.b"}}
    assert find_cycle(graph) is None

    _write(tmp_path, {"pkg/a.py": "try:\n    from .sub import c\nexcept ImportError:\n    c = None\n"})
    assert find_cycle(import_graph(tmp_path, ("pkg",))) == ["pkg.a", "pkg.sub.c", "pkg.b", "pkg.a"]
