"""The values of the jaxpr interpreter and the sparse-matrix helpers its rules share."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass
class _Value:
    """One value of the program: its dependency matrix (``None``: depends on no
    input), its known value (``None``: unknown) and its shape."""

    deps: sp.csr_array | None
    const: np.ndarray | None
    shape: tuple[int, ...]
    floating: bool

    @property
    def size(self) -> int:
        return math.prod(self.shape)


# --- the budget of dependency entries --------------------------------------------------------


class DenseDependencies(Exception):
    """A dependency matrix would hold more entries than the interpreter's budget
    (:func:`entry_budget`): the interpreter stops and takes the pattern as dense."""


_BUDGET: ContextVar[int | None] = ContextVar("dependency_entry_budget", default=None)


@contextmanager
def entry_budget(entries: int) -> Iterator[None]:
    """Within this block no dependency matrix may hold more than ``entries``
    entries: building one raises :class:`DenseDependencies` before its memory is spent."""
    token = _BUDGET.set(entries)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _within_budget(entries: int) -> None:
    budget = _BUDGET.get()
    if budget is not None and entries > budget:
        raise DenseDependencies(f"{entries} dependency entries, over the budget of {budget}")


def _selected(selector: sp.csr_array, deps: sp.csr_array) -> sp.csr_array:
    """``selector @ deps`` (row ``r``: the union of the rows ``selector[r]`` selects),
    its entries bounded first: the selected rows' lengths summed, which costs one
    pass over the selector, while the product of two nearly dense matrices costs minutes."""
    if _BUDGET.get() is not None:
        selector = selector if selector.format == "csr" else sp.csr_array(selector)
        lengths = np.diff(deps.indptr)
        _within_budget(int(lengths[selector.indices].sum()))
    return sp.csr_array(selector @ deps)


# --- sparse-matrix helpers ---------------------------------------------------------------


def _empty(rows: int, n: int) -> sp.csr_array:
    return sp.csr_array((rows, n), dtype=bool)


def _union(a: sp.csr_array | None, b: sp.csr_array | None) -> sp.csr_array | None:
    if a is None:
        return b
    if b is None:
        return a
    return sp.csr_array(a + b)


def _take_rows(deps: sp.csr_array, source: np.ndarray) -> sp.csr_array:
    """Row ``k`` of the result is row ``source[k]`` of ``deps`` (empty where ``source < 0``)."""
    source = np.asarray(source, dtype=np.int64).reshape(-1)
    valid = source >= 0
    selector = sp.csr_array(
        (np.ones(int(valid.sum()), dtype=bool), (np.flatnonzero(valid), source[valid])),
        shape=(source.size, deps.shape[0]),
    )
    return _selected(selector, deps)


def _gather_rows(deps: sp.csr_array, out_rows: np.ndarray, in_rows: np.ndarray, size: int) -> sp.csr_array:
    """Row ``r`` of the result is the union of the rows ``in_rows[k]`` of ``deps`` with ``out_rows[k] == r``."""
    selector = sp.csr_array(
        (np.ones(out_rows.size, dtype=bool), (np.asarray(out_rows, np.int64), np.asarray(in_rows, np.int64))),
        shape=(size, deps.shape[0]),
    )
    return _selected(selector, deps)


def _all_of(values: Sequence[_Value], size: int, n: int) -> sp.csr_array | None:
    """Every one of ``size`` rows depends on every input any of ``values`` depends on."""
    union = np.zeros(n, dtype=bool)
    for value in values:
        if value.deps is not None and value.deps.nnz:
            union[value.deps.indices] = True
    if not union.any():
        return None
    columns = np.flatnonzero(union)
    _within_budget(size * columns.size)
    rows = np.repeat(np.arange(size, dtype=np.int64), columns.size)
    data = np.ones(rows.size, dtype=bool)
    return sp.csr_array((data, (rows, np.tile(columns, size))), shape=(size, n))


def _index_array(shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape)


def _lines(shape: tuple[int, ...], axis: int) -> np.ndarray:
    """The flat indices of an array of ``shape``, one row per line along ``axis``
    (no rows where an axis is empty)."""
    indices = np.moveaxis(_index_array(shape), axis, -1)
    return indices.reshape(math.prod(indices.shape[:-1]), shape[axis])


def _broadcast(value: _Value, shape: tuple[int, ...], n: int) -> sp.csr_array | None:
    """The value's dependencies broadcast to ``shape`` (numpy broadcasting)."""
    if value.deps is None:
        return None
    if value.shape == shape:
        return value.deps
    source = np.broadcast_to(_index_array(value.shape), shape)
    return _take_rows(value.deps, source)
