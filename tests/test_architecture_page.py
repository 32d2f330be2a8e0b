"""``docs/architecture.md`` names only what exists.

Every code span of the page (and every path in its diagram) that names code is
checked against the code as it is: a path (``di/prep/runners.py``,
``di/engines/<name>/``, ``di/engines/*/host.py``) is a file or folder of the
repository; a dotted name from ``di`` (``di.register_engine``,
``di.backends.fallbacks``) resolves; a name of code (``prepare_operator``,
``Prep.check``, ``ENGINE``) is defined in ``di`` or its tests, a member after a
class name being the class's own. Paths are written from the repository root:
a bare file name (``call.py``) is refused, since nothing says where it is,
except in a row of the layer table, in the folders that row names.
"""

from __future__ import annotations

import ast
import functools
import glob
import re
from pathlib import Path

import pytest

import di

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"

CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", flags=re.MULTILINE | re.DOTALL)
PATH = re.compile(r"(?<![\w/])((?:di|tests|docs|bench|scripts)/[\w./*<>-]*)")
NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?")
DI_NAME = re.compile(r"(?<![\w.])di(?:\.[A-Za-z_]\w*)+")
FILE_LIKE = re.compile(r"^[\w.-]+(?:\.py|/)$")
FOREIGN = {"jax", "torch", "numpy", "np", "autograd", "optree", "scipy", "array_api_compat", "python"}
"""Other libraries, whose names the page may mention (``jax.value_and_grad``)."""


# --- what the code defines -------------------------------------------------------------------------


class Definitions:
    """The names defined in a set of modules: every function, class, assigned name
    and parameter (``names``), each class's own members (``members``), and each
    module's top-level names (``top``, by dotted module name)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.members: dict[str, set[str]] = {}
        self.top: dict[str, set[str]] = {}

    def add_module(self, module: str, tree: ast.Module) -> None:
        top = self.top.setdefault(module, set())
        self.names.add(module.rpartition(".")[2])
        for node in tree.body:
            top |= _bound(node)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.names.add(node.name)
            elif isinstance(node, ast.arg):
                self.names.add(node.arg)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                self.names |= _bound(node)
            if isinstance(node, ast.ClassDef):
                members = self.members.setdefault(node.name, set())
                for item in node.body:
                    members |= _bound(item)
                for item in ast.walk(node):  # self.name = ... in its methods
                    if isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
                        if isinstance(item.value, ast.Name) and item.value.id == "self":
                            members.add(item.attr)


def _bound(node: ast.AST) -> set[str]:
    """The names a statement binds at its own level."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).partition(".")[0] for alias in node.names}
    found = set()
    for target in targets:
        for item in ast.walk(target):
            if isinstance(item, ast.Name):
                found.add(item.id)
    return found


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def definitions() -> Definitions:
    found = Definitions()
    for path in sorted([*(ROOT / "di").rglob("*.py"), *(ROOT / "tests").glob("*.py")]):
        found.add_module(_module_name(path), ast.parse(path.read_text(encoding="utf-8")))
    return found


# --- what the page names ---------------------------------------------------------------------------


def path_exists(path: str) -> bool:
    """Whether a path from the repository root names a file or folder (``<name>``
    and ``*`` match any one name)."""
    pattern = re.sub(r"<[^>]*>", "*", path.rstrip("/"))
    return bool(glob.glob(str(ROOT / pattern)))


def di_name_exists(dotted: str) -> bool:
    """Whether ``di.a.b.c`` names something: the longest module prefix that is a
    file of ``di``, then a name that module defines, then the members of that
    class; ``di.X`` may be a public name (``di.__all__``, resolved lazily)."""
    parts = dotted.split(".")
    known = definitions()
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in known.top:
            rest = parts[cut:]
            break
    else:
        return False
    if module == "di" and rest and (rest[0] in di.__all__ or rest[0] == "__all__"):
        obj = getattr(di, rest[0])
        return all(hasattr(obj := getattr(obj, part), "__class__") for part in rest[1:]) if rest[1:] else True
    if not rest:
        return True
    if rest[0] not in known.top[module]:
        return False
    return len(rest) == 1 or (len(rest) == 2 and rest[1] in known.members.get(rest[0], set()))


