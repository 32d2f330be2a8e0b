"""The documentation: its examples run, its site builds, every public name is documented.

Conventions for ``docs/**/*.md`` (repeated for contributors at the end of
``docs/testing.md``):

* A fenced block whose language is ``python`` runs. The blocks of one page run in
  order, in one namespace, so a page reads as one script.
* A ``text`` block that follows a ``python`` block, with only blank lines between,
  is that block's expected standard output, compared line by line (trailing spaces
  and surrounding blank lines ignored). A ``python`` block that prints must be
  followed by one, so no printed output goes unchecked.
* Any other fence language is shown, not run: ``bash`` for shell commands, ``py``
  for Python that cannot run in the test suite (a GPU, a pytest module, a file on
  the reader's disk). Pages say so where they use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import doctest
import importlib
import importlib.util
import inspect
import io
import os
import pkgutil
import re
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path
from typing import Any

import pytest
from helpers import docs_hooks

import di

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    flags=re.MULTILINE | re.DOTALL,
)
IMPORT = re.compile(r"^\s*(?:import|from)\s+(\w+)", flags=re.MULTILINE)


@dataclasses.dataclass
class Block:
    lang: str
    body: str
    line: int
    start: int
    end: int


def blocks_of(text: str) -> list[Block]:
    """Every fenced block of a Markdown page, in order."""
    found = []
    for match in FENCE.finditer(text):
        indent = match["indent"]
        body = match["body"]
        if indent:
            body = "".join(line[len(indent) :] if line.startswith(indent) else line for line in body.splitlines(True))
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(match["lang"], body, line, match.start(), match.end()))
    return found


def examples_of(text: str) -> list[tuple[Block, Block | None]]:
    """Each ``python`` block with the ``text`` block holding its expected output, if any."""
    blocks = blocks_of(text)
    pairs = []
    for i, block in enumerate(blocks):
        if block.lang != "python":
            continue
        expected = None
        if i + 1 < len(blocks):
            following = blocks[i + 1]
            if following.lang == "text" and not text[block.end : following.start].strip():
                expected = following
        pairs.append((block, expected))
    return pairs


def _normalise(output: str) -> list[str]:
    lines = [line.rstrip() for line in output.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


# --- every example runs, with its output checked ----------------------------------------------


PAGES_WITH_EXAMPLES = [page for page in PAGES if examples_of(page.read_text(encoding="utf-8"))]


def test_the_pages_have_examples() -> None:
    assert len(PAGES_WITH_EXAMPLES) >= 10, [_page_id(page) for page in PAGES_WITH_EXAMPLES]


@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=_page_id)
def test_page_examples_run_and_print_what_the_page_says(page: Path, tmp_path: Path, monkeypatch: Any) -> None:
    text = page.read_text(encoding="utf-8")
    examples = examples_of(text)
    for module_name in sorted({m for block, _ in examples for m in IMPORT.findall(block.body)} - {"di"}):
        pytest.importorskip(module_name)
    monkeypatch.chdir(tmp_path)
    # a family a page registers (backends.md's array-api-strict one) is the page's: another test
    # registering a family for the same arrays would otherwise find this one first
    from di.families import registry

    monkeypatch.setattr(registry, "_FAMILIES", dict(registry._FAMILIES))
    monkeypatch.setattr(registry, "_FAMILY_BY_TYPE", {})
    monkeypatch.setattr(registry, "_CONVERTERS", {})
    _isolate_engines(monkeypatch)  # and so is an engine it registers (backends.md's complex step)
    if "torch" in sys.modules:  # a reader runs a page in a fresh process: dynamo's memory of earlier
        sys.modules["torch"]._dynamo.reset()  # compiles (ints it saw change, per code object) must not leak in
    name = "docs_example_" + re.sub(r"\W", "_", _page_id(page))
    module = types.ModuleType(name)
    module.__file__ = str(page)
    monkeypatch.setitem(sys.modules, name, module)
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # as a reader runs it, not pytest's error filters
        for block, expected in examples:
            where = f"{_page_id(page)}:{block.line}"
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout):
                try:
                    exec(compile(block.body, where, "exec"), module.__dict__)
                except Exception as err:
                    code = textwrap.indent(block.body, "    ")
                    message = f"the example at {where} raised {type(err).__name__}: {err}\n\n{code}"
                    raise AssertionError(message) from err
            printed = _normalise(stdout.getvalue())
            if expected is None:
                assert not printed, (
                    f"the example at {where} prints, but no ```text block follows it with the expected output:\n"
                    + "\n".join(printed)
                )
                continue
            wanted = _normalise(expected.body)
            if printed != wanted:
                diff = "\n".join(
                    difflib.unified_diff(wanted, printed, "the page says", "the example prints", lineterm="")
                )
                raise AssertionError(f"the example at {where} prints something else than the page shows:\n{diff}")


def test_fence_conventions_are_followed() -> None:
    """Output blocks follow a python block, and no block uses a language the runner ignores by accident."""
    known = {"python", "py", "text", "bash", "toml", "yaml", "ini", ""}
    problems = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in blocks_of(text):
            if block.lang not in known:
                problems.append(
                    f"{_page_id(page)}:{block.line}: fence language {block.lang!r} (use one of {sorted(known)})"
                )
    assert not problems, "\n".join(problems)


def test_the_runner_reads_fences_as_documented() -> None:
    text = (
        "Intro\n\n```python\nprint(1)\n```\n\n```text\n1\n```\n\n"
        "```py\nnot run\n```\n\n    ```python\n    x = 2\n    ```\n"
    )
    pairs = examples_of(text)
    assert [(b.body, e.body if e else None) for b, e in pairs] == [("print(1)\n", "1\n"), ("x = 2\n", None)]


# --- every public name is documented --------------------------------------------------------


def _sections(doc: str) -> set[str]:
    return set(
        re.findall(r"^\s*(Args|Arguments|Attributes|Returns|Yields|Raises|Examples?):\s*$", doc, flags=re.MULTILINE)
    )


def _takes_arguments(obj: Any) -> bool:
    try:
        parameters = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False
    return bool(parameters)


def _missing_sections(name: str) -> list[str]:
    obj = getattr(di, name)
    doc = inspect.getdoc(obj) or ""
    if not doc.strip():
        return ["a docstring"]
    sections = _sections(doc)
    missing = []
    if not sections & {"Example", "Examples"}:
        missing.append("Example")
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return missing
        if _takes_arguments(obj) and not sections & {"Args", "Arguments", "Attributes"}:
            missing.append("Args (or Attributes)")
        return missing
    if _takes_arguments(obj) and not sections & {"Args", "Arguments"}:
        missing.append("Args")
    if "Returns" not in sections and "Yields" not in sections:
        missing.append("Returns")
    if "Raises" not in sections:
        missing.append("Raises")
    return missing


def test_all_lists_only_existing_names() -> None:
    assert len(set(di.__all__)) == len(di.__all__)
    assert [name for name in di.__all__ if not hasattr(di, name)] == []


def test_every_public_name_has_args_returns_raises_and_an_example() -> None:
    """Functions: Args (when they take any), Returns, Raises, Example. Classes: Example, and Args or
    Attributes when they take arguments. Exceptions and warnings: Example."""
    problems = {name: missing for name in di.__all__ if (missing := _missing_sections(name))}
    assert not problems, "public names whose docstring lacks sections:\n" + "\n".join(
        f"  di.{name}: {', '.join(missing)}" for name, missing in sorted(problems.items())
    )


DIRECTIVE = re.compile(r"^[ \t]*:::[ \t]+(\S+)", flags=re.MULTILINE)
CROSS_REFERENCE = re.compile(r"\]\[(di(?:\.\w+)*)\]")


def _directives(pages: list[Path]) -> set[str]:
    """The paths the pages document with ``::: path`` (mkdocstrings)."""
    return {m[1] for page in pages for m in DIRECTIVE.finditer(page.read_text(encoding="utf-8"))}


def _resolve(path: str) -> Any:
    """The object a dotted path names: its longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        with contextlib.suppress(ImportError):
            found: Any = importlib.import_module(".".join(parts[:cut]))
            for part in parts[cut:]:
                found = getattr(found, part)
            return found
    raise AssertionError(f"{path} names nothing")


