"""Graph colorings of sparsity patterns, so that one pushforward (or pullback, or
hvp) per color recovers every nonzero.

* :func:`column_coloring`: columns sharing a row get different colors (a
  distance-1 coloring of the column intersection graph). Then ``J @ S``
  (``S[j, c] = 1`` when column ``j`` has color ``c``) holds every ``J[i, j]`` in
  ``(i, color[j])``. :func:`row_coloring` is the same on ``J.T``, for pullbacks.
* :func:`star_coloring`: for a symmetric (Hessian) pattern, a distance-1
  coloring in which every path on four vertices uses at least three colors
  (Gebremedhin, Manne and Pothen, 2005). Each nonzero is then alone of its color
  in its row or its column of ``H @ S``: read directly.
* :func:`acyclic_coloring`: every two-colored subgraph is a forest (Gebremedhin,
  Tarafdar, Manne and Pothen, 2009). Fewer colors than star (a banded Hessian
  with ``rho`` off-diagonal bands: ``floor(rho / 2) + 1`` against
  ``2 floor(rho / 2) + 1``), read by substitution along the trees.
* :func:`bicoloring`: a star coloring of the bipartite graph of a Jacobian, rows
  and columns together: columns are read by pushforwards, rows by pullbacks. A
  Jacobian with a dense row and a dense column (an arrowhead) needs ``n``
  column colors or ``m`` row colors but three bicolors.

All are greedy, vertex by vertex in an order (:data:`ORDERS`, in
:mod:`di.sparse.orders`). ``"auto"`` searches: every order, then DSATUR and
smallest-last with seeded tie-breaks, then Culberson's iterated greedy on the best
(recoloring by whole color classes) until it stalls; it keeps the fewest colors,
stops at a lower bound, and stays within :data:`WORK_BUDGET` (each candidate is
costed before it runs). The acyclic search adds a bounded palette (each vertex
prefers a color absent two steps away: a grid's 3 colors) and the star search
(a star coloring as small wins: it is read directly). The loops are
:mod:`di.sparse.kernels` and :mod:`di.sparse.order_kernels` (compiled by Numba
when it is installed and the graph is large).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from di.sparse import kernels
from di.sparse.checks import is_acyclic_coloring, is_star_coloring, is_structurally_orthogonal
from di.sparse.orders import ORDERS, order_cost, vertex_order

__all__ = [
    "ORDERS",
    "BUDGET_FLOOR",
    "WORK_BUDGET",
    "Coloring",
    "acyclic_coloring",
    "adjacency",
    "bicoloring",
    "column_coloring",
    "is_acyclic_coloring",
    "is_star_coloring",
    "is_structurally_orthogonal",
    "row_coloring",
    "star_coloring",
    "vertex_order",
]

WORK_BUDGET = 300_000_000
"""The most steps (entries walked, in compiled-kernel units) the search of
``order="auto"`` may take: thirty times one coloring's cost, at least
:data:`BUDGET_FLOOR` (a tenth of both without Numba). The first order always runs."""
BUDGET_FLOOR = 100_000_000
_RELABEL_STEPS = 50  # per stored entry: shuffling a graph with scipy, in compiled steps
_RANDOM_TIES = 6  # seeded relabelings whose ties the orders also try (DSATUR gains most from them)
_RECOLOR_PATIENCE = 6  # iterated-greedy passes without improvement before it stops
_GRAPH_LIMIT = 50_000_000  # edges of a column intersection graph worth building


@dataclass(frozen=True, eq=False)
class Coloring:
    """A coloring and how it was found.

    Attributes:
        colors: the color of each vertex, ``0 .. n_colors - 1`` (``-1``: neutral,
            in no seed).
        order: the vertex order that gave it (``"auto"`` results name the winner:
            ``"saturation~2"`` with ties broken by the second seeded relabeling,
            ``"+recolored"`` when iterated greedy improved it, ``"+palette"`` when
            a bounded palette did).
        tried: ``(order, colors)`` of every candidate ``"auto"`` ran, in order.
        skipped: the candidates ``"auto"`` left out: over the work budget, or
            not needed once the lower bound was reached.
    """

    colors: np.ndarray
    order: str
    tried: tuple[tuple[str, int], ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def n_colors(self) -> int:
        """The number of colors."""
        return int(self.colors.max(initial=-1)) + 1


# --- graphs and orders ----------------------------------------------------------------------------


def adjacency(pattern: sp.csr_array) -> sp.csr_array:
    """The symmetric adjacency graph of a square pattern: ``P | P.T`` without the diagonal."""
    graph = sp.csr_array(pattern + pattern.T, dtype=bool)
    graph.setdiag(False)
    graph.eliminate_zeros()
    graph.sort_indices()
    return graph


def _intersection_graph(pattern: sp.csr_array) -> sp.csr_array | None:
    """The column intersection graph (columns sharing a row are adjacent), or
    ``None`` when it would have more than ``_GRAPH_LIMIT`` edges."""
    degrees = np.diff(sp.csr_array(pattern).indptr).astype(np.int64)
    if int((degrees * degrees).sum()) > _GRAPH_LIMIT:
        return None
    csc = sp.csc_array(pattern, dtype=np.int32)
    return adjacency(sp.csr_array(csc.T @ csc))


# --- the colorings ----------------------------------------------------------------------------------

_Kernel = Callable[[sp.csr_array, np.ndarray], np.ndarray]


def _greedy(graph: sp.csr_array, order: np.ndarray) -> np.ndarray:
    n = graph.shape[0]
    run, compiled = kernels.kernel(kernels.greedy_kernel, graph.nnz)
    ptr, idx, order_, colors, mark = kernels.arguments(
        compiled, graph.indptr, graph.indices, order, np.full(n, -1), np.full(n + 1, -1)
    )
    return np.asarray(run(ptr, idx, order_, colors, mark), dtype=np.int64)


def _walk(graph: sp.csr_array) -> int:
    """The entries a distance-2 kernel walks: the sum of squared degrees (one
    dense row makes it quadratic, however few the edges: an arrowhead of 1e4
    vertices walks 1e8 entries, 10 s in Python, 0.1 s compiled)."""
    degrees = np.diff(graph.indptr).astype(np.int64)
    return int(np.dot(degrees, degrees))


def _star(graph: sp.csr_array, order: np.ndarray) -> np.ndarray:
    n = graph.shape[0]
    run, compiled = kernels.kernel(kernels.star_kernel, _walk(graph))
    ptr, idx, order_, colors, mark = kernels.arguments(
        compiled, graph.indptr, graph.indices, order, np.full(n, -1), np.full(n + 1, -1)
    )
    return np.asarray(run(ptr, idx, order_, colors, mark), dtype=np.int64)


def _twins(graph: sp.csr_array) -> np.ndarray:
    """For each stored entry ``(i, j)`` of a symmetric CSR graph, the position of ``(j, i)``."""
    rows = np.repeat(np.arange(graph.shape[0], dtype=np.int64), np.diff(graph.indptr))
    cols = graph.indices.astype(np.int64)
    by_transpose = np.lexsort((rows, cols))  # positions sorted by (col, row): entry (j, i) of each (i, j)
    twin = np.empty(rows.size, dtype=np.int64)
    twin[by_transpose] = np.arange(rows.size, dtype=np.int64)
    return twin


def _acyclic(graph: sp.csr_array, order: np.ndarray, palette: int = 0) -> np.ndarray:
    n, edges = graph.shape[0], graph.nnz
    run, compiled = kernels.kernel(kernels.acyclic_kernel, _walk(graph))
    args = kernels.arguments(
        compiled,
        graph.indptr,
        graph.indices,
        _twins(graph),
        order,
        np.full(n, -1),
        np.full(n + 1, -1),
        np.arange(edges),
        np.zeros(edges),
        np.full(edges, -1),
        np.full(edges, -1),
        np.full(n + 1, -1),
        np.full(n + 1, -1),
        np.full(n + 1, -1),
    )
    args.insert(-1, palette)
    return np.asarray(run(*args), dtype=np.int64)


def _class_order(colors: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Iterated greedy's order (Culberson): whole color classes, by ``rank`` of their color."""
    return np.lexsort((np.arange(colors.size), rank[colors])).astype(np.int64)


