"""Programs that check their own arguments (an ahead-of-time compiled executable
refuses another pytree structure, shape or dtype): how they say so, and how a
non-strict prep has them compile again instead."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ArgumentsRejected", "checked_by_executable", "checks_arguments", "compiling_again"]


class ArgumentsRejected(Exception):
    """Raised by a program that checks its own arguments (an ahead-of-time compiled
    executable: it refuses another pytree structure, shape or dtype) when it
    refuses a call's. The prep's runner then builds the mismatch report of a strict
    prep, or runs the program again inside :func:`compiling_again`."""


_AGAIN = threading.local()


@contextlib.contextmanager
def compiling_again() -> Iterator[None]:
    """Within this block a program that checks its own arguments runs arguments it
    refuses through its compile-on-call function (a new compile) instead of raising
    :class:`ArgumentsRejected`: what a non-strict prep does with other arguments."""
    before = getattr(_AGAIN, "on", False)
    _AGAIN.on = True
    try:
        yield
    finally:
        _AGAIN.on = before


def checked_by_executable(executable: Callable[..., Any], function: Callable[..., Any]) -> Callable[..., Any]:
    """A program that calls ``executable`` (compiled for the prepared arguments,
    which refuses others with a ``TypeError``) and, for arguments it refuses,
    raises :class:`ArgumentsRejected`, or inside :func:`compiling_again` calls
    ``function`` (which compiles for them). Marked ``checks_arguments``, so a
    strict prep's runner leaves the comparison of ``x`` to it. An ``executable``
    with a ``cell`` attribute (a one-element list) is called through it: an
    executable compiled by its first call puts the compiled one there.

    Examples:
        >>> from di.prep.own_checks import ArgumentsRejected, checked_by_executable, compiling_again
        >>> def executable(x):
        ...     if not isinstance(x, int):
        ...         raise TypeError("compiled for int")
        ...     return x + 1
        >>> run = checked_by_executable(executable, lambda x: x + 0.5)
        >>> run(1)
        2
        >>> with compiling_again():
        ...     run(1.0)
        1.5
    """

    # (an executable compiled by its first call gives the compiled one in its cell once it exists)
    cell: list[Callable[..., Any]] = getattr(executable, "cell", None) or [executable]

    def run(*args: Any) -> Any:
        try:
            return cell[0](*args)
        except TypeError:
            if getattr(_AGAIN, "on", False):
                return function(*args)
            raise ArgumentsRejected() from None

    run.checks_arguments = True  # type: ignore[attr-defined]
    run.executable = executable  # type: ignore[attr-defined]
    return run


def checks_arguments(program: Callable[..., Any]) -> bool:
    """Whether ``program`` checks its own arguments (see :func:`checked_by_executable`)."""
    return bool(getattr(program, "checks_arguments", False))
