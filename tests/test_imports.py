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
from typing import Dict, Iterator, List, Optional, Set, Tuple

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


def _everywhere(body: List[ast.stmt]) -> Iterator[ast.AST]:
    """Every node, inside functions and classes too, except under ``if TYPE_CHECKING:``."""
    tree = ast.Module(body=body, type_ignores=[])
    skip: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return (node for node in ast.walk(tree) if id(node) not in skip)


def import_graph(root: Path, packages: tuple[str, ...], functions: bool = False) -> Dict[str, Set[str]]:
    """Module -> the project modules it imports at module level (with ``functions``: anywhere in it)."""
    files = module_files(root, packages)
    graph: Dict[str, Set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges: Set[str] = set()
        body = ast.parse(path.read_text(encoding="utf-8"), str(path)).body
        for node in (_everywhere(body) if functions else _module_level(body)):
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


# -- the layers (docs/architecture.md draws them) ------------------------------------------------------------------
# Lowest first; a module belongs to the layer of the longest prefix that names it. A module may import its own
# layer and the layers below; an import from a lower layer up to a higher one is a back-edge, and the few that
# are allowed are listed with their reason in UPWARD.
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    ("root", ("console",)),  # the package itself (its version), and nothing below it: matched exactly
    ("wire", ("console.agent.wire",)),  # the contract shared by the agent and the console
    ("agent", ("console.agent",)),  # runs on the host: samplers, diagnosis, actions
    ("inventory", ("console.inventory",)),  # the fleet file and its imports
    ("auth", ("console.web.auth",)),  # the HTTP rules every listener shares (token, Host/Origin, TLS)
    ("link", ("console.link", "console.agentless")),  # reaching the hosts
    ("core", ("console.core", "console.sources")),  # the fleet: controller, state, statuses (no UI)
    ("monitor", ("console.monitor", "console.notify")),  # observers of the state: metrics, history, alerts, notify
    ("services", ("console.mcp", "console.demo", "console.web")),  # MCP over the core; the demo's hosts; web
    ("view", ("widgets", "themes")),  # Textual widgets and themes
    ("ui", ("console.ui",)),  # the Textual app
    ("entry", ("console.headless", "console.fleet_file", "console.commands", "console.serve", "console.demo.run",
               "console.mcp.command", "console.notify.command", "console.web.command",
               "console.cli", "console.__main__")),  # commands
]
UPWARD: Dict[Tuple[str, str], str] = {
    # the demo's hosts (services) are started by the headless run (entry): not an upward edge; none today
}
# The modules the command line dispatches to (console/cli.py ENTRY_POINTS): only the CLI imports them.
ENTRY_POINT_MODULES = ("console.commands", "console.serve", "console.demo.run", "console.mcp.command",
                       "console.ui.replay", "console.monitor.history_command", "console.notify.command",
                       "console.web.command",
                       "console.monitor.report_command")


def layer_of(module: str) -> int:
    best, found = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            below = module.startswith(prefix + ".") and prefix != "console"
            if (module == prefix or below) and len(prefix) > best:
                best, found = len(prefix), index
    assert found >= 0, f"{module} is in no layer: add it to LAYERS in tests/test_imports.py"
    return found


def upward_edges(graph: Dict[str, Set[str]]) -> List[Tuple[str, str]]:
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


def test_no_import_cycle_even_through_imports_inside_functions() -> None:
    cycle = find_cycle(import_graph(ROOT, PACKAGES, functions=True))
    assert cycle is None, "import cycle (function-level imports included): " + " -> ".join(cycle or [])


def test_no_module_imports_a_higher_layer() -> None:
    graph = import_graph(ROOT, PACKAGES, functions=True)
    unexplained = [edge for edge in upward_edges(graph) if edge not in UPWARD]
    assert not unexplained, "imports up the layers: " + ", ".join(f"{a} -> {b}" for a, b in unexplained)
    assert len(UPWARD) <= 1


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_nothing_outside_the_agent_imports_more_of_it_than_its_wire_package() -> None:
    graph = import_graph(ROOT, PACKAGES, functions=True)
    through_the_wall = sorted(
        (a, b) for a, targets in graph.items() if not _in(a, "console.agent") for b in targets
        if _in(b, "console.agent") and not _in(b, "console.agent.wire")
    )
    assert not through_the_wall, "imports of agent internals: " + ", ".join(f"{a} -> {b}" for a, b in through_the_wall)


def test_widgets_use_the_core_not_the_links_the_controller_or_the_monitoring() -> None:
    graph = import_graph(ROOT, PACKAGES, functions=True)
    forbidden = ("console.link", "console.agentless", "console.core.controller", "console.monitor", "console.ui",
                 "console.sources")
    bad = sorted((a, b) for a, targets in graph.items() if a.startswith(("widgets", "themes")) for b in targets
                 if b.startswith(forbidden))
    assert not bad, "widgets reaching past the core: " + ", ".join(f"{a} -> {b}" for a, b in bad)


def test_only_the_command_line_imports_an_entry_point() -> None:
    graph = import_graph(ROOT, PACKAGES, functions=True)
    bad = sorted((a, b) for a, targets in graph.items() if a not in ("console.cli",) for b in targets
                 if b in ENTRY_POINT_MODULES)
    assert not bad, "an entry point imported by another module: " + ", ".join(f"{a} -> {b}" for a, b in bad)


def test_the_layer_rules_catch_what_they_are_for(tmp_path: Path) -> None:
    """The checks above, fed a small tree with each fault, find it (so a passing run means something)."""
    _write(tmp_path, {
        "console/__init__.py": "",
        "console/core/__init__.py": "",
        "console/core/state.py": "def f():\n    from console.ui import app\n",  # up a layer, inside a function
        "console/ui/__init__.py": "",
        "console/ui/app.py": "from console.core import state\nfrom console.agent.sample import gpu\n",
        "console/agent/__init__.py": "",
        "console/agent/sample/__init__.py": "",
        "console/agent/sample/gpu.py": "",
    })
    graph = import_graph(tmp_path, ("console",), functions=True)
    assert upward_edges(graph) == [("console.core.state", "console.ui.app")]
    assert find_cycle(graph) == ["console.core.state", "console.ui.app", "console.core.state"]
    assert find_cycle(import_graph(tmp_path, ("console",))) is None  # invisible at module level
    assert "console.agent.sample.gpu" in graph["console.ui.app"]


MAX_FILE_LINES = 600  # a product file longer than this has more than one job: split it by job


def test_no_product_file_is_over_600_lines() -> None:
    long = {str(path.relative_to(ROOT)): n for path in module_files(ROOT, PACKAGES).values()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert not long, f"over {MAX_FILE_LINES} lines: {long}"
