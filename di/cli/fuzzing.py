"""``di fuzz``: the differential fuzzer (:mod:`di.testing.fuzz`) from the command line."""

from __future__ import annotations

import argparse

from di.cli.common import parse_backends
from di.cli.output import Output

__all__ = ["run"]


def run(args: argparse.Namespace, out: Output) -> int:
    """Fuzz for ``--minutes`` from ``--seed`` (on ``--backends``, by default every
    installed engine's); print each finding as a test and the counts by kind
    (:data:`di.testing.fuzz.KINDS`).

    Returns:
        0 when no backend disagreed, 1 otherwise.
    """
    from di.testing.fuzz import fuzz

    backends = parse_backends(args.backends) if args.backends else None
    report = fuzz(seconds=args.minutes * 60.0, seed=args.seed, backends=backends, log=print, compiled=args.compiled)
    counts = ", ".join(f"{kind}: {count}" for kind, count in report.counts().items())
    print(
        f"di fuzz: {report.programs} programs, {report.calls} calls compared; findings: {counts} "
        f"({report.doubtful} programs where every engine agreed against the reference, set aside)"
    )
    return 1 if report.findings else 0
