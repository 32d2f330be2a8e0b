"""Benchmark ``di`` against the native engine calls: ``python -m bench`` or
``python bench/run.py``.

For every backend, operator, dtype (float32, float64) and size, the prepared
``di`` call is timed against the native call a user of that engine writes for that
operator (``jit(grad)`` for ``gradient``, ``jit(value_and_grad)`` for
``value_and_gradient``, ``jacfwd``, ``jvp``, ``vjp``, ``jvp`` of ``grad`` for the
hvp; ``torch.autograd.grad`` and ``torch.func`` for torch; autograd's own
``grad``, ``make_jvp``...), on the same input, interleaved in one process (see
:mod:`bench.timing`). The unprepared ``di.gradient`` is timed against the same
native call as ``gradient``. Beside them: ``di``'s own per-call cost (a zero
backend), the strict signature check alone, ``import di``, preparation times and
conversions between array families. Everything is printed and written to
``bench/results.md``.

Options:
    --quick            fewer repeats; AutoTorch(compile=True) on three operators at n = 1e3
    --sizes 10,1e3     sizes of x (default 10,1e3,1e5)
    --output PATH      the markdown report (default bench/results.md)
    --backends ...     subset of jax-jit,jax,torch,torch-compile,autograd,finitediff
    --functions ...    the scalar functions, subset of sum_of_squares,rosenbrock (default rosenbrock)
    --dtypes ...       subset of float32,float64
    --operators ...    subset of the operators (default all)
    --repeats N        exactly N pairs of blocks per row (smoke tests)
    --threads N        torch intra-op threads (default 1; 0 keeps torch's default)
    --compile / --no-compile   include AutoTorch(compile=True) (default: yes; a first inductor compile
                       takes ~20 s on 2 cores)
    --real / --no-real the rows of real inputs (bench/real.py: pytrees, an nn.Module, a loop step, numpy
                       callers, compiles of a value_and_gradient-only loop; default: yes)
    --spellings / --no-spellings  the fastest-native-spelling table (bench/spellings.py: every operator,
                       hessian included, against each native spelling at n = 32 and 1e3; default: yes)
"""

from __future__ import annotations

import argparse
import dataclasses
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

from bench.cases import ENGINES, GRADIENT, MAX_N, OPERATORS, SCALAR_OPERATORS, UNPREPARED, Case, Engine, to_numpy
from bench.functions import FUNCTIONS, VECTOR_FUNCTIONS
from bench.report import (
    ROW_HEADERS,
    Row,
    Table,
    format_ns,
    format_ratio,
    machine,
    measured_row,
    render_markdown,
    render_text,
    versions,
)
from bench.timing import Settings, compare

__all__ = ["main", "parse_args", "run"]

DEFAULT_SIZES = (10, 1_000, 100_000)
DTYPES = ("float32", "float64")
FAMILIES = ("numpy", "torch", "jax")
VECTOR_FUNCTION = "coupled_cubic"


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
    parser.add_argument("--quick", action="store_true", help="fewer repeats: a few minutes")
    parser.add_argument("--sizes", type=_sizes, help="comma-separated sizes of x, e.g. 10,1e3,1e5")
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parent / "results.md")
    parser.add_argument("--backends", type=_subset(list(ENGINES)), default=list(ENGINES))
    parser.add_argument("--functions", type=_subset(list(FUNCTIONS)), default=["rosenbrock"])
    parser.add_argument("--dtypes", type=_subset(list(DTYPES)), default=list(DTYPES))
    parser.add_argument("--operators", type=_subset(list(OPERATORS)), default=list(OPERATORS))
    parser.add_argument("--repeats", type=int, help="exactly this many pairs of blocks per row (smoke tests)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: stable on a shared machine; 0 keeps torch's default)",
    )
    parser.add_argument("--compile", dest="compile", action="store_true", default=None, help="time torch.compile")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--real", dest="real", action="store_true", default=True, help="time the real-input rows")
    parser.add_argument("--no-real", dest="real", action="store_false")
    parser.add_argument("--spellings", dest="spellings", action="store_true", default=True)
    parser.add_argument("--no-spellings", dest="spellings", action="store_false")
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = list(DEFAULT_SIZES)
    if args.compile is None:
        args.compile = True
    if not args.compile:
        args.backends = [key for key in args.backends if key != "torch-compile"]
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
            Settings(block_ns=2.5e5, budget_s=0.6, min_pairs=5, max_pairs=801),
            Settings(block_ns=2.5e5, budget_s=0.3, min_pairs=3, max_pairs=401),
            Settings(block_ns=2.5e5, budget_s=0.5, min_pairs=5, max_pairs=401),
        )
    return (
        Settings(block_ns=2.5e5, budget_s=2.0, min_pairs=9, max_pairs=2001),
        Settings(block_ns=2.5e5, budget_s=1.0, min_pairs=5, max_pairs=1001),
        Settings(block_ns=2.5e5, budget_s=1.0, min_pairs=9, max_pairs=1001),
    )


