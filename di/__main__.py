"""``python -m di`` (console script ``di``): which backends work on which functions, and how fast.

Commands:

* ``di`` runs :func:`di.testing.default_scenarios` on every installed backend (and
  ``AutoJAX(jit=True)``), prints a table (backend, scenario, max error against the
  analytic reference, median prepared-call time, status), the correctness of
  every backend x operator and the fastest backend per scenario. Exit status 1
  when any backend disagrees with a reference (skips are not failures).
* ``di check MODULE:FUNCTION --x-shape 100 [--dtype float64] [--operator gradient]``
  runs the user's function on every installed backend, compares each result with
  a float64 reference from the first automatic-differentiation backend that
  succeeds, and times prepared calls. Exit status 1 when a backend fails or
  disagrees.
* ``di plan MODULE:FUNCTION --x-shape 1000 [--operator gradient] [--budget 1]``
  prepares the function with :class:`di.AutoFastest` and prints its plan: which
  backend is fastest for this function, size, dtype and array family
  (``--family``) on this machine, and why the others lost. Exit status 1 when
  no candidate can be trusted (all fail, or no majority agrees).

``di`` and ``check`` take ``--backends jax,jax-jit,torch,autograd,finitediff``, ``--json FILE``
(the rows) and ``--plot FILE.png --sizes 10,1000,100000`` (median time per
prepared call against input size, log-log, one line per backend; needs
matplotlib). Exit status 2 for a usage error (bad option, import failure).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

EXIT_OK, EXIT_DISAGREE, EXIT_USAGE = 0, 1, 2
PLOT_SIZE_INCHES = (8.0, 5.0)
PLOT_DPI = 100
_MATRIX_OPERATORS = ("jacobian", "hessian")
_MAX_MATRIX_SIZE = 4096


class UsageError(Exception):
    """A mistake on the command line or in what it names (exit status 2)."""


# --- output ----------------------------------------------------------------------------


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
        """Print a :class:`di.plan.Plan` (a rich table when rich is installed)."""
        if self.console is None:
            print(plan)
        else:
            self.console.print()
            self.console.print(plan)

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
        """Print a table; cells of status columns are coloured."""
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
            last = index == len(columns) - 1 and len(columns) > 2
            table.add_column(column, no_wrap=True, overflow="ellipsis", max_width=60 if last else None)
        for row in rows:
            table.add_row(*(Text(cell, style=_style(cell)) for cell in row))
        self.console.print(table)


def _style(cell: str) -> str:
    if cell.startswith("FAIL") or cell.startswith("ERROR") or cell.startswith("DIFF"):
        return "bold red"
    if cell.startswith("ok"):
        return "green"
    if cell.startswith("skip"):
        return "yellow"
    return ""


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


def _seconds(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.1f} us"
    if value < 1:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.2f} s"


def _number(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.1e}"


def _short(text: str, width: int = 70) -> str:
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


def _write_json(path: str, rows: list[dict[str, Any]]) -> None:
    Path(path).write_text(json.dumps(_jsonable(rows), indent=2) + "\n")


# --- arguments -----------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--backends",
        help="comma-separated backends: jax, jax-jit, torch, torch-compile, autograd, finitediff, "
        "finitediff-forward, or name(option=value) (default: every installed engine, plus jax-jit)",
    )
    common.add_argument("--json", metavar="FILE", help="write the rows as JSON to FILE")
    common.add_argument(
        "--plot", metavar="FILE.png", help="draw median time per prepared call against input size (needs matplotlib)"
    )
    common.add_argument(
        "--sizes",
        default="10,1000,100000",
        help="input sizes of the --plot sweep, comma-separated (default: 10,1000,100000)",
    )
    common.add_argument("--rtol", type=float, help="relative tolerance (default: per backend and dtype)")
    common.add_argument("--atol", type=float, help="absolute tolerance (default: per backend and dtype)")
    parser = argparse.ArgumentParser(
        prog="di",
        description="Run di's scenarios on every installed differentiation backend and compare them.",
        parents=[common],
    )
    parser.add_argument("--operators", help="comma-separated operators to keep (default: all)")
    parser.add_argument("-k", dest="keyword", help="keep scenarios whose name contains this text")
    parser.add_argument(
        "--scenarios", metavar="MODULE:FUNCTION", help="use the scenarios returned by this function instead"
    )
    parser.add_argument(
        "--prep-modes",
        default="unprepared,prepared-twice",
        help="preparation modes to check, among unprepared, prepared, prepared-twice (default: unprepared,"
        "prepared-twice; the first call of prepared-twice is the prepared check)",
    )
    parser.add_argument("--no-bench", action="store_true", help="check correctness only, no timings")
    parser.add_argument("--quiet", action="store_true", help="print the summary tables only")
    commands = parser.add_subparsers(dest="command", metavar="{check,plan}")
    check = commands.add_parser(
        "check",
        parents=[common],
        help="check your own function on every backend",
        description="Differentiate MODULE:FUNCTION on every backend, compare with a float64 reference, time it.",
    )
    check.add_argument("function", metavar="MODULE:FUNCTION", help="e.g. mypackage.losses:loss or path/to/file.py:f")
    check.add_argument("--x-shape", default="100", help="shape of x, e.g. 100 or 3,4 ('' for a scalar)")
    check.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    check.add_argument("--operator", default="gradient", help="gradient (default), jacobian, hessian, hvp, ...")
    check.add_argument("--seed", type=int, default=0, help="seed of the random x and tangents")
    check.add_argument(
        "--sparse",
        action="store_true",
        help="jacobian/hessian with di.AutoSparse(backend); also report the nonzeros of a dense result at another "
        "random point that lie outside the prepared pattern",
    )
    plan = commands.add_parser(
        "plan",
        help="find the fastest backend for your function (di.AutoFastest)",
        description="Prepare MODULE:FUNCTION with di.AutoFastest and print its plan: every candidate backend, "
        "checked against the others and timed on this machine.",
    )
    plan.add_argument("function", metavar="MODULE:FUNCTION", help="e.g. mypackage.losses:loss or path/to/file.py:f")
    plan.add_argument("--x-shape", default="100", help="shape of x, e.g. 100 or 3,4 ('' for a scalar)")
    plan.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    plan.add_argument("--family", default="numpy", choices=["numpy", "torch", "jax"], help="array family of x")
    plan.add_argument("--operator", default="gradient", help="gradient (default), jacobian, hessian, hvp, ...")
    plan.add_argument("--budget", type=float, default=1.0, help="seconds spent timing the candidates (default 1)")
    plan.add_argument("--backends", help="the candidates, comma-separated as for check (default: AutoFastest's)")
    plan.add_argument("--rtol", type=float, help="relative agreement tolerance (default: by dtype)")
    plan.add_argument("--atol", type=float, help="absolute agreement tolerance (default: by dtype)")
    plan.add_argument("--cache", metavar="FILE.json", help="remember the plan in this JSON file (and reuse it)")
    plan.add_argument("--json", metavar="FILE", help="write the plan as JSON to FILE")
    plan.add_argument("--seed", type=int, default=0, help="seed of the random x and tangents")
    return parser


def _parse_backends(text: str | None) -> list[Any]:
    import di
    from di.testing import parse_backend

    if not text:
        backends: list[Any] = list(di.available_backends())
        if di.AutoJAX() in backends:
            backends.insert(backends.index(di.AutoJAX()) + 1, di.AutoJAX(jit=True))
        return backends
    try:
        return [parse_backend(part) for part in _split(text)]
    except ValueError as err:
        raise UsageError(f"--backends: {err}") from err


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(float(part)) for part in _split(text)]
    except ValueError as err:
        raise UsageError(f"--sizes must be comma-separated integers, not {text!r}") from err
    if not sizes or any(s < 1 for s in sizes):
        raise UsageError("--sizes must be positive integers")
    return sorted(set(sizes))


def _parse_shape(text: str) -> tuple[int, ...]:
    text = text.strip().strip("()")
    if text in ("", "scalar"):
        return ()
    try:
        return tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError as err:
        raise UsageError(f"--x-shape must be comma-separated integers such as 100 or 3,4, not {text!r}") from err


def load_object(spec: str, what: str = "function") -> Any:
    """Import ``MODULE:NAME`` (a dotted module or a path to a ``.py`` file).

    Raises:
        UsageError: malformed spec, import failure, missing attribute.
    """
    module_name, sep, name = spec.rpartition(":")
    if not sep or not module_name or not name:
        raise UsageError(f"expected MODULE:{what.upper()}, e.g. mypackage.losses:loss, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise UsageError(f"cannot import {module_name!r}: no such file")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None:
                raise UsageError(f"cannot import {module_name!r}: not a Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except UsageError:
        raise
    except Exception as err:
        raise UsageError(f"cannot import module {module_name!r}: {type(err).__name__}: {err}") from err
    try:
        return getattr(module, name)
    except AttributeError:
        public = sorted(n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n)))
        hint = f"; it has: {', '.join(public[:12])}" if public else ""
        raise UsageError(f"module {module_name!r} has no {what} {name!r}{hint}") from None


# --- the default run ---------------------------------------------------------------------------


def _scenario_rows(results: list[Any], timings: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per backend x scenario, combining the preparation modes."""
    grouped: dict[tuple[str, str], list[Any]] = {}
    for result in results:
        grouped.setdefault((result.backend, result.scenario), []).append(result)
    rows = []
    for (backend, scenario), group in grouped.items():
        statuses = {r.prep_mode: r.status for r in group}
        failed = [r for r in group if r.status == "failed"]
        passed = [r for r in group if r.status == "passed"]
        if failed:
            status = "FAIL"
            message = f"{failed[0].prep_mode}: {failed[0].message}"
        elif passed and len(passed) == len(group):
            status, message = "ok", ""
        elif passed:
            status, message = "ok", "partly skipped: " + next(r.message for r in group if r.status == "skipped")
        else:
            status, message = "skip", group[0].message
        abs_errors = [r.max_abs_error for r in group if not math.isnan(r.max_abs_error)]
        rel_errors = [r.max_rel_error for r in group if not math.isnan(r.max_rel_error)]
        timing = timings.get((backend, scenario), {})
        rows.append(
            {
                "kind": "scenario",
                "backend": backend,
                "scenario": scenario,
                "operator": group[0].operator,
                "status": status,
                "modes": statuses,
                "max_abs_error": max(abs_errors) if abs_errors else math.nan,
                "max_rel_error": max(rel_errors) if rel_errors else math.nan,
                "rtol": group[0].rtol,
                "atol": group[0].atol,
                "time_median": timing.get("time_median", math.nan),
                "time_min": timing.get("time_min", math.nan),
                "samples": timing.get("samples", 0),
                "calls": timing.get("calls"),
                "compile_time": timing.get("compile_time", math.nan),
                "message": message,
            }
        )
    return rows