def _count(colors: np.ndarray) -> int:
    return int(colors.max(initial=-1)) + 1


def _relabeled_order(graph: sp.csr_array, order: str, seed: int) -> np.ndarray:
    """``order`` on the graph with its vertices shuffled by ``seed``: the same rule
    with its ties broken another (reproducible) way."""
    permutation = np.random.default_rng(seed).permutation(graph.shape[0])
    shuffled = sp.csr_array(graph[permutation][:, permutation])
    shuffled.sort_indices()
    return permutation[vertex_order(shuffled, order)].astype(np.int64)


class _Search:
    """The candidates of ``order="auto"``, run while the work budget lasts and the
    lower bound is not reached; keeps the fewest colors (the first found on a tie)."""

    def __init__(self, graph: sp.csr_array, color: _Kernel, kernel_cost: int, lower: int) -> None:
        self.graph, self.color, self.kernel_cost, self.lower = graph, color, kernel_cost, lower
        # About thirty colorings' worth, at least BUDGET_FLOOR, at most WORK_BUDGET:
        # a small graph gets the whole search, a large one what its size repays.
        budget = min(WORK_BUDGET, max(BUDGET_FLOOR, 30 * kernel_cost))
        self.budget = budget if kernels.numba_available() else budget // 10
        self.spent = 0
        self.best: Coloring | None = None
        self.tried: list[tuple[str, int]] = []
        self.skipped: list[str] = []

    @property
    def done(self) -> bool:
        return self.best is not None and self.best.n_colors <= self.lower

    def run(
        self,
        name: str,
        order: Callable[[], np.ndarray],
        cost: int,
        *,
        accept_ties: bool = False,
        color: _Kernel | None = None,
    ) -> bool:
        """Run one candidate (unless over budget or done); whether it improved on the best."""
        if self.done or (self.best is not None and self.spent + cost + self.kernel_cost > self.budget):
            self.skipped.append(name)
            return False
        colors = (color or self.color)(self.graph, order())
        self.spent += cost + self.kernel_cost
        self.tried.append((name, _count(colors)))
        best = self.best
        if best is None or _count(colors) < best.n_colors or (accept_ties and _count(colors) == best.n_colors):
            self.best = Coloring(colors, name)
            return best is None or _count(colors) < best.n_colors
        return False

    def result(self) -> Coloring:
        assert self.best is not None
        return Coloring(self.best.colors, self.best.order, tuple(self.tried), tuple(self.skipped))


