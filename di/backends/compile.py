"""The compile policy of compiled backends, shared by every engine that compiles.

One rule decides which contexts are compiled in (:func:`is_static_context`), one
wrapper counts the distinct static values a program meets
(:func:`counting_static_values`), one makes a program compile on its first call,
once across threads (:func:`compiled_on_first_use`), and one
(:class:`RecompileWatch`) decides when an engine that compiles again on its own
(guards on Python state) warns and when it stops. Engines bring their compiler
(how to compile a function with static arguments, how to compile it now); the
policy around it is decided here, once.

Compiled backends compile at preparation the program the plain operator runs
(``gradient``); the ``value_and_*`` program of the same family compiles only if
it is used, on its first call. A preparation asked for the combined form
(``prepare_gradient(..., value=True)``) swaps the two (:func:`combined_first`):
a loop that calls one form compiles once.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import sys
import threading
import warnings
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import numpy as np

from di.backends.selectors import AbstractBackend
from di.contexts import Constant, Context
from di.errors import InvalidInputError, RecompileWarning
from di.families import family_of
from di.prep.finish import finish_steps, with_steps

__all__ = [
    "RECOMPILE_WARNING_THRESHOLD",
    "RecompileWatch",
    "caller_stacklevel",
    "combined_first",
    "compiled_on_first_use",
    "compiling_combined_first",
    "counting_static_values",
    "has_static_leaves",
    "is_static_context",
    "is_static_value",
    "static_argnums",
    "static_positions",
]

Program = Callable[..., Any]

RECOMPILE_WARNING_THRESHOLD = 8
"""Distinct values of one static context after which a compiled program warns
(each value is a compile of its own)."""

_STATIC_SCALARS = (int, bool, str, bytes, type(None), enum.Enum, np.integer, np.bool_)
"""Values compiled in: NumPy integer and bool scalars (``np.int64(2)``, ``np.bool_(True)``)
as Python ints and bools are (a slice bound, a branch), not as NumPy arrays."""

_COMBINED_FIRST: contextvars.ContextVar[bool] = contextvars.ContextVar("di_combined_first", default=False)


@contextlib.contextmanager
def compiling_combined_first(combined: bool) -> Iterator[None]:
    """Within this block, compiled backends compile the ``value_and_*`` program
    of an operator family at preparation and the plain one on its first call
    (``combined=True``), or the reverse (``False``, the default).

    Examples:
        >>> from di.backends.compile import combined_first, compiling_combined_first
        >>> with compiling_combined_first(True):
        ...     inside = combined_first()
        >>> inside, combined_first()
        (True, False)
    """
    token = _COMBINED_FIRST.set(combined)
    try:
        yield
    finally:
        _COMBINED_FIRST.reset(token)


def combined_first() -> bool:
    """Whether the preparation under way compiles the ``value_and_*`` program
    ahead of time (see :func:`compiling_combined_first`)."""
    return _COMBINED_FIRST.get()


def is_static_context(context: Context) -> bool:
    """Whether a context is compiled in (static) on a compiled backend.

    The one rule for every compiled backend (``AutoJAX(jit=True)``,
    ``AutoTorch(compile=True)``): arrays and Python floats are traced (a new value
    runs the same program); ints, bools, strings, ``None``, enums, tuples of
    these, and other hashable non-array objects are compiled in (a new value
    compiles again, once per value). A list, dict or other tuple is a pytree,
    not static as a whole: its array and float leaves are traced and its other
    leaves compiled in, each by the same rule (:func:`is_static_value`, and
    :func:`has_static_leaves`). ``Constant(value, static=True/False)``
    overrides the choice.

    Args:
        context: a :class:`di.Constant` or :class:`di.Cache`.

    Returns:
        ``True`` when the context's value is compiled into the program.

    Examples:
        >>> import di
        >>> from di.backends.compile import is_static_context
        >>> import numpy as np
        >>> is_static_context(di.Constant(3)), is_static_context(di.Constant(3.0))
        (True, False)
        >>> is_static_context(di.Constant(np.int64(3))), is_static_context(di.Constant(np.array(3)))
        (True, False)
    """
    if isinstance(context, Constant) and context.static is not None:
        return context.static
    return is_static_value(context.value)


def is_static_value(value: Any) -> bool:
    """Whether a value (a context's, or a leaf of one) is compiled in by default:
    the rule of :func:`is_static_context` without ``static=``.

    Examples:
        >>> from di.backends.compile import is_static_value
        >>> is_static_value("fast"), is_static_value(2), is_static_value(0.5), is_static_value([2])
        (True, True, False, False)
    """
    if isinstance(value, _STATIC_SCALARS):
        return True
    if family_of(value) is not None or isinstance(value, (float, complex)):
        return False
    if isinstance(value, tuple):
        return all(isinstance(item, _STATIC_SCALARS) for item in value)
    if isinstance(value, (list, dict)) or not isinstance(value, Hashable):
        return False  # containers are pytrees: see has_static_leaves
    return True


def has_static_leaves(context: Context, leaves: Sequence[Any]) -> bool:
    """Whether a context that is not static as a whole is a pytree (a list, dict
    or tuple) some of whose ``leaves`` (the engine's flattening of its value)
    are compiled in: ints, strings, bools and the other values
    :func:`is_static_value` compiles in, where its arrays and floats are
    traced. ``Constant(value, static=False)`` traces every leaf.

    Examples:
        >>> import di
        >>> from di.backends.compile import has_static_leaves
        >>> has_static_leaves(di.Constant({"n": 2, "a": 0.5}), [0.5, 2])
        True
        >>> has_static_leaves(di.Constant({"n": 2}, static=False), [2])
        False
    """
    if isinstance(context, Constant) and context.static is not None:
        return False
    if not isinstance(context.value, (list, dict, tuple)) or is_static_value(context.value):
        return False
    return any(is_static_value(leaf) for leaf in leaves)


def static_positions(contexts: Sequence[Context], backend: AbstractBackend) -> tuple[int, ...]:
    """Indices (among the contexts) of the static contexts, refusing unhashable ones.

    Raises:
        InvalidInputError: a context forced static whose value is not hashable.

    Examples:
        >>> import di
        >>> from di.backends.compile import static_positions
        >>> static_positions([di.Constant(1.0), di.Constant(2)], di.AutoFiniteDiff())
        (1,)
    """
    positions = tuple(i for i, c in enumerate(contexts) if is_static_context(c))
    for i in positions:
        if not isinstance(contexts[i].value, Hashable):
            raise InvalidInputError(
                f"{backend!r}: context {i + 1} is compiled in (static) but its "
                f"{type(contexts[i].value).__name__} value is not hashable: pass Constant(value, static=False) "
                f"to trace it, or make it hashable."
            )
    return positions


def static_argnums(contexts: Sequence[Context], backend: AbstractBackend, lead: int) -> tuple[int, ...]:
    """The argument numbers of the static contexts in a program whose context
    values follow ``lead`` other arguments (``x``, and tangents when it has them).

    Examples:
        >>> import di
        >>> from di.backends.compile import static_argnums
        >>> static_argnums([di.Constant(1.0), di.Constant(2)], di.AutoFiniteDiff(), lead=2)
        (3,)
    """
    return tuple(lead + i for i in static_positions(contexts, backend))


def counting_static_values(
    program: Program,
    positions: tuple[int, ...],
    backend: AbstractBackend,
    threshold: int = RECOMPILE_WARNING_THRESHOLD,
    *,
    prepared: Sequence[Any] = (),
    first_context: int = 0,
    keys: dict[int, Callable[[Any], Hashable]] | None = None,
) -> Program:
    """Wrap a compiled program so that the distinct static values it meets are
    counted, with one :class:`di.RecompileWarning` once a context has taken more
    than ``threshold`` values (each one a separate compile).

    Args:
        program: ``program(x, *values)`` (or ``(x, tangents, *values)``).
        positions: where the static values are among the program's arguments
            after ``x``.
        backend: the selector, named in the warning.
        threshold: distinct values of one context tolerated without a warning.
        prepared: the static values at preparation, one per position: the
            preparation compiled for them, so they count from the start.
        first_context: the position of the first context among the
            arguments after ``x`` (1 when tangents come first), for the
            context number the warning gives.
        keys: for a position holding a pytree context with static leaves
            (:func:`has_static_leaves`), what of its value is compiled in.

    Returns:
        ``program`` itself when nothing is static, else a counting wrapper.

    Examples:
        >>> import warnings, di
        >>> from di.backends.compile import counting_static_values
        >>> run = counting_static_values(lambda x, k: x * k, (0,), di.AutoFiniteDiff(), threshold=1)
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     run(1, 2), run(1, 3), len(caught)
        (2, 3, 1)
        >>> run = counting_static_values(lambda x, k: x * k, (0,), di.AutoFiniteDiff(), threshold=1, prepared=(2,))
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     run(1, 3), len(caught)
        (3, 1)
    """
    if not positions:
        return program
    seen: list[set[Any]] = [set() for _ in positions]
    key_of = [(keys or {}).get(i) for i in positions]
    for slot, value in enumerate(prepared):
        seen[slot].add(value if key_of[slot] is None else key_of[slot](value))  # type: ignore[misc]
    lock = threading.Lock()
    warned = [False]

    def counted(x: Any, *values: Any) -> Any:
        for slot, i in enumerate(positions):
            key = values[i] if key_of[slot] is None else key_of[slot](values[i])  # type: ignore[misc]
            if key not in seen[slot]:
                with lock:
                    seen[slot].add(key)
                    if len(seen[slot]) > threshold and not warned[0]:
                        warned[0] = True
                        _warn_static_values(backend, i - first_context + 1, len(seen[slot]), key_of[slot] is None)
        return program(x, *values)

    return counted


def _warn_static_values(backend: AbstractBackend, number: int, count: int, whole: bool) -> None:
    if whole:
        what = f"context {number} is compiled in (static) and has taken {count} distinct values"
        fix = "pass it as Constant(value, static=False) or as an array so it is traced"
    else:
        what = (
            f"context {number}'s leaves that are not arrays or floats (ints, strings, ...) are compiled in (static) "
            f"and have taken {count} distinct values"
        )
        fix = "pass a leaf that varies as an array, or as a context of its own with Constant(value, static=False)"
    warnings.warn(
        f"{backend!r}: {what}, each compiled separately. If it varies, {fix}.",
        RecompileWarning,
        stacklevel=5,
    )


def compiled_on_first_use(
    program: Program, while_compiling: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
) -> Program:
    """``program``, whose first call (the one that compiles) runs under a lock.

    Calls made while the first one compiles wait for it, then run the compiled
    program; a first call that raises leaves the next call to compile. Threads
    sharing a prep thus trace and compile it once, and later calls take no lock.

    Args:
        program: a compiled-on-call function (a jitted or ``torch.compile``'d one).
        while_compiling: a context the first call runs in (the engine's settings
            for a prep's first trace), or ``None``.

    Returns:
        A function with the same arguments and results.

    Examples:
        >>> from di.backends.compile import compiled_on_first_use
        >>> traces = []
        >>> def program(x):
        ...     traces.append(x)
        ...     return 2 * x
        >>> run = compiled_on_first_use(program)
        >>> run(1), run(2), len(traces)
        (2, 4, 2)
    """
    # (a program's finishing steps stay outside, as its parts: a prep's runner calls them itself)
    program, steps = finish_steps(program)
    lock = threading.Lock()
    compiled = False

    def run(*args: Any) -> Any:
        nonlocal compiled
        if compiled:
            return program(*args)
        with lock, contextlib.nullcontext() if while_compiling is None else while_compiling():
            result = program(*args)
            compiled = True
        return result

    return with_steps(run, steps)


class RecompileWatch:
    """When a compiled program that its engine compiles again on its own (guards
    on Python state) warns, for one program.

    The engine reports each recompile it sees with :meth:`recompiled`; compiling
    for a new value of the static contexts is expected, anything else is not.
    A :class:`di.RecompileWarning` comes from the second unexpected recompile on,
    and, whatever the cause, from the compile that leaves one before the
    engine's limit: a caller always hears of the limit before reaching it.

    Args:
        backend: the selector, named in the warnings.
        statics: the positions of the static values among the program's arguments.
        limit: how many compiles of one program the engine allows, or a function
            returning it (read when needed: the engine's setting may change).
        skip: the top-level packages whose frames a warning skips to point at the
            caller's line (``di``, and the engine's, whose compiled wrappers sit
            between ``di``'s frames).
        advice: the engine's reading of a failed guard (``reason -> advice``, ``""``
            for none), for the guards that say what changed outside ``f`` (a grad
            mode), where the default advice about ``f``'s side effects misleads.

    Examples:
        >>> import warnings, di
        >>> from di.backends.compile import RecompileWatch
        >>> watch = RecompileWatch(di.AutoFiniteDiff(), statics=(), limit=8)
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     watch.recompiled((), "x changed")
        ...     watch.recompiled((), "x changed")
        >>> len(caught), watch.unexpected
        (1, 2)
    """

    def __init__(
        self,
        backend: AbstractBackend,
        statics: tuple[int, ...],
        limit: int | Callable[[], int],
        skip: tuple[str, ...] = ("di",),
        advice: Callable[[str], str] | None = None,
    ) -> None:
        self.backend = backend
        self._advice = advice
        self.statics = statics
        self._limit = limit
        self._skip = skip
        self._compiled_keys: set[tuple[Any, ...]] = set()
        self.unexpected = 0
        self.compiles = 0
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        """The engine's recompile limit."""
        return self._limit() if callable(self._limit) else self._limit

    def recompiled(self, args: Sequence[Any], reason: str) -> None:
        """Record one recompile of the program called with ``args``, ``reason``
        being the engine's own account of it, and warn if the policy says so."""
        with self._lock:
            self.compiles += 1
            key = tuple(args[i] for i in self.statics)
            expected = bool(self.statics) and key not in self._compiled_keys
            if expected:
                self._compiled_keys.add(key)
            else:
                self.unexpected += 1
            near_limit = self.compiles >= self.limit - 1
        if not expected and self.unexpected >= 2:
            advice = self._advice(reason) if self._advice is not None else ""
            self._warn(
                f"compiled f again ({self.unexpected} recompiles since preparation; at {self.limit} it stops) "
                f"because this guard failed: {reason}. "
                + (
                    advice
                    or "f changes something the compiler guards on between calls: a Python global or attribute it "
                    "reads or modifies (a call counter), or a Python value it closes over. Keep such side effects "
                    "out of f and pass values that change as contexts (di.Constant(value) is traced)."
                )
            )
        elif near_limit:
            cause = "a new value of a static context" if expected else f"this guard failed: {reason}"
            self._warn(
                f"compiled f {self.compiles} times since preparation ({cause}); at {self.limit} it stops with "
                f"di.RecompileLimitError. Pass values that change as traced contexts (Constant(value, "
                f"static=False), or arrays), and keep Python side effects out of f."
            )

    def _warn(self, text: str) -> None:
        warnings.warn(f"{self.backend!r}: {text}", RecompileWarning, stacklevel=caller_stacklevel(self._skip))


def caller_stacklevel(skip: tuple[str, ...] = ("di",)) -> int:
    """The ``stacklevel`` that points a warning issued by the calling function at
    the first frame outside the packages ``skip`` names (the caller's own line).

    Examples:
        >>> from di.backends.compile import caller_stacklevel
        >>> caller_stacklevel(()) >= 1
        True
    """
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in skip:
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level