def _print_scenario_tables(out: Output, rows: list[dict[str, Any]], backends: list[str], quiet: bool) -> None:
    ordered = sorted(rows, key=lambda r: (r["scenario"], backends.index(r["backend"])))
    if not quiet:
        out.table(
            "Every backend on every scenario (errors against the analytic reference; time per prepared call)",
            ["backend", "scenario", "max abs err", "max rel err", "median time", "status", "note"],
            [
                [
                    r["backend"],
                    r["scenario"],
                    _number(r["max_abs_error"]),
                    _number(r["max_rel_error"]),
                    _seconds(r["time_median"]),
                    r["status"],
                    _short(r["message"], 60),
                ]
                for r in ordered
            ],
        )
    operators: list[str] = []
    for r in rows:
        if r["operator"] not in operators:
            operators.append(r["operator"])
    matrix = []
    for backend in backends:
        cells = [backend]
        for operator in operators:
            group = [r for r in rows if r["backend"] == backend and r["operator"] == operator]
            n_fail = sum(r["status"] == "FAIL" for r in group)
            n_ok = sum(r["status"] == "ok" for r in group)
            if n_fail:
                cells.append(f"FAIL {n_fail}/{len(group)}")
            elif n_ok == len(group) and group:
                cells.append(f"ok {n_ok}")
            elif n_ok:
                cells.append(f"ok {n_ok}/{len(group)}")
            else:
                cells.append("skip")
        matrix.append(cells)
    out.table("Correctness per backend and operator (scenarios ok / total)", ["backend", *operators], matrix)
    fastest = []
    for scenario in sorted({r["scenario"] for r in rows}):
        timed = sorted(
            (r for r in rows if r["scenario"] == scenario and r["status"] == "ok" and not math.isnan(r["time_median"])),
            key=lambda r: r["time_median"],
        )
        if not timed:
            continue
        best = timed[0]
        runner_up = timed[1] if len(timed) > 1 else None
        fastest.append(
            [
                scenario,
                best["backend"],
                _seconds(best["time_median"]),
                runner_up["backend"] if runner_up else "-",
                f"{runner_up['time_median'] / best['time_median']:.1f}x" if runner_up else "-",
            ]
        )
    if fastest:
        out.table(
            "Fastest backend per scenario (median prepared call)",
            ["scenario", "fastest", "median time", "next fastest", "next is slower by"],
            fastest,
        )


