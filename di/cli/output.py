"""What the commands print and write: rich tables (plain text without rich), a
progress bar, number formats, status cells and JSON files."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from di.fastest.plan import format_seconds

__all__ = ["Output", "Progress", "count_cell", "number", "seconds", "short", "write_json"]

TEXT_COLUMNS = ("error", "note", "notes")
"""Columns of free text: cut to a readable width, with an ellipsis."""
TEXT_WIDTH = 60


class Output:
    """Tables and lines on stdout through rich when it is installed, plain text otherwise."""

    def __init__(self) -> None:
        try:
            from rich.console import Console
        except ImportError:  # pragma: no cover - rich is in the cli extra
            self.console: Any = None
        else:
            self.console = Console(highlight=False)
            if not self.console.is_terminal:
                self.console = Console(highlight=False, width=200)

    def line(self, text: str = "", style: str | None = None) -> None:
        """Print one line."""
        if self.console is None:
            print(text)
        else:
            self.console.print(text, style=style, markup=False, soft_wrap=True)

    def plan(self, plan: Any) -> None:
        """Print a plan of :class:`di.AutoFastest` (a rich table when rich is installed)."""
        if self.console is None:
            print(plan)
        else:
            self.console.print()
            self.console.print(plan)

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        """Print a table; status cells are coloured, free-text columns cut short."""
        rows = [list(map(str, row)) for row in rows]
        if self.console is None:
            widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
            print(f"\n{title}")
            print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
            print("  ".join("-" * w for w in widths))
            for row in rows:
                print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
            return
        from rich.table import Table
        from rich.text import Text

        self.console.print()
        self.console.print(title, style="bold", markup=False, soft_wrap=True)
        table = Table(show_lines=False, header_style="bold")
        for index, column in enumerate(columns):
            text = column in TEXT_COLUMNS or (index == len(columns) - 1 and len(columns) > 2)
            table.add_column(column, no_wrap=True, overflow="ellipsis", max_width=TEXT_WIDTH if text else None)
        for row in rows:
            table.add_row(*(Text(cell, style=style_of(cell)) for cell in row))
        self.console.print(table)


def style_of(cell: str) -> str:
    """The colour of a status cell (``ok``, ``skip``, ``FAIL``, ``ERROR``, ``DIFF``, or counts)."""
    if cell.startswith(("FAIL", "ERROR", "DIFF")) or re.match(r"^\d+ FAIL", cell):
        return "bold red"
    if cell.startswith("ok") or re.match(r"^\d+ ok", cell):
        return "yellow" if "skipped" in cell else "green"
    if cell.startswith("skip") or re.match(r"^\d+ skipped", cell):
        return "yellow"
    return ""


def count_cell(n_ok: int, n_failed: int, n_skipped: int) -> str:
    """A summary cell that names every kind of outcome, so a skip is never hidden
    in a total: ``"8 ok"``, ``"7 ok, 1 skipped"``, ``"1 FAIL, 6 ok, 1 skipped"``.

    Examples:
        >>> from di.cli.output import count_cell
        >>> count_cell(7, 0, 1), count_cell(8, 0, 0), count_cell(6, 1, 1), count_cell(0, 0, 0)
        ('7 ok, 1 skipped', '8 ok', '1 FAIL, 6 ok, 1 skipped', '-')
    """
    parts = [f"{n} {word}" for n, word in ((n_failed, "FAIL"), (n_ok, "ok"), (n_skipped, "skipped")) if n]
    return ", ".join(parts) if parts else "-"


class Progress:
    """A rich progress bar on stderr (shown on terminals only); a no-op without rich."""

    def __init__(self, total: int, description: str) -> None:
        self._progress: Any = None
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress
        except ImportError:  # pragma: no cover
            return
        console = Console(stderr=True)
        self._progress = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[current]}"),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self._task = self._progress.add_task(description, total=total, current="")

    def __enter__(self) -> Progress:
        if self._progress is not None:
            self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def advance(self, current: str = "", description: str | None = None) -> None:
        """Count one step done."""
        if self._progress is not None:
            fields: dict[str, Any] = {"current": current}
            if description is not None:
                fields["description"] = description
            self._progress.update(self._task, advance=1, **fields)


def seconds(value: float | None) -> str:
    """A duration for tables: ``"8.1 us"``, ``"2.35 ms"``, ``"1.20 s"``; ``"-"`` when unknown
    (the plan tables' format, :func:`di.fastest.plan.format_seconds`).

    Examples:
        >>> from di.cli.output import seconds
        >>> seconds(8.1e-6), seconds(None)
        ('8.1 us', '-')
    """
    return format_seconds(value)


def number(value: float | None) -> str:
    """An error for tables: ``"3.6e-15"``; ``"-"`` when unknown."""
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.1e}"


def short(text: str, width: int = 70) -> str:
    """``text`` on one line, cut to ``width`` characters with ``...``."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None or isinstance(value, float):
        return value
    return str(value)


def write_json(path: str, rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` as JSON (``nan`` and infinities as ``null``)."""
    Path(path).write_text(json.dumps(_jsonable(rows), indent=2) + "\n")
