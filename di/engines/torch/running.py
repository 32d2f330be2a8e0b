"""The programs of :mod:`.func` as they run outside (and inside) transforms: the
arguments converted, forward mode taking turns between threads, and a write of
``f`` into ``x`` found after it ran."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from di.engines.torch.transforms import dynamo_compiling

__all__ = ["FORWARD_MODE_LOCK", "running"]

FORWARD_MODE_LOCK = threading.RLock()
"""``torch.func`` keeps its forward-mode state (dual levels) per process: forward-mode calls take turns."""


def running(
    function: Callable[..., Any],
    arguments: Callable[[Any, Sequence[Any] | None, Sequence[Any]], tuple[Any, ...]],
    with_tangents: bool,
    locked: bool,
    traced: bool = False,
    refuse: Callable[[Any, Any], Exception] | None = None,
) -> Callable[..., Any]:
    """A program ``(x, [tangents,] *values)`` running ``function`` on converted
    arguments. ``locked``: ``torch.func`` keeps its forward-mode state (dual
    levels) per process, not per thread, so forward-mode calls from several
    threads must take turns. ``traced``: the program runs inside a transform,
    where a compiler tracing the call takes no lock (it cannot follow one).
    ``refuse(x, tensor)``: the error raised when ``function`` wrote into the
    tensor it received for ``x`` (its version counter moved: torch's forward mode
    lets ``f`` write), checked outside transforms (about 0.1 us); it replaces
    ``f``'s own error (chained to it), but a ``KeyboardInterrupt`` or another
    ``BaseException`` that is no ``Exception`` passes unchanged."""
    lock = FORWARD_MODE_LOCK if locked else None
    compiling = dynamo_compiling
    if refuse is not None and not traced:
        # (one body per signature, inline: this runs at every call)
        if with_tangents:

            def run_checked_with_tangents(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
                args = arguments(x, tangents, values)
                xt = args[0]
                try:
                    version = xt._version
                except (AttributeError, RuntimeError):  # an inference tensor keeps no count
                    version = None
                try:
                    if lock is None:
                        result = function(*args)
                    else:
                        with lock:
                            result = function(*args)
                except Exception as err:  # (f's own error, or torch's refusal, may come after the write)
                    if version is not None and xt._version != version:
                        raise refuse(x, xt) from err
                    raise
                # (a KeyboardInterrupt or another BaseException passes unchanged)
                if version is not None and xt._version != version:
                    raise refuse(x, xt)
                return result

            return run_checked_with_tangents

        def run_checked(x: Any, *values: Any) -> Any:
            args = arguments(x, None, values)
            xt = args[0]
            try:
                version = xt._version
            except (AttributeError, RuntimeError):  # a pytree x's leaves; an inference tensor keeps no count
                version = None
            try:
                if lock is None:
                    result = function(*args)
                else:
                    with lock:
                        result = function(*args)
            except Exception as err:
                if version is not None and xt._version != version:
                    raise refuse(x, xt) from err
                raise
            if version is not None and xt._version != version:
                raise refuse(x, xt)
            return result

        return run_checked
    if with_tangents:

        def run_with_tangents(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
            if lock is None or (traced and compiling()):
                return function(*arguments(x, tangents, values))
            with lock:
                return function(*arguments(x, tangents, values))

        return run_with_tangents

    def run(x: Any, *values: Any) -> Any:
        if lock is None or (traced and compiling()):
            return function(*arguments(x, None, values))
        with lock:
            return function(*arguments(x, None, values))

    return run
