"""``di plan MODULE:FUNCTION``: which backend :class:`di.AutoFastest` picks for the
user's function on this machine, and why the others lost."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from di.cli.check import Problem, add_function_arguments
from di.cli.common import EXIT_DISAGREE, EXIT_OK, UsageError, add_engine_option, parse_backends
from di.cli.output import Output
from di.cli.sweep import MATRIX_OPERATORS

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``di plan``."""
    from di.families import families

    add_function_arguments(parser)
    parser.add_argument(
        "--family",
        default="numpy",
        choices=[family.name for family in families()],
        help="array family of x and of the array contexts (default: %(default)s)",
    )
    parser.add_argument("--budget", type=float, default=1.0, help="seconds spent timing the candidates (default 1)")
    add_engine_option(parser)
    parser.add_argument("--backends", help="the candidates, comma-separated as for check (default: AutoFastest's)")
    parser.add_argument("--rtol", type=float, help="relative agreement tolerance (default: by dtype)")
    parser.add_argument("--atol", type=float, help="absolute agreement tolerance (default: by dtype)")
    parser.add_argument("--cache", metavar="FILE.json", help="remember the plan in this JSON file (and reuse it)")
    parser.add_argument("--json", metavar="FILE", help="write the plan as JSON to FILE")
    parser.add_argument(
        "--sparse",
        action="store_true",
        help="jacobian/hessian: also time di.AutoSparse(candidate) for each candidate (sparse results)",
    )


def _in_family(context: Any, convert: Any) -> Any:
    import numpy as np

    import di

    value = convert(context.value) if isinstance(context.value, np.ndarray) else context.value
    return di.Cache(value) if isinstance(context, di.Cache) else di.Constant(value)


def run(args: argparse.Namespace, out: Output) -> int:
    """``di plan MODULE:FUNCTION``.

    Returns:
        The exit status: 1 when no candidate can be trusted (all fail, or no
        majority agrees), else 0.

    Raises:
        UsageError: bad options, or a function that does not import.
    """
    import di
    from di.families import converter
    from di.fastest.plan import CandidatesDisagreeError, selector_label

    problem = Problem(args)
    if args.sparse and problem.operator not in MATRIX_OPERATORS:
        raise UsageError(f"--sparse plans jacobian or hessian, not {problem.operator}")
    try:
        candidates = parse_backends(args.backends) if args.backends else None
        if args.sparse:
            dense = list(candidates) if candidates else list(di.AutoFastest().default_candidates())
            candidates = [*dense, *[di.AutoSparse(c) for c in dense if not c.sparse]]
        selector = di.AutoFastest(
            candidates,
            budget_s=args.budget,
            rtol=args.rtol,
            atol=args.atol,
            cache=args.cache,
        )
        to_family = converter("numpy", args.family)
    except (ValueError, TypeError, ImportError) as err:
        raise UsageError(str(err)) from err
    x, contexts = problem.x(problem.dtype), problem.contexts(problem.dtype)
    tangents = problem.tangents(x, problem.dtype, contexts)
    t_args = () if tangents is None else (tuple(to_family(t) for t in tangents),)
    x, contexts = to_family(x), tuple(_in_family(c, to_family) for c in contexts)
    out.line(
        f"di plan {problem.name}: {problem.operator}, x {args.family} {problem.dtype} {problem.shape}, "
        f"budget {args.budget:g} s"
    )
    try:
        prep = getattr(di, problem.spec.prepare)(problem.f, selector, x, *t_args, *contexts)
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
