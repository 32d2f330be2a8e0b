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

from di.sparse import kernels

__all__ = [
    "Decompression",
    "Substitution",
    "acyclic_decompression",
    "bidirectional_decompression",
    "column_decompression",
    "row_decompression",
    "seeds",
    "star_decompression",
    "star_decompression_one_color_each",
]


@dataclass(frozen=True, eq=False)
class Decompression:
    """How to read a pattern's nonzeros out of a stacked compressed matrix.

    Attributes:
        mode: ``"forward"`` (column coloring, pushforwards), ``"reverse"`` (row
            coloring, pullbacks), ``"bidirectional"`` (both), ``"symmetric"``
            (star coloring, hvps) or ``"substitution"`` (acyclic coloring, hvps).
        colors: the color of each column (forward, bidirectional, symmetric,
            substitution) or row (reverse); ``-1``: in no seed (neutral).
        n_colors: the number of products per call (pushforwards, pullbacks or hvps).
        index: for each nonzero in CSR order, its flat index in the stacked
            compressed matrix (for ``"substitution"``: in the solved unknowns).
        indptr: the CSR row pointers of the pattern.
        indices: the CSR column indices of the pattern.
        shape: the pattern's shape ``(m, n)``.
        row_colors: the color of each row (``"bidirectional"`` only).
        n_forward: how many of the products are pushforwards (``"bidirectional"``).
        substitution: the solve of an acyclic decompression.
    """

    mode: str
    colors: np.ndarray
    n_colors: int
    index: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    shape: tuple[int, int]
    row_colors: np.ndarray | None = None
    n_forward: int = 0
    substitution: Substitution | None = None

    @property
    def rows(self) -> np.ndarray:
        """The row of each nonzero (COO form)."""
        return np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))

    @property
    def flat_positions(self) -> np.ndarray:
        """Each nonzero's index in the flattened dense ``(m, n)`` matrix."""
        return self.rows * self.shape[1] + self.indices

    @property
    def n_reverse(self) -> int:
        """How many of the products are pullbacks (``"bidirectional"``)."""
        return self.n_colors - self.n_forward

    def decompress(self, compressed: np.ndarray) -> np.ndarray:
        """The nonzeros (CSR order) from a stacked compressed numpy matrix (for
        ``"bidirectional"``: the flattened pushforwards, then the pullbacks)."""
        flat = np.asarray(compressed).reshape(-1)
        if self.substitution is not None:
            return self.substitution.solve(flat)[self.index]
        return flat[self.index]


@dataclass(frozen=True, eq=False)
class Substitution:
    """The unknowns of an acyclic decompression, solved in order: unknown ``k`` is
    ``compressed[source[k]]`` minus the unknowns ``dep_idx[dep_ptr[k]:dep_ptr[k + 1]]``
    (solved before it). Diagonal entries have no dependencies; an off-diagonal one
    is a leaf's edge of a two-colored tree once the leaf's other edges are known."""

    source: np.ndarray
    dep_ptr: np.ndarray
    dep_idx: np.ndarray

    @property
    def depth(self) -> int:
        """The longest chain of dependencies (rounding accumulates along it)."""
        level = np.zeros(self.source.size, dtype=np.int64)
        for k in range(self.source.size):
            deps = self.dep_idx[self.dep_ptr[k] : self.dep_ptr[k + 1]]
            level[k] = level[deps].max(initial=-1) + 1
        return int(level.max(initial=-1)) + 1

    def solve(self, compressed: np.ndarray) -> np.ndarray:
        """The unknowns from the flattened compressed matrix (NumPy)."""
        run, compiled = kernels.kernel(kernels.substitution_kernel, self.dep_idx.size + self.source.size)
        flat = np.asarray(compressed).reshape(-1)
        out = np.zeros(self.source.size, dtype=flat.dtype)
        if compiled:
            return np.asarray(run(self.source, self.dep_ptr, self.dep_idx, flat, out))
        source, dep_ptr, dep_idx = kernels.arguments(False, self.source, self.dep_ptr, self.dep_idx)
        values = run(source, dep_ptr, dep_idx, flat.tolist(), out.tolist())
        return np.asarray(values, dtype=flat.dtype)


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
    seeded = colors >= 0  # neutral vertices are in no seed
    matrix[colors[seeded], np.flatnonzero(seeded)] = 1.0
    return matrix


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