def _searched(graph: sp.csr_array, color: _Kernel, seed: int, *, work: int, lower: int) -> _Search:
    """The search of ``order="auto"``: every order of :data:`ORDERS`, then
    DSATUR and smallest-last with seeded ties, then iterated greedy on the best
    (recoloring by whole color classes: reversed, largest first, shuffled), while
    :data:`WORK_BUDGET` lasts and the ``lower`` bound is not reached."""
    walk = _walk(graph)
    n, edges = graph.shape[0], graph.nnz
    search = _Search(graph, color, kernels.steps(n + work), lower)
    estimate = int(np.sqrt(edges)) + 1  # colors, for the independent sets' passes
    candidates: list[tuple[int, str, Callable[[], np.ndarray]]] = [
        (order_cost(graph, name, walk, estimate), name, functools.partial(vertex_order, graph, name, seed))
        for name in ORDERS
    ]
    for tie in range(1, _RANDOM_TIES + 1):
        for name in ("saturation", "smallest_last"):
            cost = order_cost(graph, name, walk, 0) + _RELABEL_STEPS * edges
            candidates.append((cost, f"{name}~{tie}", functools.partial(_relabeled_order, graph, name, seed + tie)))
    # Cheapest first (natural first: it costs least), so that the budget goes to many cheap
    # candidates before a costly one; the order of ties stays the list's.
    for cost, name, order in sorted(candidates, key=lambda candidate: candidate[0]):
        search.run(name, order, cost)
    rng = np.random.default_rng(seed)
    stale = 0
    while stale < _RECOLOR_PATIENCE and not search.done:
        best = search.best
        assert best is not None
        classes = np.arange(best.n_colors)
        ranks = (-classes, -np.bincount(best.colors, minlength=best.n_colors), rng.permutation(best.n_colors))
        name = best.order.removesuffix("+recolored") + "+recolored"
        runs = len(search.tried)
        reordered = functools.partial(_class_order, best.colors, ranks[stale % 3])
        improved = search.run(name, reordered, 10 * n, accept_ties=True)
        if len(search.tried) == runs:  # over budget
            break
        stale = 0 if improved else stale + 1
    return search


