"""Checks of colorings by their definitions (slow, exact): what the tests and a
given :class:`di.KnownSparsity` coloring are held to.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["is_acyclic_coloring", "is_star_coloring", "is_structurally_orthogonal"]


def is_structurally_orthogonal(pattern: sp.csr_array, colors: np.ndarray) -> bool:
    """Whether no row has two nonzeros in columns of the same color (a valid
    :func:`column_coloring`)."""
    coo = sp.coo_array(pattern)
    k = int(colors.max(initial=-1)) + 1
    keys = coo.row.astype(np.int64) * max(k, 1) + colors[coo.col]
    return bool(np.unique(keys).size == keys.size)


def _two_colored_components(pattern: sp.csr_array, colors: np.ndarray) -> list[tuple[np.ndarray, int, np.ndarray]]:
    """For each pair of colors, each connected component of the edges between them:
    ``(members, edges, degrees)``."""
    graph = sp.coo_array(pattern)
    off = graph.row != graph.col
    rows, cols = graph.row[off], graph.col[off]
    n = pattern.shape[0]
    pairs: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i, j in zip(rows.tolist(), cols.tolist()):
        if i < j:
            key = (min(colors[i], colors[j]), max(colors[i], colors[j]))
            pairs.setdefault(key, []).append((i, j))
    out = []
    for edges in pairs.values():
        sub = sp.coo_array((np.ones(len(edges)), tuple(np.array(edges).T)), shape=(n, n))
        sub = sp.csr_array(sub + sub.T)
        count, labels = sp.csgraph.connected_components(sub, directed=False)
        degrees = np.diff(sub.indptr)
        for component in range(count):
            members = np.flatnonzero(labels == component)
            if members.size >= 2:
                out.append((members, int(degrees[members].sum() // 2), degrees[members]))
    return out


def _proper(pattern: sp.csr_array, colors: np.ndarray) -> bool:
    graph = sp.coo_array(pattern)
    off = graph.row != graph.col
    return not bool(np.any(colors[graph.row[off]] == colors[graph.col[off]]))


def is_star_coloring(pattern: sp.csr_array, colors: np.ndarray) -> bool:
    """Whether ``colors`` is a star coloring of the symmetric ``pattern``: adjacent
    vertices differ, and every path on four vertices has at least three colors.

    Checked by definition (every two-colored connected subgraph is a star).
    """
    if not _proper(pattern, colors):
        return False
    for members, edges, degrees in _two_colored_components(pattern, colors):
        # A star on k vertices has k - 1 edges and one center of degree k - 1.
        if members.size > 2 and (edges != members.size - 1 or degrees.max() != members.size - 1):
            return False
    return True


def is_acyclic_coloring(pattern: sp.csr_array, colors: np.ndarray) -> bool:
    """Whether ``colors`` is an acyclic coloring of the symmetric ``pattern``: adjacent
    vertices differ, and every two-colored connected subgraph is a tree."""
    if not _proper(pattern, colors):
        return False
    return all(edges == members.size - 1 for members, edges, _ in _two_colored_components(pattern, colors))
