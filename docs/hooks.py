"""MkDocs hooks for the ``di`` documentation (configured in ``mkdocs.yml``).

1. Support tables. A line ``<!-- di:table NAME -->`` in a page is replaced, at build
   time, by a Markdown table generated from the code: each backend's adapter
   (``di.backends.registry.get_adapter(selector)``) and the capabilities record it
   declares (``di.backends.capabilities.Capabilities``, as the adapter instance has it:
   ``Adapter.instance_capabilities()``): the operators it implements natively or
   builds from its primitives (``Capabilities.support()``; a strategy that wraps
   other backends describes itself with ``support()``), whether it takes ``Cache``
   contexts and its note on them, the family it computes in, whether it compiles,
   the operators that take pytrees, the engine transforms a call runs inside (and
   what composes inside each: ``Capabilities.compositions``), and the selectors'
   options (their dataclass fields). No table is written by hand,
   so the tables cannot drift from the code. ``NAME`` is one of :data:`TABLES`.

2. Cross-references in docstrings. Some docstrings use reStructuredText roles
   (``:func:`di.gradient```), which Markdown renders literally; they become
   mkdocs-autorefs links where the target is documented (plain code otherwise).

Run ``python docs/hooks.py`` to print every table.
"""

from __future__ import annotations

import dataclasses
import html
import logging
import re
from collections.abc import Callable
from typing import Any

log = logging.getLogger("mkdocs.hooks.di")

MARKER = re.compile(r"^<!-- di:table (?P<name>[\w-]+) -->[ \t]*$", flags=re.MULTILINE)


def builtin_engines() -> list[Any]:
    """The built-in engines' records (``di/engines/__init__.py``), in their order."""
    from di.backends.engine import load
    from di.engines import BUILTIN_ENGINES

    return [load(path) for path in BUILTIN_ENGINES]


def engine_defaults() -> list[Any]:
    """Each built-in engine's default selector (its first label's)."""
    return [engine.default for engine in builtin_engines()]


def strategies() -> list[Any]:
    """The strategies' selectors the tables show: ``SecondOrder`` (its default outer
    backend over the first engine) and ``AutoSparse`` (over its default dense backend)."""
    import di

    return [di.SecondOrder(inner=engine_defaults()[0]), di.AutoSparse()]


def selectors() -> list[Any]:
    """The backend selectors the tables describe, one column or row each: the
    labelled selectors of the built-in engines (their records' ``labels``), then
    the strategies'. A label whose selector has the adapter of an earlier one, and
    compiles as it does, is left out: every row of it would repeat that one's
    (finite differences' forward method)."""
    shown: dict[tuple[type, bool], Any] = {}
    for engine in builtin_engines():
        for selector in engine.labels.values():
            engine_adapter = adapter(selector)
            shown.setdefault((type(engine_adapter), engine_adapter.compiled), selector)
    return [*shown.values(), *strategies()]


def label(selector: Any) -> str:
    """A short label: the selector's class and the options that differ from the defaults."""
    options = []
    for field in dataclasses.fields(selector):
        value = getattr(selector, field.name)
        default = field.default if field.default is not dataclasses.MISSING else None
        if field.default_factory is not dataclasses.MISSING:  # SecondOrder's backends
            options.append(label(value))
        elif value != default and not (field.name == "sparsity" and type(value).__name__ == "TracerSparsity"):
            options.append(f"{field.name}={value!r}")
    return f"{type(selector).__name__}({', '.join(options)})"


def adapter(selector: Any) -> Any:
    """The adapter behind a selector (imports its engine): for a strategy
    (AutoSparse, SecondOrder), the adapter of the backend it wraps.

    Raises:
        di.BackendNotInstalledError: the engine is missing; the tables cannot be
            generated without it.
    """
    from di.backends.registry import get_adapter, get_strategy

    strategy = get_strategy(selector)
    return get_adapter(selector if strategy is None else strategy.engine(selector))


def support(selector: Any) -> dict[str, str]:
    """How the selector computes each operator family: ``"native"``, ``"fallback"``
    or ``"unsupported"`` from an engine's adapter, a strategy's own words otherwise."""
    from di.backends.registry import get_strategy

    strategy = get_strategy(selector)
    return type(adapter(selector)).support() if strategy is None else strategy.support(selector)


def native_pytrees(selector: Any) -> dict[str, str]:
    """Per operator family: ``"native"`` when the engine takes a pytree ``x`` itself,
    ``"flattened"`` when ``di`` flattens it, ``"refused"`` for sparse operators."""
    from di.backends.capabilities import OPERATOR_FAMILIES

    native, how = record(selector).pytrees, support(selector)
    return {
        family: "refused" if how[family].startswith("sparse") else "native" if family in native else "flattened"
        for family in OPERATOR_FAMILIES
    }