def _alone(keys: np.ndarray, lookup: np.ndarray) -> np.ndarray:
    """For each key of ``lookup``, whether it occurs exactly once among ``keys``."""
    unique, counts = np.unique(keys, return_counts=True)
    if lookup.size == 0:
        return np.zeros(0, dtype=bool)
    position = np.minimum(np.searchsorted(unique, lookup), max(unique.size - 1, 0))
    found = (unique[position] == lookup) if unique.size else np.zeros(lookup.size, dtype=bool)
    return found & (counts[position] == 1 if unique.size else found)


def _choose(
    first_ok: np.ndarray, second_ok: np.ndarray, first_source: np.ndarray, second_source: np.ndarray, vertices: int
) -> np.ndarray:
    """Which read each nonzero uses (``True``: the first), so that few vertices are
    sources: forced reads first, then the read whose source is already needed."""
    if not np.all(first_ok | second_ok):
        raise ValueError("this coloring does not separate every nonzero: two nonzeros share a compressed entry")
    use_first = first_ok & ~second_ok
    needed = np.zeros(vertices, dtype=bool)
    needed[first_source[use_first]] = True
    needed[second_source[second_ok & ~first_ok]] = True
    both = first_ok & second_ok
    use_first |= both & needed[first_source]
    rest = both & ~needed[first_source] & ~needed[second_source]
    use_first |= rest
    return use_first


def _relabel(colors: np.ndarray, needed: np.ndarray) -> tuple[np.ndarray, int]:
    """Colors of the needed vertices renumbered ``0 .. k - 1`` in order, ``-1`` for the others."""
    kept = np.where(needed, colors, -1)
    labels = np.unique(kept[kept >= 0])
    relabeled = np.full(colors.size, -1, dtype=np.int64)
    relabeled[needed] = np.searchsorted(labels, colors[needed])
    return relabeled, int(labels.size)


