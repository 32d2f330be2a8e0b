"""The traced array of the array-API sparsity tracer: a NumPy value beside, for
each element, the inputs it depends on (first order) and the pairs of inputs its
second derivative may couple (second order, for Hessians).

Dependencies are rows of boolean ``scipy.sparse`` matrices, one row per element
(C order): ``first`` is ``(size, n)``, ``second`` is ``(size, n * n)`` with the
pair ``(i, j)``, ``i <= j``, at column ``i * n + j``. Rearranging operations
(reshape, indexing, concatenation, ...) are computed on an array of element
positions with NumPy and select rows; elementwise operations and reductions
combine rows. Second-order sets follow the product rule: a sum adds no pair, a
product ``u * v`` adds every pair of one input of ``u`` with one of ``v``, a
nonlinear function of ``u`` every pair of ``u``'s inputs; so a partially
separable function's Hessian pattern is exact.

The value is computed with NumPy at every step. For the local tracer it is the
value at the point, and Python branches on values take the branch the point
takes; for the global tracer a value computed from ``x`` is marked unknown and a
branch on it is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from di.errors import InvalidInputError

__all__ = ["NAMESPACE", "Tape", "Traced", "cross", "empty_rows"]

NAMESPACE: Any = None
"""The tracer's namespace module (:mod:`di.sparse.arrays.namespace`), which sets it
when imported (it imports this module: set there, no import cycle)."""


@dataclass
class Tape:
    """What every traced array of one detection shares: the number of inputs,
    whether second-order sets are kept, whether values are known (local), and the
    notes on conservative bounds."""

    n: int
    second_order: bool
    local: bool
    notes: list[str] = field(default_factory=list)

    def note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.append(line)


def empty_rows(rows: int, columns: int) -> sp.csr_array:
    """A ``(rows, columns)`` boolean CSR array without entries."""
    return sp.csr_array((rows, columns), dtype=bool)


def _bool(matrix: Any) -> sp.csr_array:
    out = sp.csr_array(matrix, dtype=bool)
    out.sum_duplicates()
    out.eliminate_zeros()
    return out


def select(matrix: sp.csr_array | None, positions: np.ndarray, columns: int) -> sp.csr_array | None:
    """Rows ``positions`` of ``matrix`` (``-1``: an empty row); ``None`` stays ``None``."""
    if matrix is None:
        return None
    flat = positions.reshape(-1)
    if flat.size and flat.min() < 0:
        matrix = sp.vstack([matrix, empty_rows(1, columns)], format="csr")
        flat = np.where(flat < 0, matrix.shape[0] - 1, flat)
    return sp.csr_array(matrix[flat])


def union(matrices: Sequence[sp.csr_array | None]) -> sp.csr_array | None:
    """Row-wise union of matrices of one shape (``None`` counts as empty)."""
    present = [m for m in matrices if m is not None and m.nnz]
    if not present:
        return next((m for m in matrices if m is not None), None)
    total = present[0]
    for matrix in present[1:]:
        total = total + matrix
    return _bool(total)


def cross(a: sp.csr_array | None, b: sp.csr_array | None, n: int) -> sp.csr_array | None:
    """Row by row, every pair ``(i, j)`` with ``i`` in a row of ``a`` and ``j`` in
    the same row of ``b``, as column ``min * n + max`` of a ``(rows, n * n)`` matrix."""
    if a is None or b is None or not a.nnz or not b.nnz:
        return None
    a, b = sp.csr_array(a), sp.csr_array(b)
    la, lb = np.diff(a.indptr), np.diff(b.indptr)
    counts = la * lb
    total = int(counts.sum())
    rows = np.repeat(np.arange(a.shape[0]), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    k = np.arange(total) - starts
    width = np.repeat(lb, counts)
    left = a.indices[np.repeat(a.indptr[:-1], counts) + k // np.maximum(width, 1)].astype(np.int64)
    right = b.indices[np.repeat(b.indptr[:-1], counts) + k % np.maximum(width, 1)].astype(np.int64)
    columns = np.minimum(left, right) * n + np.maximum(left, right)
    data = np.ones(total, dtype=bool)
    return _bool(sp.csr_array((data, (rows, columns)), shape=(a.shape[0], n * n)))


class Traced:
    """An array of the sparsity tracer (see the module's docstring).

    Attributes:
        value: the NumPy value (meaningful where ``known``, and everywhere for
            the local tracer).
        first: ``(size, n)`` first-order dependencies, ``None`` for none.
        second: ``(size, n * n)`` second-order pairs, ``None`` for none.
        known: whether ``value`` is a constant: known and computed without ``x``
            (constants, and contexts for the local tracer). Only constants read
            as values change a pattern without a branch (a zero factor drops a
            dependence, a constant index selects): a value computed from ``x`` that
            happens to be zero at the point (``sign(x)`` at 0), or an index computed
            from it (``argmax``), is not.
        tape: the shared :class:`Tape`.
    """

    __slots__ = ("first", "known", "second", "tape", "value")
    __array_priority__ = 1000  # NumPy defers to the reflected operators

    def __init__(
        self,
        value: np.ndarray,
        first: sp.csr_array | None,
        second: sp.csr_array | None,
        known: bool,
        tape: Tape,
    ) -> None:
        self.value = np.asarray(value)
        self.first = first if first is not None and first.nnz else None
        self.second = second if second is not None and second.nnz and tape.second_order else None
        self.known = known
        self.tape = tape

    # --- array attributes -------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    @property
    def ndim(self) -> int:
        return self.value.ndim

    @property
    def size(self) -> int:
        return int(self.value.size)

    @property
    def dtype(self) -> Any:
        return self.value.dtype

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def T(self) -> Traced:
        return NAMESPACE.permute_dims(self, tuple(range(self.ndim))[::-1])

    @property
    def mT(self) -> Traced:
        return NAMESPACE.matrix_transpose(self)

    def __array_namespace__(self, api_version: str | None = None) -> Any:
        return NAMESPACE

    def __len__(self) -> int:
        return int(self.shape[0])

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        kind = "local" if self.tape.local else "global"
        return f"Traced({kind}, shape={self.shape}, dtype={self.dtype})"

    # --- values leaving the tracer ----------------------------------------------------

    def _concrete(self, what: str) -> np.ndarray:
        """The value, where a Python number or NumPy array may be made of it. The
        local tracer's values are those at the point: ``bool()``, ``int()`` and
        ``float()`` read them (branches, taken as the point takes them; what ``f``
        computes from the number is a constant to the pattern, as a Python number
        is to torch's autograd). NumPy's own functions (``np.asarray``) would drop
        the dependencies, and the global tracer knows no value computed from ``x``."""
        depends = self.first is not None or self.second is not None
        if what == "asarray" and depends:
            raise InvalidInputError(
                "the sparsity tracer cannot follow asarray() of a value computed from x (a NumPy function such as "
                "np.sin, or np.asarray, called on a traced array): dependencies do not pass through NumPy's own "
                "functions. Write f with the array API (xp = di.array_namespace(x); xp.sin(x)), or pass "
                "sparsity=di.DenseSparsity() (nonzeros of dense derivatives at random points) or "
                "di.KnownSparsity(pattern) to AutoSparse."
            )
        if not self.tape.local and (depends or not self.known):
            raise InvalidInputError(
                f"the sparsity tracer cannot follow {what}() of a value computed from x: the global pattern holds "
                f"for every x, so f may not read values of x in Python. Pass sparsity=di.LocalTracerSparsity() "
                f"(the pattern at the preparation point, taking its branches), di.DenseSparsity() or "
                f"di.KnownSparsity(pattern) to AutoSparse."
            )
        return self.value

    def known_value(self, what: str) -> np.ndarray:
        """The value, for constants and for the local tracer (a branch-like read:
        the pattern holds where the result is the same); the global tracer refuses
        ``what`` (an operation whose result depends on values of ``x``, such as
        ``nonzero``)."""
        if not self.known and not self.tape.local:
            raise InvalidInputError(
                f"the sparsity tracer cannot follow {what} of a value computed from x: its result depends on values "
                f"of x, unknown to a global pattern. Use di.LocalTracerSparsity() (the pattern at the preparation "
                f"point), di.DenseSparsity() or di.KnownSparsity(pattern)."
            )
        return self.value

    def __bool__(self) -> bool:
        return bool(self._concrete("bool"))

    def __float__(self) -> float:
        return float(self._concrete("float"))

    def __int__(self) -> int:
        return int(self._concrete("int"))

    def __index__(self) -> int:
        return int(self._concrete("int"))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self._concrete("asarray")
        return value if dtype is None else value.astype(dtype)

    # --- operators --------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Traced:
        return NAMESPACE.getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise InvalidInputError(
            "the sparsity tracer cannot follow writes into arrays (x[i] = ...): build new arrays (xp.where, "
            "xp.concat), as compiled engines require too, or pass sparsity=di.DenseSparsity() or "
            "di.KnownSparsity(pattern) to AutoSparse."
        )

    def __neg__(self) -> Traced:
        return _op("negative", self)

    def __pos__(self) -> Traced:
        return self

    def __abs__(self) -> Traced:
        return _op("abs", self)

    def __add__(self, other: Any) -> Traced:
        return _op("add", self, other)

    def __radd__(self, other: Any) -> Traced:
        return _op("add", other, self)

    def __sub__(self, other: Any) -> Traced:
        return _op("subtract", self, other)

    def __rsub__(self, other: Any) -> Traced:
        return _op("subtract", other, self)

    def __mul__(self, other: Any) -> Traced:
        return _op("multiply", self, other)

    def __rmul__(self, other: Any) -> Traced:
        return _op("multiply", other, self)

    def __truediv__(self, other: Any) -> Traced:
        return _op("divide", self, other)

    def __rtruediv__(self, other: Any) -> Traced:
        return _op("divide", other, self)

    def __floordiv__(self, other: Any) -> Traced:
        return _op("floor_divide", self, other)

    def __rfloordiv__(self, other: Any) -> Traced:
        return _op("floor_divide", other, self)

    def __mod__(self, other: Any) -> Traced:
        return _op("remainder", self, other)

    def __rmod__(self, other: Any) -> Traced:
        return _op("remainder", other, self)

    def __pow__(self, other: Any) -> Traced:
        return _op("pow", self, other)

    def __rpow__(self, other: Any) -> Traced:
        return _op("pow", other, self)

    def __matmul__(self, other: Any) -> Traced:
        return _op("matmul", self, other)

    def __rmatmul__(self, other: Any) -> Traced:
        return _op("matmul", other, self)

    def __lt__(self, other: Any) -> Traced:
        return _op("less", self, other)

    def __le__(self, other: Any) -> Traced:
        return _op("less_equal", self, other)

    def __gt__(self, other: Any) -> Traced:
        return _op("greater", self, other)

    def __ge__(self, other: Any) -> Traced:
        return _op("greater_equal", self, other)

    def __eq__(self, other: Any) -> Traced:  # type: ignore[override]
        return _op("equal", self, other)

    def __ne__(self, other: Any) -> Traced:  # type: ignore[override]
        return _op("not_equal", self, other)

    def __invert__(self) -> Traced:
        return _op("logical_not", self)

    def __and__(self, other: Any) -> Traced:
        return _op("logical_and", self, other)

    def __rand__(self, other: Any) -> Traced:
        return _op("logical_and", other, self)

    def __or__(self, other: Any) -> Traced:
        return _op("logical_or", self, other)

    def __ror__(self, other: Any) -> Traced:
        return _op("logical_or", other, self)

    __hash__ = None  # type: ignore[assignment]


def _op(name: str, *arguments: Any) -> Traced:
    result: Traced = getattr(NAMESPACE, name)(*arguments)
    return result
