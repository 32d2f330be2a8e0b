"""What a prepared runner (:mod:`di.prep.runners`) does when its comparison
fails, or when a program that checks its own arguments refuses them: ordinary
Python, off the hot path. The prep's check raises the report, or finds that the
arguments fit after all and the program runs on them as the prep sees them; a
probe of the implicit cache raises :class:`Missed` instead."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from di.prep.finish import Finish
from di.prep.own_checks import compiling_again
from di.prep.traced import plain

__all__ = ["Missed", "mismatched", "mismatched_with_tangents", "rejected"]


class Missed(Exception):
    """Raised by a probe (:func:`di.prep.runners.probe`) whose arguments differ from the prepared ones."""


def mismatched(check: Callable[..., None], program: Callable[..., Any], finish: Finish | None) -> Callable[..., Any]:
    """What a strict runner does when its comparison fails: the prep's check raises
    the report, or finds that the arguments fit after all (a memmap where an
    ndarray was prepared, an engine's traced value holding an array like the
    prepared one), and the program runs on them as the prep sees them.
    ``check``: the prep's (:meth:`di.prep.base.Prep.check`)."""

    def run_mismatched(f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> Any:
        check(f, backend, x, contexts)
        result = program(plain(x), *[plain(context.value) for context in contexts])
        return result if finish is None else finish(result)

    return run_mismatched


def mismatched_with_tangents(
    refuse: Callable[..., None], explain: Callable[..., None], program: Callable[..., Any], finish: Finish | None
) -> Callable[..., Any]:
    """:func:`mismatched` for a runner with tangents (``refuse`` and ``explain``: the
    prep's ``refuse_tangent_call`` and ``explain_error``)."""

    def run_mismatched(f: Any, backend: Any, x: Any, tangents: Any, contexts: Sequence[Any]) -> Any:
        refuse(f, backend, x, tangents, contexts)
        x, tangents = plain(x), tuple(plain(t) for t in tangents)
        values = [plain(context.value) for context in contexts]
        try:
            result = program(x, tangents, *values)
        except Exception as error:
            explain(error, x, tangents, [_Value(value) for value in values])
            raise
        return result if finish is None else finish(result)

    return run_mismatched


def rejected(
    check: Callable[..., None],
    strict: bool,
    matches: Callable[..., bool],
    program: Callable[..., Any],
    probing: bool = False,
) -> Callable[..., Any]:
    """What a runner does when a program that checks its own arguments refuses a
    call's: a strict prep reports the difference its check sees (a probe raises
    :class:`Missed`), and a difference only the compiler sees (such as a weak
    type), or any for a non-strict prep, is compiled again. ``check``,
    ``strict`` and ``matches``: the prep's."""

    def run_rejected(f: Any, backend: Any, x: Any, contexts: Sequence[Any], values: Sequence[Any]) -> Any:
        if probing:
            if not matches(x, contexts):
                raise Missed()
        elif strict:
            check(f, backend, x, contexts)
        with compiling_again():
            return program(x, *values)

    return run_rejected


class _Value:
    """A context's value, for :meth:`di.prep.base.Prep.explain_error` on the slow
    path (only the value is read there)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value
