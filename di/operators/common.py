"""What every operator module shares: argument parsing and preparation steps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends.protocol import Adapter
from di.backends.registry import get_adapter
from di.contexts import Context
from di.errors import InvalidInputError
from di.families import converter, family_of
from di.prep.base import Prep
from di.prep.signature import check_contexts_wrapped, check_x

__all__ = ["adapter_for", "float_x_program", "result_converter", "split_call"]


def split_call(operator: str, args: tuple[Any, ...]) -> tuple[Prep | None, Any, Any, tuple[Any, ...]]:
    """Split ``(prep, backend, x, *contexts)`` or ``(backend, x, *contexts)``.

    Raises:
        InvalidInputError: too few arguments.
    """
    if args and isinstance(args[0], Prep):
        if len(args) < 3:
            raise InvalidInputError(f"{operator}(f, prep, backend, x, *contexts): backend and x are missing")
        return args[0], args[1], args[2], args[3:]
    if len(args) < 2:
        raise InvalidInputError(
            f"{operator}(f, backend, x, *contexts) or {operator}(f, prep, backend, x, *contexts): "
            f"backend and x are required"
        )
    return None, args[0], args[1], args[2:]


def adapter_for(operator: str, f: Any, backend: Any, x: Any, contexts: Sequence[Any]) -> Adapter:
    """Validate the arguments of ``prepare_<operator>`` and return the adapter.

    Raises:
        InvalidInputError: ``f`` not callable, ``x`` not differentiable, a raw
            value where a context is expected, ``backend`` not a selector.
        BackendNotInstalledError: the engine is missing.
        UnsupportedContextError: the engine cannot use one of the contexts.
    """
    if not callable(f):
        raise InvalidInputError(f"f must be callable, not {type(f).__name__}")
    check_x(x, operator)
    check_contexts_wrapped(contexts)
    adapter = get_adapter(backend)
    adapter.check_contexts(contexts)
    return adapter


def float_x_program(x: Any, program: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a program so a Python float ``x`` is computed as a 0-d float64 array."""
    if not isinstance(x, float):
        return program

    def from_float(x: Any, *values: Any) -> Any:
        return program(np.asarray(x, dtype=np.float64), *values)

    return from_float


def result_converter(adapter: Adapter, x: Any) -> Callable[[Any], Any]:
    """Converter from the engine's family to ``x``'s family (numpy for floats)."""
    return converter(adapter.family, family_of(x) or "numpy")


def context_values(contexts: Sequence[Context]) -> list[Any]:
    """The bare values of the contexts, in order."""
    return [context.value for context in contexts]
