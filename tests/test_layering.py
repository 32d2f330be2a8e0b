"""The package reads top-down: di's modules import one another one way.

:data:`LAYERS` is the layer map, top (command line) to bottom (errors and
contexts); ``docs/architecture.md`` shows the same map as a table, and a test
checks that the two agree. A module may import modules of its own layer or of
lower ones, never higher ones. Every import statement counts, at module level or
inside a function (a lazy import is still a dependency); imports under
``if TYPE_CHECKING:`` are exempt from the direction rule (they never run) but
still count for cycles.

Also checked here: no import cycle, no module over :data:`MAX_LINES` lines
(scenario data tables aside), and a budget of engine mentions outside the
engines' own modules (an engine's name belongs to its own modules and the
selectors; everything else asks the registries).
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "di"
ARCHITECTURE_PAGE = ROOT / "docs" / "architecture.md"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("command line", ("di/__main__.py", "di/cli/")),
    ("testing", ("di/testing/",)),
    (
        "public API",
        ("di/__init__.py", "di/namespace.py", "di/mixing/", "di/engines/*/host.py", "di/engines/*/namespace.py"),
    ),
    ("operators", ("di/operators/",)),
    ("strategies", ("di/sparse/", "di/second_order/", "di/fastest/")),
    ("engines", ("di/engines/",)),
    ("backends", ("di/backends/",)),
    ("prep", ("di/prep/",)),
    ("families and pytrees", ("di/families/", "di/pytrees.py")),
    ("errors and contexts", ("di/errors.py", "di/contexts.py")),
)
"""The layers, top to bottom, each with its files (a path ending in ``/`` is a
package: every module under it; a file may be a glob, which wins over the
package holding it: an engine's ``host.py`` and ``namespace.py`` use the public
operators, as ``di.DifferentiateWith`` and ``di.array_namespace`` do)."""

MAX_LINES = 700
LONG_MODULES_ALLOWED = ("di/testing/scenarios*.py",)
"""Data tables (the default scenarios), exempt from :data:`MAX_LINES`."""

ENGINES = ("torch", "jax", "autograd")
ENGINE_WORD = re.compile(r"\b(torch|jax|jaxlib|autograd)\b", flags=re.IGNORECASE)
ENGINE_MENTION_BUDGET = 10
ENGINE_HOMES = ("di/backends/selectors.py",)
"""Besides the modules and packages named for an engine, where engine names belong."""


# --- the import graph ----------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@dataclasses.dataclass(frozen=True)
class Import:
    """One import of a di module by another."""

    source: str
    target: str
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _absolute(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = source.split(".") if is_package else source.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports() -> list[Import]:
    """Every import of a di module in the package (``from di.x import y`` counts
    ``di.x.y`` when that is a module, else ``di.x``; ``import di`` counts ``di``)."""
    known = modules()
    found: list[Import] = []

    def record(source: str, target: str, node: ast.AST, type_only: bool) -> None:
        if target == "di" or target.startswith("di."):
            found.append(Import(source, target, node.lineno, type_only))  # type: ignore[attr-defined]

    def visit(source: str, is_package: bool, node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                record(source, alias.name, node, type_only)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(source, is_package, node)
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                record(source, submodule if submodule in known else module, node, type_only)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(source, is_package, child, True)
            for child in node.orelse:
                visit(source, is_package, child, type_only)
            return
        for child in ast.iter_child_nodes(node):
            visit(source, is_package, child, type_only)

    for name, path in known.items():
        visit(name, path.name == "__init__.py", ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the di modules it imports (type-only imports included)."""
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for edge in imports():
        graph[edge.source].add(edge.target)
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


# --- the layer map -------------------------------------------------------------------------------