def _check(native: Any, through_di: Any) -> str:
    """Compare the native and the di result once; a caveat if they differ."""
    expected, got = to_numpy(native()), to_numpy(through_di())
    if expected.shape != got.shape:
        return f"RESULTS DIFFER (shapes {expected.shape} and {got.shape})"
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    error = float(np.max(np.abs(expected - got))) / scale if expected.size else 0.0
    return "" if error < 1e-3 else f"RESULTS DIFFER (max rel. error {error:.2g})"


def row_operators(engine: Engine, n: int, args: argparse.Namespace) -> list[str]:
    """The operators timed for ``engine`` at size ``n``."""
    if args.quick and engine.quick_sizes is not None and n not in engine.quick_sizes:
        return []
    operators = [op for op in engine.operators if op in args.operators and n <= MAX_N.get(op, n)]
    if args.quick and engine.quick_operators is not None:
        operators = [op for op in operators if op in engine.quick_operators]
    return operators


def per_call_rows(args: argparse.Namespace, emit: object) -> list[Row]:
    """Every backend x function x dtype x size x operator."""
    prepared, other, _ = _settings(args)
    rows: list[Row] = []
    g = VECTOR_FUNCTIONS[VECTOR_FUNCTION]

    def add(row: Row) -> None:
        rows.append(row)
        emit(row)  # type: ignore[operator]

    started = time.perf_counter()
    for key in args.backends:
        engine = ENGINES[key]
        print(f"-- {engine.label} ({time.perf_counter() - started:.0f} s into the per-call rows)", flush=True)
        for name in args.functions:
            f = FUNCTIONS[name]
            for dtype in args.dtypes:
                for n in args.sizes:
                    if engine.max_n is not None and n > engine.max_n:
                        continue
                    operators = row_operators(engine, n, args)
                    if not operators:
                        continue
                    x_np = np.random.default_rng(n).uniform(-1.0, 1.0, n)
                    try:
                        case = engine.build(f, g, x_np, dtype, operators)
                    except Exception as err:
                        add(Row(engine.label, ", ".join(operators), name, n, dtype, note=f"failed: {err!r}"[:200]))
                        continue
                    for operator in operators:
                        function = name if operator in SCALAR_OPERATORS else VECTOR_FUNCTION
                        add(
                            _timed_row(
                                engine, case, operator, function, n, dtype, prepared if operator == GRADIENT else other
                            )
                        )
    return rows


def _timed_row(engine: Engine, case: Case, operator: str, function: str, n: int, dtype: str, settings: Settings) -> Row:
    native, through_di = case.pairs[operator]
    if engine.min_pairs is not None and settings.budget_s > 0:  # (--repeats: exactly that many, whatever the engine)
        settings = dataclasses.replace(settings, min_pairs=max(settings.min_pairs, engine.min_pairs))
    return measured_row(
        engine.label,
        operator,
        function,
        n,
        dtype,
        native,
        through_di,
        settings,
        scope=case.scope,
        check=lambda: _check(native, through_di),
    )


