"""A program followed by the conversion of its result for the caller, kept as its
parts: a prep's runner calls them itself, one Python call fewer per part on the
hot path.

A program may be finished several times over (the engine's ``aux`` joined, the
result put in the caller's key order, ``aux`` laid out): the parts are kept as a
flat tuple of steps, which the runner calls one after the other in its own frame
(no function composing them). A step may be a *cell*, a one-element list holding
the function: a step that learns a faster form of itself from the first result
(:func:`di.operators.order.in_caller_order`) puts it there, and the runner reads
the cell at each call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Finish", "Step", "composed_steps", "finish_steps", "finished", "split_finish", "with_steps"]

Finish = Callable[[Any], Any]
"""What turns a program's result into the caller's (its array family, its layout)."""

Step = Finish | list[Finish]
"""One step of a finish: the function, or a cell holding it (read at each call)."""


def finished(program: Callable[..., Any], finish: Finish) -> Callable[..., Any]:
    """``program`` followed by ``finish`` (the conversion of its result for the
    caller), as one function that keeps its parts: a prep's runner calls them
    itself, one Python call fewer per part on the hot path. ``finish`` with a
    ``cell`` attribute (a one-element list) is called through it.

    Examples:
        >>> from di.prep.finish import finish_steps, finished, split_finish
        >>> run = finished(finished(lambda x: x + 1, str), len)
        >>> run(10), split_finish(run)[1]("abc"), len(finish_steps(run)[1])
        (2, 3, 2)
    """

    cell = getattr(finish, "cell", None)
    return with_steps(program, (finish if cell is None else cell,))


def with_steps(program: Callable[..., Any], steps: tuple[Step, ...]) -> Callable[..., Any]:
    """``program`` followed by ``steps`` (as :func:`finish_steps` gives them), as
    :func:`finished` makes it; ``program`` itself when there are none.

    Examples:
        >>> from di.prep.finish import finish_steps, finished, with_steps
        >>> inner, steps = finish_steps(finished(finished(lambda x: x + 1, str), len))
        >>> with_steps(inner, steps[:1])(10), with_steps(inner, ())(10)
        ('11', 11)
    """
    if not steps:
        return program
    inner, own = finish_steps(program)
    steps = (*own, *steps)
    composed = composed_steps(steps)

    def run(*args: Any) -> Any:
        return composed(inner(*args))

    run.finish_parts = (inner, steps)  # type: ignore[attr-defined]
    return run


def _call(step: Step, result: Any) -> Any:
    return step[0](result) if step.__class__ is list else step(result)  # type: ignore[operator, index]


def composed_steps(steps: tuple[Step, ...]) -> Finish:
    """The steps as one function (off the runners' path: a program called as it is, a slow path)."""
    if len(steps) == 1 and steps[0].__class__ is not list:
        return steps[0]  # type: ignore[return-value]

    def composed(result: Any) -> Any:
        for step in steps:
            result = _call(step, result)
        return result

    return composed


def finish_steps(program: Callable[..., Any]) -> tuple[Callable[..., Any], tuple[Step, ...]]:
    """``(program, steps)`` of a program made by :func:`finished` (the innermost
    program and its finishing steps, first to last), else ``(program, ())``."""
    parts = getattr(program, "finish_parts", None)
    return (program, ()) if parts is None else parts


def split_finish(program: Callable[..., Any]) -> tuple[Callable[..., Any], Finish | None]:
    """``(program, finish)`` of a program made by :func:`finished` (its steps as
    one function), else ``(program, None)``."""
    inner, steps = finish_steps(program)
    return (program, None) if not steps else (inner, composed_steps(steps))
