"""Choosing between two compiled programs at preparation by timing them
(:func:`faster_of`): where an engine offers two spellings of one operator whose
speed depends on ``f`` in a way no cost estimate tells (JAX's Hessian, forward or
reverse over reverse; PyTensor's Jacobian, vectorized or scanned pullbacks).

A choice made so may differ between machines and runs on near-ties: the default
is kept unless the other is clearly faster, and an engine does not time programs
whose values span several processes (which must all choose alike).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from di.backends.protocol import Programs

__all__ = ["BUDGET_S", "MAX_ROUNDS", "faster_of", "timed_choice"]

BUDGET_S = 0.1
"""What a timing at preparation spends at most, after one call of each: at least
two and at most :data:`MAX_ROUNDS` timed calls of each are made."""

MAX_ROUNDS = 12


def faster_of(
    default: Callable[[], Any],
    other: Callable[[], Any],
    at_most: float = 0.85,
    budget_s: float = BUDGET_S,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[bool, float]:
    """Whether ``other`` is clearly faster than ``default``, and the ratio of their
    best times (``other / default``): both called once, then timed interleaved, at
    least twice each and while the budget lasts (by ``clock``); ``other`` wins when
    its best time is at most ``at_most`` of ``default``'s.

    Examples:
        >>> from di.backends.choosing import faster_of
        >>> now = [0]
        >>> def taking(ticks):
        ...     def run():
        ...         now[0] += ticks
        ...     return run
        >>> faster_of(taking(10), taking(1), clock=lambda: now[0])
        (True, 0.1)
        >>> faster_of(taking(10), taking(9), clock=lambda: now[0])
        (False, 0.9)
    """
    thunks, best = (default, other), [float("inf"), float("inf")]
    default(), other()
    start = clock()
    rounds = 0
    while rounds < 2 or (clock() - start < budget_s and rounds < MAX_ROUNDS):
        for i in (0, 1) if rounds % 2 == 0 else (1, 0):
            began = clock()
            thunks[i]()
            best[i] = min(best[i], clock() - began)
        rounds += 1
    ratio = best[1] / best[0] if best[0] > 0 else 1.0
    return ratio <= at_most, ratio


def timed_choice(
    default: Programs,
    other: Programs,
    run: Callable[[Programs], Callable[[], Any]],
    at_most: float,
    describe: Callable[[bool, float], str],
) -> Programs:
    """``other`` where :func:`faster_of` finds ``run(other)`` clearly faster than
    ``run(default)``, else ``default``; each chosen program's ``spelling`` (what
    ``prep.info`` shows) becomes ``describe(other_chosen, ratio)``.

    If a timed call raises (``f`` fails at the prepared point), ``default`` is kept
    as it is: the calls will raise the same error to the caller.

    Examples:
        >>> from di.backends.choosing import timed_choice
        >>> class Program:
        ...     spelling = ""
        ...     def __call__(self):
        ...         pass
        >>> default, other = {"jacobian": Program()}, {"jacobian": Program()}
        >>> chosen = timed_choice(default, other, lambda p: p["jacobian"], 1e9, lambda o, r: f"other: {o}")
        >>> chosen is other, other["jacobian"].spelling
        (True, 'other: True')
    """
    try:
        chose_other, ratio = faster_of(run(default), run(other), at_most)
    except Exception:
        return default
    programs = other if chose_other else default
    spelling = describe(chose_other, ratio)
    for program in programs.values():
        program.spelling = spelling  # type: ignore[attr-defined]
    return programs
