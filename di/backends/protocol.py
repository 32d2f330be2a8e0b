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

import enum
import threading
import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar

from di.backends.selectors import AbstractBackend
from di.contexts import Cache, Constant, Context
from di.errors import InvalidInputError, InvalidOutputError, RecompileWarning, UnsupportedContextError
from di.families import converter, family_of

__all__ = [
    "Adapter",
    "Program",
    "Programs",
    "counting_static_values",
    "describe_output",
    "is_real_scalar",
    "is_static_context",
    "raise_bad_output",
]

Program = Callable[..., Any]
Programs = dict[str, Program]

RECOMPILE_WARNING_THRESHOLD = 8
_STATIC_SCALARS = (int, bool, str, bytes, type(None), enum.Enum)


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

    def prepare_gradient_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        """Build the programs behind ``gradient`` and ``value_and_gradient``.

        By default one value-and-gradient program serves both (``gradient`` drops
        the value), so a compiled backend compiles once. Override when computing
        the value costs extra work (finite differences).

        Returns:
            ``{"gradient": program, "value_and_gradient": program}``.
        """
        value_and_gradient = self.prepare_value_and_gradient(f, x, contexts)

        def gradient_only(*args: Any) -> Any:
            return value_and_gradient(*args)[1]

        return {"gradient": gradient_only, "value_and_gradient": value_and_gradient}


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


# --- compiled backends: which contexts are compiled in ------------------------------


def is_static_context(context: Context) -> bool:
    """Whether a context is compiled in (static) on a compiled backend.

    The one rule for ``AutoJAX(jit=True)`` and ``AutoTorch(compile=True)``:
    arrays and Python floats are traced (a new value runs the same program); ints,
    bools, strings, ``None``, enums, tuples of these, and other hashable non-array
    objects are compiled in (a new value compiles again, once per value).
    ``Constant(value, static=True/False)`` overrides the choice.

    Example:
        >>> import di
        >>> from di.backends.protocol import is_static_context
        >>> is_static_context(di.Constant(3)), is_static_context(di.Constant(3.0))
        (True, False)
    """
    value = context.value
    if isinstance(context, Constant) and context.static is not None:
        return context.static
    if family_of(value) is not None or isinstance(value, (float, complex)):
        return False
    if isinstance(value, _STATIC_SCALARS):
        return True
    if isinstance(value, tuple):
        return all(isinstance(item, _STATIC_SCALARS) for item in value)
    if isinstance(value, (list, dict)) or not isinstance(value, Hashable):
        return False  # containers are pytrees: their leaves are traced
    return True


def static_positions(contexts: Sequence[Context], backend: AbstractBackend) -> tuple[int, ...]:
    """Indices of the static contexts, refusing unhashable ones.

    Raises:
        InvalidInputError: a context forced static whose value is not hashable.
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


def counting_static_values(program: Program, positions: tuple[int, ...], backend: AbstractBackend) -> Program:
    """Wrap a compiled program so that the distinct static values it meets are
    counted, with one :class:`di.RecompileWarning` once a context has taken more
    than ``RECOMPILE_WARNING_THRESHOLD`` values (each one a separate compile)."""
    if not positions:
        return program
    seen: list[set[Any]] = [set() for _ in positions]
    lock = threading.Lock()
    warned = [False]

    def counted(x: Any, *values: Any) -> Any:
        for slot, i in enumerate(positions):
            if values[i] not in seen[slot]:
                with lock:
                    seen[slot].add(values[i])
                    if len(seen[slot]) > RECOMPILE_WARNING_THRESHOLD and not warned[0]:
                        warned[0] = True
                        warnings.warn(
                            f"{backend!r}: context {i + 1} is compiled in (static) and has taken "
                            f"{len(seen[slot])} distinct values, each compiled separately. If it varies, "
                            f"pass it as Constant(value, static=False) or as an array so it is traced.",
                            RecompileWarning,
                            stacklevel=4,
                        )
        return program(x, *values)

    return counted
