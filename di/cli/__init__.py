"""The ``di`` command (``python -m di``): which backends work on which functions, and how fast.

Commands:

* ``di`` runs :func:`di.testing.default_scenarios` on every installed backend (and
  the compiled variants :class:`di.AutoFastest` tries), prints a table (backend,
  scenario, max error against the analytic reference, median prepared-call
  time, status), the correctness of every backend x operator and the fastest
  backend per scenario. Exit status 1 when any backend disagrees with a
  reference (skips are not failures). Module :mod:`di.cli.scenarios`.
* ``di check MODULE:FUNCTION --x-shape 100 [--dtype float64] [--operator gradient]
  [--constant VALUE ...]`` runs the user's function on every installed backend,
  compares each result with a float64 reference from the most accurate backend
  that succeeds, and times prepared calls. Exit status 1 when a backend fails or
  disagrees. Module :mod:`di.cli.check`.
* ``di plan MODULE:FUNCTION --x-shape 1000 [--operator gradient] [--budget 1]``
  prepares the function with :class:`di.AutoFastest` and prints its plan: which
  backend is fastest for this function, size, dtype and array family
  (``--family``) on this machine, and why the others lost. Exit status 1 when
  no candidate can be trusted (all fail, or no majority agrees). Module
  :mod:`di.cli.plan`.

``di`` and ``check`` take ``--backends`` (labels such as ``jax-jit`` or
``finitediff-forward``, see :mod:`di.testing.labels`), ``--engine MODULE:NAME``
(an engine from outside ``di``, its record registered first; ``plan`` takes it
too), ``--json FILE`` (the rows)
and ``--plot FILE.png --sizes 10,1000,100000`` (median time per prepared call
against input size, log-log, one line per backend; needs matplotlib). Exit
status 2 for a usage error (bad option, import failure).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from di.cli.common import EXIT_USAGE, UsageError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``di`` command.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 when every backend agrees with the references, 1 when
        one disagrees or fails, 2 for a usage error.

    Raises:
        SystemExit: from argparse, for ``--help`` or unknown options (the
            command's own usage is printed).

    Examples:
        >>> from di.cli import main
        >>> main(["--backends", "finitediff", "--operators", "gradient", "-k", "sum_sin/f64",
        ...       "--no-bench", "--quiet"])  # doctest: +SKIP
        0
    """
    from di.cli import check, fuzzing, plan, scenarios
    from di.cli.arguments import build_parser, check_arguments
    from di.cli.functions import register_engines
    from di.cli.output import Output

    arguments = list(sys.argv[1:] if argv is None else argv)
    parser, commands = build_parser()
    if arguments and arguments[0] in commands:  # the command's parser, so its errors show its usage
        args = commands[arguments[0]].parse_args(arguments[1:])
        args.command = arguments[0]
    else:
        args = parser.parse_args(arguments)
    out = Output()
    runners = {"check": check.run, "fuzz": fuzzing.run, "plan": plan.run, None: scenarios.run}
    try:
        check_arguments(args)
        register_engines(args.engines)
        return runners[args.command](args, out)
    except UsageError as err:
        print(f"di: error: {err}", file=sys.stderr)
        return EXIT_USAGE
