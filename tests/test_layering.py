"""The package reads top-down: di's modules import one another one way.

:data:`LAYERS` is the layer map, top (command line) to bottom (errors and
contexts); ``docs/architecture.md`` shows the same map as a table, and a test
checks that the two agree. A module may import modules of its own layer or of
lower ones, never higher ones. Every import statement counts, at module level or
inside a function (a lazy import is still a dependency); imports under
``if TYPE_CHECKING:`` are exempt from the direction rule (they never run) but
still count for cycles.

Also checked here: no import cycle, no module over :data:`MAX_LINES` lines
(scenario data tables aside), and one folder per engine: each built-in engine's
code is in ``di/engines/<name>/``, and no code outside it names the engine
(imports, names, selector classes, strings that are not prose) except the list of
built-in records and the public package's exports: everything else asks the
registries.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import re
from pathlib import Path

from di.backends.engine import Engine, load
from di.backends.selectors import engines

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
    ("strategies", ("di/sparse/", "di/second_order/", "di/fastest/", "di/complex/")),
    ("engines", ("di/engines/",)),
    ("backends", ("di/backends/",)),
    ("prep", ("di/prep/",)),
    ("families and pytrees", ("di/families/", "di/pytrees/")),
    ("errors and contexts", ("di/errors.py", "di/contexts.py", "di/loaders.py")),
)
"""The layers, top to bottom, each with its files (a path ending in ``/`` is a
package: every module under it; a file may be a glob, which wins over the
package holding it: an engine's ``host.py`` and ``namespace.py`` use the public
operators, as ``di.DifferentiateWith`` and ``di.array_namespace`` do)."""

MAX_LINES = 550
LONG_MODULES_ALLOWED = ("di/testing/scenarios*.py",)
"""Data tables (the default scenarios), exempt from :data:`MAX_LINES`."""


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


def test_direction_check_sees_lazy_imports_and_exempts_type_checking_ones() -> None:
    assert layer_of("di") == 2 and layer_of("di.engines.jax.adapter") == 5 and layer_of("di.families.numpy") == 8
    assert layer_of("di.testing.runner") == 1 and layer_of("di.nowhere") is None
    edges = imports()
    # di/backends/registry.py imports the protocol for type checking only
    assert any(
        (e.source, e.target, e.type_only) == ("di.backends.registry", "di.backends.protocol", True) for e in edges
    )
    lazy = [e for e in edges if e.source == "di.namespace" and e.target == "di.backends.selectors"]
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


# --- one folder per engine ----------------------------------------------------------------------


ENGINE_LIST_HOMES = ("di/engines/__init__.py", "di/__init__.py")
"""Where a built-in engine may be named outside its folder: the list of the built-in
records, and the public package's one export line per engine's selector."""
LIBRARY_USERS = {
    "di/sparse/jaxpr/": (
        "jax",
        "AutoSparse's program tracer reads f's program with the jax library: a sparsity detection "
        "method, not the JAX engine",
    ),
}
"""Folders outside an engine's that may use its library (import it, call it), and why;
they may still not reach into the engine's folder or name its selectors."""


def builtin_engines() -> list[Engine]:
    """The records ``di/engines/__init__.py`` lists, in its order."""
    from di.engines import BUILTIN_ENGINES

    return [load(path) for path in BUILTIN_ENGINES]


