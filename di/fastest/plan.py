"""Plans of :class:`di.AutoFastest`: which candidate backend won, and why the others did not.

A :class:`Plan` is a table of candidates (status, median time per prepared call,
reason), attached to the prep as ``prep.plan``. It holds strings, floats and the
candidates' selectors, never an array. :class:`PlanCache` remembers plans in a
JSON file so a later process skips the measurement.

Examples:
    >>> from di.fastest.plan import Plan, PlanRow
    >>> import di
    >>> plan = Plan("gradient", "x numpy float64 (3,)", (
    ...     PlanRow(di.AutoFiniteDiff(), "chosen", 2.5e-5, 40),
    ...     PlanRow(di.AutoFiniteDiff(method="forward"), "slower", 3.0e-5, 40),
    ... ))
    >>> plan.chosen
    AutoFiniteDiff(method='central', step=None)
    >>> print(plan)  # doctest: +NORMALIZE_WHITESPACE
    AutoFastest plan: gradient, x numpy float64 (3,) (measured)
    candidate                         status  median    vs chosen  reason
    AutoFiniteDiff()                  chosen  25.0 us   1.00
    AutoFiniteDiff(method='forward')  slower  30.0 us   1.20
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from di.backends.selectors import AbstractBackend, selector_classes
from di.errors import DIError

__all__ = [
    "STATUSES",
    "CandidatesDisagreeError",
    "Plan",
    "PlanCache",
    "PlanRow",
    "engine_versions",
    "format_seconds",
    "function_fingerprint",
    "function_name",
    "selector_label",
]

STATUSES = ("chosen", "slower", "failed", "disagreed")
"""A candidate's status in a plan: the one kept, one that ran correctly but
slower, one that raised (at preparation or on the first call), one whose result
differed from the majority's beyond ``rtol``."""

_CACHE_FORMAT = "di-plan-cache"
_CACHE_VERSION = 1
_REASON_WIDTH = 70
_CORE_DISTRIBUTIONS = ("numpy", "optree", "differentiation-interface")


class CandidatesDisagreeError(DIError, ValueError):
    """The candidates of :class:`di.AutoFastest` gave different results and no
    majority of them agrees, so none can be trusted to be right.

    Attributes:
        plan: the :class:`Plan` with every candidate marked ``disagreed``.

    Examples:
        >>> from di.fastest.plan import CandidatesDisagreeError
        >>> import di
        >>> issubclass(CandidatesDisagreeError, di.DIError)
        True
    """

    def __init__(self, message: str, plan: Plan) -> None:
        super().__init__(message)
        self.plan = plan


def selector_label(selector: AbstractBackend) -> str:
    """A selector's class with the options that differ from their defaults.

    Examples:
        >>> import di
        >>> from di.fastest.plan import selector_label
        >>> selector_label(di.AutoJAX(jit=True)), selector_label(di.AutoTorch())
        ('AutoJAX(jit=True)', 'AutoTorch()')
    """
    if not dataclasses.is_dataclass(selector):
        return repr(selector)
    options = []
    for field in dataclasses.fields(selector):
        value = getattr(selector, field.name)
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = dataclasses.MISSING
        if value != default:
            shown = selector_label(value) if isinstance(value, AbstractBackend) else repr(value)
            options.append(f"{field.name}={shown}")
    return f"{type(selector).__name__}({', '.join(options)})"


def format_seconds(seconds: float | None) -> str:
    """A duration for tables: ``"8.1 us"``, ``"2.35 ms"``, ``"1.20 s"``; ``"-"`` when unknown.

    Examples:
        >>> from di.fastest.plan import format_seconds
        >>> format_seconds(8.1e-6), format_seconds(None)
        ('8.1 us', '-')
    """
    if seconds is None or math.isnan(seconds):
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


@dataclass(frozen=True)
class PlanRow:
    """One candidate of a plan.

    Attributes:
        backend: the candidate's selector.
        status: one of :data:`STATUSES`.
        median_s: median seconds per prepared call (the whole ``di`` call,
            conversions to and from the caller's array family included); ``None``
            for candidates that were not timed.
        samples: the number of timed blocks of calls the median is taken over.
        reason: why a candidate failed or disagreed (the error, or the size of
            the difference); empty otherwise.

    Examples:
        >>> import di
        >>> from di.fastest.plan import PlanRow
        >>> PlanRow(di.AutoTorch(), "failed", None, 0, "ImportError: no torch").label
        'AutoTorch()'
    """

    backend: AbstractBackend
    status: str
    median_s: float | None = None
    samples: int = 0
    reason: str = ""

    @property
    def label(self) -> str:
        """The candidate's short label (:func:`selector_label`)."""
        return selector_label(self.backend)


