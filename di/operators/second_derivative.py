"""``second_derivative`` and ``value_derivative_and_second_derivative``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.operators.call import operator_function
from di.operators.prepare import prepare_operator
from di.operators.table import documented
from di.prep.base import Prep

__all__ = ["prepare_second_derivative", "second_derivative", "value_derivative_and_second_derivative"]

_OPERATOR = "second_derivative"


@documented
def prepare_second_derivative(
    f: Callable[..., Any],
    backend: AbstractBackend,
    x: Any,
    *contexts: Context,
    strict: bool = True,
    value: bool = False,
) -> Prep:
    """Prepare ``second_derivative`` and ``value_derivative_and_second_derivative`` of ``f`` at arguments like ``x``.

    The prep may be reused for any values of ``x`` and of the contexts with
    the same array family, shape, dtype and device. Compiled backends compile here.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        backend: a backend selector.
        x: an input like the ones the calls will pass (its values do not matter).
        {contexts}
        {strict}
        {value}

    Returns:
        A :class:`di.Prep` serving ``second_derivative`` and ``value_derivative_and_second_derivative``.

    Raises:
        InvalidInputError: bad ``x`` or contexts.
        UnsupportedContextError: the backend cannot use one of the contexts.
        BackendNotInstalledError: the engine is missing.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: x ** 3
        >>> backend = di.AutoFiniteDiff()
        >>> prep = di.prepare_second_derivative(f, backend, np.array(0.0))
        >>> di.second_derivative(f, prep, backend, np.array(2.0)).round(3)
        np.float64(12.0)
    """
    return prepare_operator(_OPERATOR, f, backend, x, None, contexts, strict, value=value)


@documented
@operator_function(_OPERATOR)
def second_derivative(f: Callable[..., Any], *args: Any, out: Any = None) -> Any:
    """Second derivative of ``f`` at a scalar ``x``; ``f`` may return any shape.

    Called as ``second_derivative(f, prep, backend, x, *contexts)`` with a prep from
    :func:`di.prepare_second_derivative`, or ``second_derivative(f, backend, x, *contexts)``, which prepares
    and then runs (the prep is kept: the next call like it reuses it, see :func:`di.cache_info`).

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, *contexts``.
        {out}

    Returns:
        The second derivative, shaped like ``f``'s output.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        InvalidOutputError: ``f``'s output does not suit the operator.
        OutBufferError: ``out`` does not fit.

    Examples:
        >>> import numpy as np, di
        >>> float(di.second_derivative(lambda x: x ** 3, di.AutoFiniteDiff(), np.array(2.0)).round(4))
        12.0
    """


@documented
@operator_function(_OPERATOR)
def value_derivative_and_second_derivative(f: Callable[..., Any], *args: Any, out: Any = None) -> Any:
    """``second_derivative`` together with the value and the derivative, from one prep.

    Same calling forms and prep as :func:`di.second_derivative`.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, *contexts``.
        {out}

    Returns:
        ``(y, dy, d2y)``.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        OutBufferError: ``out`` does not fit.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: x ** 3
        >>> y, dy, d2y = di.value_derivative_and_second_derivative(f, di.AutoFiniteDiff(), np.array(2.0))
        >>> float(y), float(dy.round(4)), float(d2y.round(3))
        (8.0, 12.0, 12.0)
    """
