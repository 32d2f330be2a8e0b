"""PyTensor, imported without leaving its recursion limit raised.

Importing ``pytensor`` raises Python's recursion limit to 3000 for the whole
process (``pytensor.misc.pkl_utils``, for pickling deep graphs), and never puts
it back. Every module of ``di``'s PyTensor engine imports PyTensor through this
one: when ``di``'s import is the one that raised it, the limit is put back at
once, and :func:`graph_recursion` raises it to PyTensor's 3000 only while ``di``
builds and compiles a graph (``f`` applied to symbolic variables, the derivative
graph, ``pytensor.function``'s rewrites), restoring it after. A program that
imported ``pytensor`` itself before keeps PyTensor's 3000 (``di`` then changes
nothing). The limit is the process's, not a thread's: while a graph is built,
other threads see it raised too.
"""

from __future__ import annotations

import sys

from di.backends.scoping import NestedSwitch

_before = sys.getrecursionlimit()
import pytensor  # noqa: E402  (the import whose side effect is undone below)

if sys.getrecursionlimit() != _before:  # this import ran PyTensor's: undo it
    sys.setrecursionlimit(_before)

__all__ = ["GRAPH_RECURSION_LIMIT", "graph_recursion", "pytensor"]

GRAPH_RECURSION_LIMIT = 3000
"""The recursion limit PyTensor sets for itself (``pytensor.misc.pkl_utils``),
which ``di`` gives its graph building and compiling."""


class _Deeper(NestedSwitch):
    """Raises the limit at the first entry, restores it at the last exit (unless
    the code inside set another)."""

    __slots__ = ()

    def switch_on(self) -> int | None:
        limit = sys.getrecursionlimit()
        if limit >= GRAPH_RECURSION_LIMIT:
            return None
        sys.setrecursionlimit(GRAPH_RECURSION_LIMIT)
        return limit

    def switch_off(self, saved: int | None) -> None:
        if saved is not None and sys.getrecursionlimit() == GRAPH_RECURSION_LIMIT:
            sys.setrecursionlimit(saved)


_DEEPER = _Deeper()


def graph_recursion() -> _Deeper:
    """PyTensor's recursion limit while the ``with`` block builds or compiles a graph.

    Returns:
        A context manager raising Python's recursion limit to
        :data:`GRAPH_RECURSION_LIMIT` (never lowering it) and restoring it when
        the last concurrent use ends.

    Examples:
        >>> import sys
        >>> from di.engines.pytensor.imported import GRAPH_RECURSION_LIMIT, graph_recursion
        >>> before = sys.getrecursionlimit()
        >>> with graph_recursion():
        ...     sys.getrecursionlimit() >= GRAPH_RECURSION_LIMIT
        True
        >>> sys.getrecursionlimit() == before
        True
    """
    return _DEEPER
