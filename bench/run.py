"""Benchmark ``di`` against the native engine calls: ``python -m bench`` or
``python bench/run.py``.

For every backend, function and size, the prepared ``di.gradient``, the
unprepared ``di.gradient`` and the prepared ``di.value_and_gradient`` are timed
against the native engine call doing the same work on the same input, interleaved
in one process (see :mod:`bench.timing`). Beside them: ``di``'s own per-call cost
(a zero backend), the strict signature check alone, ``import di``, preparation
times, conversions between array families at n = 1e6 and, in full mode,
``AutoTorch(compile=True)`` against native ``torch.compile``. Everything is
printed and written to ``bench/results.md``.

Options:
    --quick            fewer sizes and repeats (under two minutes)
    --sizes 10,1e3     sizes of x (default 10,1e3,1e5,1e6; quick 10,1e3,1e5)
    --output PATH      the markdown report (default bench/results.md)
    --backends ...     subset of jax-jit,jax,torch,autograd,finitediff
    --functions ...    subset of sum_of_squares,rosenbrock
    --repeats N        exactly N pairs of blocks per row (smoke tests)
    --threads N        torch intra-op threads (default 1; 0 keeps torch's default)
    --compile / --no-compile   the torch.compile section (default: full mode only)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench.cases import ENGINES, GRADIENT, OPERATORS, to_numpy
from bench.functions import FUNCTIONS
from bench.report import ROW_HEADERS, Row, Table, format_ns, machine, render_markdown, render_text, versions
from bench.timing import Settings, compare

__all__ = ["main", "parse_args", "run"]

DEFAULT_SIZES = (10, 1_000, 100_000, 1_000_000)
QUICK_SIZES = (10, 1_000, 100_000)
FAMILIES = ("numpy", "torch", "jax")


def _sizes(text: str) -> list[int]:
    sizes = [int(float(part)) for part in text.split(",") if part.strip()]
    if not sizes or any(n < 2 or n % 2 for n in sizes):
        raise argparse.ArgumentTypeError("sizes must be even integers >= 2 (the Rosenbrock function pairs entries)")
    return sizes


def _subset(known: list[str]) -> object:
    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown: {', '.join(unknown)}; choose from {', '.join(known)}")
        return names

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats: under two minutes")
    parser.add_argument("--sizes", type=_sizes, help="comma-separated sizes of x, e.g. 10,1e3,1e5")
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parent / "results.md")
    parser.add_argument("--backends", type=_subset(list(ENGINES)), default=list(ENGINES))
    parser.add_argument("--functions", type=_subset(list(FUNCTIONS)), default=list(FUNCTIONS))
    parser.add_argument("--repeats", type=int, help="exactly this many pairs of blocks per row (smoke tests)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: stable on a shared machine; 0 keeps torch's default)",
    )
    parser.add_argument("--compile", dest="compile", action="store_true", default=None, help="time torch.compile")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.compile is None:
        args.compile = not args.quick and args.repeats is None
    args.missing = [key for key in args.backends if not ENGINES[key].installed]
    args.backends = [key for key in args.backends if ENGINES[key].installed]
    return args


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _settings(args: argparse.Namespace) -> tuple[Settings, Settings, Settings]:
    """(prepared gradient rows, other rows, side measurements)."""
    if args.repeats is not None:
        exact = Settings(block_ns=2e5, budget_s=0.0, min_pairs=args.repeats, max_pairs=args.repeats)
        return exact, exact, exact
    if args.quick:
        return (
            Settings(block_ns=2.5e5, budget_s=1.0, min_pairs=5, max_pairs=801),
            Settings(block_ns=2.5e5, budget_s=0.4, min_pairs=3, max_pairs=401),
            Settings(block_ns=2.5e5, budget_s=0.5, min_pairs=5, max_pairs=401),
        )
    return (
        Settings(block_ns=2.5e5, budget_s=4.0, min_pairs=9, max_pairs=2001),
        Settings(block_ns=2.5e5, budget_s=1.2, min_pairs=5, max_pairs=601),
        Settings(block_ns=2.5e5, budget_s=1.0, min_pairs=9, max_pairs=1001),
    )


def _check(case_results: tuple[object, object] | None) -> str:
    """Compare the native and the di gradient once; a caveat if they differ."""
    if case_results is None:
        return ""
    native, through_di = case_results
    expected, got = to_numpy(native()), to_numpy(through_di())
    scale = max(1.0, float(np.max(np.abs(expected))))
    error = float(np.max(np.abs(expected - got))) / scale
    return "" if error < 1e-3 else f"GRADIENTS DIFFER (max rel. error {error:.2g})"


def per_call_rows(args: argparse.Namespace, emit: object) -> list[Row]:
    """Every backend x function x size x operator."""
    prepared, other, _ = _settings(args)
    rows: list[Row] = []
    for key in args.backends:
        engine = ENGINES[key]
        for name in args.functions:
            f = FUNCTIONS[name]
            for n in args.sizes:
                if engine.max_n is not None and n > engine.max_n:
                    continue
                x_np = np.random.default_rng(n).uniform(-1.0, 1.0, n)
                try:
                    case = engine.build(f, x_np)
                    note = _check(case.results)
                except Exception as err:
                    row = Row(engine.label, GRADIENT, name, n, note=f"failed: {err!r}"[:200])
                    rows.append(row)
                    emit(row)  # type: ignore[operator]
                    continue
                for operator in OPERATORS:
                    native, through_di = case.pairs[operator]
                    settings = prepared if operator == GRADIENT else other
                    try:
                        timing = compare(native, through_di, settings)
                    except Exception as err:
                        row = Row(engine.label, operator, name, n, case.dtype, note=f"failed: {err!r}"[:200])
                    else:
                        row = Row(
                            engine.label,
                            operator,
                            name,
                            n,
                            case.dtype,
                            timing.a_ns,
                            timing.b_ns,
                            timing.ratio,
                            timing.ratio_q1,
                            timing.ratio_q3,
                            timing.block,
                            timing.pairs,
                            note,
                        )
                    rows.append(row)
                    emit(row)  # type: ignore[operator]
    return rows


def breakdown_table(args: argparse.Namespace, settings: Settings) -> Table:
    """Where a prepared ``di.gradient``'s extra time goes, per backend, at the
    smallest size: the adapter's program alone, the facade without the strict
    check, and the full call, each timed against the native call."""
    n = min(args.sizes)
    name = args.functions[0]
    table = Table(
        f"Where di's time goes: prepared gradient, {name}, n = {n}",
        [
            "backend",
            "native",
            "adapter program alone",
            "di.gradient, strict=False",
            "di.gradient (strict)",
            "adapter adds",
            "facade adds",
            "strict check adds",
        ],
        intro=(
            "Each of the three `di` layers is timed against the native call, interleaved: the adapter's program "
            "alone (`prep.programs['gradient'](x)`, an internal), `di.gradient` through a `strict=False` prep (the "
            "facade: argument parsing, dispatch, no signature check) and the full strict call. 'adds' columns "
            "are built from the median per-pair differences (each layer minus the native call it was paired with): "
            "adapter = program - native, facade = non-strict - program, check = strict - non-strict. Differences "
            "below ~100 ns are within noise."
        ),
    )
    for key in args.backends:
        engine = ENGINES[key]
        if engine.max_n is not None and n > engine.max_n:
            continue
        try:
            case = engine.build(FUNCTIONS[name], np.random.default_rng(n).uniform(-1.0, 1.0, n))
        except Exception as err:
            table.rows.append([engine.label, f"failed: {err!r}"[:200], "", "", "", "", "", ""])
            continue
        native, strict = case.pairs[GRADIENT]
        layers = [*case.breakdown.values(), strict]
        try:
            timings = [compare(native, layer, settings) for layer in layers]
        except Exception as err:
            table.rows.append([engine.label, f"failed: {err!r}"[:200], "", "", "", "", "", ""])
            continue
        # Each layer's cost over the native call, net of that comparison's native median.
        over = [t.diff_ns for t in timings]
        table.rows.append(
            [
                engine.label,
                format_ns(statistics.median(t.a_ns for t in timings)),
                *[f"{format_ns(t.b_ns)} ({t.ratio:.3f})" for t in timings],
                _signed(over[0]),
                _signed(over[1] - over[0]),
                _signed(over[2] - over[1]),
            ]
        )
    return table


def _signed(ns: float) -> str:
    return ("-" if ns < 0 else "+") + format_ns(abs(ns))


def _worst(rows: list[Row], backends: set[str], sizes: object) -> Row | None:
    chosen = [
        r
        for r in rows
        if r.operator == GRADIENT and r.backend in backends and r.ratio is not None and sizes(r.n)  # type: ignore[operator]
    ]
    return max(chosen, key=lambda r: r.ratio or 0.0, default=None)


def summary_lines(rows: list[Row], imports: dict[str, object] | None, checks: dict[str, float]) -> list[str]:
    """PASS / MISS against issue 7's targets, with the worst row of each."""
    lines: list[str] = []

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("PASS" if ok else "MISS")

    def ratio_target(text: str, backends: set[str], sizes: object, limit: float) -> None:
        worst = _worst(rows, backends, sizes)
        if worst is None:
            lines.append(f"- n/a: {text} (not measured)")
            return
        lines.append(
            f"- {verdict(worst.ratio is not None and worst.ratio <= limit)}: {text} <= {limit}; worst "
            f"{worst.ratio:.3f} ({worst.backend}, {worst.function}, n = {worst.n}, native "
            f"{format_ns(worst.native_ns)}, di {format_ns(worst.di_ns)})"
        )

    ratio_target("prepared gradient, AutoJAX(jit=True), n = 10", {"AutoJAX(jit=True)"}, lambda n: n == 10, 1.15)
    ratio_target(
        "prepared gradient, AutoTorch() and AutoAutograd(), n = 10",
        {"AutoTorch()", "AutoAutograd()"},
        lambda n: n == 10,
        1.05,
    )
    ratio_target(
        "prepared gradient, every backend, n >= 1e5",
        {engine.label for engine in ENGINES.values()},
        lambda n: n >= 100_000,
        1.02,
    )
    if imports is not None:
        cold = float(imports["cold_ns"])  # type: ignore[arg-type]
        engines = imports["engines"]
        lines.append(
            f"- {verdict(cold < 50e6)}: `import di` under 50 ms; measured {format_ns(cold)} cold, of which "
            f"numpy alone takes {format_ns(float(imports['numpy_ns']))}; di's own modules "  # type: ignore[arg-type]
            f"{format_ns(float(imports['own_ns']))} (numpy already imported)"  # type: ignore[arg-type]
        )
        lines.append(f"- {verdict(not engines)}: no engine module after `import di`; found: {engines or 'none'}")
    if checks:
        worst_family = max(checks, key=checks.__getitem__)
        lines.append(
            f"- {verdict(checks[worst_family] < 1000)}: strict signature check under 1 us (array x, two "
            f"contexts); worst {format_ns(checks[worst_family])} ({worst_family} x)"
        )
    return lines


