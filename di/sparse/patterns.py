"""Sparsity patterns as canonical boolean ``scipy.sparse.csr_array`` matrices.

A pattern is an ``(m, n)`` boolean CSR array with sorted column indices and no
duplicates: entry ``(i, j)`` is stored when output ``i`` may depend on input
``j``. Everything in :mod:`di.sparse` takes and returns patterns in this form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "Detection",
    "as_pattern",
    "dense_pattern",
    "empty_pattern",
    "from_coordinates",
    "is_symmetric",
    "symmetrize",
]


def from_coordinates(rows: Any, cols: Any, shape: tuple[int, int]) -> sp.csr_array:
    """The canonical pattern with nonzeros at ``(rows[k], cols[k])`` (duplicates merged).

    Examples:
        >>> from di.sparse.patterns import from_coordinates
        >>> from_coordinates([0, 1, 1], [1, 0, 0], (2, 2)).toarray()
        array([[False,  True],
               [ True, False]])
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    data = np.ones(rows.size, dtype=bool)
    pattern = sp.csr_array(sp.coo_array((data, (rows, cols)), shape=shape))
    return canonical(pattern)


def canonical(pattern: Any) -> sp.csr_array:
    """A copy of ``pattern`` as a boolean CSR array, indices sorted, duplicates summed
    into ``True``, explicit zeros kept as nonzeros (a stored entry is structural)."""
    csr = sp.csr_array(pattern, copy=True)
    csr.data = np.ones(csr.data.size, dtype=bool)
    csr.sum_duplicates()
    csr.sort_indices()
    return sp.csr_array(csr, dtype=bool)


def as_pattern(value: Any) -> sp.csr_array:
    """A pattern from a scipy sparse matrix, a dense array (nonzeros) or a
    :class:`di.KnownSparsity`.

    Examples:
        >>> import numpy as np
        >>> from di.sparse.patterns import as_pattern
        >>> as_pattern(np.array([[0.0, 2.0], [0.0, 0.0]])).nnz
        1
    """
    rows = getattr(value, "rows", None)
    if rows is not None and hasattr(value, "cols") and hasattr(value, "shape"):
        return from_coordinates(value.rows, value.cols, value.shape)
    if sp.issparse(value):
        return canonical(value)
    dense = np.asarray(value)
    return canonical(sp.csr_array(dense != 0))


def empty_pattern(shape: tuple[int, int]) -> sp.csr_array:
    """The pattern with no nonzeros."""
    return sp.csr_array(shape, dtype=bool)


def dense_pattern(shape: tuple[int, int]) -> sp.csr_array:
    """The pattern where every entry is a nonzero."""
    return canonical(sp.csr_array(np.ones(shape, dtype=bool)))


def symmetrize(pattern: sp.csr_array) -> sp.csr_array:
    """``P | P.T`` (Hessian patterns are symmetric)."""
    return canonical(pattern + pattern.T)


def is_symmetric(pattern: sp.csr_array) -> bool:
    """Whether ``P == P.T``."""
    return bool((pattern != pattern.T).nnz == 0)


@dataclass
class Detection:
    """What detection found: the pattern and notes on what was bounded conservatively.

    Attributes:
        pattern: the ``(m, n)`` boolean CSR pattern.
        notes: one line per primitive whose outputs were taken to depend on all
            of their inputs (unknown primitives and loops).
    """

    pattern: sp.csr_array
    notes: list[str] = field(default_factory=list)
    output: Any = None
    """The traced output's abstract value (``shape``, ``dtype``), when traced."""
