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

__all__ = ["COMPILE_FROM", "kernel", "numba_available"]

COMPILE_FROM = 20_000
"""Work (stored entries of the graph a kernel walks) from which a kernel is compiled."""

_COMPILED: dict[str, Callable[..., Any]] = {}
_HELPERS = ("_link",)


def numba_available() -> bool:
    """Whether Numba is installed (it is optional: the kernels run in Python without it)."""
    return importlib.util.find_spec("numba") is not None


def kernel(function: Callable[..., Any], work: int, force: bool | None = None) -> tuple[Callable[..., Any], bool]:
    """The kernel to run: ``(callable, compiled)``.

    Args:
        function: one of this module's kernels.
        work: the size of the problem (stored entries walked).
        force: ``True`` to compile whatever the size (tests), ``False`` never to.

    Returns:
        The Numba-compiled kernel and ``True``, or ``function`` and ``False``
        (then pass Python lists, see :func:`arguments`).
    """
    compile_it = force if force is not None else work >= COMPILE_FROM
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
    for name in _HELPERS:
        namespace[name] = numba.njit(cache=False)(namespace[name])
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


def _link(parent: Any, e: int, f: int) -> None:
    """Merge the sets of edges ``e`` and ``f`` (no path compression: trees stay shallow
    enough, and the kernel stays one function for Numba)."""
    while parent[e] != e:
        e = parent[e]
    while parent[f] != f:
        f = parent[f]
    if e != f:
        parent[f] = e


def acyclic_kernel(
    ptr: Any, idx: Any, twin: Any, order: Any, colors: Any, mark: Any, parent: Any, visit_v: Any, visit_w: Any
) -> Any:
    """Greedy acyclic coloring (every two-colored subgraph is a forest).

    Two-colored trees are kept as disjoint sets of edges (``parent``, indexed by
    the smaller of an edge's two CSR positions, ``twin[a]`` being the other). A
    vertex ``v`` may not take a neighbor's color, nor the color ``b`` of a tree
    ``T`` (colors ``a``, ``b``) it reaches through two different neighbors of
    color ``a``: ``v`` would close a cycle in ``T``. ``visit_v[T]``/``visit_w[T]``
    record the first neighbor through which ``v`` reached ``T``. Returns ``colors``.
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
                if x == v or colors[x] < 0 or mark[colors[x]] == v:
                    continue
                tree = min(b, twin[b])
                while parent[tree] != tree:
                    tree = parent[tree]
                if visit_v[tree] != v:
                    visit_v[tree] = v
                    visit_w[tree] = w
                elif visit_w[tree] != w:
                    mark[colors[x]] = v
        color = 0
        while mark[color] == v:
            color += 1
        colors[v] = color
        # Grow the trees: edge (v, w) joins the trees of color pair {color, colors[w]} at w and at v.
        for a in range(ptr[v], ptr[v + 1]):
            w = idx[a]
            if colors[w] < 0:
                continue
            edge = min(a, twin[a])
            for b in range(ptr[w], ptr[w + 1]):
                x = idx[b]
                if x != v and colors[x] == color:
                    _link(parent, edge, min(b, twin[b]))
        for a in range(ptr[v], ptr[v + 1]):
            w = idx[a]
            if colors[w] < 0:
                continue
            # Edges from v to two neighbors of one color are in one tree: link each to the first.
            first = -1
            for b in range(ptr[v], a):
                if colors[idx[b]] == colors[w]:
                    first = b
                    break
            if first >= 0:
                _link(parent, min(first, twin[first]), min(a, twin[a]))
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
