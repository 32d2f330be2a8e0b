"""What a program derived from another's is made of: the fallbacks
(:mod:`di.backends.fallbacks`) build each operator from an adapter's primitives
with these pieces. The standard basis they seed products with (its NumPy dtype),
the direction they take (forward or reverse), ``f``'s output sampled once at
preparation, tangents brought into the engine's family, copies of what was
computed at preparation handed out, and a primitive's errors about ``f``'s
output raised as the operator's the caller asked for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from di.backends.protocol import Adapter, Program, keeping_error
from di.contexts import Context
from di.errors import InvalidOutputError
from di.families import converter, family_of, get_family

__all__ = [
    "engine_tangent",
    "evaluate_output",
    "fresh_copy",
    "numpy_dtype",
    "output_of",
    "prefers_forward",
    "raise_as",
    "reported_as",
    "unit_arrays",
]


def numpy_dtype(value: Any) -> Any:
    """The numpy dtype matching an array's dtype, whatever its family."""
    if isinstance(value, float):
        return np.dtype(np.float64)
    family = family_of(value)
    return np.dtype(get_family(family).describe_dtype(value.dtype) if family else str(value.dtype))


def unit_arrays(shape: tuple[int, ...], dtype: Any) -> tuple[Any, ...]:
    """The ``prod(shape)`` unit arrays of ``shape`` (the standard basis), in numpy."""
    size = math.prod(shape)
    return tuple(np.eye(size, dtype=dtype).reshape((size, *shape)))


def evaluate_output(adapter: Adapter, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Any:
    """Evaluate ``f`` once at the prepared arguments (engine family), to learn the
    shape and dtype of its output."""
    return adapter.prepare_value_program(f, x, contexts)(x, *[c.value for c in contexts])


def prefers_forward(adapter: Adapter, n_inputs: int, n_outputs: int) -> bool:
    """Forward mode costs one pass per input, reverse one per output: pick the
    cheaper one, unless the selector's ``mode`` or the adapter's primitives decide."""
    mode = getattr(adapter.backend, "mode", None)
    if not adapter.has_native("pullback"):
        return True
    if not adapter.has_native("pushforward"):
        return False
    if mode is not None:
        return bool(mode == "forward")
    return n_inputs <= n_outputs


def raise_as(operator: str, primitives: tuple[str, ...], error: InvalidOutputError) -> NoReturn:
    """Raise ``error``, raised by the program of a primitive (``primitives``) that
    ``operator``'s fallback runs, as ``operator``'s own: the caller asked for
    ``derivative``, not for the ``pushforward`` it is built from. The engine's
    check stays the only one (this runs only once it refused); an error whose
    message names no such primitive is raised as it is."""
    message = str(error)
    for primitive in primitives:
        if message.startswith(f"{primitive} "):
            body = message[len(primitive) :].replace(f"di.{primitive}(", f"di.{operator}(")
            renamed = type(error)(operator + body)
            if hasattr(error, "__notes__"):
                renamed.__notes__ = list(error.__notes__)
            # the engine's cause (if any) stays the cause: the primitive's message would only repeat this one
            raise renamed.with_traceback(error.__traceback__) from error.__cause__
    raise error


def reported_as(operator: str, primitives: tuple[str, ...], program: Program) -> Program:
    """``program`` (a fallback of ``operator`` built from ``primitives``' programs)
    with the errors about ``f``'s output those programs raise naming ``operator``
    (:func:`raise_as`)."""

    def program_of_operator(*args: Any) -> Any:
        try:
            return program(*args)
        except InvalidOutputError as err:
            raise_as(operator, primitives, err)

    return keeping_error(program_of_operator, program)


def output_of(adapter: Adapter, f: Callable[..., Any], x: Any, contexts: Sequence[Context], has_aux: bool) -> Any:
    """``f``'s output ``y`` at the prepared arguments (engine family)."""
    y = evaluate_output(adapter, f, x, contexts)
    return y[0] if has_aux and isinstance(y, tuple) and len(y) == 2 else y


def engine_tangent(adapter: Adapter) -> Callable[[Any], Any]:
    family = adapter.capabilities.family

    def to_engine(tangent: Any) -> Any:
        return converter(family_of(tangent), family)(tangent)

    return to_engine


def fresh_copy(adapter: Adapter) -> Callable[[Any], Any]:
    """A copy of an array made at preparation, for a result the caller will own:
    a mutable family's caller may write into it, and an immutable one's may free
    it (JAX's ``delete()``, or donating it to a jitted call), which must not
    break the prep's next call. Every family copies (on the array's device)."""
    xp = get_family(adapter.capabilities.family).namespace()
    return lambda array: xp.asarray(array, copy=True)