def breakdown_table(args: argparse.Namespace, settings: Settings) -> tuple[Table, dict[str, tuple[float, float]]]:
    """Where a prepared ``di.gradient``'s extra time goes, per backend, at the
    smallest size: the adapter's program alone, the facade without the strict
    check, and the full call, each timed against the native call. Also returns
    di's own cost per backend (the strict call minus the native call, ns) with
    its uncertainty (:attr:`Timing.diff_uncertainty_ns`)."""
    n = min(args.sizes)
    name = args.functions[0]
    table = Table(
        f"Where di's time goes: prepared gradient, {name}, n = {n}, float32",
        [
            "backend",
            "native",
            "adapter program alone",
            "di.gradient, strict=False",
            "di.gradient (strict)",
            "adapter adds",
            "facade adds",
            "strict check adds",
            "one empty Python function around the native call adds",
        ],
        intro=(
            "Each of the three `di` layers is timed against the native call, interleaved: the adapter's program "
            "alone (`prep.programs['gradient'](x)`, an internal), `di.gradient` through a `strict=False` prep (the "
            "facade: argument parsing, dispatch, no signature check) and the full strict call. 'adds' columns "
            "are built from the median per-pair differences (each layer minus the native call it was paired with): "
            "adapter = program - native, facade = non-strict - program, check = strict - non-strict. The last "
            "column is the floor of any wrapper on this machine: the native call made through one Python function "
            "that only passes it on (di's prepared call goes through two, the operator and the prep's runner). "
            "Differences below ~100 ns are within noise."
        ),
    )
    own_costs: dict[str, tuple[float, float]] = {}
    for key in args.backends:
        engine = ENGINES[key]
        if (engine.max_n is not None and n > engine.max_n) or key == "torch-compile":
            continue
        try:
            x_np = np.random.default_rng(n).uniform(-1.0, 1.0, n)
            case = engine.build(FUNCTIONS[name], VECTOR_FUNCTIONS[VECTOR_FUNCTION], x_np, "float32", [GRADIENT])
        except Exception as err:
            table.rows.append([engine.label, f"failed: {err!r}"[:200], "", "", "", "", "", "", ""])
            continue
        native, strict = case.pairs[GRADIENT]
        if len(case.breakdown) != 2:  # (an engine whose case splits no layers: its row says so)
            table.rows.append([engine.label, "no breakdown (the case gives no layers)", "", "", "", "", "", "", ""])
            continue

        def passthrough(native: Any = native) -> Any:
            return native()

        layers = [*case.breakdown.values(), strict, passthrough]
        try:
            timings = [compare(native, layer, settings) for layer in layers]
        except Exception as err:
            table.rows.append([engine.label, f"failed: {err!r}"[:200], "", "", "", "", "", "", ""])
            continue
        # Each layer's cost over the native call, net of that comparison's native median.
        over = [t.diff_ns for t in timings]
        own_costs[engine.label] = (over[2], timings[2].diff_uncertainty_ns)
        table.rows.append(
            [
                engine.label,
                format_ns(statistics.median(t.a_ns for t in timings)),
                *[f"{format_ns(t.b_ns)} ({t.ratio:.3f})" for t in timings[:3]],
                _signed(over[0]),
                _signed(over[1] - over[0]),
                _signed(over[2] - over[1]),
                _signed(over[3]),
            ]
        )
    return table, own_costs


def _signed(ns: float) -> str:
    return ("-" if ns < 0 else "+") + format_ns(abs(ns))


def _worst(rows: list[Row], keep: Callable[[Row], bool]) -> Row | None:
    chosen = [r for r in rows if r.operator != UNPREPARED and r.ratio is not None and keep(r)]
    return max(chosen, key=lambda r: r.ratio or 0.0, default=None)


