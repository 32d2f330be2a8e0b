"""The adapter protocol: what an engine must provide for ``di`` to drive it.

An adapter turns ``(f, x, contexts)`` into a *program*: a plain callable taking
``x`` and the context values exactly as the caller passes them (any array family)
and returning engine arrays. The operator layer around it checks signatures,
unwraps contexts and converts results back to the caller's family; the adapter
only does what is specific to its engine.

Programs are built once, at preparation, so everything that can be decided from
the prepared arguments (conversions, compiled functions, static arguments) is
decided there and the call itself does nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from di.backends.selectors import AbstractBackend
from di.contexts import Cache, Context
from di.errors import InvalidOutputError, UnsupportedContextError
from di.families import converter, family_of

__all__ = ["Adapter", "Program", "describe_output", "raise_bad_output"]

Program = Callable[..., Any]


class Adapter:
    """Base class of the engine-specific code behind a backend selector.

    Subclasses set ``family`` (the array family the engine computes in) and
    implement :meth:`prepare_value_and_gradient`. Capabilities are declared as
    class attributes so documentation tables are generated from the code.

    Example:
        >>> from di.backends.registry import get_adapter
        >>> import di
        >>> get_adapter(di.AutoFiniteDiff()).family
        'numpy'
    """

    family: ClassVar[str] = "numpy"
    supports_cache: ClassVar[bool] = True
    cache_note: ClassVar[str] = ""
    compiled: ClassVar[bool] = False

    def __init__(self, backend: AbstractBackend) -> None:
        self.backend = backend

    # --- checks made at preparation ---------------------------------------------

    def check_contexts(self, contexts: Sequence[Context]) -> None:
        """Refuse, up front, the contexts this engine cannot pass to ``f``.

        Raises:
            UnsupportedContextError: a ``Cache`` on an engine that cannot write
                into arrays.
        """
        if not self.supports_cache and any(isinstance(c, Cache) for c in contexts):
            raise UnsupportedContextError(f"{self.backend!r} cannot use Cache contexts: {self.cache_note}")

    # --- helpers for subclasses -------------------------------------------------

    def input_converters(self, values: Sequence[Any]) -> list[Callable[[Any], Any]]:
        """One converter per value, bringing arrays into this engine's family
        (identity for values that are not arrays or already in the family)."""
        return [converter(family_of(value), self.family) for value in values]

    # --- operators --------------------------------------------------------------

    def prepare_value_and_gradient(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Program:
        """Build the program computing ``(y, g)`` for a scalar-valued ``f``.

        Args:
            f: the user's function, called as ``f(x, *context_values)``.
            x: the active argument as the caller gave it at preparation.
            contexts: the contexts given at preparation (values and kinds).

        Returns:
            A callable ``program(x, *context_values) -> (y, g)``, with ``y`` a 0-d
            array and ``g`` an array of ``x``'s shape, both in this engine's family.
        """
        raise NotImplementedError

    def prepare_gradient(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Program:
        """Build the program computing only ``g``; by default the value-and-gradient
        program with the value dropped. Override when the value costs extra."""
        value_and_gradient = self.prepare_value_and_gradient(f, x, contexts)

        def gradient_only(*args: Any) -> Any:
            return value_and_gradient(*args)[1]

        return gradient_only


def describe_output(y: Any) -> str:
    """Describe a value ``f`` returned, for error messages."""
    shape = getattr(y, "shape", None)
    dtype = getattr(y, "dtype", None)
    if shape is not None:
        return f"an array of shape {tuple(shape)} and dtype {dtype}"
    return f"a {type(y).__name__}"


def raise_bad_output(y: Any, backend: AbstractBackend, operator: str = "gradient") -> None:
    """Raise :class:`InvalidOutputError` for an ``f`` whose output ``operator``
    cannot use."""
    shape = getattr(y, "shape", None)
    hint = ""
    if shape is not None and tuple(shape) != ():
        hint = " Reduce it to a scalar (for example with .sum()), or use jacobian for array outputs."
    elif isinstance(y, complex) or "complex" in str(getattr(y, "dtype", "")):
        hint = " Differentiate its real part or its squared modulus instead."
    else:
        hint = " Return a floating-point 0-d array or a Python float."
    raise InvalidOutputError(
        f"{operator} needs f to return a real scalar, but with {backend!r} f returned {describe_output(y)}.{hint}"
    )


def is_real_scalar(y: Any) -> bool:
    """Whether ``y`` is a real floating scalar (0-d floating array of any family,
    an engine's traced scalar, or a Python float)."""
    if isinstance(y, float):
        return True
    shape = getattr(y, "shape", None)
    if shape is None or tuple(shape) != ():
        return False
    from di.families import is_floating_dtype

    return is_floating_dtype(y.dtype)
