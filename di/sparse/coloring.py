"""Graph colorings of sparsity patterns, so that one pushforward (or pullback, or
hvp) per color recovers every nonzero.

* :func:`column_coloring`: columns sharing a row get different colors (a
  distance-2 coloring of the bipartite graph, i.e. a coloring of the column
  intersection graph). Then ``J @ S`` (``S[j, c] = 1`` when column ``j`` has color
  ``c``) holds every ``J[i, j]`` in ``(i, color[j])``. :func:`row_coloring` is
  the same on ``J.T``, for pullbacks.
* :func:`star_coloring`: for a symmetric (Hessian) pattern, a distance-1
  coloring in which every path on four vertices uses at least three colors
  (Gebremedhin, Manne and Pothen, 2005, Algorithm 4.1). Each nonzero ``H[i, j]``
  is then the only one of its color in row ``i`` or in row ``j`` of ``H @ S``, so
  it is recovered directly; an arrowhead needs 2 colors where a column coloring
  needs ``n``.

Both are greedy, vertex by vertex in ``order``: ``"largest_first"`` (by
decreasing degree, which usually needs fewer colors) or ``"natural"``. They work
on ``(n, colors)`` tables rather than on an explicit graph, so an arrowhead of
size 1e4 never builds its ``1e8``-edge intersection graph.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = [
    "ORDERS",
    "column_coloring",
    "is_star_coloring",
    "is_structurally_orthogonal",
    "row_coloring",
    "star_coloring",
]

ORDERS = ("largest_first", "natural")


def _vertex_order(degrees: np.ndarray, order: str) -> np.ndarray:
    if order == "natural":
        return np.arange(degrees.size)
    if order == "largest_first":
        return np.argsort(-degrees, kind="stable")
    raise ValueError(f"unknown vertex order {order!r}; use one of {', '.join(ORDERS)}")


def _first_free(forbidden: np.ndarray) -> int:
    free = np.flatnonzero(~forbidden)
    return int(free[0]) if free.size else int(forbidden.size)


class _ColorTable:
    """A boolean (or counting) ``(vertices, colors)`` table that grows with the colors."""

    def __init__(self, n: int, dtype: type) -> None:
        self.table: np.ndarray = np.zeros((n, 8), dtype=dtype)

    def ensure(self, color: int) -> None:
        if color >= self.table.shape[1]:
            grown = np.zeros((self.table.shape[0], max(2 * self.table.shape[1], color + 1)), dtype=self.table.dtype)
            grown[:, : self.table.shape[1]] = self.table
            self.table = grown


def column_coloring(pattern: sp.csr_array, order: str = "largest_first") -> np.ndarray:
    """Greedy coloring of the columns so that no two columns of one color share a row.

    Args:
        pattern: an ``(m, n)`` pattern.
        order: ``"largest_first"`` (columns with most nonzeros first) or ``"natural"``.

    Returns:
        ``colors``, an int64 array of length ``n`` with values ``0 .. k - 1``.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.coloring import column_coloring
        >>> tridiagonal = sp.csr_array(np.eye(5, k=-1) + np.eye(5) + np.eye(5, k=1))
        >>> column_coloring(tridiagonal, "natural")
        array([0, 1, 2, 0, 1])
    """
    m, n = pattern.shape
    csc = sp.csc_array(pattern)
    indptr, rows = csc.indptr, csc.indices
    colors = np.full(n, -1, dtype=np.int64)
    used = _ColorTable(m, bool)  # used[i, c]: row i already has a column of color c
    for j in _vertex_order(np.diff(indptr), order):
        rows_j = rows[indptr[j] : indptr[j + 1]]
        if rows_j.size == 0:
            colors[j] = 0
            continue
        color = _first_free(used.table[rows_j].any(axis=0))
        used.ensure(color)
        used.table[rows_j, color] = True
        colors[j] = color
    return colors


def row_coloring(pattern: sp.csr_array, order: str = "largest_first") -> np.ndarray:
    """Greedy coloring of the rows so that no two rows of one color share a column
    (:func:`column_coloring` of the transpose), for compression by pullbacks.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.coloring import row_coloring
        >>> row_coloring(sp.csr_array(np.array([[1, 1, 1], [0, 1, 0], [0, 0, 1]])))
        array([0, 1, 1])
    """
    return column_coloring(sp.csr_array(pattern.T), order)


def star_coloring(pattern: sp.csr_array, order: str = "largest_first") -> np.ndarray:
    """Greedy star coloring of a symmetric pattern (its diagonal is ignored).

    Args:
        pattern: an ``(n, n)`` symmetric pattern.
        order: ``"largest_first"`` or ``"natural"``.

    Returns:
        ``colors``, an int64 array of length ``n``.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.coloring import star_coloring
        >>> arrow = np.eye(6, dtype=bool); arrow[0, :] = arrow[:, 0] = True
        >>> star_coloring(sp.csr_array(arrow))
        array([0, 1, 1, 1, 1, 1])
    """
    n = pattern.shape[0]
    graph = sp.csr_array(pattern, dtype=bool, copy=True)
    graph.setdiag(False)
    graph.eliminate_zeros()
    indptr, indices = graph.indptr, graph.indices
    neighbors = [indices[indptr[v] : indptr[v + 1]] for v in range(n)]
    colors = np.full(n, -1, dtype=np.int64)
    counts = _ColorTable(n, np.int32)  # counts[x, c]: neighbors of x with color c
    for v in _vertex_order(np.diff(indptr), order):
        forbidden = np.zeros(counts.table.shape[1] + 1, dtype=bool)
        for w in neighbors[v]:
            color_w = colors[w]
            if color_w >= 0:
                forbidden[color_w] = True
            others = neighbors[w]
            others = others[(others != v) & (colors[others] >= 0)]
            if others.size == 0:
                continue
            if color_w < 0:
                # v and x would be at distance 2 through an uncolored w.
                forbidden[colors[others]] = True
            else:
                # x has another neighbor y != w colored like w: v colored like x
                # would make the path v - w - x - y two-colored.
                blocking = others[counts.table[others, color_w] >= 2]
                forbidden[colors[blocking]] = True
        color = _first_free(forbidden)
        counts.ensure(color)
        counts.table[neighbors[v], color] += 1
        colors[v] = color
    return colors


def is_structurally_orthogonal(pattern: sp.csr_array, colors: np.ndarray) -> bool:
    """Whether no row has two nonzeros in columns of the same color (a valid
    :func:`column_coloring`)."""
    coo = sp.coo_array(pattern)
    k = int(colors.max(initial=-1)) + 1
    keys = coo.row.astype(np.int64) * max(k, 1) + colors[coo.col]
    return bool(np.unique(keys).size == keys.size)


def is_star_coloring(pattern: sp.csr_array, colors: np.ndarray) -> bool:
    """Whether ``colors`` is a star coloring of the symmetric ``pattern``: adjacent
    vertices differ, and every path on four vertices has at least three colors.

    Checked by definition (every two-colored connected subgraph is a star), for tests.
    """
    graph = sp.coo_array(pattern)
    off = graph.row != graph.col
    rows, cols = graph.row[off], graph.col[off]
    if np.any(colors[rows] == colors[cols]):
        return False
    n = pattern.shape[0]
    pairs: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i, j in zip(rows.tolist(), cols.tolist()):
        if i < j:
            key = (min(colors[i], colors[j]), max(colors[i], colors[j]))
            pairs.setdefault(key, []).append((i, j))
    for edges in pairs.values():
        sub = sp.coo_array((np.ones(len(edges)), tuple(np.array(edges).T)), shape=(n, n))
        sub = sp.csr_array(sub + sub.T)
        count, labels = sp.csgraph.connected_components(sub, directed=False)
        degrees = np.diff(sub.indptr)
        for component in range(count):
            members = np.flatnonzero(labels == component)
            if members.size <= 2:
                continue
            edges_in = degrees[members].sum() // 2
            # A star on k vertices has k - 1 edges and one center of degree k - 1.
            if edges_in != members.size - 1 or degrees[members].max() != members.size - 1:
                return False
    return True
