"""Merge the per-call tables of several benchmark reports into one table of ratio
ranges: ``python -m bench.ranges results1.md results2.md ...``.

On a shared machine one run's ratio moves with the neighbours' load; the range of
the medians over repeated runs (min-max) says how far to trust each cell. Prints
a markdown table: one line per backend and operator, one column per dtype and
size, each cell ``min-max`` of that row's median ratio over the runs (one value
when only one run measured it).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python bench/ranges.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import ROW_HEADERS

__all__ = ["main", "ratio_ranges", "read_rows"]

Key = tuple[str, str]
Column = tuple[str, int]


def read_rows(markdown: str) -> list[dict[str, str]]:
    """The rows of the per-call table of one report, as dicts keyed by header."""
    rows: list[dict[str, str]] = []
    inside = False
    for line in markdown.splitlines():
        if line.startswith("## "):
            inside = line.startswith("## Per call")
            continue
        if inside and line.startswith("| ") and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
            if cells != ROW_HEADERS and len(cells) == len(ROW_HEADERS):
                rows.append(dict(zip(ROW_HEADERS, cells)))
    return rows


def _size(text: str) -> int:
    return int(float(text))


def ratio_ranges(reports: list[str]) -> tuple[list[Column], dict[Key, dict[Column, list[float]]]]:
    """Every (backend, operator) -> (dtype, n) -> the median ratios of the runs."""
    found: dict[Key, dict[Column, list[float]]] = defaultdict(lambda: defaultdict(list))
    columns: set[Column] = set()
    for markdown in reports:
        for row in read_rows(markdown):
            try:
                ratio = float(row["ratio di/native"])
            except ValueError:
                continue
            column = (row["dtype"], _size(row["n"]))
            columns.add(column)
            found[(row["backend"], row["operator"])][column].append(ratio)
    return sorted(columns), found


def render(columns: list[Column], found: dict[Key, dict[Column, list[float]]]) -> str:
    """The markdown table of ranges."""

    def label(column: Column) -> str:
        dtype, n = column
        return f"{dtype} n={n:.0e}".replace("e+0", "e") if n >= 1000 else f"{dtype} n={n}"

    def cell(values: list[float]) -> str:
        if not values:
            return "-"
        low, high = min(values), max(values)
        return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"

    lines = [
        "| backend | operator | " + " | ".join(label(c) for c in columns) + " |",
        "|" + "---|" * (len(columns) + 2),
    ]
    for (backend, operator), cells in found.items():
        lines.append(f"| {backend} | {operator} | " + " | ".join(cell(cells.get(c, [])) for c in columns) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    columns, found = ratio_ranges([Path(path).read_text() for path in paths])
    print(render(columns, found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
