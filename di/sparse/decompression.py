"""Seeds and exact decompression: which entry of the compressed matrix holds each
nonzero.

The compressed matrix is what the engine returns, stacked one color per row:
``(colors, m)`` pushforwards ``J @ s_c`` for a column coloring, ``(colors, n)``
pullbacks ``s_c @ J`` for a row coloring, ``(colors, n)`` hvps ``H @ s_c`` for a
star coloring. A :class:`Decompression` holds, for every nonzero of the pattern
in CSR order, its flat index in that stacked matrix: decompressing is one gather,
``compressed.reshape(-1)[index]``, which gives the ``data`` of the result's CSR
(or COO) form. Every index is checked when it is built: a coloring under which a
nonzero is not alone in its compressed entry is refused, so decompression is
exact by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["Decompression", "column_decompression", "row_decompression", "seeds", "star_decompression"]


@dataclass(frozen=True, eq=False)
class Decompression:
    """How to read a pattern's nonzeros out of a stacked compressed matrix.

    Attributes:
        mode: ``"forward"`` (column coloring, pushforwards), ``"reverse"`` (row
            coloring, pullbacks) or ``"symmetric"`` (star coloring, hvps).
        colors: the color of each column (forward, symmetric) or row (reverse).
        n_colors: the number of colors: of pushforwards, pullbacks or hvps per call.
        index: for each nonzero in CSR order, its flat index in the stacked
            compressed matrix.
        indptr: the CSR row pointers of the pattern.
        indices: the CSR column indices of the pattern.
        shape: the pattern's shape ``(m, n)``.
    """

    mode: str
    colors: np.ndarray
    n_colors: int
    index: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    shape: tuple[int, int]

    @property
    def rows(self) -> np.ndarray:
        """The row of each nonzero (COO form)."""
        return np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))

    @property
    def flat_positions(self) -> np.ndarray:
        """Each nonzero's index in the flattened dense ``(m, n)`` matrix."""
        return self.rows * self.shape[1] + self.indices

    def decompress(self, compressed: np.ndarray) -> np.ndarray:
        """The nonzeros (CSR order) from a stacked compressed numpy matrix."""
        return np.asarray(compressed).reshape(-1)[self.index]


def seeds(colors: np.ndarray, n_colors: int, size: int) -> np.ndarray:
    """The ``(n_colors, size)`` seed matrix: row ``c`` is 1 where ``colors == c``.

    Examples:
        >>> import numpy as np
        >>> from di.sparse.decompression import seeds
        >>> seeds(np.array([0, 1, 0]), 2, 3)
        array([[1., 0., 1.],
               [0., 1., 0.]])
    """
    matrix = np.zeros((n_colors, size))
    matrix[colors, np.arange(size)] = 1.0
    return matrix


def _unique_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct keys and how often each occurs."""
    return np.unique(keys, return_counts=True)


def _count_of(keys: np.ndarray, unique: np.ndarray, counts: np.ndarray) -> np.ndarray:
    position = np.searchsorted(unique, keys)
    position = np.minimum(position, max(unique.size - 1, 0))
    found = unique.size > 0 and np.all(unique[position] == keys) if keys.size else True
    if not found:  # pragma: no cover - symmetric patterns always hold the mirrored key
        raise AssertionError("decompression: a mirrored entry is missing from a symmetric pattern")
    return counts[position] if keys.size else np.zeros(0, dtype=np.int64)


def _refuse(what: str) -> ValueError:
    return ValueError(f"this {what} does not separate every nonzero: two nonzeros share a compressed entry")


def _coordinates(pattern: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    rows = np.repeat(np.arange(pattern.shape[0], dtype=np.int64), np.diff(pattern.indptr))
    return rows, pattern.indices.astype(np.int64)


def column_decompression(pattern: sp.csr_array, colors: np.ndarray) -> Decompression:
    """Decompression of pushforwards ``J @ s_c``: ``J[i, j]`` is at ``(color[j], i)``.

    Raises:
        ValueError: two columns of one color share a row.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.decompression import column_decompression
        >>> d = column_decompression(sp.csr_array(np.eye(2, dtype=bool)), np.array([0, 0]))
        >>> d.n_colors, d.index
        (1, array([0, 1]))
    """
    m, n = pattern.shape
    rows, cols = _coordinates(pattern)
    n_colors = int(colors.max(initial=-1)) + 1
    keys = rows * max(n_colors, 1) + colors[cols]
    if np.unique(keys).size != keys.size:
        raise _refuse("column coloring")
    index = colors[cols] * m + rows
    return Decompression("forward", colors, n_colors, index, pattern.indptr.copy(), cols, (m, n))


def row_decompression(pattern: sp.csr_array, colors: np.ndarray) -> Decompression:
    """Decompression of pullbacks ``s_c @ J``: ``J[i, j]`` is at ``(color[i], j)``.

    Raises:
        ValueError: two rows of one color share a column.
    """
    m, n = pattern.shape
    rows, cols = _coordinates(pattern)
    n_colors = int(colors.max(initial=-1)) + 1
    keys = cols * max(n_colors, 1) + colors[rows]
    if np.unique(keys).size != keys.size:
        raise _refuse("row coloring")
    index = colors[rows] * n + cols
    return Decompression("reverse", colors, n_colors, index, pattern.indptr.copy(), cols, (m, n))


def star_decompression(pattern: sp.csr_array, colors: np.ndarray) -> Decompression:
    """Decompression of hvps ``H @ s_c`` for a symmetric pattern and a star coloring.

    ``(H @ S)[i, c]`` sums ``H[i, k]`` over the ``k`` of color ``c`` in row ``i``:
    ``H[i, j]`` is read at ``(color[j], i)`` when ``j`` is the only one of its color
    in row ``i``, else at ``(color[i], j)`` when ``i`` is the only one of its color
    in row ``j`` (which a star coloring guarantees).

    Raises:
        ValueError: a nonzero is not alone of its color in either row.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.decompression import star_decompression
        >>> arrow = np.eye(3, dtype=bool); arrow[0, :] = arrow[:, 0] = True
        >>> star_decompression(sp.csr_array(arrow), np.array([0, 1, 1])).index
        array([0, 1, 2, 1, 4, 2, 5])
    """
    n = pattern.shape[0]
    rows, cols = _coordinates(pattern)
    n_colors = int(colors.max(initial=-1)) + 1
    width = max(n_colors, 1)
    unique, counts = _unique_keys(rows * width + colors[cols])
    alone_in_row = _count_of(rows * width + colors[cols], unique, counts) == 1
    alone_in_column = _count_of(cols * width + colors[rows], unique, counts) == 1
    if not np.all(alone_in_row | alone_in_column):
        raise _refuse("star coloring")
    index = np.where(alone_in_row, colors[cols] * n + rows, colors[rows] * n + cols)
    return Decompression("symmetric", colors, n_colors, index, pattern.indptr.copy(), cols, (n, n))