def summary_lines(rows: list[Row], imports: dict[str, object] | None, checks: dict[str, float]) -> list[str]:
    """PASS / MISS against issue 12's targets, with the worst row of each and every miss."""
    lines: list[str] = []

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("PASS" if ok else "MISS")

    def ratio_target(text: str, keep: Callable[[Row], bool], limit: float) -> None:
        worst = _worst(rows, keep)
        if worst is None:
            lines.append(f"- n/a: {text} (not measured)")
            return
        misses = [r for r in rows if r.operator != UNPREPARED and r.ratio is not None and keep(r) and r.ratio > limit]
        lines.append(
            f"- {verdict(not misses)}: {text} <= {limit}; worst {worst.ratio:.3f} ({worst.backend} {worst.operator}, "
            f"{worst.dtype}, n = {worst.n}, native {format_ns(worst.native_ns)}, di {format_ns(worst.di_ns)})"
            + (f"; {len(misses)} rows over: " + ", ".join(_short(r) for r in misses) if misses else "")
        )

    ratio_target(
        "prepared gradient, AutoJAX(jit=True), n = 10",
        lambda r: r.backend == "AutoJAX(jit=True)" and r.operator == GRADIENT and r.n == 10,
        1.15,
    )
    ratio_target("every prepared operator, every backend, n = 1e3", lambda r: r.n == 1_000, 1.10)
    ratio_target("every prepared operator, every backend, n >= 1e5", lambda r: r.n >= 100_000, 1.03)
    if imports is not None:
        own = float(imports["own_ns"])  # type: ignore[arg-type]
        engines = imports["engines"]
        lines.append(
            f"- {verdict(own < 10e6)}: di's own modules under 10 ms at `import di` (numpy already imported); "
            f"measured {format_ns(own)}; cold `import di` {format_ns(float(imports['cold_ns']))}, of which numpy "  # type: ignore[arg-type]
            f"alone {format_ns(float(imports['numpy_ns']))}"  # type: ignore[arg-type]
        )
        lines.append(f"- {verdict(not engines)}: no engine module after `import di`; found: {engines or 'none'}")
    if checks:
        worst_family = max(checks, key=checks.__getitem__)
        lines.append(
            f"- {verdict(checks[worst_family] < 1000)}: strict signature check under 1 us (array x, two "
            f"contexts); worst {format_ns(checks[worst_family])} ({worst_family} x)"
        )
    return lines


def _short(row: Row) -> str:
    return f"{row.backend} {row.operator} {row.dtype} n={row.n}: {row.ratio:.3f}"


def summary_table(rows: list[Row]) -> Table:
    """One line per backend and operator, one column per dtype and size: the ratios
    di / native (the quartiles are in the per-call table)."""
    keys = sorted({(r.dtype, r.n) for r in rows if r.ratio is not None})
    table = Table(
        "Summary: ratio di / native per operator",
        [
            "backend",
            "operator",
            *[f"{dtype} n={n:.0e}".replace("e+0", "e") if n >= 1000 else f"{dtype} n={n}" for dtype, n in keys],
        ],
        intro=(
            "Median paired ratio of the prepared di call to the native call for the same operator (see the per-call "
            "table for the times, quartiles and the native call of each backend). '-': not measured."
        ),
    )
    seen: dict[tuple[str, str], dict[tuple[str, int], str]] = {}
    for r in rows:
        cells = seen.setdefault((r.backend, r.operator), {})
        cells[(r.dtype, r.n)] = format_ratio(r.ratio) if r.ratio is not None else "failed"
    for (backend, operator), cells in seen.items():
        table.rows.append([backend, operator, *[cells.get(key, "-") for key in keys]])
    return table


def guarded(title: str, section: Callable[[], tuple[Table, Any]], default: Any) -> tuple[Table, Any]:
    """Run one section; if it raises, a table saying so takes its place (the
    rest of the suite still runs)."""
    try:
        return section()
    except Exception as err:
        detail = "".join(traceback.format_exception_only(type(err), err)).strip().replace("\n", " ")
        print(f"section {title!r} failed: {detail}", file=sys.stderr, flush=True)
        return Table(title, ["error"], [[f"this section failed: {detail}"[:500]]]), default


def _real_sections(
    args: argparse.Namespace, settings: Settings, rows: list[Row]
) -> tuple[list[Table], Callable[[dict[str, float]], list[str]]]:
    """The real-input rows (bench/real.py) and the compile table; and the lines of
    issue 23's targets, given di's own costs from the breakdown."""
    if not args.real:
        return [], lambda own_costs: []
    from bench import real

    print("== Per call: real inputs ==", flush=True)
    print("  ".join(ROW_HEADERS), flush=True)
    real_rows = real.real_rows(
        args.sizes, args.backends, args.compile, settings, lambda row: print("  ".join(row.cells()), flush=True)
    )
    per_call = Table("Per call: real inputs", ROW_HEADERS, [row.cells() for row in real_rows], intro=real.REAL_INTRO)
    torch_backend = "eager" if args.repeats is not None else "inductor"
    compiles, _ = guarded(
        "Compiles of a value_and_gradient-only loop",
        lambda: (real.compile_table(args.backends, args.compile, torch_backend), None),
        None,
    )
    return [per_call, compiles], lambda own_costs: real.target_lines(rows, real_rows, own_costs, compiles)


