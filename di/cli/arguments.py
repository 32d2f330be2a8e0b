"""The command line's parser: the options every command shares, and each command's."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from di.cli.common import UsageError, add_engine_option, parse_sizes

__all__ = ["COMMANDS", "build_parser", "check_arguments"]

COMMANDS = ("check", "plan")
"""The subcommands; without one, ``di`` runs the built-in scenarios."""


def _backends_help() -> str:
    from di.testing.labels import known_labels

    return (
        f"comma-separated backends: {', '.join(known_labels())}, or name(option=value) "
        f"(default: every installed engine, and the compiled variants di.AutoFastest tries)"
    )


def common_options() -> argparse.ArgumentParser:
    """The options of the scenario table and of ``check``."""
    common = argparse.ArgumentParser(add_help=False)
    add_engine_option(common)
    common.add_argument("--backends", help=_backends_help())
    common.add_argument("--json", metavar="FILE", help="write the rows as JSON to FILE")
    common.add_argument(
        "--plot", metavar="FILE.png", help="draw median time per prepared call against input size (needs matplotlib)"
    )
    common.add_argument(
        "--sizes",
        default="10,1000,100000",
        help="input sizes of the --plot sweep, comma-separated (default: %(default)s)",
    )
    common.add_argument("--rtol", type=float, help="relative tolerance (default: per backend and dtype)")
    common.add_argument("--atol", type=float, help="absolute tolerance (default: per backend and dtype)")
    common.add_argument("--no-bench", action="store_true", help="check correctness only, no timings")
    return common


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and each command's own (which reports its own usage).

    Returns:
        ``(parser, {command: its parser})``.

    Examples:
        >>> from di.cli.arguments import build_parser
        >>> parser, commands = build_parser()
        >>> commands["check"].parse_args(["m:f", "--no-bench"]).no_bench
        True
    """
    from di.cli import check, plan, scenarios

    common = common_options()
    parser = argparse.ArgumentParser(
        prog="di",
        description="Run di's scenarios on every installed differentiation backend and compare them.",
        parents=[common],
    )
    scenarios.add_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="{check,fuzz,plan}")
    commands = {
        "check": subparsers.add_parser(
            "check",
            parents=[common],
            help="check your own function on every backend",
            description="Differentiate MODULE:FUNCTION on every backend, compare with a float64 reference, time "
            "it. Arguments of f after x are given with --constant and --cache-buffer, in f's order.",
        ),
        "fuzz": subparsers.add_parser(
            "fuzz",
            parents=[common],
            help="differentiate random array-API programs on every backend and compare them",
            description="Draw random programs (chains of array-API operations), differentiate each on every "
            "installed backend, unprepared and prepared, and compare with a high-accuracy finite difference; "
            "print each disagreement, shrunk, as a ready-to-paste test.",
        ),
        "plan": subparsers.add_parser(
            "plan",
            help="find the fastest backend for your function (di.AutoFastest)",
            description="Prepare MODULE:FUNCTION with di.AutoFastest and print its plan: every candidate backend, "
            "checked against the others and timed on this machine.",
        ),
    }
    check.add_arguments(commands["check"])
    fuzz = commands["fuzz"]
    fuzz.add_argument("--minutes", type=float, default=1.0, help="the time budget in minutes (default 1)")
    fuzz.add_argument("--seed", type=int, default=0, help="the seed of the programs drawn (default 0)")
    fuzz.add_argument("--compiled", action="store_true", help="compare the compiling selectors too")
    plan.add_arguments(commands["plan"])
    return parser, commands


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse, before any work, option values that would fail late or mean nothing:
    a negative or non-finite ``--rtol``/``--atol``, a negative ``--seed``, ``--sizes``
    that are not positive integers, and a ``--json``/``--plot``/``--cache`` file in a
    folder that does not exist.

    Raises:
        UsageError: the first such value.

    Examples:
        >>> import argparse
        >>> from di.cli.arguments import check_arguments
        >>> check_arguments(argparse.Namespace(rtol=-1.0))
        Traceback (most recent call last):
        ...
        di.cli.common.UsageError: --rtol must be a finite number >= 0, not -1.0
    """
    for option in ("rtol", "atol"):
        value = getattr(args, option, None)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"--{option} must be a finite number >= 0, not {value!r}")
    seed = getattr(args, "seed", None)
    if seed is not None and seed < 0:
        raise UsageError(f"--seed must be an integer >= 0, not {seed}")
    sizes = getattr(args, "sizes", None)
    if sizes is not None:
        parse_sizes(sizes)  # read again where the sweep runs; refused here, before the run it follows
    for option in ("json", "plot", "cache"):
        path = getattr(args, option, None)
        if path and not Path(path).parent.is_dir():
            raise UsageError(f"--{option} {path}: the folder {str(Path(path).parent)!r} does not exist")