def guarded(title: str, section: Callable[[], tuple[Table, Any]], default: Any) -> tuple[Table, Any]:
    """Run one section; if it raises, a table saying so takes its place (the
    rest of the suite still runs)."""
    try:
        return section()
    except Exception as err:
        detail = "".join(traceback.format_exception_only(type(err), err)).strip().replace("\n", " ")
        print(f"section {title!r} failed: {detail}", file=sys.stderr, flush=True)
        return Table(title, ["error"], [[f"this section failed: {detail}"[:500]]]), default


def run(args: argparse.Namespace) -> tuple[list[Row], str]:
    """Run everything; return the per-call rows and the markdown report."""
    from bench import extras
    from bench.operators import operators_table

    if args.threads > 0 and _installed("torch"):
        # With torch's default (one thread per core), a parallel region on a machine
        # whose other cores are busy waits for a descheduled thread: calls that take
        # 70 us take 40 ms one time in ten. One thread keeps both sides comparable.
        import torch

        torch.set_num_threads(args.threads)

    started = time.perf_counter()
    load_start = _load()
    prepared, _, side = _settings(args)
    smoke = args.repeats is not None
    tables: list[Table] = []

    def show(table: Table) -> None:
        print(render_text(table), flush=True)
        print(f"({time.perf_counter() - started:.0f} s elapsed)\n", flush=True)

    import_repeats = 1 if smoke else (3 if args.quick else 7)
    import_table, imports = guarded("import di", lambda: extras.import_table(import_repeats), None)
    show(import_table)

    families = [family for family in FAMILIES if family == "numpy" or _installed(family)]
    if args.missing:
        print(f"not installed, skipped: {', '.join(args.missing)}", flush=True)
    zero_table, _ = guarded("Zero backend", lambda: extras.zero_backend_table(side, families), {})
    show(zero_table)
    check_table, checks = guarded(
        "Strict signature check alone", lambda: extras.signature_check_table(side.scaled(3.0), families), {}
    )
    show(check_table)

    print("== Per call: di against the native call ==", flush=True)
    print("  ".join(ROW_HEADERS), flush=True)
    rows = per_call_rows(args, lambda row: print("  ".join(row.cells()), flush=True))
    print(flush=True)
    main_table = Table(
        "Per call: di against the native call",
        ROW_HEADERS,
        [row.cells() for row in rows],
        intro=(
            "`gradient` is the prepared `di.gradient(f, prep, backend, x)` (strict prep), "
            "`value_and_gradient` the prepared `di.value_and_gradient` against the native call returning both, "
            "and `gradient, unprepared` is `di.gradient(f, backend, x)`, which prepares on every call, against the "
            "same native call as `gradient` (so its ratio is the price of not preparing; on AutoJAX(jit=True) "
            "that is a compilation per call). Native calls: "
            + "; ".join(f"{engine.label}: `{engine.native}`" for engine in ENGINES.values())
            + ". jax and torch inputs are float32, numpy inputs float64."
        ),
    )

    breakdown, _ = guarded("Where di's time goes", lambda: (breakdown_table(args, prepared), None), None)
    show(breakdown)

    prep_sizes = [n for n in args.sizes if n <= 1000] or args.sizes[:1]
    first_function = args.functions[0]
    prep_table, _ = guarded(
        "Preparation: di.prepare_gradient",
        lambda: (
            extras.preparation_table(
                FUNCTIONS[first_function],
                first_function,
                prep_sizes,
                1 if smoke else (3 if args.quick else 7),
                args.backends,
                {key: engine.label for key, engine in ENGINES.items()},
            ),
            None,
        ),
        None,
    )
    show(prep_table)
    conversion_n = 10 if smoke else 1_000_000
    if _installed("jax") and _installed("torch"):
        conversion_table, _ = guarded(
            "Conversions between families", lambda: (extras.conversion_table(side, conversion_n), None), None
        )
        show(conversion_table)
    else:
        conversion_table = Table("Conversions between families", ["note"], [["not run: needs jax and torch"]])

    operator_n = 1000
    operator_table, _ = guarded(
        "Prepared hvp, jacobian, pushforward, pullback",
        lambda: (operators_table(side, operator_n, set(args.backends)), None),
        None,
    )
    show(operator_table)

    compile_table = None
    if args.compile and _installed("torch"):
        compile_table, _ = guarded(
            "AutoTorch(compile=True) against native torch.compile",
            lambda: extras.torch_compile_table(
                {name: FUNCTIONS[name] for name in args.functions}, args.sizes, prepared
            ),
            None,
        )
        show(compile_table)
    else:
        compile_table = Table(
            "AutoTorch(compile=True) against native torch.compile",
            ["note"],
            [["not run (quick mode, --no-compile or torch missing): a first torch.compile takes ~20 s here"]],
        )

    tables = [
        main_table,
        breakdown,
        operator_table,
        zero_table,
        check_table,
        import_table,
        prep_table,
        conversion_table,
        compile_table,
    ]
    summary = summary_lines(rows, imports, checks)
    summary.append(f"- suite wall time: {time.perf_counter() - started:.0f} s")
    info = machine()
    info["load average (1 min) at start / end"] = f"{load_start} / {_load()} (other processes share these cores)"
    command = "python -m bench " + " ".join(sys.argv[1:]) if sys.argv[1:] else "python -m bench"
    print("== Targets ==")
    print("\n".join(summary), flush=True)
    return rows, render_markdown(command.strip(), info, versions(), summary, tables)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _, markdown = run(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown)
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
