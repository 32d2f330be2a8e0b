"""How the sparsity tracer's rules compute a traced result: the tape of a call's
arguments, element positions, the rows of dependencies an output takes from its
inputs (rearranged, joined, reduced over groups or whole lines, mapped by a
linear operator), and the rule factories for elementwise functions (sorted by
what their derivatives keep: :data:`PAIRS`) and reductions. The namespace
(:mod:`di.sparse.arrays.namespace`) and its extensions bind the array API's
names to rules made with these.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from di.sparse.arrays.tracer import Tape, Traced, cross, select, union

__all__ = [
    "PAIRS",
    "all_known",
    "along_lines",
    "axes_of",
    "binary",
    "computed",
    "elementwise",
    "everything",
    "joined",
    "lift",
    "linear_map",
    "positions_of",
    "rearranged",
    "reduced",
    "reduction",
    "rows_at",
    "stack_rows",
    "tape_of",
    "unary",
    "value_of",
    "zero_reduction",
]


def tape_of(arguments: Sequence[Any]) -> Tape | None:
    for argument in arguments:
        if isinstance(argument, Traced):
            return argument.tape
        if isinstance(argument, (list, tuple)):
            found = tape_of(argument)
            if found is not None:
                return found
    return None


def lift(value: Any, tape: Tape) -> Traced:
    if isinstance(value, Traced):
        return value
    return Traced(np.asarray(value), None, None, True, tape)


def value_of(value: Any) -> Any:
    return value.value if isinstance(value, Traced) else value


def positions_of(t: Traced) -> np.ndarray:
    return np.arange(t.size).reshape(t.shape)


def all_known(arguments: Sequence[Traced]) -> bool:
    return builtins.all(a.known for a in arguments)


def rows_at(t: Traced, positions: np.ndarray, value: np.ndarray, known: bool | None = None) -> Traced:
    """``t``'s rows at ``positions`` (``-1``: none), with the value given."""
    n = t.tape.n
    first = select(t.first, positions, n)
    second = select(t.second, positions, n * n)
    return Traced(value, first, second, t.known if known is None else known, t.tape)


def computed(function: Callable[..., Any], *values: Any, **options: Any) -> Any:
    with np.errstate(all="ignore"):
        return function(*values, **options)


def rearranged(function: Callable[..., Any], t: Traced, *args: Any, **options: Any) -> Traced:
    """``function`` (a rearrangement: reshape, indexing, ...) applied to ``t``."""
    positions = function(positions_of(t), *args, **options)
    return rows_at(t, np.asarray(positions), np.asarray(function(t.value, *args, **options)))


def joined(function: Callable[..., Any], arrays: Sequence[Any], **options: Any) -> Traced:
    """``function`` (concat, stack, ...) of several arrays, as one rearrangement."""
    tape = tape_of(arrays)
    assert tape is not None
    lifted = [lift(a, tape) for a in arrays]
    offsets = np.cumsum([0, *[a.size for a in lifted]])
    positions = function([positions_of(a) + offset for a, offset in zip(lifted, offsets)], **options)
    n = tape.n
    first = stack_rows([a.first for a in lifted], lifted, n)
    second = stack_rows([a.second for a in lifted], lifted, n * n)
    joined = Traced(np.zeros(0), first, second, all_known(lifted), tape)
    return rows_at(joined, np.asarray(positions), np.asarray(function([a.value for a in lifted], **options)))


def stack_rows(matrices: Sequence[sp.csr_array | None], arrays: Sequence[Traced], columns: int) -> Any:
    if builtins.all(m is None for m in matrices):
        return None
    blocks = [m if m is not None else sp.csr_array((a.size, columns), dtype=np.bool_) for m, a in zip(matrices, arrays)]
    return sp.csr_array(sp.vstack(blocks, format="csr"))


PAIRS: dict[str, Callable[[int], list[tuple[int, int]]]] = {
    "linear": lambda k: [],
    "piecewise": lambda k: [],
    "product": lambda k: [(0, 1)],
    "quotient": lambda k: [(0, 1), (1, 1)],
    "nonlinear": lambda k: [(i, j) for i in range(k) for j in range(i, k)],
}


