"""``di check MODULE:FUNCTION``: the user's function on every backend, against a
float64 reference from the most accurate backend that computes it."""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from di.cli.common import (
    EXIT_DISAGREE,
    EXIT_OK,
    UsageError,
    default_backends,
    parse_backends,
    parse_shape,
    parse_sizes,
)
from di.cli.functions import ContextOption, add_context_options, check_arity, load_object, output_shape, point
from di.cli.output import Output, Progress, number, seconds, short, write_json
from di.cli.sweep import MATRIX_OPERATORS

__all__ = ["Problem", "add_arguments", "add_function_arguments", "run"]

SCALAR_OPERATORS = ("derivative", "second_derivative")


def add_function_arguments(parser: argparse.ArgumentParser) -> None:
    """The options naming the user's function and its arguments (``check`` and ``plan``)."""
    parser.add_argument("function", metavar="MODULE:FUNCTION", help="e.g. mypackage.losses:loss or path/to/file.py:f")
    parser.add_argument(
        "--x-shape",
        default="100",
        metavar="SHAPE",
        help="shape of x, e.g. 100 or 3,4 ('' for a scalar; default: %(default)s)",
    )
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"], help="default: %(default)s")
    parser.add_argument(
        "--operator", default="gradient", help="gradient (default), jacobian, hessian, hvp, pushforward, ..."
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random x and tangents (default: 0)")
    add_context_options(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``di check``."""
    add_function_arguments(parser)
    parser.add_argument(
        "--sparse",
        action="store_true",
        help="jacobian/hessian with di.AutoSparse(backend); also report the nonzeros of a dense result at another "
        "random point that lie outside the prepared pattern",
    )


class Problem:
    """The user's function with what it is differentiated at: operator, shape,
    dtype, seed and contexts, as the command line gave them.

    Args:
        args: the parsed options of ``check`` or ``plan``.

    Raises:
        UsageError: an unknown operator, a function that does not import, or
            contexts that do not match its arguments.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        import di
        from di.testing import OPERATORS

        if args.operator not in OPERATORS:
            raise UsageError(f"--operator must be one of {', '.join(OPERATORS)}, not {args.operator!r}")
        if OPERATORS[args.operator].missing(di):
            raise UsageError(f"--operator {args.operator}: not available in this di version")
        self.name: str = args.function
        self.f: Callable[..., Any] = load_object(args.function)
        if not callable(self.f):
            raise UsageError(f"{args.function} is a {type(self.f).__name__}, not a function")
        self.operator: str = args.operator
        self.spec = OPERATORS[args.operator]
        self.shape = () if args.operator in SCALAR_OPERATORS else parse_shape(args.x_shape)
        self.dtype: str = args.dtype
        self.seed: int = args.seed
        self.options: list[ContextOption] = list(args.contexts or [])
        check_arity(self.f, self.name, len(self.options))
        self.values = [option.value(i, self.seed) for i, option in enumerate(self.options)]

    def contexts(self, dtype: str) -> tuple[Any, ...]:
        """The contexts, floating arrays in ``dtype``."""
        return tuple(option.context(value, dtype) for option, value in zip(self.options, self.values))

    def x(self, dtype: str, shape: tuple[int, ...] | None = None, offset: int = 0) -> Any:
        """The random point (another one for each ``offset``)."""
        return point(self.shape if shape is None else shape, dtype, self.seed + offset)

    def tangents(self, x: Any, dtype: str, contexts: Sequence[Any]) -> tuple[Any, ...] | None:
        """A random tangent (shaped like ``x``, or like ``f(x)`` for ``pullback``), or ``None``."""
        if not self.spec.takes_tangents:
            return None
        if self.operator == "pullback":
            shape = output_shape(self.f, x, [context.value for context in contexts])
        else:
            shape = tuple(x.shape)
        return (point(shape, dtype, self.seed + 1),)

    def scenario(self, dtype: str, reference: Any = None, shape: tuple[int, ...] | None = None) -> Any:
        """The check as a :class:`di.testing.Scenario`, prepared at its own point."""
        import numpy as np

        from di.testing import PrepArgs, Scenario

        x, contexts = self.x(dtype, shape), self.contexts(dtype)
        tangents = self.tangents(x, dtype, contexts)
        references = {} if reference is None else {self.spec.call_result: reference}
        return Scenario(
            self.operator,
            self.f,
            x,
            contexts=contexts,
            tangents=tangents,
            name=f"{getattr(self.f, '__name__', 'f')} {self.operator} {dtype} {tuple(x.shape)}",
            prep_args=PrepArgs(np.array(x, copy=True), tangents, self.contexts(dtype)),
            **references,
        )


def _reference(problem: Problem) -> tuple[Any, str]:
    """The float64 result of the most accurate backend that computes it (automatic
    differentiation before finite differences: the tightest default tolerances)."""
    import di
    from di.testing import backend_label, default_tolerances

    candidates = sorted(default_backends(), key=lambda b: default_tolerances(b, "float64", problem.spec.order))
    scenario = problem.scenario("float64")
    t_args = (scenario.tangents,) if problem.spec.takes_tangents else ()
    for backend in candidates:
        try:
            result = getattr(di, problem.spec.call)(problem.f, backend, scenario.x, *t_args, *scenario.contexts)
        except Exception:
            continue
        return result, backend_label(backend)
    return None, "none (every backend failed)"


def _pattern_check(problem: Problem, backend: Any) -> tuple[int, str]:
    """``di check --sparse``: the pattern prepared at the check's point against the
    nonzeros of a dense result at another random point (a pattern that depends on
    x is the caller's responsibility: this is how they find out)."""
    import numpy as np

    import di
    from di.testing import default_tolerances
    from di.testing.arrays import to_numpy

    contexts = problem.contexts(problem.dtype)
    prepare = getattr(di, f"prepare_{problem.operator}")
    prep = prepare(problem.f, di.AutoSparse(backend), problem.x(problem.dtype), *contexts)
    other = problem.x(problem.dtype, offset=7)
    dense = to_numpy(getattr(di, problem.operator)(problem.f, backend, other, *problem.contexts(problem.dtype)))
    pattern = prep.sparsity
    dense = np.asarray(dense, dtype=np.float64).reshape(pattern.shape)
    # an approximating backend's zeros are its noise (finite differences: truncation and
    # rounding error on every entry), not structure: entries within the error its
    # tolerances allow of the largest one are not nonzeros (exact engines: rounding only)
    rtol, atol = default_tolerances(backend, problem.dtype, order=2 if problem.operator == "hessian" else 1)
    floor = atol + rtol * float(np.max(np.abs(dense), initial=0.0))
    outside = int(np.count_nonzero((np.abs(dense) > floor) & ~pattern.toarray()))
    note = f"pattern: {pattern.nnz} nonzeros, {prep.colors} colors"
    if outside:
        return outside, f"{note}; a dense {problem.operator} at another random point has {outside} nonzeros OUTSIDE it"
    return 0, note


def _check_one(problem: Problem, backend: Any, reference: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One backend's row: status, errors against the reference, timings, error and note."""
    import di
    from di.testing import Case, backend_label, benchmark_differentiation, run_case

    run_on = di.AutoSparse(backend) if args.sparse else backend
    scenario = problem.scenario(problem.dtype, reference)
    result = run_case(Case(run_on, scenario, "prepared"), rtol=args.rtol, atol=args.atol)
    error, note = "", ""
    if result.status == "skipped":
        status, note = "skip", result.message
    elif result.status == "passed":
        status = "ok"
    else:
        status, error = ("ERROR" if result.error is not None else "DIFF"), result.message
    timing: dict[str, Any] = {}
    if status in ("ok", "DIFF") and result.error is None and not args.no_bench:
        timing = benchmark_differentiation(run_on, [scenario], prepared=(True,), min_time=0.05)[0]
    if args.sparse and status == "ok":
        outside, note = _pattern_check(problem, backend)
        if outside:
            status, error = "DIFF", f"{outside} nonzeros outside the prepared pattern"
    return {
        "kind": "check",
        "backend": backend_label(backend) + (" (sparse)" if args.sparse else ""),
        "function": problem.name,
        "operator": problem.operator,
        "dtype": problem.dtype,
        "shape": list(problem.shape),
        "status": status,
        "max_abs_error": result.max_abs_error,
        "max_rel_error": result.max_rel_error,
        "time_median": timing.get("time_median", math.nan),
        "time_min": timing.get("time_min", math.nan),
        "compile_time": timing.get("compile_time", math.nan),
        "calls": timing.get("calls"),
        "message": error,
        "note": note,
    }


def _print_rows(out: Output, title: str, rows: list[dict[str, Any]]) -> None:
    out.table(
        title,
        ["backend", "status", "max abs diff", "max rel diff", "median time", "compile", "f calls", "error", "notes"],
        [
            [
                r["backend"],
                r["status"],
                number(r["max_abs_error"]),
                number(r["max_rel_error"]),
                seconds(r["time_median"]),
                seconds(r["compile_time"]),
                "-" if r["calls"] is None else str(r["calls"]),
                short(r["message"], 80),
                short(r["note"], 80),
            ]
            for r in rows
        ],
    )
    failed = [r for r in rows if r["message"]]
    if failed:  # the table cuts each message: the cause and the fix di's errors carry, in full
        out.line()
        out.line("errors in full:")
        for r in failed:
            out.line(
                textwrap.fill(f"{r['backend']}: {' '.join(r['message'].split())}", width=100, subsequent_indent="    ")
            )


def run(args: argparse.Namespace, out: Output) -> int:
    """``di check MODULE:FUNCTION``.

    Returns:
        The exit status: 1 when a backend fails or disagrees, else 0.

    Raises:
        UsageError: bad options, or a function that does not import.
    """
    problem = Problem(args)
    if args.sparse and problem.operator not in MATRIX_OPERATORS:
        raise UsageError(f"--sparse checks jacobian or hessian, not {problem.operator}")
    backends = parse_backends(args.backends)
    reference, reference_label = _reference(problem)
    n_contexts = len(problem.options)
    contexts = f", {n_contexts} context{'s' if n_contexts > 1 else ''}" if n_contexts else ""
    out.line(
        f"di check {problem.name}: {problem.operator}, x {problem.dtype} {problem.shape}{contexts} "
        f"(seed {problem.seed}); reference: {reference_label} in float64"
    )
    rows: list[dict[str, Any]] = []
    with Progress(len(backends), "checking") as progress:
        for backend in backends:
            rows.append(_check_one(problem, backend, reference, args))
            progress.advance(rows[-1]["backend"])
    _print_rows(out, f"{problem.name}: {problem.operator} against {reference_label} (float64)", rows)
    sweep_rows = _sweep(out, problem, backends, args) if args.plot else []
    if args.json:
        write_json(args.json, rows + sweep_rows)
    failures = sum(r["status"] in ("ERROR", "DIFF") for r in rows)
    skipped = sum(r["status"] == "skip" for r in rows)
    skips = f" ({skipped} of {len(rows)} skipped: see the notes)" if skipped else ""
    if failures:
        out.line(f"{failures} of {len(rows)} backends failed or disagree{skips}.", style="bold red")
        return EXIT_DISAGREE
    out.line(f"Every backend that ran agrees with the reference{skips}.", style="bold green")
    return EXIT_OK


def _sweep(out: Output, problem: Problem, backends: list[Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    import numpy as np

    from di.cli.sweep import sweep

    if any(isinstance(value, np.ndarray) and value.ndim for value in problem.values):
        raise UsageError("--plot sweeps the size of x, which array contexts of a fixed shape cannot follow")
    name = getattr(problem.f, "__name__", "f")
    return sweep(
        out,
        lambda size: problem.scenario(problem.dtype, shape=(size,)),
        name,
        problem.operator,
        backends,
        parse_sizes(args.sizes),
        problem.dtype,
        args.plot,
    )