def _colored(graph: sp.csr_array, color: _Kernel, order: str, seed: int, *, work: int, lower: int) -> Coloring:
    """``color`` in ``order``, or the best of :func:`_searched` for ``"auto"``."""
    if order != "auto":
        return Coloring(color(graph, vertex_order(graph, order, seed)), order)
    return _searched(graph, color, seed, work=work, lower=lower).result()


def _cycle_bound(graph: sp.csr_array) -> int:
    """A lower bound on the colors of a star or acyclic coloring: 3 when the graph
    has a cycle (as many edges as vertices), 2 with an edge, else 1 (or 0)."""
    n, edges = graph.shape[0], graph.nnz // 2
    return 3 if edges >= n > 0 else 2 if edges else min(n, 1)


def column_coloring(pattern: sp.csr_array, order: str = "auto", seed: int = 0) -> np.ndarray:
    """Greedy coloring of the columns so that no two columns of one color share a row.

    Args:
        pattern: an ``(m, n)`` pattern.
        order: one of :data:`ORDERS`, or ``"auto"`` (the best of several).
        seed: the seed of the ``"random"`` order.

    Returns:
        ``colors``, an int64 array of length ``n`` with values ``0 .. k - 1``.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.coloring import column_coloring
        >>> tridiagonal = sp.csr_array(np.eye(5, k=-1) + np.eye(5) + np.eye(5, k=1))
        >>> column_coloring(tridiagonal, "natural")
        array([0, 1, 2, 0, 1])
    """
    return column_coloring_of(pattern, order, seed).colors


def column_coloring_of(pattern: sp.csr_array, order: str = "auto", seed: int = 0) -> Coloring:
    """:func:`column_coloring` with the order that gave it (a :class:`Coloring`)."""
    graph = _intersection_graph(pattern)
    n = pattern.shape[1]
    if graph is None:  # a row so dense that its columns would all differ anyway: one color each
        return Coloring(np.arange(n, dtype=np.int64), "distinct")
    lower = int(np.diff(sp.csr_array(pattern).indptr).max(initial=0))  # a row's columns all differ
    return _colored(graph, _greedy, order, seed, work=graph.nnz, lower=lower)


def row_coloring(pattern: sp.csr_array, order: str = "auto", seed: int = 0) -> np.ndarray:
    """Greedy coloring of the rows so that no two rows of one color share a column
    (:func:`column_coloring` of the transpose), for compression by pullbacks.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.coloring import row_coloring
        >>> row_coloring(sp.csr_array(np.array([[1, 1, 1], [0, 1, 0], [0, 0, 1]])))
        array([0, 1, 1])
    """
    return column_coloring(sp.csr_array(pattern.T), order, seed)


