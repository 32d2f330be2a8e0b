"""``--plot FILE.png --sizes ...``: median time per prepared call against the size
of ``x``, one line per backend, log-log (needs matplotlib)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from di.cli.common import UsageError
from di.cli.output import Output, Progress, seconds

__all__ = ["MATRIX_OPERATORS", "MAX_MATRIX_SIZE", "PLOT_DPI", "PLOT_SIZE_INCHES", "sweep"]

PLOT_SIZE_INCHES = (8.0, 5.0)
PLOT_DPI = 100
MATRIX_OPERATORS = ("jacobian", "hessian")
MAX_MATRIX_SIZE = 4096
"""Jacobians and Hessians are not timed beyond this size of ``x`` (their results grow as its square)."""


def sweep(
    out: Output,
    make_scenario: Callable[[int], Any],
    title: str,
    operator: str,
    backends: list[Any],
    sizes: list[int],
    dtype: str,
    plot_path: str,
    budget: float = 2.0,
) -> list[dict[str, Any]]:
    """Time prepared calls at each size, skipping sizes a backend would take too
    long on; print the table, draw the plot and return the rows.

    Args:
        out: where to print.
        make_scenario: the scenario at a size of ``x``.
        title: what the plot shows (the function's name).
        operator: the operator timed.
        backends: the selectors.
        sizes: the sizes of ``x``, increasing.
        dtype: the dtype of ``x``, for the titles.
        plot_path: the PNG file to write.
        budget: seconds per call past which a backend stops at larger sizes.

    Raises:
        UsageError: matplotlib is missing, or the operator needs a scalar ``x``.
    """
    from di.testing import backend_label

    try:
        import matplotlib
    except ImportError as err:
        raise UsageError("--plot needs matplotlib: pip install 'differentiation-interface[cli]'") from err
    if operator in ("derivative", "second_derivative"):
        raise UsageError(f"--plot sweeps the size of x, which {operator} needs to be a scalar")
    rows = _time_sizes(make_scenario, operator, backends, sizes, budget)
    labels = [backend_label(b) for b in backends]
    out.table(
        f"Median time per prepared {operator} call against input size ({dtype})",
        ["backend", *(str(s) for s in sizes)],
        [
            [
                label,
                *(seconds(r["time_median"]) if r["status"] == "ok" else "skip" for r in rows if r["backend"] == label),
            ]
            for label in labels
        ],
    )
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=PLOT_SIZE_INCHES, dpi=PLOT_DPI)
    for label in labels:
        points = [(r["size"], r["time_median"]) for r in rows if r["backend"] == label and r["status"] == "ok"]
        if points:
            axes.plot(*zip(*points), marker="o", label=label)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("input size n")
    axes.set_ylabel("median time per prepared call (s)")
    axes.set_title(f"{title}: {operator} ({dtype})")
    axes.grid(True, which="both", alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend()
    figure.savefig(plot_path, dpi=PLOT_DPI)
    plt.close(figure)
    out.line(f"plot written to {plot_path}")
    return rows


def _time_sizes(
    make_scenario: Callable[[int], Any], operator: str, backends: list[Any], sizes: list[int], budget: float
) -> list[dict[str, Any]]:
    from di.testing import backend_label

    rows: list[dict[str, Any]] = []
    stopped: dict[str, str] = {}  # backends that sit out the larger sizes, and why
    last: dict[str, tuple[int, float]] = {}  # each backend's last size timed, and its median
    with Progress(len(sizes) * len(backends), "timing sizes") as progress:
        for size in sizes:
            for backend in backends:
                label = backend_label(backend)
                if operator in MATRIX_OPERATORS and size > MAX_MATRIX_SIZE:
                    stopped.setdefault(label, f"{operator} of size {size} is too large")
                if label not in stopped and label in last:
                    prev_size, prev_time = last[label]
                    if prev_time * (size / prev_size) > budget:
                        stopped[label] = f"predicted over {budget:g} s per call"
                row: dict[str, Any] = {"kind": "sweep", "backend": label, "operator": operator, "size": size}
                if label in stopped:
                    row.update(status="skipped", error=stopped[label], time_median=math.nan)
                else:
                    row.update(_time_one(backend, make_scenario(size)))
                    first_call = row["time_median"] + row.pop("compile_time")
                    if row["status"] != "ok":
                        stopped[label] = row["error"] or row["status"]
                    else:
                        last[label] = (size, row["time_median"])
                        if first_call > budget:
                            stopped[label] = f"over {budget:g} s per call"
                rows.append(row)
                progress.advance(f"{label} n={size}")
    return rows


def _time_one(backend: Any, scenario: Any) -> dict[str, Any]:
    from di.testing import benchmark_differentiation

    result = benchmark_differentiation(backend, [scenario], prepared=(True,), min_time=0.05, max_samples=50)[0]
    return {k: result[k] for k in ("status", "error", "time_median", "time_min", "calls", "compile_time")}