def run_default(args: argparse.Namespace, out: Output) -> int:
    """``di`` without a command: every scenario on every backend."""
    from di.testing import benchmark_differentiation, default_scenarios, iter_cases, run_case
    from di.testing.runner import backend_label

    backends = _parse_backends(args.backends)
    if args.scenarios:
        loaded = load_object(args.scenarios, "function")
        scenarios = list(loaded() if callable(loaded) else loaded)
    else:
        scenarios = default_scenarios()
    if args.operators:
        wanted = set(_split(args.operators))
        scenarios = [s for s in scenarios if s.operator in wanted]
    if args.keyword:
        scenarios = [s for s in scenarios if args.keyword in s.name]
    if not scenarios:
        raise UsageError("no scenario left after --operators / -k")
    labels = [backend_label(b) for b in backends]
    start = time.perf_counter()
    try:
        cases = list(iter_cases(backends, scenarios, _split(args.prep_modes)))
    except ValueError as err:
        raise UsageError(f"--prep-modes: {err}") from err
    n_bench = 0 if args.no_bench else len(backends) * len(scenarios)
    out.line(f"di: {len(scenarios)} scenarios x {len(backends)} backends ({', '.join(labels)})")
    results = []
    timings: dict[tuple[str, str], dict[str, Any]] = {}
    with Progress(len(cases) + n_bench, "checking") as progress:
        for case in cases:
            results.append(run_case(case, rtol=args.rtol, atol=args.atol))
            progress.advance(case.id)
        if not args.no_bench:
            ran = {(r.backend, r.scenario) for r in results if r.status != "skipped" and r.error is None}
            for backend in backends:
                for scenario in scenarios:
                    key = (backend_label(backend), scenario.name)
                    if key in ran:
                        row = benchmark_differentiation(
                            backend, [scenario], prepared=(True,), min_time=0.01, max_samples=100
                        )[0]
                        if row["status"] == "ok":
                            timings[key] = row
                    progress.advance(f"{key[0]} {key[1]}", description="timing")
    for result in results:  # "AutoTorch(compile=False, ...) does not ..." -> "torch does not ..."
        for backend in backends:
            result.message = result.message.replace(repr(backend), backend_label(backend))
    rows = _scenario_rows(results, timings)
    _print_scenario_tables(out, rows, labels, args.quiet)
    failed = [r for r in results if r.status == "failed"]
    if failed:
        out.line("")
        out.line(f"Disagreements with the reference ({len(failed)}):", style="bold red")
        for r in failed:
            out.line(f"  {r.line()}")
    sweep_rows: list[dict[str, Any]] = []
    if args.plot:
        from di.testing.scenarios import sum_sin

        sweep_rows = _sweep(out, sum_sin, "gradient", backends, _parse_sizes(args.sizes), "float64", args.plot)
    if args.json:
        _write_json(args.json, rows + sweep_rows)
    n_passed = sum(r.status == "passed" for r in results)
    n_skipped = sum(r.status == "skipped" for r in results)
    out.line("")
    verdict = "every backend agrees with the references" if not failed else "SOME BACKENDS DISAGREE"
    out.line(
        f"{len(results)} cases: {n_passed} passed, {len(failed)} failed, {n_skipped} skipped "
        f"(skips: operator not in this di, or unsupported by the backend) in {time.perf_counter() - start:.1f} s: "
        f"{verdict}",
        style="bold red" if failed else "bold green",
    )
    return EXIT_DISAGREE if failed else EXIT_OK