@dataclass(frozen=True)
class Plan:
    """What :class:`di.AutoFastest` measured, and which candidate it kept.

    Printing a plan gives a table; ``rich`` renders it as a rich table
    (``rich.print(prep.plan)``).

    Attributes:
        operator: the operator family (``"gradient"``, ``"hvp"``, ...).
        signature: the arguments it was made for (``"x numpy float64 (1000,)"``).
        rows: one :class:`PlanRow` per candidate, in the candidates' order.
        source: ``"measured"``, or ``"cache PATH"`` for a plan read from a
            :class:`PlanCache` (measured by an earlier process).
        budget_s: the measurement budget it was made with.

    Examples:
        >>> import di
        >>> from di.fastest.plan import Plan, PlanRow
        >>> plan = Plan("gradient", "x numpy float64 (3,)", (PlanRow(di.AutoFiniteDiff(), "chosen", 1e-5, 9),))
        >>> plan.chosen, plan.status_of(di.AutoFiniteDiff())
        (AutoFiniteDiff(method='central', step=None), 'chosen')
    """

    operator: str
    signature: str
    rows: tuple[PlanRow, ...]
    source: str = "measured"
    budget_s: float | None = None

    @property
    def chosen(self) -> AbstractBackend:
        """The selector whose prep was kept.

        Raises:
            LookupError: no row is ``chosen`` (a plan of candidates that all failed).
        """
        for row in self.rows:
            if row.status == "chosen":
                return row.backend
        raise LookupError("no candidate was chosen in this plan")

    def status_of(self, backend: AbstractBackend) -> str:
        """The status of one candidate.

        Raises:
            KeyError: ``backend`` is not a candidate of this plan.
        """
        for row in self.rows:
            if row.backend == backend:
                return row.status
        raise KeyError(backend)

    def _chosen_time(self) -> float | None:
        return next((row.median_s for row in self.rows if row.status == "chosen"), None)

    def table_rows(self) -> list[list[str]]:
        """The table's cells: candidate, status, median, ratio to the chosen one, reason."""
        reference = self._chosen_time()
        cells = []
        for row in self.rows:
            ratio = "-"
            if row.median_s is not None and reference:
                ratio = f"{row.median_s / reference:.2f}"
            reason = " ".join(row.reason.split())
            if len(reason) > _REASON_WIDTH:
                reason = reason[: _REASON_WIDTH - 3] + "..."
            cells.append([row.label, row.status, format_seconds(row.median_s), ratio, reason])
        return cells

    @property
    def title(self) -> str:
        """The table's title line."""
        return f"AutoFastest plan: {self.operator}, {self.signature} ({self.source})"

    COLUMNS = ("candidate", "status", "median", "vs chosen", "reason")

    def __str__(self) -> str:
        rows = self.table_rows()
        widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(self.COLUMNS)]
        lines = [self.title, "  ".join(c.ljust(w) for c, w in zip(self.COLUMNS, widths)).rstrip()]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        return "\n".join(lines)

    def __rich__(self) -> Any:
        """The title line and a ``rich.table.Table`` of the plan (``rich`` calls this when printing)."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        styles = {"chosen": "bold green", "slower": "", "failed": "red", "disagreed": "bold red"}
        table = Table(header_style="bold")
        for column in self.COLUMNS:
            table.add_column(column, overflow="fold" if column == "reason" else "ellipsis")
        for row, cells in zip(self.rows, self.table_rows()):
            style = styles.get(row.status, "")
            table.add_row(*(Text(cell, style=style if i == 1 else "") for i, cell in enumerate(cells)))
        return Group(Text(self.title, style="bold"), table)

    # --- JSON ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON-ready data (candidates by ``repr``)."""
        return {
            "operator": self.operator,
            "signature": self.signature,
            "budget_s": self.budget_s,
            "rows": [
                {
                    "candidate": repr(row.backend),
                    "status": row.status,
                    "median_s": row.median_s,
                    "samples": row.samples,
                    "reason": row.reason,
                }
                for row in self.rows
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], candidates: Sequence[AbstractBackend], source: str) -> Plan:
        """Read a plan written by :meth:`to_json`, matching its candidates to ``candidates``
        by ``repr`` (a JSON file never names code to import).

        Raises:
            KeyError: a candidate of the data is not among ``candidates``, or a
                field is missing.
            ValueError: an unknown status.
        """
        by_repr = {repr(candidate): candidate for candidate in candidates}
        rows = []
        for row in data["rows"]:
            if row["status"] not in STATUSES:
                raise ValueError(f"unknown status {row['status']!r}")
            median = row["median_s"]
            rows.append(
                PlanRow(
                    by_repr[row["candidate"]],
                    row["status"],
                    None if median is None else float(median),
                    int(row["samples"]),
                    str(row["reason"]),
                )
            )
        budget = data.get("budget_s")
        return cls(str(data["operator"]), str(data["signature"]), tuple(rows), source, budget)


# --- what a cached plan is keyed by ---------------------------------------------------------


