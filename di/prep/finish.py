"""A program followed by the conversion of its result for the caller, kept as its
two parts: a prep's runner calls them itself, one Python call fewer on the hot path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Finish", "finished", "split_finish"]

Finish = Callable[[Any], Any]
"""What turns a program's result into the caller's (its array family, its layout)."""


def finished(program: Callable[..., Any], finish: Finish) -> Callable[..., Any]:
    """``program`` followed by ``finish`` (the conversion of its result for the
    caller), as one function that keeps its two parts: a prep's runner calls them
    itself, one Python call fewer on the hot path.

    Examples:
        >>> from di.prep.finish import finished, split_finish
        >>> run = finished(lambda x: x + 1, str)
        >>> run(1), split_finish(run)[1] is str
        ('2', True)
    """

    inner, first = split_finish(program)
    if first is not None:  # one finish after the other, around the innermost program
        program, finish = inner, _then(first, finish)

    def run(*args: Any) -> Any:
        return finish(program(*args))

    run.finish_parts = (program, finish)  # type: ignore[attr-defined]
    return run


def _then(first: Finish, second: Finish) -> Finish:
    def both(result: Any) -> Any:
        return second(first(result))

    return both


def split_finish(program: Callable[..., Any]) -> tuple[Callable[..., Any], Finish | None]:
    """``(program, finish)`` of a program made by :func:`finished`, else
    ``(program, None)``."""
    parts = getattr(program, "finish_parts", None)
    return (program, None) if parts is None else parts