def elementwise(kind: str, function: Callable[..., Any], *arguments: Any, **options: Any) -> Any:
    tape = tape_of(arguments)
    if tape is None:
        return computed(function, *arguments, **options)
    lifted = [lift(a, tape) for a in arguments]
    value = np.asarray(computed(function, *[a.value for a in lifted], **options))
    known = all_known(lifted)
    if kind == "zero":
        return Traced(value, None, None, known, tape)
    shape = value.shape
    broadcast = [np.broadcast_to(positions_of(a), shape) for a in lifted]
    if kind == "product":  # a constant zero factor removes the dependence
        zero = np.zeros(shape, dtype=np.bool_)
        for a in lifted:
            if a.first is None and a.known:
                zero |= np.broadcast_to(a.value == 0, shape)
        broadcast = [np.where(zero, -1, p) for p in broadcast]
    n = tape.n
    firsts = [select(a.first, p, n) for a, p in zip(lifted, broadcast)]
    first = union(firsts)
    second = None
    if tape.second_order:
        parts = [select(a.second, p, n * n) for a, p in zip(lifted, broadcast)]
        for i, j in PAIRS[kind](len(lifted)):
            parts.append(cross(firsts[i], firsts[j], n))
        second = union(parts)
    return Traced(value, first, second, known, tape)


def unary(kind: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(x: Any, /, **options: Any) -> Any:
        return elementwise(kind, function, x, **options)

    rule.__name__ = function.__name__
    return rule


def binary(kind: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(x1: Any, x2: Any, /, **options: Any) -> Any:
        return elementwise(kind, function, x1, x2, **options)

    rule.__name__ = function.__name__
    return rule


def everything(x: Traced, value: np.ndarray, why: str) -> Traced:
    """Each output element depending on every element of ``x``, with a note."""
    x.tape.note(f"{why}: every output element taken to depend on every element of the indexed array")
    return reduced(x, np.zeros((1, x.size), dtype=np.bool_) | True, value, nonlinear=False, broadcast=True)


def reduced(x: Traced, groups: np.ndarray, value: np.ndarray, *, nonlinear: bool, broadcast: bool = False) -> Traced:
    """Output element ``o`` depends on the positions ``groups[o]`` of ``x`` (a
    boolean mask over all positions when ``broadcast``: one group for every output)."""
    n = x.tape.n
    if broadcast:
        reducer = sp.csr_array(groups)
    else:
        count = groups.shape[1]
        rows = np.repeat(np.arange(groups.shape[0]), count)
        data = np.ones(rows.size, dtype=np.bool_)
        reducer = sp.csr_array((data, (rows, groups.reshape(-1))), shape=(groups.shape[0], x.size))
    first = None if x.first is None else sp.csr_array(reducer @ x.first, dtype=np.bool_)
    second = None if x.second is None else sp.csr_array(reducer @ x.second, dtype=np.bool_)
    if nonlinear and x.tape.second_order:
        second = union([second, cross(first, first, n)])
    if broadcast:
        every = np.zeros(value.shape, dtype=np.int64)
        spread = Traced(np.zeros(1), first, second, x.known, x.tape)
        return rows_at(spread, every, value)
    return Traced(value, first, second, x.known, x.tape)


def axes_of(x: Traced, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(a % builtins.max(x.ndim, 1) for a in axes)


def reduction(nonlinear: bool, function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(x: Any, /, *, axis: Any = None, keepdims: bool = False, **options: Any) -> Any:
        if not isinstance(x, Traced):
            return function(x, axis=axis, keepdims=keepdims, **options)
        axes = axes_of(x, axis)
        value = np.asarray(computed(function, x.value, axis=axes, keepdims=keepdims, **options))
        kept = [a for a in range(x.ndim) if a not in axes]
        positions = np.transpose(positions_of(x), (*kept, *axes))
        groups = positions.reshape(value.size, -1)
        return reduced(x, groups, value, nonlinear=nonlinear)

    rule.__name__ = function.__name__
    return rule


def zero_reduction(function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(x: Any, /, **options: Any) -> Any:
        return elementwise("zero", lambda v: function(v, **options), x)

    return rule


def along_lines(x: Traced, axis: int, value: np.ndarray, *, nonlinear: bool) -> Traced:
    """Each output element depending on its whole line of ``x`` along ``axis``."""
    axis = axis % x.ndim
    positions = np.moveaxis(positions_of(x), axis, -1)
    groups = positions.reshape(-1, x.shape[axis])
    lines = reduced(x, groups, np.zeros(groups.shape[0]), nonlinear=nonlinear)
    line_of = np.empty(x.size, dtype=np.int64)
    line_of[groups.reshape(-1)] = np.repeat(np.arange(groups.shape[0]), groups.shape[1])
    return rows_at(lines, line_of.reshape(x.shape), value)


def linear_map(x: Traced, reducer: sp.csr_array, value: np.ndarray) -> Traced:
    first = None if x.first is None else sp.csr_array(reducer @ x.first, dtype=np.bool_)
    second = None if x.second is None else sp.csr_array(reducer @ x.second, dtype=np.bool_)
    return Traced(value, first, second, x.known, x.tape)