def test_every_public_name_has_a_reference_entry() -> None:
    """Each name of ``di.__all__`` has its ``::: di.<name>`` under docs/reference (the anchor that
    ``[...][di.<name>]`` links resolve to), and every entry there names something that exists."""
    entries = _directives(sorted((DOCS / "reference").glob("*.md")))
    missing = sorted(name for name in di.__all__ if f"di.{name}" not in entries)
    assert not missing, f"names of di.__all__ without a '::: di.<name>' in docs/reference: {missing}"
    for entry in entries:
        _resolve(entry)


def test_every_cross_reference_names_a_documented_object() -> None:
    """A ``[text][di.X]`` link needs an entry for ``di.X``, for an object it belongs to, or for the
    same object under its public name; otherwise the site links nowhere."""
    entries = _directives(PAGES)
    objects = {id(_resolve(entry)) for entry in entries}
    dangling = []
    for page in PAGES:
        for target in CROSS_REFERENCE.findall(page.read_text(encoding="utf-8")):
            if any(target == e or target.startswith(e + ".") for e in entries) or id(_resolve(target)) in objects:
                continue
            dangling.append(f"{page.relative_to(DOCS)}: [{target}]")
    assert not dangling, "cross-references to no '::: ' entry:\n" + "\n".join(dangling)


# --- the docstrings' examples run (doctest) ------------------------------------------------------


