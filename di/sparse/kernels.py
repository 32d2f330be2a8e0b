"""The loops of coloring and substitution, written once in the subset of Python
that Numba compiles.

Greedy colorings visit vertices one at a time: they do not vectorise. Each
kernel here is plain Python over integer arrays; :func:`kernel` returns it
compiled by Numba when Numba is installed and the problem is large enough to
repay the compile (about 0.4 s per kernel, once per process), and otherwise the
Python function itself, run on Python lists (several times faster than on NumPy
scalars). Measured on two shared cores at n = 1e5 (a pentadiagonal pattern), a
distance-2 coloring takes 6 ms compiled and 170 ms in Python.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["COMPILE_FROM", "PYTHON_STEP", "RARE_COMPILE_FROM", "compiles", "kernel", "numba_available", "steps"]

COMPILE_FROM = 20_000
"""Work (stored entries of the graph a kernel walks) from which a kernel is compiled."""

_COMPILED: dict[str, Callable[..., Any]] = {}
_HELPERS = ("_find", "_union")


def numba_available() -> bool:
    """Whether Numba is installed (it is optional: the kernels run in Python without it)."""
    return importlib.util.find_spec("numba") is not None


PYTHON_STEP = 100
"""About how many compiled steps one step of a kernel in plain Python costs (for
the coloring search's budget)."""

RARE_COMPILE_FROM = 1_000_000
"""Work from which the kernels of the orders the search tries once per pattern
(independent sets, heaps, breadth-first) are compiled: their compiles
(1-3 s each, heap-based ones most) outweigh a run in Python below it."""


def compiles(work: int, rare: bool = False) -> bool:
    """Whether :func:`kernel` compiles a kernel of this work (Numba installed)."""
    return work >= (RARE_COMPILE_FROM if rare else COMPILE_FROM) and numba_available()


COMPILE_STEPS = 500_000_000
"""What compiling one of the orders' kernels costs, in compiled steps (1-3 s): more
than the search's whole budget, so the search never compiles one (a caller asking
for that order does)."""


def steps(work: int, rare: bool = False, name: str = "") -> int:
    """The cost of a kernel's run in compiled-step units: ``work``, times
    :data:`PYTHON_STEP` when it runs in plain Python, plus :data:`COMPILE_STEPS`
    for a ``rare`` kernel (named ``name``) not compiled yet."""
    if not compiles(work, rare):
        return work * PYTHON_STEP
    return work + (COMPILE_STEPS if rare and name not in _COMPILED else 0)


def kernel(
    function: Callable[..., Any], work: int, force: bool | None = None, rare: bool = False
) -> tuple[Callable[..., Any], bool]:
    """The kernel to run: ``(callable, compiled)``.

    Args:
        function: one of this module's kernels.
        work: the size of the problem (stored entries walked).
        force: ``True`` to compile whatever the size (tests), ``False`` never to.
        rare: compile from :data:`RARE_COMPILE_FROM` rather than
            :data:`COMPILE_FROM` (the kernels of orders tried once per pattern).

    Returns:
        The Numba-compiled kernel and ``True``, or ``function`` and ``False``
        (then pass Python lists, see :func:`arguments`).
    """
    compile_it = force if force is not None else work >= (RARE_COMPILE_FROM if rare else COMPILE_FROM)
    if not compile_it or not numba_available():
        return function, False
    compiled = _COMPILED.get(function.__name__)
    if compiled is None:
        compiled = _COMPILED[function.__name__] = _compile(function)
    return compiled, True


def _compile(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` compiled by Numba, the helpers it calls compiled with it."""
    import types

    import numba

    namespace = dict(function.__globals__)
    for name in _HELPERS:  # in dependency order: each compiled helper sees those compiled before it
        helper = namespace.get(name)
        if helper is not None:
            code = types.FunctionType(helper.__code__, namespace, helper.__name__, helper.__defaults__)
            namespace[name] = numba.njit(cache=False)(code)
    copy = types.FunctionType(function.__code__, namespace, function.__name__, function.__defaults__)
    return numba.njit(cache=False, nogil=True)(copy)  # type: ignore[no-any-return]


def arguments(compiled: bool, *arrays: np.ndarray) -> list[Any]:
    """The kernel's array arguments: int64 arrays when compiled, Python lists otherwise."""
    if compiled:
        return [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]
    return [np.asarray(a).tolist() for a in arrays]


# --- distance-1 greedy coloring ----------------------------------------------------------------


def greedy_kernel(ptr: Any, idx: Any, order: Any, colors: Any, mark: Any) -> Any:
    """Color the vertices in ``order`` with the smallest color no neighbor has.

    ``colors`` (-1 everywhere) and ``mark`` (-1, length ``n + 1``) are scratch of
    length ``n``; returns ``colors``.
    """
    for v in order:
        for a in range(ptr[v], ptr[v + 1]):
            color = colors[idx[a]]
            if color >= 0:
                mark[color] = v
        color = 0
        while mark[color] == v:
            color += 1
        colors[v] = color
    return colors


def star_kernel(ptr: Any, idx: Any, order: Any, colors: Any, mark: Any) -> Any:
    """Greedy star coloring (no path on four vertices has only two colors).

    A vertex ``v`` may not take: a neighbor's color; the color of a vertex two
    steps away through a neighbor not colored yet (else the two would meet at it
    later); the color of ``x`` two steps away through a colored ``w`` when ``x``
    has another neighbor colored like ``w`` (``v - w - x - y`` would alternate).
    Returns ``colors``.
    """
    for v in order:
        for a in range(ptr[v], ptr[v + 1]):
            w = idx[a]
            color_w = colors[w]
            if color_w >= 0:
                mark[color_w] = v
            for b in range(ptr[w], ptr[w + 1]):
                x = idx[b]
                color_x = colors[x]
                if x == v or color_x < 0 or mark[color_x] == v:
                    continue
                if color_w < 0:
                    mark[color_x] = v
                    continue
                alike = 0
                for c in range(ptr[x], ptr[x + 1]):
                    if colors[idx[c]] == color_w:
                        alike += 1
                if alike >= 2:
                    mark[color_x] = v
        color = 0
        while mark[color] == v:
            color += 1
        colors[v] = color
    return colors


def _find(parent: Any, e: int) -> int:
    """The root of edge ``e``'s set, halving the path on the way (near-constant
    amortized, with the union by rank of :func:`_union`)."""
    while parent[e] != e:
        parent[e] = parent[parent[e]]
        e = parent[e]
    return e


def _union(parent: Any, rank: Any, e: int, f: int) -> None:
    """Merge the sets of edges ``e`` and ``f`` (the lower-ranked root under the other)."""
    e = _find(parent, e)
    f = _find(parent, f)
    if e == f:
        return
    if rank[e] < rank[f]:
        e, f = f, e
    parent[f] = e
    if rank[e] == rank[f]:
        rank[e] += 1


def acyclic_kernel(
    ptr: Any,
    idx: Any,
    twin: Any,
    order: Any,
    colors: Any,
    mark: Any,
    parent: Any,
    rank: Any,
    visit_v: Any,
    visit_w: Any,
    first_edge: Any,
    first_stamp: Any,
    palette: int,
    near: Any,
) -> Any:
    """Greedy acyclic coloring (every two-colored subgraph is a forest), after
    Gebremedhin, Tarafdar, Manne and Pothen (SIAM J. Sci. Comput., 2007).

    The two-colored trees are disjoint sets of edges (``parent``/``rank``, an edge
    named by the smaller of its two CSR positions, ``twin[a]`` being the other),
    merged by rank with path halving. A vertex ``v`` may not take a neighbor's
    color, nor the color of ``x`` in a tree it reaches through two different
    neighbors (``visit_v``/``visit_w``: the first vertex and neighbor that reached
    each tree): ``v`` would close a cycle. Once ``v`` is colored, each edge
    ``(v, w)`` joins the trees of its two colors at ``w`` and at ``v``
    (``first_edge``/``first_stamp``: the first edge from ``v`` to each color).

    With ``palette > 0``, ``v`` takes the first allowed color below ``palette``
    that no vertex two steps away has (``near``, -1, length ``n + 1``), else the
    first allowed one below ``palette``, else the first allowed one: on a grid in
    breadth-first order this finds the diagonal 3-coloring first-fit misses.
    About ``sum(deg(w)**2)`` steps. Returns ``colors``.
    """
    for v in order:
        for a in range(ptr[v], ptr[v + 1]):
            color_w = colors[idx[a]]
            if color_w >= 0:
                mark[color_w] = v
        for a in range(ptr[v], ptr[v + 1]):
            w = idx[a]
            if colors[w] < 0:
                continue
            for b in range(ptr[w], ptr[w + 1]):
                x = idx[b]
                if x == v or colors[x] < 0:
                    continue
                near[colors[x]] = v
                if mark[colors[x]] == v:
                    continue
                tree = _find(parent, min(b, twin[b]))
                if visit_v[tree] != v:
                    visit_v[tree] = v
                    visit_w[tree] = w
                elif visit_w[tree] != w:
                    mark[colors[x]] = v
        color = -1
        if palette > 0:
            for c in range(palette):
                if mark[c] != v and near[c] != v:
                    color = c
                    break
            if color < 0:
                for c in range(palette):
                    if mark[c] != v:
                        color = c
                        break
        if color < 0:
            color = 0
            while mark[color] == v:
                color += 1
        colors[v] = color
        for a in range(ptr[v], ptr[v + 1]):
            w = idx[a]
            color_w = colors[w]
            if color_w < 0:
                continue
            edge = min(a, twin[a])
            # Edges from v to neighbors of one color are in one tree.
            if first_stamp[color_w] == v:
                _union(parent, rank, first_edge[color_w], edge)
            else:
                first_stamp[color_w] = v
                first_edge[color_w] = edge
            for b in range(ptr[w], ptr[w + 1]):
                x = idx[b]
                if x != v and colors[x] == color:
                    _union(parent, rank, edge, min(b, twin[b]))
    return colors


# --- vertex orders --------------------------------------------------------------------------------


def dynamic_order_kernel(
    ptr: Any, idx: Any, key: Any, pick_max: bool, step: int, head: Any, nxt: Any, prv: Any, done: Any, taken: Any
) -> Any:
    """Vertices in the order of a bucket queue on ``key``: repeatedly take a vertex
    with the largest (``pick_max``) or smallest key, then add ``step`` to the key of
    each neighbor not taken yet. ``head`` has one slot per possible key (-1),
    ``nxt``/``prv``/``done`` (0)/``taken`` one per vertex. Returns ``taken``."""
    n = len(key)
    for v in range(n):
        k = key[v]
        nxt[v] = head[k]
        prv[v] = -1
        if head[k] >= 0:
            prv[head[k]] = v
        head[k] = v
    current = 0 if not pick_max else len(head) - 1
    for t in range(n):
        if pick_max:
            while head[current] < 0:
                current -= 1
        else:
            while head[current] < 0:
                current += 1
        v = head[current]
        head[current] = nxt[v]
        if nxt[v] >= 0:
            prv[nxt[v]] = -1
        done[v] = 1
        taken[t] = v
        for a in range(ptr[v], ptr[v + 1]):
            u = idx[a]
            if done[u]:
                continue
            k = key[u]
            # Unlink u from bucket k, relink it in bucket k + step.
            if prv[u] >= 0:
                nxt[prv[u]] = nxt[u]
            else:
                head[k] = nxt[u]
            if nxt[u] >= 0:
                prv[nxt[u]] = prv[u]
            k += step
            key[u] = k
            nxt[u] = head[k]
            prv[u] = -1
            if head[k] >= 0:
                prv[head[k]] = u
            head[k] = u
            if pick_max and k > current:
                current = k
            if not pick_max and k < current:
                current = k
    return taken


# --- substitution (acyclic decompression) ---------------------------------------------------------


def substitution_kernel(source: Any, dep_ptr: Any, dep_idx: Any, compressed: Any, out: Any) -> Any:
    """``out[k] = compressed[source[k]] - sum(out[dep_idx[dep_ptr[k]:dep_ptr[k + 1]]])``
    in order (each unknown after those it depends on). Returns ``out``."""
    for k in range(len(source)):
        total = compressed[source[k]]
        for a in range(dep_ptr[k], dep_ptr[k + 1]):
            total -= out[dep_idx[a]]
        out[k] = total
    return out