# --- check ---------------------------------------------------------------------------------


def _point(shape: tuple[int, ...], dtype: str, seed: int) -> Any:
    import numpy as np

    return np.asarray(np.random.default_rng(seed).standard_normal(shape), dtype=dtype)


def _output_shape(f: Callable[..., Any], x: Any) -> tuple[int, ...]:
    """The shape of ``f(x)``, trying numpy first, then the installed engines."""
    import numpy as np

    from di.testing.scenarios import to_numpy

    def converter(engine: str) -> Callable[[Any], Any]:
        def convert(a: Any) -> Any:
            return importlib.import_module(engine).asarray(a)

        return convert

    attempts: list[Callable[[Any], Any]] = [lambda a: a]
    for engine in ("torch", "jax.numpy"):
        if importlib.util.find_spec(engine.split(".")[0]) is not None:
            attempts.append(converter(engine))
    last: Exception | None = None
    for convert in attempts:
        try:
            return tuple(np.shape(to_numpy(f(convert(x)))))
        except Exception as err:
            last = err
    raise UsageError(f"cannot evaluate the function at x: {type(last).__name__}: {last}")


def _check_scenario(
    f: Callable[..., Any], operator: str, shape: tuple[int, ...], dtype: str, seed: int, reference: Any = None
) -> Any:
    import numpy as np

    from di.testing import OPERATORS, PrepArgs, Scenario

    spec = OPERATORS[operator]
    x = _point(shape, dtype, seed)
    tangents = None
    if spec.takes_tangents:
        t_shape = _output_shape(f, x) if operator == "pullback" else shape
        tangents = (_point(t_shape, dtype, seed + 1),)
    references: dict[str, Any] = {}
    if reference is not None:
        references[spec.call_result] = reference
    return Scenario(
        operator,
        f,
        x,
        tangents=tangents,
        name=f"{getattr(f, '__name__', 'f')} {operator} {dtype} {shape}",
        prep_args=PrepArgs(np.array(x, copy=True), tangents),
        **references,
    )