def name_exists(name: str) -> bool:
    """Whether a name of code (``prepare_operator``, ``Prep.check``) is defined in ``di`` or its tests."""
    name = name.removesuffix("()")
    if name.startswith("di."):
        return di_name_exists(name)
    head, _, member = name.partition(".")
    if head in FOREIGN:
        return True
    known = definitions()
    if not member:
        return head in known.names or head in known.members
    return head in known.members and member in known.members[head]


def problems(text: str) -> list[str]:
    """What the page names that does not exist, and file names that do not say where they are."""
    found = []
    fenced = "\n".join(FENCE.findall(text))
    for path in PATH.findall(fenced):
        if not path_exists(path):
            found.append(f"{path} (in a diagram): no such file or folder")
    for line in FENCE.sub("", text).splitlines():
        # a table row's bare file names are in the folders its cells name (the layer's files)
        folders = [path for path in PATH.findall(line) if path.endswith("/")] if line.startswith("|") else []
        for span in CODE_SPAN.findall(line):
            found += _span_problems(span, folders)
    return found


def _span_problems(span: str, folders: list[str]) -> list[str]:
    paths = PATH.findall(span)
    if paths:
        return [f"`{span}`: no such file or folder" for path in paths if not path_exists(path)]
    if FILE_LIKE.match(span):
        if not folders:
            return [f"`{span}`: a file or folder not written from the repository root"]
        if not any(path_exists(folder + span) for folder in folders):
            return [f"`{span}`: not in {', '.join(folders)}"]
        return []
    if NAME.fullmatch(span):
        return [] if name_exists(span) else [f"`{span}`: no such name in di or its tests"]
    return [f"`{span}`: {name} does not exist" for name in DI_NAME.findall(span) if not di_name_exists(name)]


# --- the tests ---------------------------------------------------------------------------------------


def test_every_path_and_name_docs_architecture_mentions_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(CODE_SPAN.findall(text)) > 100, "the page names little code: is it still the architecture page?"
    missing = problems(text)
    assert not missing, "docs/architecture.md names what does not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("span", "exists"),
    [
        ("`di/prep/runners.py`", True),
        ("`di/engines/<name>/`", True),
        ("`di/engines/*/host.py`", True),
        ("`di/_autograd_namespace.py`", False),
        ("`di.register_engine`", True),
        ("`di.backends.fallbacks`", True),
        ("`di.backends.registry.get_adapter`", True),
        ("`di.backends.registry.operator_call`", False),
        ("`di.gradient(f, prep, backend, x, di.Constant(c))`", True),
        ("`di.gradient(f, di.NoSuchName)`", False),
        ("`prepare_operator`", True),
        ("`operator_call`", False),
        ("`Prep.check`", True),
        ("`Prep._runner`", False),
        ("`Prep.runners`", True),
        ("`Family.fields`", True),
        ("`MAX_LINES`", True),
        ("`jax.value_and_grad`", True),
        ("`call.py`", False),
        ("`strict=False`", True),
    ],
)
def test_the_check_tells_what_exists(span: str, exists: bool) -> None:
    assert not problems(f"Some prose naming {span}.") == exists


def test_a_table_row_finds_its_file_names_in_its_folders() -> None:
    assert not problems("| operators | `di/operators/` | the call (`call.py`) |")
    assert problems("| operators | `di/operators/` | the runners (`runners.py`) |")


def test_the_check_reads_paths_in_diagrams() -> None:
    assert problems("```text\n  di/nowhere/    a layer\n```\n")
    assert not problems("```text\n  di/prep/    a layer\n```\n")
