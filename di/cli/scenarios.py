"""``di`` without a command: every built-in scenario on every backend, as tables."""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from di.cli.common import EXIT_DISAGREE, EXIT_OK, UsageError, parse_backends, parse_sizes, split
from di.cli.functions import load_object
from di.cli.output import Output, Progress, count_cell, number, seconds, short, write_json

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the scenario table (the top-level command)."""
    parser.add_argument("--operators", help="comma-separated operators to keep (default: all)")
    parser.add_argument("-k", dest="keyword", help="keep scenarios whose name contains this text")
    parser.add_argument(
        "--scenarios", metavar="MODULE:FUNCTION", help="use the scenarios returned by this function instead"
    )
    parser.add_argument(
        "--prep-modes",
        default="unprepared,prepared-twice",
        help="preparation modes to check, among unprepared, prepared, prepared-twice (default: %(default)s; the "
        "first call of prepared-twice is the prepared check)",
    )
    parser.add_argument("--quiet", action="store_true", help="print the summary tables only")


def _scenario_rows(results: list[Any], timings: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per backend x scenario, combining the preparation modes."""
    grouped: dict[tuple[str, str], list[Any]] = {}
    for result in results:
        grouped.setdefault((result.backend, result.scenario), []).append(result)
    rows = []
    for (backend, scenario), group in grouped.items():
        failed = [r for r in group if r.status == "failed"]
        passed = [r for r in group if r.status == "passed"]
        if failed:
            status, message = "FAIL", f"{failed[0].prep_mode}: {failed[0].message}"
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
                "modes": {r.prep_mode: r.status for r in group},
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


def _correctness(rows: list[dict[str, Any]], backends: list[str]) -> list[list[str]]:
    """Per backend, per operator: how many scenarios passed, failed, were skipped."""
    operators = list(dict.fromkeys(r["operator"] for r in rows))
    matrix = []
    for backend in backends:
        cells = [backend]
        for operator in operators:
            group = [r["status"] for r in rows if r["backend"] == backend and r["operator"] == operator]
            cells.append(count_cell(group.count("ok"), group.count("FAIL"), group.count("skip")))
        matrix.append(cells)
    return matrix


def _fastest(rows: list[dict[str, Any]]) -> list[list[str]]:
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
                seconds(best["time_median"]),
                runner_up["backend"] if runner_up else "-",
                f"{runner_up['time_median'] / best['time_median']:.1f}x" if runner_up else "-",
            ]
        )
    return fastest


def _print_tables(out: Output, rows: list[dict[str, Any]], backends: list[str], quiet: bool) -> None:
    if not quiet:
        ordered = sorted(rows, key=lambda r: (r["scenario"], backends.index(r["backend"])))
        out.table(
            "Every backend on every scenario (errors against the analytic reference; time per prepared call)",
            ["backend", "scenario", "max abs err", "max rel err", "median time", "status", "note"],
            [
                [
                    r["backend"],
                    r["scenario"],
                    number(r["max_abs_error"]),
                    number(r["max_rel_error"]),
                    seconds(r["time_median"]),
                    r["status"],
                    short(r["message"], 60),
                ]
                for r in ordered
            ],
        )
    operators = list(dict.fromkeys(r["operator"] for r in rows))
    out.table(
        "Correctness per backend and operator (scenarios ok, failed, skipped)",
        ["backend", *operators],
        _correctness(rows, backends),
    )
    fastest = _fastest(rows)
    if fastest:
        out.table(
            "Fastest backend per scenario (median prepared call)",
            ["scenario", "fastest", "median time", "next fastest", "next is slower by"],
            fastest,
        )


def _scenarios(args: argparse.Namespace) -> list[Any]:
    from di.testing import Scenario, default_scenarios

    if args.scenarios:
        loaded = load_object(args.scenarios, "function")
        given = loaded() if callable(loaded) else loaded
        expected = f"--scenarios {args.scenarios} must give a list of di.testing.Scenario"
        try:
            scenarios = list(given)
        except TypeError:
            raise UsageError(f"{expected}, not a {type(given).__name__}") from None
        wrong = [item for item in scenarios if not isinstance(item, Scenario)]
        if wrong:
            raise UsageError(f"{expected}, not one holding {type(wrong[0]).__name__} {wrong[0]!r}")
    else:
        scenarios = default_scenarios()
    if args.operators:
        wanted = set(split(args.operators))
        scenarios = [s for s in scenarios if s.operator in wanted]
    if args.keyword:
        scenarios = [s for s in scenarios if args.keyword in s.name]
    if not scenarios:
        raise UsageError("no scenario left after --operators / -k")
    return scenarios


def _timings(
    backends: list[Any], scenarios: list[Any], ran: set[tuple[str, str]], progress: Progress
) -> dict[tuple[str, str], dict[str, Any]]:
    from di.testing import backend_label, benchmark_differentiation

    timings: dict[tuple[str, str], dict[str, Any]] = {}
    for backend in backends:
        for scenario in scenarios:
            key = (backend_label(backend), scenario.name)
            if key in ran:
                row = benchmark_differentiation(backend, [scenario], prepared=(True,), min_time=0.01, max_samples=100)
                if row[0]["status"] == "ok":
                    timings[key] = row[0]
            progress.advance(f"{key[0]} {key[1]}", description="timing")
    return timings


def run(args: argparse.Namespace, out: Output) -> int:
    """``di`` without a command: every scenario on every backend.

    Returns:
        The exit status: 1 when a backend disagrees with a reference, else 0.

    Raises:
        UsageError: bad options, or no scenario left.
    """
    from di.testing import backend_label, iter_cases, run_case

    scenarios = _scenarios(args)  # first: the --scenarios module may define the backends --backends names
    backends = parse_backends(args.backends)
    labels = [backend_label(b) for b in backends]
    start = time.perf_counter()
    try:
        cases = list(iter_cases(backends, scenarios, split(args.prep_modes)))
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
            timings = _timings(backends, scenarios, ran, progress)
    for result in results:  # "AutoFiniteDiff(method=..., step=None) does not ..." -> "finitediff does not ..."
        for backend in backends:
            result.message = result.message.replace(repr(backend), backend_label(backend))
    rows = _scenario_rows(results, timings)
    _print_tables(out, rows, labels, args.quiet)
    failed = [r for r in results if r.status == "failed"]
    if failed:
        out.line("")
        out.line(f"Disagreements with the reference ({len(failed)}):", style="bold red")
        for r in failed:
            out.line(f"  {r.line()}")
    sweep_rows = _sweep(out, args, backends) if args.plot else []
    if args.json:
        write_json(args.json, rows + sweep_rows)
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


def _sweep(out: Output, args: argparse.Namespace, backends: list[Any]) -> list[dict[str, Any]]:
    """The size sweep of the plain ``di`` command: ``sum(sin(x) * x)``'s gradient."""
    import numpy as np

    from di.cli.sweep import sweep
    from di.testing import Scenario
    from di.testing.scenarios import sum_sin

    def make_scenario(size: int) -> Any:
        x = np.random.default_rng(0).standard_normal(size)
        return Scenario("gradient", sum_sin, x, name=f"sum_sin gradient float64 ({size},)")

    return sweep(out, make_scenario, "sum_sin", "gradient", backends, parse_sizes(args.sizes), "float64", args.plot)
