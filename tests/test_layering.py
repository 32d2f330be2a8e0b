"""The package reads top-down: di's modules import one another one way.

Every import statement counts, including those under ``TYPE_CHECKING`` and those
inside functions (a lazy import is still a dependency). Only the top-level ``di``
package, which re-exports the public names, is left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "di"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the di modules it imports (``from di.x import y`` counts ``di.x.y``
    when that is a module, else ``di.x``)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("di"):
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    graph[name].add(submodule if submodule in modules else node.module)
            elif isinstance(node, ast.Import):
                graph[name].update(alias.name for alias in node.names if alias.name.startswith("di."))
    return graph


def find_cycle(graph: dict[str, set[str]], nodes: set[str]) -> list[str] | None:
    """One import cycle among ``nodes`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node] & nodes):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(nodes):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_parses_every_module() -> None:
    graph = import_graph()
    assert "di.backends.protocol" in graph and "di.backends.fallbacks" in graph
    assert "di.backends.protocol" in graph["di.backends.fallbacks"]  # the fallbacks build on the protocol


def test_the_protocol_does_not_need_the_fallbacks() -> None:
    graph = import_graph()
    assert "di.backends.fallbacks" not in graph["di.backends.protocol"]


def test_the_backend_layer_has_no_import_cycle() -> None:
    graph = import_graph()
    backends = {name for name in graph if name.startswith("di.backends")}
    assert find_cycle(graph, backends) is None


def test_no_module_below_the_public_package_imports_in_a_cycle() -> None:
    graph = import_graph()
    assert find_cycle(graph, set(graph) - {"di"}) is None


def test_find_cycle_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph, set(graph)) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}, {"a", "b"}) is None
