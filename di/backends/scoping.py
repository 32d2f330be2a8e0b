"""Process-wide state changed only while ``di`` needs it.

Some engines need a global setting while ``di`` runs ``f`` or builds a graph
(TensorFlow's NumPy behavior, PyTensor's recursion limit). :class:`NestedSwitch`
changes it at the first entry of nested or concurrent ``with`` blocks and puts
it back at the last exit, so a caller's own setting is what they see outside.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

__all__ = ["NestedSwitch"]


class NestedSwitch:
    """A process-wide setting on while any ``with`` block of this switch runs.

    Subclasses define :meth:`switch_on` (change the setting, return what it
    takes to restore it) and :meth:`switch_off` (restore it). The setting is the
    process's: while one thread is inside, other threads see it too.

    Example:
        >>> import sys
        >>> from di.backends.scoping import NestedSwitch
        >>> class Deeper(NestedSwitch):
        ...     def switch_on(self):
        ...         before = sys.getrecursionlimit()
        ...         sys.setrecursionlimit(before + 1000)
        ...         return before
        ...     def switch_off(self, saved):
        ...         sys.setrecursionlimit(saved)
        >>> before, deeper = sys.getrecursionlimit(), Deeper()
        >>> with deeper:
        ...     with deeper:
        ...         sys.getrecursionlimit() - before
        1000
        >>> sys.getrecursionlimit() == before
        True
    """

    __slots__ = ("_depth", "_lock", "_saved")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._saved: Any = None

    def switch_on(self) -> Any:
        """Change the setting; return what :meth:`switch_off` needs to restore it."""
        raise NotImplementedError

    def switch_off(self, saved: Any) -> None:
        """Restore the setting from what :meth:`switch_on` returned."""
        raise NotImplementedError

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._saved = self.switch_on()
            self._depth += 1

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                saved, self._saved = self._saved, None
                self.switch_off(saved)