def function_name(f: Callable[..., Any]) -> str:
    """``module:qualname`` of a function (of the wrapped function for a
    ``functools.partial``, of the class for a callable object).

    Examples:
        >>> from di.fastest.plan import function_name, format_seconds
        >>> function_name(format_seconds)
        'di.fastest.plan:format_seconds'
    """
    target: Any = getattr(f, "func", f)  # functools.partial
    if not hasattr(target, "__qualname__"):
        target = type(target)
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', '?')}"


def _hash_code(code: Any, digest: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for constant in code.co_consts:
        if hasattr(constant, "co_code"):  # a nested function or comprehension
            _hash_code(constant, digest)
        else:
            digest.update(repr(constant).encode())


def function_fingerprint(f: Callable[..., Any]) -> str:
    """A hash of ``f``'s bytecode, so an edited function does not reuse the plan
    of its previous body; ``""`` for callables without Python bytecode.

    Examples:
        >>> from di.fastest.plan import function_fingerprint
        >>> function_fingerprint(lambda x: x + 1) == function_fingerprint(lambda x: x + 1)
        True
        >>> function_fingerprint(lambda x: x + 1) == function_fingerprint(lambda x: x + 2)
        False
    """
    target: Any = getattr(f, "func", f)
    code = getattr(target, "__code__", None)
    if code is None:  # a callable object: its class's __call__
        code = getattr(vars(type(target)).get("__call__"), "__code__", None)
    if code is None:
        return ""
    digest = hashlib.sha256()
    _hash_code(code, digest)
    return digest.hexdigest()[:16]


def engine_versions(candidates: Sequence[AbstractBackend] = ()) -> dict[str, str]:
    """The installed versions of the engines (and of Python, numpy and ``di``),
    without importing any engine; a plan measured under other versions is stale.

    Args:
        candidates: selectors whose ``engine`` module is looked up too (for
            third-party backends).

    Returns:
        ``{"python": "3.11.9", "numpy": "2.1.0", ...}``: every known selector's
        ``distributions`` (or ``engine``), those installed.

    Examples:
        >>> from di.fastest.plan import engine_versions
        >>> "numpy" in engine_versions()
        True
    """
    from importlib import metadata

    versions = {"python": sys.version.split()[0]}
    names = dict.fromkeys(_CORE_DISTRIBUTIONS)
    for selector in (*selector_classes(), *(type(c) for c in candidates)):
        names.update(dict.fromkeys(selector.distributions or ((selector.engine,) if selector.engine else ())))
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            module = sys.modules.get(name)
            if module is not None and hasattr(module, "__version__"):
                versions[name] = str(module.__version__)
    return versions


def cache_key(parts: Mapping[str, Any]) -> str:
    """The key of a plan in a :class:`PlanCache`: a hash of what it depends on."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


class PlanCache:
    """Plans remembered in a JSON file, keyed by function, operator, signature and
    candidates; an entry measured under other engine versions is ignored (and
    replaced by the next measurement).

    Writes go to a temporary file in the same folder, then ``os.replace``, so a
    reader never sees a half-written file and concurrent writers cannot corrupt it
    (the last one wins; each merges into the file as it is just before writing).

    Args:
        path: the JSON file (created on first write).

    Examples:
        >>> import tempfile, os
        >>> from di.fastest.plan import PlanCache
        >>> cache = PlanCache(os.path.join(tempfile.mkdtemp(), "plans.json"))
        >>> cache.store("k", {"engines": {"numpy": "2"}, "plan": {}})
        >>> cache.lookup("k", {"numpy": "2"})
        {'engines': {'numpy': '2'}, 'plan': {}}
        >>> cache.lookup("k", {"numpy": "3"}) is None
        True
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
            if data.get("format") != _CACHE_FORMAT or not isinstance(data.get("plans"), dict):
                raise ValueError("not a di plan cache")
            if data.get("version") != _CACHE_VERSION:
                return {}  # written by another version of di: measured again, then replaced
        except (ValueError, AttributeError) as err:
            warnings.warn(
                f"di: ignoring the plan cache {str(self.path)!r}, which is not a di plan cache ({err}); "
                f"it will be rewritten.",
                stacklevel=4,
            )
            return {}
        plans: dict[str, Any] = data["plans"]
        return plans

    def lookup(self, key: str, engines: Mapping[str, str]) -> dict[str, Any] | None:
        """The entry stored under ``key``, if it was measured under these ``engines``."""
        entry = self._read().get(key)
        if not isinstance(entry, dict) or entry.get("engines") != dict(engines):
            return None
        return entry

    def store(self, key: str, entry: Mapping[str, Any]) -> None:
        """Add or replace one entry; a file that cannot be written gives a warning, not an error."""
        try:
            plans = self._read()
            plans[key] = dict(entry)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as file:
                    json.dump({"format": _CACHE_FORMAT, "version": _CACHE_VERSION, "plans": plans}, file, indent=1)
                os.replace(temporary, self.path)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError as err:
            warnings.warn(f"di: could not write the plan cache {str(self.path)!r}: {err}", stacklevel=4)