def _reference(f: Callable[..., Any], operator: str, shape: tuple[int, ...], seed: int) -> tuple[Any, str]:
    """The float64 result of the first backend that computes it (AD before finite differences)."""
    import di
    from di.testing.runner import backend_label

    candidates = [di.AutoTorch(), di.AutoJAX(), di.AutoAutograd(), di.AutoJAX(jit=True), di.AutoFiniteDiff()]
    scenario = _check_scenario(f, operator, shape, "float64", seed)
    spec = scenario.spec
    for backend in candidates:
        if not backend.is_installed:
            continue
        t_args = (scenario.tangents,) if spec.takes_tangents else ()
        try:
            result = getattr(di, spec.call)(f, backend, scenario.x, *t_args)
        except Exception:
            continue
        return result, backend_label(backend)
    return None, "none (every backend failed)"


def run_check(args: argparse.Namespace, out: Output) -> int:
    """``di check MODULE:FUNCTION``."""
    import di
    from di.testing import OPERATORS, Case, benchmark_differentiation, run_case
    from di.testing.runner import backend_label

    if args.operator not in OPERATORS:
        raise UsageError(f"--operator must be one of {', '.join(OPERATORS)}, not {args.operator!r}")
    if OPERATORS[args.operator].missing(di):
        raise UsageError(f"--operator {args.operator}: not available in this di version")
    f = load_object(args.function)
    if not callable(f):
        raise UsageError(f"{args.function} is a {type(f).__name__}, not a function")
    shape = () if args.operator in ("derivative", "second_derivative") else _parse_shape(args.x_shape)
    if args.sparse and args.operator not in _MATRIX_OPERATORS:
        raise UsageError(f"--sparse checks jacobian or hessian, not {args.operator}")
    backends = _parse_backends(args.backends)
    reference, reference_label = _reference(f, args.operator, shape, args.seed)
    out.line(
        f"di check {args.function}: {args.operator}, x {args.dtype} {shape} (seed {args.seed}); "
        f"reference: {reference_label} in float64"
    )
    rows: list[dict[str, Any]] = []
    failures = 0
    with Progress(len(backends), "checking") as progress:
        for backend in backends:
            label = backend_label(backend) + (" (sparse)" if args.sparse else "")
            run_on = di.AutoSparse(backend) if args.sparse else backend
            scenario = _check_scenario(f, args.operator, shape, args.dtype, args.seed, reference)
            result = run_case(Case(run_on, scenario, "prepared"), rtol=args.rtol, atol=args.atol)
            timing: dict[str, Any] = {}
            if result.error is None and result.status != "skipped":
                timing = benchmark_differentiation(run_on, [scenario], prepared=(True,), min_time=0.05)[0]
            if args.sparse and result.status == "passed":
                outside, result.message = _pattern_check(f, args.operator, backend, shape, args.dtype, args.seed)
                if outside:
                    result.status = "failed"
            if result.status == "passed":
                status = "ok"
            elif result.status == "skipped":
                status = "skip"
            else:
                failures += 1
                status = "ERROR" if result.error is not None else "DIFF"
            rows.append(
                {
                    "kind": "check",
                    "backend": label,
                    "function": args.function,
                    "operator": args.operator,
                    "dtype": args.dtype,
                    "shape": list(shape),
                    "status": status,
                    "max_abs_error": result.max_abs_error,
                    "max_rel_error": result.max_rel_error,
                    "time_median": timing.get("time_median", math.nan),
                    "time_min": timing.get("time_min", math.nan),
                    "compile_time": timing.get("compile_time", math.nan),
                    "calls": timing.get("calls"),
                    "message": result.message,
                }
            )
            progress.advance(label)
    out.table(
        f"{args.function}: {args.operator} against {reference_label} (float64)",
        ["backend", "status", "max abs diff", "max rel diff", "median time", "compile", "f calls", "error"],
        [
            [
                r["backend"],
                r["status"],
                _number(r["max_abs_error"]),
                _number(r["max_rel_error"]),
                _seconds(r["time_median"]),
                _seconds(r["compile_time"]),
                "-" if r["calls"] is None else str(r["calls"]),
                _short(r["message"], 80),
            ]
            for r in rows
        ],
    )
    sweep_rows: list[dict[str, Any]] = []
    if args.plot:
        sweep_rows = _sweep(out, f, args.operator, backends, _parse_sizes(args.sizes), args.dtype, args.plot)
    if args.json:
        _write_json(args.json, rows + sweep_rows)
    if failures:
        out.line(f"{failures} of {len(rows)} backends failed or disagree.", style="bold red")
        return EXIT_DISAGREE
    out.line("Every backend that ran agrees with the reference.", style="bold green")
    return EXIT_OK


