"""Contexts: the arguments of ``f`` that are not differentiated.

``f`` is always called as ``f(x, *values)``, one value per context, in the order
the contexts were given. The wrapper says what the value is for:

* :class:`Constant` - the value matters and is never mutated by ``di``.
* :class:`Cache` - scratch space ``f`` may overwrite; its initial value is
  irrelevant and it is never part of the result.
"""

from __future__ import annotations

from typing import Any

from di.errors import InvalidInputError, InvalidOptionTypeError

__all__ = ["Cache", "Constant", "Context", "rewrap_context"]


class Context:
    """Base class of :class:`Constant` and :class:`Cache`.

    Args:
        value: the value passed to ``f``; not itself a context.

    Raises:
        InvalidInputError: ``value`` is a context (``Constant(Constant(v))``):
            ``f`` would receive the inner wrapper, not ``v``.

    Examples:
        >>> import di
        >>> isinstance(di.Constant(2.0), di.Context)
        True
    """

    __slots__ = ("value",)
    kind: str = "context"

    def __init__(self, value: Any) -> None:
        self.value = _unwrapped(type(self).__name__, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


class Constant(Context):
    """A value ``f`` reads but does not differentiate.

    ``di`` never writes into a ``Constant``. Array values in another array family
    than the backend's are converted to the backend's family before ``f`` sees them
    (zero-copy where the engines allow it).

    Args:
        value: any object; arrays, Python scalars and hashable objects are typical.
        static: only meaningful for compiled backends. ``None`` (default) lets the
            backend decide from the value's type (arrays and floats are traced,
            ints, bools, strings and other hashable objects are compiled in);
            ``True`` forces a hashable value to be compiled in; ``False`` forces a
            Python scalar to be traced.

    Raises:
        InvalidInputError: ``value`` is itself a context.
        InvalidOptionTypeError: ``static`` is not ``None``, ``True`` or ``False``.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x, a: (a * x * x).sum()
        >>> di.gradient(f, di.AutoFiniteDiff(), np.array([1.0, 2.0]), di.Constant(3.0))
        array([ 6., 12.])
    """

    __slots__ = ("static",)
    kind = "constant"

    def __init__(self, value: Any, static: bool | None = None) -> None:
        self.value = _unwrapped("Constant", value)
        if not (static is None or static is True or static is False):
            static = _static_flag(static)
        self.static = static

    def __repr__(self) -> str:
        if self.static is None:
            return f"Constant({self.value!r})"
        return f"Constant({self.value!r}, static={self.static})"


class Cache(Context):
    """Scratch space that ``f`` may overwrite.

    Its initial value does not matter and ``f``'s result must not depend on it.
    PyTorch and finite differences pass the caller's buffer to ``f`` (writes land
    in it; torch detaches it after the call so it holds no graph). JAX arrays are
    immutable: ``f`` receives an array it must not write into and builds new
    arrays instead. autograd cannot write traced values into arrays, so it refuses
    ``Cache`` at preparation with :class:`di.UnsupportedContextError`.

    Args:
        value: an array (numpy, torch or jax) of the shape ``f`` needs.

    Examples:
        >>> import numpy as np, di
        >>> def f(x, buf):
        ...     buf[:] = x * x
        ...     return buf.sum()
        >>> di.gradient(f, di.AutoFiniteDiff(), np.array([1.0, 2.0]), di.Cache(np.zeros(2)))
        array([2., 4.])
    """

    __slots__ = ()
    kind = "cache"


def _unwrapped(wrapper: str, value: Any) -> Any:
    """``value``, refused when it is a context: ``f`` would receive the inner wrapper
    object itself (``x * Constant(2.0)`` fails inside ``f``, far from the mistake)."""
    if isinstance(value, Context):
        inner = type(value).__name__
        raise InvalidInputError(
            f"di.{wrapper}({value!r}) wraps a context: f would receive the {inner} object, not its value. "
            f"Remove the inner wrapper: di.{wrapper}(v), not di.{wrapper}(di.{inner}(v))"
        )
    return value


def _static_flag(static: Any) -> bool:
    """A ``numpy.bool_`` ``static`` as a ``bool``; anything else but ``None``, ``True``
    and ``False`` refused (``static="no"`` is a true string, and would compile the value in)."""
    if type(static).__module__ == "numpy" and type(static).__name__ in ("bool", "bool_"):
        return bool(static)
    raise InvalidOptionTypeError(
        f"di.Constant(static={static!r}): static takes None, True or False (a Python bool or numpy.bool_), "
        f"not {type(static).__name__}"
    )


def rewrap_context(context: Context, value: Any) -> Context:
    """The same kind of context (and ``static`` flag) around another value."""
    if isinstance(context, Constant):
        return Constant(value, static=context.static)
    return type(context)(value)