def _public_modules() -> list[str]:
    names = ["di"]
    for info in pkgutil.walk_packages(di.__path__, "di."):
        names.append(info.name)
    return sorted(names)


def _isolate_engines(monkeypatch: Any) -> None:
    """Undo, after the test, the engines an example registers: a registered engine is
    listed by di.available_backends(), which other tests of this process use."""
    from di.backends import registry, selectors

    selectors.engines()  # the built-in engines are registered first, and stay
    for module, table in ((selectors, "_ENGINES"), (selectors, "_BY_SELECTOR"), (selectors, "_BY_NAME")):
        monkeypatch.setattr(module, table, dict(getattr(module, table)))
    monkeypatch.setattr(registry, "_ADAPTERS", dict(registry._ADAPTERS))


@pytest.mark.parametrize("module_name", _public_modules())
def test_docstring_examples(module_name: str, monkeypatch: Any) -> None:
    _isolate_engines(monkeypatch)
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        pytest.skip(f"{module_name} needs an engine that is not installed: {err}")
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    output = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        for test in finder.find(module, module_name, globs={}):
            runner.run(test, out=output.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed:\n{output.getvalue()}"


# --- the support tables are generated from the adapters -------------------------------------------


def _table_rows(table: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]


def test_every_table_marker_names_a_generated_table() -> None:
    hooks = docs_hooks()
    used = {m["name"] for page in PAGES for m in hooks.MARKER.finditer(page.read_text(encoding="utf-8"))}
    assert used, "no page uses a generated table"
    assert used <= set(hooks.TABLES), f"unknown tables: {sorted(used - set(hooks.TABLES))}"


def test_operator_table_is_what_the_adapters_declare() -> None:
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    pytest.importorskip("autograd")
    from di.backends.capabilities import OPERATOR_FAMILIES

    hooks = docs_hooks()
    rows = _table_rows(hooks.operators_table())
    header = rows[0]
    by_operator = {row[0].split(" / ")[0].strip("`"): row for row in rows[2:]}
    for selector in hooks.selectors():
        name = f"`{hooks.label(selector)}`"
        if name not in header:
            continue  # a compiled selector: same adapter as its eager column
        index = header.index(name)
        support = hooks.support(selector)
        for family in OPERATOR_FAMILIES:
            assert by_operator[family][index] == support[family], (family, name)


def test_context_table_says_autograd_refuses_cache() -> None:
    pytest.importorskip("autograd")
    hooks = docs_hooks()
    rows = {row[0]: row for row in _table_rows(hooks.contexts_table())[2:]}
    assert rows["`AutoAutograd()`"][2] == "refused at preparation"
    assert rows["`AutoFiniteDiff()`"][1:3] == ["yes", "yes"]


def test_context_table_says_what_a_write_into_x_does_as_each_adapter_declares() -> None:
    from di.backends.capabilities import X_WRITES

    hooks = docs_hooks()
    rows = {row[0]: row for row in _table_rows(hooks.contexts_table())[2:]}
    assert set(hooks._X_WRITES) == set(X_WRITES)
    for selector in hooks.selectors():
        declared = hooks.record(selector).x_writes
        assert rows[f"`{hooks.label(selector)}`"][4] == hooks._X_WRITES[declared], selector


def test_pytree_table_follows_the_adapters_declarations() -> None:
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    pytest.importorskip("autograd")
    hooks = docs_hooks()
    rows = _table_rows(hooks.pytrees_table())
    header, by_operator = rows[0], {row[0].strip("`"): row for row in rows[2:]}
    for selector in hooks.selectors():
        index = header.index(f"`{hooks.label(selector)}`")
        native = hooks.adapter(selector).instance_capabilities().pytrees
        sparse = hooks.support(selector)
        for family, row in by_operator.items():
            expected = "native" if family in native else "flattened"
            assert row[index] == ("refused" if sparse[family].startswith("sparse") else expected), (family, selector)


# --- the site builds ----------------------------------------------------------------------------


def test_site_builds_strictly(tmp_path: Path) -> None:
    for needed in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(needed.split(".")[0]) is None:
            pytest.skip(f"{needed} is not installed: pip install 'differentiation-interface[docs]'")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    # (--quiet would hide the warnings from --strict's count: a broken link or docstring would pass)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    # TensorFlow's C++ logging (absl) writes a line of its own when the hooks first import it
    own = [line for line in result.stderr.splitlines() if "WARNING" in line and "absl::InitializeLog" not in line]
    assert not own, result.stderr
    backends = (site / "backends" / "index.html").read_text(encoding="utf-8")
    assert "native" in backends and "di:table" not in backends, "the support tables were not generated"
    reference = (site / "reference" / "operators" / "index.html").read_text(encoding="utf-8")
    assert 'id="di.gradient"' in reference, "the API reference was not generated from the docstrings"