def _pattern_check(
    f: Callable[..., Any], operator: str, backend: Any, shape: tuple[int, ...], dtype: str, seed: int
) -> tuple[int, str]:
    """``di check --sparse``: the pattern prepared at the check's point against the
    nonzeros of a dense result at another random point (a pattern that depends on
    x is the caller's responsibility: this is how they find out)."""
    import numpy as np

    import di
    from di.testing.scenarios import to_numpy

    prep = getattr(di, f"prepare_{operator}")(f, di.AutoSparse(backend), _point(shape, dtype, seed))
    dense = to_numpy(getattr(di, operator)(f, backend, _point(shape, dtype, seed + 7)))
    pattern = prep.sparsity
    outside = int(np.count_nonzero((np.asarray(dense).reshape(pattern.shape) != 0) & ~pattern.toarray()))
    message = f"pattern: {pattern.nnz} nonzeros, {prep.colors} colors"
    if outside:
        message += f"; a dense {operator} at another random point has {outside} nonzeros OUTSIDE it"
    return outside, message


# --- plan ----------------------------------------------------------------------------------------


def run_plan(args: argparse.Namespace, out: Output) -> int:
    """``di plan MODULE:FUNCTION``."""
    import di
    from di.families import converter
    from di.plan import CandidatesDisagreeError, selector_label
    from di.testing import OPERATORS

    if args.operator not in OPERATORS:
        raise UsageError(f"--operator must be one of {', '.join(OPERATORS)}, not {args.operator!r}")
    f = load_object(args.function)
    if not callable(f):
        raise UsageError(f"{args.function} is a {type(f).__name__}, not a function")
    spec = OPERATORS[args.operator]
    shape = () if args.operator in ("derivative", "second_derivative") else _parse_shape(args.x_shape)
    try:
        selector = di.AutoFastest(
            _parse_backends(args.backends) if args.backends else None,
            budget_s=args.budget,
            rtol=args.rtol,
            atol=args.atol,
            cache=args.cache,
        )
        to_family = converter("numpy", args.family)
    except (ValueError, TypeError, ImportError) as err:
        raise UsageError(str(err)) from err
    x = _point(shape, args.dtype, args.seed)
    tangents: tuple[Any, ...] = ()  # (tx,) for the operators that take tangents
    if spec.takes_tangents:
        t_shape = _output_shape(f, x) if args.operator == "pullback" else shape
        tangents = ((to_family(_point(t_shape, args.dtype, args.seed + 1)),),)
    x = to_family(x)
    out.line(
        f"di plan {args.function}: {args.operator}, x {args.family} {args.dtype} {shape}, budget {args.budget:g} s"
    )
    try:
        prep = getattr(di, spec.prepare)(f, selector, x, *tangents)
    except CandidatesDisagreeError as err:
        out.plan(err.plan)
        out.line("No majority of the candidates agrees: none can be trusted.", style="bold red")
        return EXIT_DISAGREE
    except Exception as err:
        out.line(f"Every candidate failed; the first: {type(err).__name__}: {err}", style="bold red")
        for note in getattr(err, "__notes__", ()):
            out.line(note)
        return EXIT_DISAGREE
    out.plan(prep.plan)
    out.line(f"Fastest: {selector_label(prep.plan.chosen)}", style="bold green")
    if args.json:
        Path(args.json).write_text(json.dumps(prep.plan.to_json(), indent=1) + "\n", encoding="utf-8")
    return EXIT_OK


