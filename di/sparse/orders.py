"""Vertex orders for the greedy colorings of :mod:`di.sparse.coloring`, and what
each costs (the search of ``order="auto"`` runs them within a work budget).

The classic orders (Gebremedhin, Manne and Pothen, SIAM Review 2005; Kosowski
and Manuszewski, 2004): ``natural``; ``largest_first`` (decreasing degree);
``smallest_last`` (repeatedly remove a vertex of smallest remaining degree, then
reverse); ``incidence_degree`` (next the vertex with most neighbors already
ordered); ``dynamic_largest_first`` (next the vertex of largest remaining degree);
``saturation`` (DSATUR: next the vertex with most distinct colors around it);
``independent_set`` (maximal independent sets one after the other, each grown
from vertices of smallest degree); ``breadth_first`` and ``depth_first``
(connected-sequential: each component from its lowest vertex); ``random`` (a
permutation drawn from ``seed``, the same on every machine). The dynamic orders
come with two tie-breaks: the vertex queued last (their plain names) and the
lowest vertex (``":lowest"``, as networkx breaks them).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from di.sparse import kernels, order_kernels
from di.sparse.selector import ORDERS

__all__ = ["ORDERS", "order_cost", "vertex_order"]


_DYNAMIC = {  # (initial key: degrees?, pick the largest?, step on each neighbor taken)
    "smallest_last": (True, False, -1),
    "dynamic_largest_first": (True, True, -1),
    "incidence_degree": (False, True, 1),
}


def order_cost(graph: sp.csr_array, order: str, walk: int, colors: int) -> int:
    """What an order costs on ``graph``, in compiled steps (:func:`di.sparse.kernels.steps`),
    for the search's budget: ``walk`` is the sum of squared degrees (DSATUR's
    updates), ``colors`` an estimate of the number of colors (independent sets:
    one pass per color)."""
    n, edges = graph.shape[0], graph.nnz
    logarithm = max(1.0, math.log2(max(n, 2)))
    if order in ("natural", "random", "largest_first"):
        return n
    if order in _DYNAMIC:
        return kernels.steps(n + edges)
    if order in ("breadth_first", "depth_first"):
        return kernels.steps(n + edges, True, "connected_sequential_kernel")
    if order.endswith(":lowest"):
        return kernels.steps(int((n + edges) * logarithm), True, "heap_order_kernel")
    if order == "saturation":
        return kernels.steps(n * n + walk)
    if order == "independent_set":
        work = (n + edges) * max(colors, 1) + int(edges * logarithm)
        return kernels.steps(work, True, "independent_set_kernel")
    raise ValueError(f"unknown vertex order {order!r}; use one of {', '.join(ORDERS)} or 'auto'")


def vertex_order(graph: sp.csr_array, order: str, seed: int = 0) -> np.ndarray:
    """The vertices of a symmetric graph in one of :data:`ORDERS`.

    Args:
        graph: a symmetric boolean CSR graph without diagonal, indices sorted.
        order: one of :data:`ORDERS`.
        seed: the seed of ``"random"``.

    Returns:
        A permutation of ``0 .. n - 1`` (int64).

    Raises:
        ValueError: an unknown order.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.orders import vertex_order
        >>> star = np.zeros((4, 4), dtype=bool); star[0, 1:] = star[1:, 0] = True
        >>> vertex_order(sp.csr_array(star), "largest_first")
        array([0, 1, 2, 3])
        >>> vertex_order(sp.csr_array(star), "breadth_first")
        array([0, 1, 2, 3])
    """
    n = graph.shape[0]
    degrees = np.diff(graph.indptr).astype(np.int64)
    if order not in ORDERS:
        raise ValueError(f"unknown vertex order {order!r}; use one of {', '.join(ORDERS)} or 'auto'")
    if order == "natural" or n == 0:
        return np.arange(n, dtype=np.int64)
    if order == "largest_first":
        return np.argsort(-degrees, kind="stable").astype(np.int64)
    if order == "random":
        return np.random.default_rng(seed).permutation(n).astype(np.int64)
    work = graph.nnz + n
    if order == "saturation":
        return _saturation(graph)[1]
    if order == "independent_set":
        run, compiled = kernels.kernel(order_kernels.independent_set_kernel, work, rare=True)
        args = kernels.arguments(compiled, graph.indptr, graph.indices, np.zeros(n), np.zeros(n), np.zeros(n))
        return np.asarray(run(*args), dtype=np.int64)
    if order in ("breadth_first", "depth_first"):
        run, compiled = kernels.kernel(order_kernels.connected_sequential_kernel, work, rare=True)
        ptr, idx, seen, stack, cursor, taken = kernels.arguments(
            compiled, graph.indptr, graph.indices, np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        )
        return np.asarray(run(ptr, idx, order == "depth_first", seen, stack, cursor, taken), dtype=np.int64)
    name, _, ties = order.partition(":")
    by_degree, pick_max, step = _DYNAMIC[name]
    key = degrees.copy() if by_degree else np.zeros(n, dtype=np.int64)
    if ties == "lowest":
        run, compiled = kernels.kernel(order_kernels.heap_order_kernel, work, rare=True)
        ptr, idx, key_, done, taken = kernels.arguments(
            compiled, graph.indptr, graph.indices, key, np.zeros(n), np.zeros(n)
        )
        result = np.asarray(run(ptr, idx, key_, pick_max, step, done, taken), dtype=np.int64)
    else:
        run, compiled = kernels.kernel(kernels.dynamic_order_kernel, work)
        slots = int(degrees.max(initial=0)) + 1
        ptr, idx, key_, head, nxt, prv, done, taken = kernels.arguments(
            compiled,
            graph.indptr,
            graph.indices,
            key,
            np.full(slots, -1),
            np.full(n, -1),
            np.full(n, -1),
            np.zeros(n),
            np.zeros(n),
        )
        result = np.asarray(run(ptr, idx, key_, pick_max, step, head, nxt, prv, done, taken), dtype=np.int64)
    return result[::-1].copy() if name == "smallest_last" else result


def _saturation(graph: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """DSATUR's colors and order."""
    n = graph.shape[0]
    degrees = np.diff(graph.indptr).astype(np.int64)
    run, compiled = kernels.kernel(order_kernels.dsatur_kernel, int(np.dot(degrees, degrees)) + n * n)
    ptr, idx, colors, mark, saturation, taken = kernels.arguments(
        compiled, graph.indptr, graph.indices, np.full(n, -1), np.full(n + 1, -1), np.zeros(n), np.zeros(n)
    )
    colors = run(ptr, idx, colors, mark, saturation, taken)
    return np.asarray(colors, dtype=np.int64), np.asarray(taken, dtype=np.int64)