def star_coloring(pattern: sp.csr_array, order: str = "auto", seed: int = 0) -> np.ndarray:
    """Greedy star coloring of a symmetric pattern (its diagonal is ignored).

    Args:
        pattern: an ``(n, n)`` symmetric pattern.
        order: one of :data:`ORDERS`, or ``"auto"``.
        seed: the seed of the ``"random"`` order.

    Returns:
        ``colors``, an int64 array of length ``n``.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.coloring import star_coloring
        >>> arrow = np.eye(6, dtype=bool); arrow[0, :] = arrow[:, 0] = True
        >>> star_coloring(sp.csr_array(arrow))
        array([0, 1, 1, 1, 1, 1])
    """
    return star_coloring_of(pattern, order, seed).colors


def star_coloring_of(pattern: sp.csr_array, order: str = "auto", seed: int = 0) -> Coloring:
    """:func:`star_coloring` with the order that gave it. ``"auto"`` also searches
    distance-2 colorings (greedy on the square of the graph: star colorings too,
    as networkx would find them), named ``"distance2:<order>"``."""
    graph = adjacency(pattern)
    if order != "auto":
        return Coloring(_star(graph, vertex_order(graph, order, seed)), order)
    work = _star_work(graph)
    star = None
    if work <= WORK_BUDGET:  # else (nearly dense) a distance-2 coloring alone, if the square is small
        star = _colored(graph, _star, order, seed, work=work, lower=_cycle_bound(graph))
        if star.n_colors <= _cycle_bound(graph):
            return star
    square = _square(graph)
    if square is None:
        return star if star is not None else _colored(graph, _star, order, seed, work=work, lower=0)
    lower = int(np.diff(graph.indptr).max(initial=0)) + 1  # a vertex and its neighbors all differ
    far = _searched(square, _greedy, seed, work=square.nnz, lower=lower).result()
    far_tried = tuple((f"distance2:{n}", c) for n, c in far.tried)
    if star is None:
        return Coloring(far.colors, f"distance2:{far.order}", far_tried, ("star kernel: over budget", *far.skipped))
    tried, skipped = star.tried + far_tried, star.skipped + far.skipped
    if far.n_colors < star.n_colors:
        return Coloring(far.colors, f"distance2:{far.order}", tried, skipped)
    return Coloring(star.colors, star.order, tried, skipped)


def _star_work(graph: sp.csr_array) -> int:
    """A bound on the star kernel's steps: for each path ``v - w - x``, ``x``'s
    neighbors (``sum(deg(w) * sum of w's neighbors' degrees)``: quartic on a nearly
    dense graph, where a distance-2 coloring costs far less and does as well)."""
    degrees = np.diff(graph.indptr).astype(np.float64)
    around = sp.csr_array(graph, dtype=np.float64) @ degrees
    return int(min(float(np.dot(degrees, around)), 2.0**62))


def _square(graph: sp.csr_array) -> sp.csr_array | None:
    """Vertices one or two steps apart adjacent, or ``None`` past ``_GRAPH_LIMIT`` edges."""
    n = graph.shape[0]
    if _walk(graph) > 4 * _GRAPH_LIMIT or (n * n > _GRAPH_LIMIT and _walk(graph) > _GRAPH_LIMIT):
        return None  # (the product's flops, and its entries: at most n**2 and the walk)
    one = sp.csr_array(graph, dtype=np.int32) + sp.eye_array(graph.shape[0], dtype=np.int32, format="csr")
    return adjacency(sp.csr_array(one @ one, dtype=bool))


def acyclic_coloring(pattern: sp.csr_array, order: str = "auto", seed: int = 0) -> np.ndarray:
    """Greedy acyclic coloring of a symmetric pattern: adjacent vertices differ and
    every cycle uses at least three colors.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.coloring import acyclic_coloring
        >>> penta = sp.csr_array(sum(np.eye(8, k=k) for k in range(-2, 3)))
        >>> int(acyclic_coloring(penta, "natural").max()) + 1
        3
    """
    return acyclic_coloring_of(pattern, order, seed).colors


