"""The fastest native spelling: every prepared operator against each native
spelling an expert of its engine writes (``python -m bench.spellings``; also part
of ``python -m bench``).

An operator has several native spellings on most engines (torch's hvp: double
backward, ``torch.func.jvp`` of ``torch.func.grad``, ``torch.func.vjp`` of it;
JAX's hessian: ``jax.hessian``, ``jacfwd(jacrev)``, ``jacrev(jacrev)``; ...), listed
per engine in :mod:`bench.cases` (``Case.spellings``; an engine that lists none
has its per-call native alone). Each spelling is timed against the prepared
``di`` call, interleaved (:mod:`bench.timing`), and the row names the fastest
(the smallest median time) with ``di``'s paired ratio to it. float32, the
Rosenbrock function (``f``) and the coupled cubic (``g``).

Options:
    --sizes 32,1000    sizes of x (default 32,1000)
    --backends ...     subset of the engines (default: every installed one but torch-compile)
    --operators ...    subset of the operators (default: all, hessian included)
    --quick            shorter budgets
    --output PATH      the markdown report (default bench/spellings_results.md)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python bench/spellings.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench.cases import ENGINES, HESSIAN, MAX_N, SPELLED_OPERATORS, Engine, to_numpy
from bench.functions import FUNCTIONS, VECTOR_FUNCTIONS
from bench.report import Table, format_ns, machine, render_markdown, render_text, versions
from bench.timing import Settings, compare

__all__ = [
    "HESSIAN",
    "LIMIT",
    "SIZES",
    "SKIPPED",
    "SPELLED_OPERATORS",
    "main",
    "print_row",
    "spelling_rows",
    "spelling_table",
    "target_line",
]

SIZES = (32, 1_000)
LIMIT = 1.2
"""The target: every prepared operator within this ratio of the fastest native spelling."""
SKIPPED = ("torch-compile",)
"""Engines left out by default: a compile per spelling, operator and size (minutes each)."""
HEADERS = ["backend", "operator", "n", "fastest native spelling", "native", "di", "di / fastest", "every spelling"]


def _operators(engine: Engine, n: int, wanted: list[str]) -> list[str]:
    offered = set(engine.operators) | set(engine.spelled)
    return [op for op in SPELLED_OPERATORS if op in offered and op in wanted and n <= MAX_N.get(op, n)]


def _differs(native: Any, through_di: Any) -> str:
    expected, got = to_numpy(native()), to_numpy(through_di())
    if expected.shape != got.shape:
        return f"RESULTS DIFFER (shapes {expected.shape} and {got.shape})"
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    error = float(np.max(np.abs(expected - got))) / scale if expected.size else 0.0
    return "" if error < 1e-3 else f"RESULTS DIFFER (max rel. error {error:.2g})"


def spelling_rows(
    backends: list[str], sizes: list[int], operators: list[str], settings: Settings, emit: Any = print
) -> list[dict[str, Any]]:
    """One row per engine, operator and size: each spelling timed against ``di``
    (the fastest, the smallest median, is named by :func:`spelling_table`)."""
    rows: list[dict[str, Any]] = []
    f, g = FUNCTIONS["rosenbrock"], VECTOR_FUNCTIONS["coupled_cubic"]
    for key in backends:
        engine = ENGINES[key]
        if not engine.installed:
            continue
        for n in sizes:
            if engine.max_n is not None and n > engine.max_n:
                continue
            chosen = _operators(engine, n, operators)
            if not chosen:
                continue
            x_np = np.random.default_rng(n).uniform(-1.0, 1.0, n)
            try:
                case = engine.build(f, g, x_np, "float32", chosen)
            except Exception as err:
                note = f"failed: {err!r}"[:200]
                failed = {"backend": engine.label, "operator": ", ".join(chosen), "n": n, "note": note}
                rows.append(failed)
                emit(failed)
                continue
            for operator in chosen:
                if operator not in case.pairs:
                    continue
                native, through_di = case.pairs[operator]
                spelled = case.spellings.get(operator) or {engine.natives.get(operator, "native"): native}
                timings: dict[str, Any] = {}
                notes = ""
                try:
                    with case.scope():
                        for label, spelling in spelled.items():
                            note = _differs(spelling, through_di)
                            if note:
                                notes += f"{label}: {note}; "
                            timings[label] = compare(spelling, through_di, settings)
                except Exception as err:
                    notes += f"failed: {err!r}"[:200]
                row = {"backend": engine.label, "operator": operator, "n": n, "timings": timings, "note": notes}
                rows.append(row)
                emit(row)
    return rows


def _fastest(row: dict[str, Any]) -> tuple[str, Any] | None:
    timings = row.get("timings") or {}
    if not timings:
        return None
    label = min(timings, key=lambda name: timings[name].a_ns)  # (each spelling's median, in its own pairs)
    return label, timings[label]


def _cells(row: dict[str, Any]) -> list[str]:
    n = row["n"]
    size = f"{n:.0e}".replace("e+0", "e") if n >= 1000 else str(n)
    fastest = _fastest(row)
    if fastest is None:
        return [row["backend"], row["operator"], size, "-", "-", "-", "-", row.get("note", "")]
    label, timing = fastest
    others = "; ".join(
        f"{name}: {format_ns(t.a_ns)} ({t.ratio:.2f})" for name, t in row["timings"].items() if name != label
    )
    note = f" {row['note']}" if row.get("note") else ""
    return [
        row["backend"],
        row["operator"],
        size,
        f"`{label}`",
        format_ns(timing.a_ns),
        format_ns(timing.b_ns),
        f"{timing.ratio:.3f} ({timing.ratio_q1:.2f}-{timing.ratio_q3:.2f})",
        (others or "-") + note,
    ]


def spelling_table(rows: list[dict[str, Any]]) -> Table:
    """The rows as a report table."""
    return Table(
        "Fastest native spelling",
        HEADERS,
        [_cells(row) for row in rows],
        intro=(
            "Each prepared di call (strict prep, float32, the engine's own array family) against every native "
            "spelling an expert of the engine writes for the operator (bench/cases.py lists them), interleaved; "
            "'fastest' is the spelling of the smallest median time, 'di / fastest' the median of di's paired "
            "ratios to it (quartiles in parentheses), 'every spelling' the others' times and di's ratio to each. "
            f"Scalar operators on the Rosenbrock function, the others on the coupled cubic. Target: within {LIMIT}."
        ),
    )


def target_line(rows: list[dict[str, Any]]) -> str:
    """PASS / MISS: every prepared operator within :data:`LIMIT` of its fastest spelling,
    naming the engines :data:`SKIPPED` leaves out when no row of theirs was measured."""
    measured = [(row, fastest) for row in rows if (fastest := _fastest(row)) is not None]
    if not measured:
        return "- n/a: every prepared operator within 1.2 of the fastest native spelling (not measured)"
    misses = [(row, t) for row, (_, t) in measured if t.ratio > LIMIT]
    worst_row, (worst_label, worst) = max(measured, key=lambda item: item[1][1].ratio)
    verdict = "PASS" if not misses else "MISS"
    text = (
        f"- {verdict}: every prepared operator, every engine measured, within {LIMIT} of the fastest native "
        f"spelling at n = {', '.join(str(n) for n in sorted({row['n'] for row, _ in measured}))}; "
        f"worst {worst.ratio:.3f} ({worst_row['backend']} {worst_row['operator']}, n = {worst_row['n']}, "
        f"against `{worst_label}`)"
    )
    if misses:
        text += "; over: " + ", ".join(f"{r['backend']} {r['operator']} n={r['n']}: {t.ratio:.3f}" for r, t in misses)
    measured_labels = {row["backend"] for row, _ in measured}
    left_out = [ENGINES[key].label for key in SKIPPED if key in ENGINES and ENGINES[key].label not in measured_labels]
    if left_out:
        # (the line speaks of every engine: one left out by default is named, not silently passed)
        text += (
            f"; not measured here: {', '.join(left_out)} (a compile per spelling, operator and size; "
            "`--backends` takes it, and `python -m bench`'s per-call table times it against the same spellings)"
        )
    return text


def print_row(row: dict[str, Any]) -> None:
    """One row, as the run goes."""
    print("  ".join(_cells(row)) if "timings" in row else f"{row['backend']} {row['operator']}: {row['note']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spellings", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
    parser.add_argument("--backends", default=",".join(key for key in ENGINES if key not in SKIPPED))
    parser.add_argument("--operators", default=",".join(SPELLED_OPERATORS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, help="exactly this many pairs of blocks per timing (smoke tests)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0 keeps torch's default)")
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parent / "spellings_results.md")
    args = parser.parse_args(argv)
    backends = [key.strip() for key in args.backends.split(",") if key.strip()]
    unknown = [key for key in backends if key not in ENGINES]
    if unknown:
        parser.error(f"unknown backends: {', '.join(unknown)}")
    sizes = [int(float(part)) for part in args.sizes.split(",") if part.strip()]
    operators = [part.strip() for part in args.operators.split(",") if part.strip()]
    if args.threads > 0 and ENGINES["torch"].installed:
        import torch

        torch.set_num_threads(args.threads)
    settings = Settings(block_ns=2.5e5, budget_s=0.3 if args.quick else 0.8, min_pairs=5, max_pairs=401)
    if args.repeats is not None:
        settings = Settings(block_ns=2e5, budget_s=0.0, min_pairs=args.repeats, max_pairs=args.repeats)
    load = os.getloadavg()[0]
    rows = spelling_rows(backends, sizes, operators, settings, print_row)
    table = spelling_table(rows)
    print(render_text(table))
    summary = [target_line(rows)]
    print("\n".join(summary))
    info = machine()
    info["load average (1 min) at start / end"] = f"{load:.2f} / {os.getloadavg()[0]:.2f}"
    command = "python -m bench.spellings " + " ".join(sys.argv[1:] if argv is None else argv)
    args.output.write_text(render_markdown(command.strip(), info, versions(), summary, [table]))
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