def _engine_words(engine: Engine) -> tuple[set[str], set[str]]:
    """``(names, classes)``: what names ``engine`` in code (its name, aliases, the
    packages it imports, its selector classes), and its selector classes' names."""
    classes = {cls.__name__ for cls in engine.selectors}
    packages = {engine.module.partition(".")[0], *engine.distributions} - {""}
    return {engine.name, *engine.aliases, *packages, *classes}, classes


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def _references(source: str, module: str) -> list[tuple[int, str]]:
    """What code refers to, with line numbers: every module it imports (absolute),
    dotted names (``di.AutoJAX``, ``torch.autograd.grad``), names it defines
    (functions, classes, arguments), and string literals without spaces that are not
    docstrings (``"jax"``, ``"di.engines.jax:ENGINE"``). Docstrings, comments and
    messages (strings with spaces) are prose, free to mention any engine."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found: list[tuple[int, str]] = []
    is_package = module.endswith("__init__")
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [(line, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module.removesuffix(".__init__"), is_package, node)
            found += [(line, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Attribute) and _chain(node):
            found.append((line, _chain(node)))
        elif isinstance(node, ast.Name):
            found.append((line, node.id))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((line, node.name))
        elif isinstance(node, ast.arg):
            found.append((line, node.arg))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value and not re.search(r"\s", node.value):
                found.append((line, node.value))
    return found


def _chain(node: ast.Attribute) -> str:
    """``a.b.c`` for an attribute chain that starts at a name, else ``""``."""
    parts = [node.attr]
    value = node.value
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    return ".".join([value.id, *reversed(parts)]) if isinstance(value, ast.Name) else ""


def names_engine(reference: str, engine: Engine, library_allowed: bool = False) -> bool:
    """Whether ``reference`` names ``engine``: it starts with one of the engine's
    words (``jax.numpy``, ``AutoJAX``, ``"finitediff"``; its packages too unless
    ``library_allowed``), reaches into its folder (``di.engines.jax.family``), or
    takes one of its selector classes from somewhere (``di.AutoJAX``). Another
    library's attribute is not the engine (``torch.autograd`` is torch's)."""
    words, classes = _engine_words(engine)
    if library_allowed:
        words = words - {engine.module.partition(".")[0], *engine.distributions}
    parts = [part for part in re.split(r"[.:/()\[\],=-]", reference) if part]
    if not parts:
        return False
    folder = f"di.engines.{engine.name}"
    dotted = reference.replace("/", ".").replace(":", ".")
    return parts[0] in words or dotted == folder or dotted.startswith(folder + ".") or bool(classes & set(parts))


def engine_names_outside_their_folders() -> list[str]:
    """``module:line names engine (reference)`` for every reference to a built-in
    engine outside its folder (and the lists that name them all)."""
    found = []
    engines = builtin_engines()
    for name, path in modules().items():
        relative = path.relative_to(ROOT).as_posix()
        if relative in ENGINE_LIST_HOMES:
            continue
        checked = [engine for engine in engines if not relative.startswith(f"di/engines/{engine.name}/")]
        if not checked:
            continue
        source = path.read_text(encoding="utf-8")
        lines: dict[str, list[int]] = {}  # each module parsed once, each distinct reference checked once
        for line, reference in _references(source, name if path.name != "__init__.py" else f"{name}.__init__"):
            lines.setdefault(reference, []).append(line)
        for engine in checked:
            allowed = any(
                relative.startswith(f) and library == engine.name for f, (library, _) in LIBRARY_USERS.items()
            )
            for reference, at in lines.items():
                if names_engine(reference, engine, allowed):
                    found += [f"{relative}:{line} names {engine.name} ({reference})" for line in at]
    return sorted(set(found))


def test_each_builtin_engines_code_is_in_its_folder() -> None:
    for engine in builtin_engines():
        package = f"di.engines.{engine.name}"
        paths = [engine.adapter, engine.family, engine.host, engine.traced, engine.processes]
        paths += [engine.namespace.build] if engine.namespace is not None else []
        named = [path.partition(":")[0] for path in paths if isinstance(path, str) and path]
        named += [cls.__module__ for cls in engine.selectors]
        outside = [module for module in named if module != package and not module.startswith(package + ".")]
        assert not outside, f"{engine.name}'s record names modules outside di/engines/{engine.name}/: {outside}"
        assert (PACKAGE / "engines" / engine.name / "__init__.py").is_file()
        assert engine.name in {e.name for e in engines()}, f"{engine.name} is not registered"


def test_no_code_outside_an_engines_folder_names_it() -> None:
    found = engine_names_outside_their_folders()
    assert not found, (
        f"{len(found)} references to built-in engines outside their folders (only "
        f"{' and '.join(ENGINE_LIST_HOMES)} may name them); ask the registries instead:\n" + "\n".join(found)
    )


def test_a_builtin_engine_is_named_on_one_line_of_each_list() -> None:
    """Adding an engine in tree touches its folder and two lines elsewhere: its record's
    path in ``di/engines/__init__.py`` and its selector's export in ``di/__init__.py``."""
    for engine in builtin_engines():
        for home in ENGINE_LIST_HOMES:
            path = ROOT / home
            references = _references(path.read_text(encoding="utf-8"), f"{_module_name(path)}.__init__")
            lines = sorted({line for line, reference in references if names_engine(reference, engine)})
            assert len(lines) == 1, f"{home} names {engine.name} on lines {lines}: one line per engine"


def test_the_public_package_exports_the_selectors_the_records_name() -> None:
    """``di/__init__.py``'s one line per engine (for type checkers) imports exactly the
    built-in records' selector classes, and ``di.<name>`` is each (through its record)."""
    import di
    from di.backends.selectors import builtin_selectors

    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    exported = {
        alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("di.engines.")
        for alias in node.names
        if alias.asname == alias.name  # the redundant alias: a re-export
    }
    classes = builtin_selectors()
    assert exported == {name: cls.__module__ for name, cls in classes.items()}
    assert [name for name, cls in classes.items() if getattr(di, name) is not cls or name not in di.__all__] == []


def test_engine_references_are_read_from_code_not_prose() -> None:
    source = '''"""A module about torch and jax."""
import torch  # jax in a comment
from jax import numpy
import numpy as np


def to_torch(x, autograd_like):
    """Convert with torch."""
    message = f"use di.AutoJAX() or {x}"  # a message: prose
    return torch.autograd.grad(x), x.jax_array, "autograd", "PyTorch", di.AutoFiniteDiff, "di.engines.jax:ENGINE"
'''
    references = [reference for _, reference in _references(source, "di.example")]
    records = {engine.name: engine for engine in builtin_engines()}
    by_engine = {name: sorted({r for r in references if names_engine(r, record)}) for name, record in records.items()}
    by_engine = {name: found for name, found in by_engine.items() if found}  # (engines the example names)
    assert by_engine == {
        "jax": ["di.engines.jax:ENGINE", "jax.numpy"],
        "torch": ["torch", "torch.autograd", "torch.autograd.grad"],
        "autograd": ["autograd"],
        "finitediff": ["di.AutoFiniteDiff"],
    }, by_engine
    assert not names_engine("jax.numpy", records["jax"], library_allowed=True)
    assert names_engine("di.engines.jax.family", records["jax"], library_allowed=True)


def test_engine_labels_read_back_as_their_selectors() -> None:
    from di.testing.labels import backend_label, known_labels, parse_backend

    for engine in builtin_engines():
        assert engine.labels, f"{engine.name} offers no labelled selector"
        for label, selector in engine.labels.items():
            assert backend_label(selector) == label and parse_backend(label) == selector
            assert label in known_labels()
        assert set(engine.fastest) <= set(engine.labels) and set(engine.compiled) <= set(engine.fastest)