_PALETTE_ORDERS = ("breadth_first", "natural", "incidence_degree:lowest", "smallest_last")


def acyclic_coloring_of(pattern: sp.csr_array, order: str = "auto", seed: int = 0) -> Coloring:
    """:func:`acyclic_coloring` with the order that gave it; ``"auto"`` also tries a
    star coloring (every star coloring is acyclic, and read directly: on a tie it
    wins, its :attr:`Coloring.order` then starts with ``"star:"``)."""
    graph = adjacency(pattern)
    if order != "auto":
        acyclic = Coloring(_acyclic(graph, vertex_order(graph, order, seed)), order)
        star = Coloring(_star(graph, vertex_order(graph, order, seed)), order)
        return star if star.n_colors < acyclic.n_colors else acyclic
    search = _searched(graph, _acyclic, seed, work=_walk(graph), lower=_cycle_bound(graph))
    walk = _walk(graph)
    improved = True
    while improved and not search.done:
        # Greedy with a bounded palette, one color fewer than the best: each vertex
        # prefers a color no vertex two steps away has (a grid's (i + j) mod 3).
        assert search.best is not None
        palette = search.best.n_colors - 1
        improved = False
        for name in _PALETTE_ORDERS:
            cost = order_cost(graph, name, walk, palette)

            def bounded(graph: sp.csr_array, order: np.ndarray, palette: int = palette) -> np.ndarray:
                return _acyclic(graph, order, palette)

            candidate = functools.partial(vertex_order, graph, name, seed)
            if search.run(f"{name}+palette", candidate, cost, color=bounded):
                improved = True
                break
    acyclic = search.result()
    star = star_coloring_of(pattern, "auto", seed)
    if star.n_colors <= acyclic.n_colors:
        return Coloring(star.colors, "star:" + star.order, acyclic.tried + star.tried, acyclic.skipped + star.skipped)
    return Coloring(acyclic.colors, acyclic.order, acyclic.tried + star.tried, acyclic.skipped + star.skipped)


def bipartite_graph(pattern: sp.csr_array) -> sp.csr_array:
    """The ``(m + n, m + n)`` symmetric pattern ``[[0, J], [J.T, 0]]``: rows first, then columns."""
    m, n = pattern.shape
    upper = sp.hstack([sp.csr_array((m, m), dtype=bool), sp.csr_array(pattern, dtype=bool)])
    lower = sp.hstack([sp.csr_array(pattern.T, dtype=bool), sp.csr_array((n, n), dtype=bool)])
    return sp.csr_array(sp.vstack([upper, lower]), dtype=bool)


def bicoloring_of(pattern: sp.csr_array, order: str = "auto", seed: int = 0) -> Coloring:
    """A star coloring of :func:`bipartite_graph` (row vertices first, then columns):
    the raw material of a bidirectional decompression
    (:func:`di.sparse.decompression.bidirectional_decompression` assigns each nonzero
    to a pushforward or a pullback and makes unused vertices neutral)."""
    return star_coloring_of(bipartite_graph(pattern), order, seed)


def bicoloring(pattern: sp.csr_array, order: str = "auto", seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Row and column colors for a bidirectional Jacobian (pullbacks for rows,
    pushforwards for columns), ``-1`` for the rows and columns no product needs.

    Returns:
        ``(row_colors, column_colors)``.

    Examples:
        >>> import numpy as np, scipy.sparse as sp
        >>> from di.sparse.coloring import bicoloring
        >>> arrow = np.eye(6, dtype=bool); arrow[0, :] = arrow[:, 0] = True
        >>> rows, columns = bicoloring(sp.csr_array(arrow))
        >>> len(set(rows[rows >= 0])) + len(set(columns[columns >= 0]))
        3
    """
    from di.sparse.decompression import bidirectional_decompression

    decompression = bidirectional_decompression(pattern, bicoloring_of(pattern, order, seed).colors)
    assert decompression.row_colors is not None
    return decompression.row_colors, decompression.colors