# --- size sweep and plot ------------------------------------------------------------------------


def _sweep(
    out: Output,
    f: Callable[..., Any],
    operator: str,
    backends: list[Any],
    sizes: list[int],
    dtype: str,
    plot_path: str,
    seed: int = 0,
    budget: float = 2.0,
) -> list[dict[str, Any]]:
    """Time prepared calls at each size, skipping sizes a backend would take too long on."""
    from di.testing import benchmark_differentiation
    from di.testing.runner import backend_label

    try:
        import matplotlib
    except ImportError as err:
        raise UsageError("--plot needs matplotlib: pip install 'differentiation-interface[cli]'") from err
    if operator in ("derivative", "second_derivative"):
        raise UsageError(f"--plot sweeps the size of x, which {operator} needs to be a scalar")
    rows: list[dict[str, Any]] = []
    stopped: dict[str, str] = {}
    last: dict[str, tuple[int, float]] = {}
    with Progress(len(sizes) * len(backends), "timing sizes") as progress:
        for size in sizes:
            for backend in backends:
                label = backend_label(backend)
                row: dict[str, Any] = {"kind": "sweep", "backend": label, "operator": operator, "size": size}
                if operator in _MATRIX_OPERATORS and size > _MAX_MATRIX_SIZE:
                    stopped.setdefault(label, f"{operator} of size {size} is too large")
                if label in stopped:
                    rows.append({**row, "status": "skipped", "error": stopped[label], "time_median": math.nan})
                    progress.advance(f"{label} n={size}")
                    continue
                if label in last:
                    prev_size, prev_time = last[label]
                    if prev_time * (size / prev_size) > budget:
                        stopped[label] = f"predicted over {budget:g} s per call"
                        rows.append({**row, "status": "skipped", "error": stopped[label], "time_median": math.nan})
                        progress.advance(f"{label} n={size}")
                        continue
                scenario = _check_scenario(f, operator, (size,), dtype, seed)
                result = benchmark_differentiation(
                    backend, [scenario], prepared=(True,), min_time=0.05, max_samples=50
                )[0]
                rows.append({**row, **{k: result[k] for k in ("status", "error", "time_median", "time_min", "calls")}})
                if result["status"] != "ok":
                    stopped[label] = result["error"] or result["status"]
                else:
                    first = result["time_median"] + result["compile_time"]
                    last[label] = (size, result["time_median"])
                    if first > budget:
                        stopped[label] = f"over {budget:g} s per call"
                progress.advance(f"{label} n={size}")
    out.table(
        f"Median time per prepared {operator} call against input size ({dtype})",
        ["backend", *(str(s) for s in sizes)],
        [
            [
                backend_label(b),
                *(
                    _seconds(r["time_median"]) if r["status"] == "ok" else "skip"
                    for r in rows
                    if r["backend"] == backend_label(b)
                ),
            ]
            for b in backends
        ],
    )
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=PLOT_SIZE_INCHES, dpi=PLOT_DPI)
    for backend in backends:
        label = backend_label(backend)
        points = [(r["size"], r["time_median"]) for r in rows if r["backend"] == label and r["status"] == "ok"]
        if points:
            axes.plot(*zip(*points), marker="o", label=label)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("input size n")
    axes.set_ylabel("median time per prepared call (s)")
    axes.set_title(f"{getattr(f, '__name__', 'f')}: {operator} ({dtype})")
    axes.grid(True, which="both", alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend()
    figure.savefig(plot_path, dpi=PLOT_DPI)
    plt.close(figure)
    out.line(f"plot written to {plot_path}")
    return rows


# --- entry point -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``di`` command.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 when every backend agrees with the references, 1 when
        one disagrees or fails, 2 for a usage error.

    Raises:
        SystemExit: from argparse, for ``--help`` or unknown options.

    Examples:
        >>> from di.__main__ import main
        >>> main(["--backends", "finitediff", "--operators", "gradient", "-k", "sum_sin/f64",
        ...       "--no-bench", "--quiet"])  # doctest: +SKIP
        0
    """
    args = _parser().parse_args(argv)
    out = Output()
    try:
        if args.command == "check":
            return run_check(args, out)
        if args.command == "plan":
            return run_plan(args, out)
        return run_default(args, out)
    except UsageError as err:
        print(f"di: error: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