def record(selector: Any) -> Any:
    """The capabilities record of a selector's adapter, as the instance has it."""
    return adapter(selector).instance_capabilities()


def _code(text: str) -> str:
    return f"`{text}`"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = [_row(header), _row(["---"] * len(header)), *(_row(row) for row in rows)]
    return "\n".join(lines)


def operators_table() -> str:
    """Operator families x backends: native, fallback or unsupported.

    The column of a compiled selector repeats the eager one's (same adapter); it
    is kept so the table reads as "what can I call on this selector".
    """
    from di.backends.capabilities import OPERATOR_FAMILIES

    columns = [s for s in selectors() if not adapter(s).compiled]
    supports = {label(s): support(s) for s in columns}
    rows = []
    for family, names in OPERATOR_FAMILIES.items():
        rows.append([" / ".join(_code(name) for name in names), *(supports[label(s)][family] for s in columns)])
    for family in ("pullback", "hvp"):
        same_point = f"{family}_same_point"
        cells = []
        for s in columns:
            if supports[label(s)][family] not in ("native", "fallback"):
                cells.append(supports[label(s)][family])
            else:
                cells.append("native" if same_point in record(s).native else "fallback")
        rows.append([f"{_code(family)} at one point ({_code(f'prepare_{same_point}')})", *cells])
    return _table(["operator", *(_code(label(s)) for s in columns)], rows)


def contexts_table() -> str:
    """Backends x context kinds: accepted or refused at preparation, and the note."""
    rows = []
    for s in selectors():
        capabilities = record(s)
        cache = "yes" if capabilities.cache else "refused at preparation"
        note = html.escape(capabilities.cache_note) or "-"
        rows.append([_code(label(s)), "yes", cache, note, _X_WRITES[capabilities.x_writes]])
    return _table(["backend", "`Constant`", "`Cache`", "note on `Cache`", "`f` writes into `x`"], rows)


_X_WRITES = {"refused": "refused (`InvalidInputError`)", "own copy": "into the engine's own copy (differentiated)"}
"""The contexts table's words for each ``Capabilities.x_writes`` (``di.backends.capabilities.X_WRITES``)."""


def backends_table() -> str:
    """Selectors: engine, the array family they compute in, compiled or not, the engine
    transforms a call runs inside, and the extra to install."""
    rows = []
    for s in selectors():
        a, capabilities = adapter(s), record(s)
        engine = type(s).engine_display
        extra = f"`differentiation-interface[{s.extra}]`" if s.extra else "(numpy only)"
        if type(s).__name__ == "SecondOrder":
            extra = "those of its two backends"
        if type(s).__name__ == "AutoSparse":
            engine = f"{type(s.dense).engine_display}, colored (scipy)"
            extra = "its dense backend's, and `differentiation-interface[sparse]` (scipy)"
        transforms = ", ".join(_code(t) for t in capabilities.transforms) or "-"
        rows.append([_code(label(s)), engine, capabilities.family, "yes" if a.compiled else "no", transforms, extra])
    return _table(["selector", "engine", "computes in", "compiled", "runs inside", "install"], rows)


def options_table() -> str:
    """Selector classes and their options (dataclass fields with defaults)."""
    classes = [cls for engine in builtin_engines() for cls in engine.selectors] + [type(s) for s in strategies()]
    rows = []
    for cls in classes:
        options = []
        for field in dataclasses.fields(cls):
            if field.default is not dataclasses.MISSING:
                options.append(_code(f"{field.name}={field.default!r}"))
            elif field.default_factory is not dataclasses.MISSING:
                options.append(_code(f"{field.name}={label(field.default_factory())}"))
            else:
                options.append(_code(field.name))
        rows.append([f"[`di.{cls.__name__}`][di.{cls.__name__}]", ", ".join(options) or "(none)"])
    return _table(["selector", "options (defaults)"], rows)


def pytrees_table() -> str:
    """Operator families x backends: does the engine take a pytree ``x`` itself, or does ``di``
    flatten it into one vector (``Capabilities.pytrees``)?"""
    from di.backends.capabilities import OPERATOR_FAMILIES

    columns = selectors()
    how = {label(s): native_pytrees(s) for s in columns}
    rows = [[_code(family), *(how[label(s)][family] for s in columns)] for family in OPERATOR_FAMILIES]
    return _table(["operator", *(_code(label(s)) for s in columns)], rows)