def _spelling_section(args: argparse.Namespace, settings: Settings) -> tuple[list[Table], list[str]]:
    """The fastest-native-spelling table (bench/spellings.py) and its target line: at
    n = 32 and 1e3 (the smallest size of a smoke run)."""
    if not args.spellings:
        return [], []
    from bench import spellings

    print("== Fastest native spelling ==", flush=True)
    sizes = [min(args.sizes)] if args.repeats is not None else list(spellings.SIZES)
    backends = [key for key in args.backends if key not in spellings.SKIPPED]
    operators = [op for op in spellings.SPELLED_OPERATORS if op in args.operators or op == spellings.HESSIAN]
    rows = spellings.spelling_rows(backends, sizes, operators, settings, spellings.print_row)
    return [spellings.spelling_table(rows)], [spellings.target_line(rows)]


def run(args: argparse.Namespace) -> tuple[list[Row], str]:
    """Run everything; return the per-call rows and the markdown report."""
    from bench import extras

    if args.threads > 0 and _installed("torch"):
        # With torch's default (one thread per core), a parallel region on a machine
        # whose other cores are busy waits for a descheduled thread: calls that take
        # 70 us take 40 ms one time in ten. One thread keeps both sides comparable.
        import torch

        torch.set_num_threads(args.threads)

    started = time.perf_counter()
    load_start = _load()
    prepared, other, side = _settings(args)
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
            "Each operator is the prepared di call (strict prep) against the native call a user of the engine "
            "writes for that operator; `gradient, unprepared` is `di.gradient(f, backend, x)`, which the preparation "
            "cache serves after its first call, against the same native call as `gradient` (its ratio is the "
            "price of not preparing: the cache's lookup; see 'Unprepared calls'). One tangent or cotangent "
            "v = cos(x). Scalar operators on "
            f"the scalar function, jacobian/pushforward/pullback on `{VECTOR_FUNCTION}` (bench/functions.py). "
            "Inputs in the engine's family and the row's dtype; float64 JAX rows run inside "
            "`jax.enable_x64(True)` on both sides. Native calls:\n\n"
            + "\n".join(
                f"- {engine.label}: " + "; ".join(f"{op}: `{text}`" for op, text in engine.natives.items())
                for key, engine in ENGINES.items()
                if key in args.backends
            )
        ),
    )
    summary_ratios = summary_table(rows)

    breakdown, own_costs = guarded("Where di's time goes", lambda: breakdown_table(args, prepared), {})
    show(breakdown)

    spelling_tables, spelling_summary = _spelling_section(args, other)
    for table in spelling_tables:
        show(table)

    real_tables, real_summary = _real_sections(args, other, rows)
    for table in real_tables[1:]:
        show(table)

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

    from bench import unprepared  # the preparation cache's unprepared calls and the everyday ML call

    cache_tables, _ = guarded("Unprepared calls", lambda: (unprepared.tables(side, smoke), None), None)
    cache_tables = cache_tables if isinstance(cache_tables, list) else [cache_tables]
    for table in cache_tables:
        show(table)
    tables = [
        summary_ratios,
        main_table,
        *spelling_tables,
        *real_tables[:1],
        breakdown,
        zero_table,
        check_table,
        import_table,
        prep_table,
        conversion_table,
        *cache_tables,
        *real_tables[1:],
    ]
    summary = ["Issue 12:", "", *summary_lines(rows, imports, checks)]
    if spelling_summary:
        summary += ["", "Issue 36:", "", *spelling_summary]
    if args.real:
        summary += ["", "Issue 23:", "", *real_summary(own_costs)]
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
