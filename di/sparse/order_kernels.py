"""The loops of the vertex orders that are not a plain bucket queue: DSATUR (which
colors as it orders), independent sets, breadth- and depth-first sequences, and
the smallest-last and largest-first orders with ties broken by the lowest vertex.

Written, as :mod:`di.sparse.kernels`, in the subset of Python that Numba
compiles (:func:`di.sparse.kernels.kernel`); lists of int tuples are the heaps.
Every kernel is deterministic: ties go to the lowest vertex index, as in the
textbook (and networkx's) statements of these orders.
"""

from __future__ import annotations

import heapq
from typing import Any

__all__ = [
    "connected_sequential_kernel",
    "dsatur_kernel",
    "heap_order_kernel",
    "independent_set_kernel",
]


def dsatur_kernel(ptr: Any, idx: Any, colors: Any, mark: Any, saturation: Any, taken: Any) -> Any:
    """DSATUR (Brélaz): repeatedly color, with the smallest color its neighbors lack,
    an uncolored vertex with the most distinct colors among its neighbors (then the
    largest degree, then the lowest index). ``colors`` is -1 everywhere, ``mark``
    -1 (length ``n + 1``), ``saturation`` 0, ``taken`` scratch (length ``n``).
    Returns ``colors``; ``taken`` holds the order. Each step scans the uncolored
    vertices (``n**2`` in all: plain loops compile in a fraction of a heap's time)."""
    n = len(colors)
    for t in range(n):
        v = -1
        for u in range(n):
            if colors[u] >= 0:
                continue
            if (
                v < 0
                or saturation[u] > saturation[v]
                or (saturation[u] == saturation[v] and ptr[u + 1] - ptr[u] > ptr[v + 1] - ptr[v])
            ):
                v = u
        for a in range(ptr[v], ptr[v + 1]):
            c = colors[idx[a]]
            if c >= 0:
                mark[c] = v
        color = 0
        while mark[color] == v:
            color += 1
        colors[v] = color
        taken[t] = v
        for a in range(ptr[v], ptr[v + 1]):
            w = idx[a]
            if colors[w] >= 0:
                continue
            seen = False  # whether w already had a neighbor of this color
            for b in range(ptr[w], ptr[w + 1]):
                u = idx[b]
                if u != v and colors[u] == color:
                    seen = True
                    break
            if not seen:
                saturation[w] += 1
    return colors


def heap_order_kernel(ptr: Any, idx: Any, key: Any, pick_max: bool, step: int, done: Any, taken: Any) -> Any:
    """The order of :func:`di.sparse.kernels.dynamic_order_kernel` (repeatedly take
    the vertex of largest or smallest key, add ``step`` to its remaining
    neighbors' keys), ties broken by the lowest vertex index instead of the last
    one queued. Returns ``taken``."""
    n = len(key)
    sign = -1 if pick_max else 1
    heap = [(0, 0)]
    heapq.heappop(heap)
    for v in range(n):
        heapq.heappush(heap, (sign * key[v], v))
    t = 0
    while t < n:
        k, v = heapq.heappop(heap)
        if done[v] or k != sign * key[v]:
            continue
        done[v] = 1
        taken[t] = v
        t += 1
        for a in range(ptr[v], ptr[v + 1]):
            u = idx[a]
            if not done[u]:
                key[u] += step
                heapq.heappush(heap, (sign * key[u], u))
    return taken


def independent_set_kernel(ptr: Any, idx: Any, state: Any, degree: Any, taken: Any) -> Any:
    """The independent-set order: the vertices of a maximal independent set of the
    uncolored graph, then of the rest, and so on; each set is grown by taking a
    vertex of smallest degree among those still eligible and removing its
    neighbors. ``state`` (0), ``degree`` and ``taken`` have length ``n``. Returns ``taken``."""
    n = len(state)
    t = 0
    # state: 0 waiting, 1 eligible in this round, 2 blocked in this round, 3 taken.
    while t < n:
        for v in range(n):
            if state[v] != 3:
                state[v] = 1
        heap = [(0, 0)]
        heapq.heappop(heap)
        for v in range(n):
            if state[v] == 1:
                count = 0
                for a in range(ptr[v], ptr[v + 1]):
                    if state[idx[a]] == 1:
                        count += 1
                degree[v] = count
                heapq.heappush(heap, (count, v))
        while len(heap) > 0:
            d, v = heapq.heappop(heap)
            if state[v] != 1 or d != degree[v]:
                continue
            state[v] = 3
            taken[t] = v
            t += 1
            for a in range(ptr[v], ptr[v + 1]):
                w = idx[a]
                if state[w] != 1:
                    continue
                state[w] = 2
                for b in range(ptr[w], ptr[w + 1]):
                    u = idx[b]
                    if state[u] == 1:
                        degree[u] -= 1
                        heapq.heappush(heap, (degree[u], u))
    return taken


def connected_sequential_kernel(
    ptr: Any, idx: Any, depth_first: bool, seen: Any, stack: Any, cursor: Any, taken: Any
) -> Any:
    """Breadth-first (or depth-first, in preorder) sequences of each connected
    component, each started at its lowest vertex, neighbors in stored order.
    ``seen`` (0), ``stack``, ``cursor`` and ``taken`` have length ``n``. Returns ``taken``."""
    n = len(seen)
    t = 0
    for source in range(n):
        if seen[source]:
            continue
        seen[source] = 1
        taken[t] = source
        t += 1
        if not depth_first:
            head = t - 1
            while head < t:
                v = taken[head]
                head += 1
                for a in range(ptr[v], ptr[v + 1]):
                    w = idx[a]
                    if not seen[w]:
                        seen[w] = 1
                        taken[t] = w
                        t += 1
            continue
        top = 0
        stack[0] = source
        cursor[source] = ptr[source]
        while top >= 0:
            v = stack[top]
            if cursor[v] == ptr[v + 1]:
                top -= 1
                continue
            w = idx[cursor[v]]
            cursor[v] += 1
            if not seen[w]:
                seen[w] = 1
                taken[t] = w
                t += 1
                top += 1
                stack[top] = w
                cursor[w] = ptr[w]
    return taken