def second_order_table() -> str:
    """Outer x inner backends of ``SecondOrder``: which pairs compute second order
    (``Capabilities.differentiates``, through ``Adapter.differentiates_programs_of``,
    the check made at preparation)."""
    from di.second_order.strategy import supported_pairs

    engines = engine_defaults()
    pairs = set(supported_pairs(engines))
    rows = [
        [_code(label(outer)), *("supported" if (outer, inner) in pairs else "refused" for inner in engines)]
        for outer in engines
    ]
    return _table(["outer \\ inner", *(_code(label(inner)) for inner in engines)], rows)


def transform_engines() -> list[tuple[Any, list[Any]]]:
    """Each engine that composes with transforms, as its default selector, and the
    selectors whose calls follow its records: its labelled ones, ``AutoSparse``
    over it where it is the default dense backend, and ``SecondOrder`` of it over
    itself where it differentiates its own programs."""
    import di

    found = []
    for engine in builtin_engines():
        default = engine.default
        capabilities = record(default)
        if not capabilities.compositions:
            continue
        over = list(engine.labels.values())
        if di.AutoSparse().dense == default:
            over.append(di.AutoSparse(default))
        if capabilities.differentiates == "own":
            over.append(di.SecondOrder(default, default))
        found.append((default, over))
    return found


def transforms_table() -> str:
    """Engine transforms x what runs inside them (``Capabilities.compositions``, the
    records the tests in ``tests/test_transforms_*.py`` run): the operators,
    unprepared calls, same-point preps, ``Cache`` contexts, and a note."""
    from di.backends.capabilities import OPERATOR_FAMILIES

    rows = []
    for engine, selectors_ in transform_engines():
        capabilities = record(engine)
        backends = ", ".join(_code(label(s)) for s in selectors_)
        for index, composition in enumerate(capabilities.compositions):
            refused_operators = [family for family in OPERATOR_FAMILIES if not composition.composes(family)]
            operators = "all" if not refused_operators else "all but " + ", ".join(map(_code, refused_operators))
            cache = composition.status("Cache") if capabilities.cache else "- (never)"
            rows.append(
                [
                    _code(composition.transform),
                    backends if index == 0 else "(the same)",
                    operators,
                    composition.status("unprepared"),
                    composition.status("same point"),
                    cache,
                    html.escape(composition.note) or "-",
                ]
            )
    header = ["inside", "backends", "operators", "unprepared", "same-point preps", "`Cache`", "note"]
    return _table(header, rows)


def transform_refusals_table() -> str:
    """What a refusal or a graph break in :func:`transforms_table` means, and what to do."""
    from di.backends.transforms import BREAKS, REFUSALS

    rows = [[aspect, "refused", html.escape(text)] for aspect, text in REFUSALS.items()]
    rows += [[aspect, "graph break", html.escape(text)] for aspect, text in BREAKS.items()]
    return _table(["what", "status", "why, and what to do"], rows)


TABLES: dict[str, Callable[[], str]] = {
    "operators": operators_table,
    "contexts": contexts_table,
    "backends": backends_table,
    "options": options_table,
    "pytrees": pytrees_table,
    "second-order": second_order_table,
    "transforms": transforms_table,
    "transform-refusals": transform_refusals_table,
}


def render(markdown: str, where: str = "") -> str:
    """Replace every ``<!-- di:table NAME -->`` line of a page by its table.

    Raises:
        KeyError: an unknown table name.
    """

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"{where}: unknown table {name!r}; known: {', '.join(TABLES)}")
        return TABLES[name]()

    return MARKER.sub(replace, markdown)


# --- MkDocs hooks -----------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Generate the support tables of a page."""
    if "<!-- di:table" not in markdown:
        return markdown
    try:
        return render(markdown, page.file.src_path)
    except ImportError as err:  # di.BackendNotInstalledError
        log.warning(
            "%s: the support tables need every engine installed "
            "(pip install 'differentiation-interface[all,docs]'): %s",
            page.file.src_path,
            err,
        )
        return MARKER.sub("*(table not generated: an engine is missing where these docs were built)*", markdown)


_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj):<code>~?(?P<target>[\w.]+)</code>")


def link_roles(text: str) -> str:
    """Turn reStructuredText roles left in rendered docstrings into optional autorefs.

    Example:
        >>> link_roles(":func:<code>di.gradient</code>")
        '<autoref identifier="di.gradient" optional><code>di.gradient</code></autoref>'
    """

    def replace(match: re.Match[str]) -> str:
        target = match["target"]
        shown = target.rsplit(".", 1)[-1] if "~" in match.group(0) else target
        return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'

    return _ROLE.sub(replace, text)


def on_page_content(html_text: str, page: Any, **kwargs: Any) -> str:
    """Link the reStructuredText roles of rendered docstrings."""
    return link_roles(html_text)


if __name__ == "__main__":
    for table_name, make in TABLES.items():
        print(f"## {table_name}\n\n{make()}\n")
