"""Rows, tables, the machine description and the markdown report."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.timing import Settings, compare

__all__ = ["Row", "Table", "format_ns", "machine", "render_markdown", "render_text", "versions"]

ROOT = Path(__file__).resolve().parent.parent


def format_ns(ns: float | None) -> str:
    """``1234.5`` -> ``"1.23 us"``; ``None`` -> ``"-"``."""
    if ns is None:
        return "-"
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.3g} us" if ns < 1e5 else f"{ns / 1e3:.0f} us"
    if ns < 1e9:
        return f"{ns / 1e6:.3g} ms" if ns < 1e8 else f"{ns / 1e6:.0f} ms"
    return f"{ns / 1e9:.3g} s"


def format_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3f}"


@dataclass
class Row:
    """One per-call comparison: ``di`` against the native call on the same input.

    Attributes:
        backend: the selector, e.g. ``AutoJAX(jit=True)``.
        operator: ``gradient``, ``gradient, unprepared`` or ``value_and_gradient``.
        function: the benchmarked function.
        n: the size of ``x``.
        dtype: the dtype of ``x``.
        native_ns: median per-call time of the native call.
        di_ns: median per-call time through ``di``.
        ratio: ``di_ns / native_ns``.
        ratio_q1, ratio_q3: quartiles of the per-pair ratios (noise).
        block: calls per timed block.
        pairs: pairs of blocks timed.
        note: errors or caveats.
    """

    backend: str
    operator: str
    function: str
    n: int
    dtype: str = ""
    native_ns: float | None = None
    di_ns: float | None = None
    ratio: float | None = None
    ratio_q1: float | None = None
    ratio_q3: float | None = None
    block: int = 0
    pairs: int = 0
    note: str = ""

    def cells(self) -> list[str]:
        spread = "-" if self.ratio_q1 is None else f"{self.ratio_q1:.3f}-{self.ratio_q3:.3f}"
        return [
            self.backend,
            self.operator,
            self.function,
            f"{self.n:.0e}".replace("e+0", "e") if self.n >= 1000 else str(self.n),
            self.dtype,
            format_ns(self.native_ns),
            format_ns(self.di_ns),
            format_ratio(self.ratio),
            spread,
            f"{self.block}x{self.pairs}" if self.pairs else "-",
            self.note,
        ]


ROW_HEADERS = [
    "backend",
    "operator",
    "function",
    "n",
    "dtype",
    "native",
    "di",
    "ratio di/native",
    "pair ratios q1-q3",
    "block x pairs",
    "note",
]


def measured_row(
    backend: str,
    operator: str,
    function: str,
    n: int,
    dtype: str,
    native: Callable[[], object],
    through_di: Callable[[], object],
    settings: Settings,
    *,
    scope: Callable[[], AbstractContextManager[object]],
    check: Callable[[], str],
) -> Row:
    """The row of one comparison: inside ``scope()``, ``check()`` once (its message
    is the row's note), then ``native`` timed against ``through_di``; a failure
    becomes the note."""
    try:
        with scope():
            note = check()
            timing = compare(native, through_di, settings)
    except Exception as err:
        return Row(backend, operator, function, n, dtype, note=f"failed: {err!r}"[:200])
    return Row(
        backend,
        operator,
        function,
        n,
        dtype,
        timing.a_ns,
        timing.b_ns,
        timing.ratio,
        timing.ratio_q1,
        timing.ratio_q3,
        timing.block,
        timing.pairs,
        note,
    )


@dataclass
class Table:
    """A titled table of the report."""

    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    intro: str = ""


def machine() -> dict[str, str]:
    """CPU model, cores, OS, and the git commit measured."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "OS": f"{platform.system()} {platform.release()}",
    }
    try:
        import torch

        info["torch intra-op threads"] = f"{torch.get_num_threads()} (set by --threads; JAX/XLA keeps its default)"
    except ImportError:
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "di"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        info["di commit"] = commit + (" (di/ modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    info["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return info


def versions() -> dict[str, str]:
    """Versions of python and the engines."""
    found = {"python": platform.python_version()}
    for name in ("differentiation-interface", "numpy", "jax", "jaxlib", "torch", "autograd", "array-api-compat"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def about_line() -> str:
    """The machine and the versions on one line, for a report's header."""
    return ", ".join(f"{key}: {value}" for key, value in {**machine(), **versions()}.items())


def _markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def render_markdown(
    command: str, info: dict[str, str], found: dict[str, str], summary: list[str], tables: list[Table]
) -> str:
    """The whole report as markdown."""
    lines = [
        "# di benchmark results",
        "",
        f"Generated by `{command}` (see `bench/run.py`); do not edit by hand.",
        "",
        "Each row times the same work on the same input, native engine call against `di`, in one process,",
        "interleaved (native block, di block, di block, native block, ...). A block is `k` back-to-back calls",
        "timed with `time.perf_counter_ns` (blocks of about 0.25 ms, or one call when a call is slower); the",
        "times are medians of the per-call block times, the ratio is the median of the per-pair ratios",
        "`di / native` (each pair's blocks run back to back, so the paired ratio survives drifting machine",
        "load best) and `pair ratios q1-q3` their quartiles, a noise estimate. `block x pairs` is calls per",
        "block times pairs of blocks.",
        "JAX results are waited for with `block_until_ready()` on both sides. Inputs are in each engine's own",
        "family (jax arrays for AutoJAX, torch tensors for AutoTorch, numpy for autograd and finite",
        "differences), so neither side converts.",
        "",
        "## Machine",
        "",
    ]
    lines += [f"- {key}: {value}" for key, value in info.items()]
    lines += ["", "## Versions", ""]
    lines += [f"- {key}: {value}" for key, value in found.items()]
    lines += ["", "## Targets", ""]
    lines += summary
    for table in tables:
        lines += ["", f"## {table.title}", ""]
        if table.intro:
            lines += [table.intro, ""]
        lines += _markdown_table(table.headers, table.rows)
    return "\n".join(lines) + "\n"


def render_text(table: Table) -> str:
    """A table as aligned plain text, for the terminal."""
    widths = [len(h) for h in table.headers]
    for row in table.rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    out = [f"== {table.title} =="]
    out.append("  ".join(h.ljust(w) for h, w in zip(table.headers, widths)).rstrip())
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table.rows]
    return "\n".join(out)


def render_backend_dtype_rows(
    rows: list[dict[str, Any]], columns: tuple[str, str, str] = ("native", "di", "di / native")
) -> str:
    """A markdown table of timed rows, each a dict with ``backend``, ``dtype``, ``n``
    and the ``timing`` of :func:`bench.timing.compare` (``columns``: the headers of
    the first timing, the second, and their ratio)."""
    first, second, ratio = columns
    lines = [
        f"| backend | dtype | n | {first} | {second} | {ratio} (q1-q3) |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        t = row["timing"]
        lines.append(
            f"| `{row['backend']}` | {row['dtype']} | {row['n']:g} | {format_ns(t.a_ns)} | {format_ns(t.b_ns)} | "
            f"{format_ratio(t.ratio)} ({format_ratio(t.ratio_q1)}-{format_ratio(t.ratio_q3)}) |"
        )
    return "\n".join(lines)
