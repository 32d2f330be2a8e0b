"""The compiled Hessian's program, chosen at preparation (:func:`hessian_programs`):
forward over reverse (``jax.hessian``, ``jacfwd(jacrev(f))``) or reverse over
reverse (``jacrev(jacrev(f))``).

Which one is faster depends on ``f``, and XLA's cost analysis does not tell them
apart: on the CPU at n = 1e3, float32, both programs read the same bytes for
every ``f`` tried, while reverse over reverse ran in 0.30 of forward's time for
``sum(x**2)``, 0.80 for the extended Rosenbrock and 0.82 for ``sum(cumsum(x)**2)``,
and in 1.7-1.8x for ``sum(x**2)**2`` and ``logsumexp`` and 12x for
``sum(sin(x) x)``. So a square Hessian under jit of at least
:data:`MEASURED_MIN_SIZE` elements compiles both and times them at the prepared
``x`` (:func:`faster_of`); forward over reverse, JAX's own ``jax.hessian``, is kept
unless reverse over reverse is clearly faster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from di.backends.choosing import timed_choice
from di.backends.processes import processes_of
from di.backends.protocol import Programs
from di.engines.jax.programs import size

__all__ = ["HESSIAN_SPELLINGS", "MEASURED_MIN_SIZE", "REVERSE_TIME_RATIO", "hessian_programs"]

MEASURED_MIN_SIZE = 64
"""The least size of ``x`` whose Hessian program is measured (both compiled and
timed at preparation); below it both run in tens of microseconds and the second
compile costs more than a choice can save."""

REVERSE_TIME_RATIO = 0.85
"""Reverse over reverse is chosen when its best time is at most this fraction of
forward over reverse's: a near-tie keeps JAX's own ``jax.hessian``."""

HESSIAN_SPELLINGS = {
    "forward": "jax.hessian (forward over reverse: jacfwd(jacrev(f)))",
    "reverse": "jacrev(jacrev(f)) (reverse over reverse)",
}


def _calls_back(executables: Sequence[Any]) -> bool:
    """Whether a compiled program calls back into Python (``jax.pure_callback``,
    ``io_callback``, ``jax.debug.print``, a ``di.DifferentiateWith`` inside ``f``):
    running it at preparation would run the caller's code, so it is not timed."""
    for executable in executables:
        try:
            if "callback" in executable.as_text():
                return True
        except Exception:  # pragma: no cover - an executable without its text: not timed
            return True
    return not executables


def hessian_programs(
    build: Callable[[bool, list[Any]], Programs],
    x: Any,
    values: Sequence[Any],
    compiled: bool,
) -> Programs:
    """The Hessian's programs: ``build(forward, compiled_now)`` makes one candidate
    (``compiled_now`` receives its executables compiled now). ``compiled``: under
    jit, with untraced inputs; then, for an ``x`` of at least
    :data:`MEASURED_MIN_SIZE` elements, both candidates are built and timed
    (:func:`faster_of`), unless a program calls back into Python or the values
    span several processes (which must all choose alike: forward over reverse,
    with no timing). Each program names its spelling and how it was
    chosen (the prep's ``info``)."""
    executables: list[Any] = []
    forward = build(True, executables)
    measured = compiled and size(x) >= MEASURED_MIN_SIZE and processes_of([x, *values]) is None
    if not measured or _calls_back(executables):
        return forward
    reverse = build(False, [])
    plain = next(iter(forward))

    def run(programs: Programs) -> Callable[[], Any]:
        return lambda: jax.block_until_ready(programs[plain](x, *values))

    return timed_choice(
        forward,
        reverse,
        run,
        REVERSE_TIME_RATIO,
        lambda chosen_reverse, ratio: (
            f"{HESSIAN_SPELLINGS['reverse' if chosen_reverse else 'forward']}, chosen by timing both compiled "
            f"programs at preparation (reverse over reverse took {ratio:.2f} of forward over reverse's time)"
        ),
    )  # (a checkify error of f at x0 keeps forward: the calls will raise it)
