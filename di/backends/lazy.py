"""Programs that compile on their first call, once, whichever thread calls first.

Compiled backends compile at preparation the program the plain operator runs
(``gradient``); the ``value_and_*`` program of the same family compiles only if
it is used. Both engines compile a jitted or ``torch.compile``'d function on its
first call; this wrapper makes that first call under a lock, so that threads
sharing a prep trace and compile it once, and later calls take no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["compiled_on_first_use"]


def compiled_on_first_use(program: Callable[..., Any]) -> Callable[..., Any]:
    """``program``, whose first call (the one that compiles) runs under a lock.

    Calls made while the first one compiles wait for it, then run the compiled
    program; a first call that raises leaves the next call to compile.

    Args:
        program: a compiled-on-call function (``jax.jit``, ``torch.compile``).

    Returns:
        A function with the same arguments and results.

    Examples:
        >>> from di.backends.lazy import compiled_on_first_use
        >>> traces = []
        >>> def program(x):
        ...     traces.append(x)
        ...     return 2 * x
        >>> run = compiled_on_first_use(program)
        >>> run(1), run(2), len(traces)
        (2, 4, 2)
    """
    lock = threading.Lock()
    compiled = False

    def run(*args: Any) -> Any:
        nonlocal compiled
        if compiled:
            return program(*args)
        with lock:
            result = program(*args)
            compiled = True
        return result

    return run