def star_decompression(pattern: sp.csr_array, colors: np.ndarray) -> Decompression:
    """Decompression of hvps ``H @ s_c`` for a symmetric pattern and a star coloring.

    ``(H @ S)[i, c]`` sums ``H[i, k]`` over the ``k`` of color ``c`` in row ``i``:
    ``H[i, j]`` is read at ``(color[j], i)`` when ``j`` is the only one of its color
    in row ``i``, else at ``(color[i], j)`` when ``i`` is the only one of its color
    in row ``j`` (which a star coloring guarantees). Vertices no read needs become
    neutral (in no seed), and colors left empty are dropped.

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
    width = max(int(colors.max(initial=-1)) + 1, 1)
    keys = rows * width + colors[cols]
    use_row = _choose(_alone(keys, keys), _alone(keys, cols * width + colors[rows]), cols, rows, n)
    needed = np.zeros(n, dtype=bool)
    needed[np.where(use_row, cols, rows)] = True
    relabeled, n_colors = _relabel(colors, needed)
    index = np.where(use_row, relabeled[cols] * n + rows, relabeled[rows] * n + cols)
    _check_reads(rows, cols, relabeled, use_row, n_colors)
    return Decompression("symmetric", relabeled, n_colors, index, pattern.indptr.copy(), cols, (n, n))


def star_decompression_one_color_each(pattern: sp.csr_array) -> Decompression:
    """:func:`star_decompression` of a symmetric pattern with one color per vertex
    (a pattern without zeros, which needs them all): ``H[i, j]`` is read from hvp
    ``j`` at row ``i``, alone by construction, so no read is checked (the checks
    sort every nonzero: seconds on a dense pattern of n = 1000).

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.decompression import star_decompression_one_color_each
        >>> star_decompression_one_color_each(sp.csr_array(np.ones((2, 2), dtype=bool))).index
        array([0, 2, 1, 3])
    """
    n = pattern.shape[0]
    rows, cols = _coordinates(pattern)
    every = np.arange(n, dtype=np.int64)
    return Decompression("symmetric", every, n, cols * n + rows, pattern.indptr.copy(), cols, (n, n))


def _check_reads(
    rows: np.ndarray,
    cols: np.ndarray,
    colors: np.ndarray,
    use_row: np.ndarray,
    n_colors: int,
    row_colors: np.ndarray | None = None,
) -> None:
    """Every read entry holds one nonzero once neutral vertices are out of the seeds."""
    width = max(n_colors, 1)
    row_colors = colors if row_colors is None else row_colors
    in_row = colors[cols] >= 0
    in_col = row_colors[rows] >= 0
    keys_row = rows[in_row] * width + colors[cols][in_row]
    keys_col = cols[in_col] * width + row_colors[rows][in_col]
    ok_row = _alone(keys_row, rows * width + colors[cols]) & (colors[cols] >= 0)
    ok_col = _alone(keys_col, cols * width + row_colors[rows]) & (row_colors[rows] >= 0)
    if not np.all(np.where(use_row, ok_row, ok_col)):  # pragma: no cover - removing seeds keeps reads alone
        raise AssertionError("decompression: a read entry holds two nonzeros")


def bidirectional_decompression(pattern: sp.csr_array, colors: np.ndarray) -> Decompression:
    """Decompression of pushforwards and pullbacks from a star coloring of the
    bipartite graph ``[[0, J], [J.T, 0]]`` (``colors``: rows first, then columns).

    ``J[i, j]`` is read from the pushforward of column ``j``'s color at row ``i``
    when ``j`` is the only column of its color in row ``i``, else from the pullback
    of row ``i``'s color at column ``j``. Rows and columns no read needs are
    neutral; the compressed matrix is the ``(k_f, m)`` pushforwards, flattened,
    then the ``(k_r, n)`` pullbacks.

    Raises:
        ValueError: a nonzero can be read from neither product.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.decompression import bidirectional_decompression
        >>> arrow = np.eye(4, dtype=bool); arrow[0, :] = arrow[:, 0] = True
        >>> d = bidirectional_decompression(sp.csr_array(arrow), np.array([0, 1, 1, 1, 2, 0, 0, 0]))
        >>> d.n_forward, d.n_reverse
        (2, 1)
    """
    m, n = pattern.shape
    rows, cols = _coordinates(pattern)
    row_colors, column_colors = colors[:m], colors[m:]
    width = max(int(colors.max(initial=-1)) + 1, 1)
    forward_keys = rows * width + column_colors[cols]
    reverse_keys = cols * width + row_colors[rows]
    use_forward = _choose(_alone(forward_keys, forward_keys), _alone(reverse_keys, reverse_keys), m + cols, rows, m + n)
    needed_columns = np.zeros(n, dtype=bool)
    needed_columns[cols[use_forward]] = True
    needed_rows = np.zeros(m, dtype=bool)
    needed_rows[rows[~use_forward]] = True
    forward, n_forward = _relabel(column_colors, needed_columns)
    reverse, n_reverse = _relabel(row_colors, needed_rows)
    index = np.where(use_forward, forward[cols] * m + rows, n_forward * m + reverse[rows] * n + cols)
    _check_reads(rows, cols, forward, use_forward, max(n_forward, n_reverse), reverse)
    return Decompression(
        "bidirectional",
        forward,
        n_forward + n_reverse,
        index,
        pattern.indptr.copy(),
        cols,
        (m, n),
        row_colors=reverse,
        n_forward=n_forward,
    )


def acyclic_decompression(pattern: sp.csr_array, colors: np.ndarray) -> Decompression:
    """Decompression of hvps by substitution, for a symmetric pattern and an acyclic
    coloring.

    ``(H @ S)[c, v]`` is the sum of ``H[v, w]`` over the neighbors ``w`` of color
    ``c``: in a tree of two colors, a leaf has one such neighbor, so its edge is
    read directly; with it known, the next vertex becomes a leaf, and so on. The
    diagonal is read directly. Each value is one compressed entry minus values
    found before it: rounding errors add up along a tree's longest path (see
    :attr:`Substitution.depth`).

    Raises:
        ValueError: ``colors`` is not an acyclic coloring of ``pattern`` (a
            two-colored cycle leaves unknowns no leaf reaches).

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.decompression import acyclic_decompression, seeds
        >>> path = sp.csr_array(np.eye(3, dtype=bool) | np.eye(3, k=1, dtype=bool) | np.eye(3, k=-1, dtype=bool))
        >>> d = acyclic_decompression(path, np.array([0, 1, 0]))
        >>> hessian = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 4.0], [0.0, 4.0, 5.0]])
        >>> d.decompress(seeds(d.colors, 2, 3) @ hessian)
        array([2., 1., 1., 3., 4., 4., 5.])
    """
    n = pattern.shape[0]
    rows, cols = _coordinates(pattern)
    colors = np.asarray(colors, dtype=np.int64)
    off = rows != cols
    if np.any(colors[rows[off]] == colors[cols[off]]):
        raise _refuse("acyclic coloring")
    upper = off & (rows < cols)
    edge_rows, edge_cols = rows[upper], cols[upper]
    n_edges = edge_rows.size
    # Each edge is in two groups: (row, color of col) and (col, color of row).
    width = max(int(colors.max(initial=-1)) + 1, 1)
    group_keys = np.concatenate([edge_rows * width + colors[edge_cols], edge_cols * width + colors[edge_rows]])
    group_of_end, inverse = np.unique(group_keys, return_inverse=True)
    end_edge = np.concatenate([np.arange(n_edges), np.arange(n_edges)])
    by_group = np.argsort(inverse, kind="stable")
    group_ptr = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=group_of_end.size))])
    members = end_edge[by_group].tolist()
    ptr = group_ptr.tolist()
    edge_groups = [[0, 0] for _ in range(n_edges)]
    for position, group in enumerate(inverse.tolist()):
        edge_groups[position % n_edges][position // n_edges] = group
    unknown = np.diff(group_ptr).tolist()
    step_of_edge = [-1] * n_edges
    diagonal = np.flatnonzero(~off)
    sources: list[int] = (colors[rows[diagonal]] * n + rows[diagonal]).tolist()
    dep_lists: list[list[int]] = [[] for _ in range(diagonal.size)]
    queue = [g for g in range(len(unknown)) if unknown[g] == 1]
    group_vertex = (group_of_end // width).tolist()
    group_color = (group_of_end % width).tolist()
    while queue:
        group = queue.pop()
        if unknown[group] != 1:
            continue
        edges = members[ptr[group] : ptr[group + 1]]
        target = next(e for e in edges if step_of_edge[e] < 0)
        step_of_edge[target] = len(sources)
        sources.append(group_color[group] * n + group_vertex[group])
        dep_lists.append([step_of_edge[e] for e in edges if e != target])
        for other in edge_groups[target]:
            unknown[other] -= 1
            if unknown[other] == 1:
                queue.append(other)
    if any(step < 0 for step in step_of_edge):
        raise _refuse("acyclic coloring")
    dep_ptr = np.concatenate([[0], np.cumsum([len(d) for d in dep_lists])]).astype(np.int64)
    dep_idx = np.asarray([d for deps in dep_lists for d in deps], dtype=np.int64)
    # Each nonzero's unknown: the diagonal's own, an off-diagonal one its edge's.
    edge_number = np.full(rows.size, -1, dtype=np.int64)
    edge_number[upper] = np.arange(n_edges)
    lower = off & ~upper
    upper_position = np.flatnonzero(upper)
    key_upper = rows[upper] * n + cols[upper]
    order = np.argsort(key_upper)
    found = order[np.searchsorted(key_upper[order], cols[lower] * n + rows[lower])]
    edge_number[lower] = edge_number[upper_position[found]]
    steps = np.asarray(step_of_edge, dtype=np.int64)
    index = np.empty(rows.size, dtype=np.int64)
    index[~off] = np.arange(diagonal.size)
    index[off] = steps[edge_number[off]]
    substitution = Substitution(np.asarray(sources, dtype=np.int64), dep_ptr, dep_idx)
    return Decompression(
        "substitution",
        colors,
        width if rows.size else 0,
        index,
        pattern.indptr.copy(),
        cols,
        (n, n),
        substitution=substitution,
    )