def _path_module(path: str) -> str:
    """``di/cli/`` -> ``di.cli``; ``di/__init__.py`` -> ``di``; ``di/fastest/plan.py`` -> ``di.fastest.plan``;
    a glob keeps its ``*`` (``di/engines/*/host.py`` -> ``di.engines.*.host``)."""
    stem = path.rstrip("/").removesuffix(".py").removesuffix("/__init__")
    return stem.replace("/", ".")


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the module's layer: the entry naming the
    module itself (a file, or a glob of files such as ``di/engines/*/host.py``)
    or else the longest package entry that contains it; None when no entry does."""
    best: tuple[int, int] | None = None
    for index, (_, paths) in enumerate(LAYERS):
        for path in paths:
            entry = _path_module(path)
            if not path.endswith("/") and fnmatch.fnmatchcase(module, entry):
                return index
            if path.endswith("/") and (module == entry or module.startswith(entry + ".")):
                if best is None or len(entry) > best[1]:
                    best = (index, len(entry))
    return None if best is None else best[0]


def direction_violations() -> list[str]:
    """``source imports target (layer -> higher layer)`` for every import that goes up."""
    violations = []
    for edge in imports():
        if edge.type_only:
            continue
        source, target = layer_of(edge.source), layer_of(edge.target)
        if source is not None and target is not None and target < source:
            violations.append(
                f"{edge.source} (line {edge.line}) imports {edge.target}: "
                f"{LAYERS[source][0]} -> {LAYERS[target][0]}, a higher layer"
            )
    return sorted(set(violations))


def test_every_module_belongs_to_a_layer() -> None:
    unmapped = [name for name in modules() if layer_of(name) is None]
    assert not unmapped, f"add these modules to LAYERS and to docs/architecture.md: {unmapped}"


def test_imports_go_down_the_layers() -> None:
    violations = direction_violations()
    assert not violations, f"{len(violations)} imports go up a layer:\n" + "\n".join(violations)


def test_the_layer_map_is_the_one_docs_architecture_shows() -> None:
    rows = []
    for line in ARCHITECTURE_PAGE.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2 and cells[1].startswith("`di/"):
            rows.append((cells[0], tuple(re.findall(r"`(di/[^`]*)`", cells[1]))))
    assert tuple(rows) == LAYERS, "docs/architecture.md's layer table and LAYERS differ"


def test_the_files_docs_architecture_walks_through_exist() -> None:
    """Outside the layer table (which names the target layout), every ``di/...``
    path the page names is a file or package of the code as it is."""
    text = ARCHITECTURE_PAGE.read_text(encoding="utf-8")
    prose = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
    prose = prose.split("## One call, end to end", 1)[1]
    named = set(re.findall(r"`(di/[\w/]+(?:\.py)?)`", prose))
    assert named, "the page names no file"
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_direction_check_sees_lazy_imports_and_exempts_type_checking_ones() -> None:
    assert layer_of("di") == 2 and layer_of("di.engines.jax.adapter") == 5 and layer_of("di.families.numpy") == 8
    assert layer_of("di.testing.runner") == 1 and layer_of("di.nowhere") is None
    edges = imports()
    # di/backends/registry.py imports the protocol for type checking only
    assert any(
        (e.source, e.target, e.type_only) == ("di.backends.registry", "di.backends.protocol", True) for e in edges
    )
    lazy = [e for e in edges if e.source == "di.sparse.jaxpr" and e.target == "di.engines.jax.family"]
    assert lazy and not lazy[0].type_only  # inside a function: counts


# --- cycles --------------------------------------------------------------------------------------


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


# --- size --------------------------------------------------------------------------------------


def test_no_module_is_over_the_line_limit() -> None:
    long = []
    for path in modules().values():
        relative = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES and not any(fnmatch.fnmatch(relative, allowed) for allowed in LONG_MODULES_ALLOWED):
            long.append(f"{relative}: {lines} lines")
    assert not long, f"modules over {MAX_LINES} lines (split them):\n" + "\n".join(long)


# --- engine names ----------------------------------------------------------------------------


def _is_engine_home(relative: Path) -> bool:
    parts = [part.lower() for part in relative.parts]
    return any(engine in part for part in parts for engine in ENGINES) or relative.as_posix() in ENGINE_HOMES


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def engine_mentions(source: str) -> int:
    """Engine names in code: imported modules, names, attributes, function and class
    names, and string literals that are not docstrings (comments and docstrings
    are free)."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            count += sum(alias.name.split(".")[0] in ENGINES for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            count += any(part in ENGINES for part in (node.module or "").split("."))
        elif isinstance(node, ast.Name):
            count += bool(ENGINE_WORD.search(node.id))
        elif isinstance(node, ast.Attribute):
            count += bool(ENGINE_WORD.search(node.attr))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            count += bool(ENGINE_WORD.search(node.name))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            count += bool(ENGINE_WORD.search(node.value))
    return count


def engine_mentions_by_module() -> dict[str, int]:
    """Engine mentions per module outside the engines' own modules, where there are any."""
    counts = {}
    for path in modules().values():
        relative = path.relative_to(ROOT)
        if not _is_engine_home(relative):
            count = engine_mentions(path.read_text(encoding="utf-8"))
            if count:
                counts[relative.as_posix()] = count
    return counts


def test_engine_names_stay_in_the_engines_modules() -> None:
    counts = engine_mentions_by_module()
    listing = "\n".join(f"{count:4d} {module}" for module, count in sorted(counts.items(), key=lambda kv: -kv[1]))
    assert sum(counts.values()) <= ENGINE_MENTION_BUDGET, (
        f"{sum(counts.values())} engine mentions outside the engines' own modules (budget "
        f"{ENGINE_MENTION_BUDGET}); ask the registries instead:\n{listing}"
    )


def test_engine_mentions_are_counted_in_code_not_in_docstrings_or_comments() -> None:
    source = '''"""A module about torch."""
import torch  # jax in a comment
from jax import numpy
import numpy as np


def to_torch(x):
    """Convert with torch."""
    return torch.from_numpy(x), x.jax_array, "autograd", "PyTorch", "jaxlib"
'''
    # import torch, from jax, the name torch, "autograd", "jaxlib"; as whole words only (as the
    # reference counter does): to_torch, jax_array and PyTorch are not counted
    assert engine_mentions(source) == 5
    assert _is_engine_home(Path("di/engines/torch/eager.py")) and _is_engine_home(Path("di/engines/jax/family.py"))
    assert _is_engine_home(Path("di/backends/selectors.py")) and not _is_engine_home(Path("di/backends/fallbacks.py"))
