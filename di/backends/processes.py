"""Several processes computing one result: what a decision made at preparation
needs so that every process makes it alike.

An engine's distributed runtime (one array on a mesh of devices owned by several
processes; one model trained by several processes that average its gradient)
runs collectives: every process must run the same programs in the same order,
or they wait for one another forever. A choice made by measuring (timings) or
from process-local data must then be made once and shared. An engine says which
values belong to such a group through its record's ``processes`` hook
(:class:`~di.backends.engine.Engine`): a function of the call's values returning
a :class:`Processes`, or ``None`` for values that live in this process alone.
:func:`processes_of` asks the engines whose library is loaded.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from di.backends.engine import load
from di.backends.selectors import engines
from di.errors import DistributedError

__all__ = ["Processes", "processes_of"]


class Processes:
    """The processes one call's values span, as a decision at preparation sees them.

    An engine subclasses it: :meth:`broadcast` sends process 0's value to every
    process (a collective: every process calls it, in the same order), and
    :meth:`local` reads a result whose arrays span processes as this process's
    part of them.

    Attributes:
        count: how many processes.
        index: this process's place among them (0 decides).
        runtime: the runtime, as messages name it (``"JAX multi-process"``).

    Examples:
        >>> from di.backends.processes import Processes
        >>> group = Processes(1, 0, "one process")
        >>> group.broadcast({"chosen": 2}), group.local([1.0])
        ({'chosen': 2}, [1.0])
    """

    def __init__(self, count: int, index: int, runtime: str) -> None:
        self.count = count
        self.index = index
        self.runtime = runtime

    def broadcast(self, value: Any) -> Any:
        """Process 0's ``value`` (JSON data), on every process."""
        return json.loads(self.broadcast_text(json.dumps(value)))

    def broadcast_text(self, text: str) -> str:
        """Process 0's ``text``, on every process (the engine's collective)."""
        return text

    def local(self, result: Any) -> Any:
        """``result`` with each array that spans processes replaced by this
        process's part of it (NumPy), comparable with another result's part."""
        return result

    def check_agreed(self, what: str, value: Any) -> None:
        """Raise when ``value`` (JSON data) differs from process 0's.

        Raises:
            DistributedError: it differs; ``what`` names the decision.
        """
        digest = hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
        decided = self.broadcast_text(digest)
        if decided != digest:
            raise DistributedError(
                f"{what} differs between the processes of this {self.runtime} run (process {self.index} against "
                f"process 0), so they would run different programs and wait for one another forever. Make f and its "
                f"arguments' shapes, dtypes and static values the same on every process."
            )


def processes_of(values: Sequence[Any]) -> Processes | None:
    """The processes ``values`` span, as the engine that owns them says (only the
    engines whose library is loaded are asked: nothing is imported for values of
    one process); ``None`` when they live in this process alone.

    Examples:
        >>> import numpy as np
        >>> from di.backends.processes import processes_of
        >>> processes_of([np.ones(3)]) is None
        True
    """
    for hook in _hooks():
        found = hook(values)
        if found is not None:
            return found  # type: ignore[no-any-return]
    return None


_LOADED: dict[str, Callable[[Sequence[Any]], Processes | None]] = {}


def _hooks() -> list[Callable[[Sequence[Any]], Processes | None]]:
    hooks = []
    for record in engines():
        if not record.processes or (record.module and record.module not in sys.modules):
            continue
        if isinstance(record.processes, str):
            if record.processes not in _LOADED:
                _LOADED[record.processes] = load(record.processes)
            hooks.append(_LOADED[record.processes])
        else:
            hooks.append(record.processes)
    return hooks
