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
import threading
from types import TracebackType

_before = sys.getrecursionlimit()
import pytensor  # noqa: E402  (the import whose side effect is undone below)

if sys.getrecursionlimit() != _before:  # this import ran PyTensor's: undo it
    sys.setrecursionlimit(_before)

__all__ = ["GRAPH_RECURSION_LIMIT", "graph_recursion", "pytensor"]

GRAPH_RECURSION_LIMIT = 3000
"""The recursion limit PyTensor sets for itself (``pytensor.misc.pkl_utils``),
which ``di`` gives its graph building and compiling."""


class _Deeper:
    """Raises the limit at the first entry, restores it at the last exit (unless
    the code inside set another)."""

    __slots__ = ("_depth", "_lock", "_restore")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._restore: int | None = None

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                limit = sys.getrecursionlimit()
                self._restore = limit if limit < GRAPH_RECURSION_LIMIT else None
                if self._restore is not None:
                    sys.setrecursionlimit(GRAPH_RECURSION_LIMIT)
            self._depth += 1

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._restore is not None:
                if sys.getrecursionlimit() == GRAPH_RECURSION_LIMIT:
                    sys.setrecursionlimit(self._restore)
                self._restore = None


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
