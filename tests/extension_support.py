"""Helpers of the out-of-tree extension tests (``test_extension_*.py``): undoing
their registrations, and keeping ``docs/backends.md`` in step with their code.

Imported as ``from extension_support import ...`` (pytest puts this directory on
``sys.path``, as for ``conftest`` and ``helpers``).
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import re
from collections.abc import Iterator
from pathlib import Path

import di.backends.registry
import di.backends.selectors
import di.families.registry

DOCS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "backends.md"

_PYTHON_BLOCK = re.compile(r"^```python\n(?P<body>.*?)^```[ \t]*$", flags=re.MULTILINE | re.DOTALL)


@contextlib.contextmanager
def restored_registries() -> Iterator[None]:
    """Undo, on exit, every ``di.register_family`` and ``di.register_backend`` made
    inside, and the backend names that selector classes defined inside added.

    ``di`` has no public way to unregister (nothing in it needs one), so this
    restores the registries' own tables: the one place these tests reach past the
    public API, and only to clean up after themselves.
    """
    di.families.registry.families()  # the built-in engines and their families registered first: they stay
    tables: list[dict] = [  # type: ignore[type-arg]
        di.families.registry._FAMILIES,
        di.backends.selectors._ENGINES,
        di.backends.selectors._BY_SELECTOR,
        di.backends.registry._ADAPTERS,
        di.backends.selectors._BY_NAME,
    ]
    saved = [dict(table) for table in tables]
    try:
        yield
    finally:
        for table, before in zip(tables, saved):
            table.clear()
            table.update(before)
        # caches keyed by array class and by family pair: rebuilt on demand
        di.families.registry._FAMILY_BY_TYPE.clear()
        di.families.registry._CONVERTERS.clear()


def claim_backend_name(selector_type: type[di.backends.selectors.AbstractBackend]) -> None:
    """Point ``di.backend(name)`` at ``selector_type`` again. A selector class takes
    its name when it is defined, so another class of the same name defined since
    (the docs page's copy of the same example, run by ``tests/test_docs.py`` in
    this process) holds it; use inside :func:`restored_registries`."""
    for key in (selector_type.name, *selector_type.aliases):
        di.backends.selectors._BY_NAME[key.lower()] = selector_type


def excerpt(path: str | Path, name: str) -> str:
    """The lines of a file between ``# docs excerpt begin: NAME`` and
    ``# docs excerpt end: NAME`` (both markers must be there, once)."""
    text = Path(path).read_text(encoding="utf-8")
    begin, end = f"# docs excerpt begin: {name}\n", f"# docs excerpt end: {name}\n"
    assert text.count(begin) == 1 and text.count(end) == 1, f"{path}: the markers of excerpt {name!r}"
    body = text.split(begin, 1)[1].split(end, 1)[0]
    return body.strip("\n") + "\n"


def python_blocks(page: Path = DOCS_PAGE) -> list[str]:
    """The bodies of the page's ``python`` blocks, in order."""
    return [match["body"] for match in _PYTHON_BLOCK.finditer(page.read_text(encoding="utf-8"))]


def _imported_names(code: str) -> set[tuple[str, str]]:
    """``(module, name)`` for every name the code's top-level imports bind."""
    names: set[tuple[str, str]] = set()
    for node in ast.parse(code).body:
        if isinstance(node, ast.Import):
            names.update((alias.name, alias.asname or alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update((node.module or "", alias.asname or alias.name) for alias in node.names)
    return names


def assert_page_shows(code: str, source: str | Path, page: Path = DOCS_PAGE, after: str | None = None) -> None:
    """Fail, with a diff against the closest block, unless ``code`` is exactly one
    of the page's ``python`` blocks and every name the block before it imports
    (the page's imports for it) is imported by ``source``, the test module; or,
    with ``after``, unless ``code`` is a block that comes after the block ``after``
    (the code shown in several blocks, with prose between them)."""
    blocks = python_blocks(page)
    if code in blocks:
        index = blocks.index(code)
        if after is not None:
            assert after in blocks[:index], f"{page.name}: the block shown after the code it follows is not"
            return
        shown = _imported_names(blocks[index - 1]) if index else set()
        missing = sorted(shown - _imported_names(Path(source).read_text(encoding="utf-8")))
        assert shown and not missing, f"{page.name}: the imports shown before the code are not the test's: {missing}"
        return
    closest = max(blocks, key=lambda block: difflib.SequenceMatcher(None, block, code).ratio(), default="")
    diff = "\n".join(
        difflib.unified_diff(closest.splitlines(), code.splitlines(), f"{page.name}", "the test's code", lineterm="")
    )
    raise AssertionError(f"{page.name} no longer shows the code the test runs; update the page:\n{diff}")
