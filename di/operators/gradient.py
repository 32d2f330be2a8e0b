"""``gradient`` and ``value_and_gradient`` of a scalar-valued function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.operators.call import operator_function
from di.operators.prepare import prepare_operator
from di.operators.table import documented
from di.prep.base import Prep

__all__ = ["gradient", "prepare_gradient", "value_and_gradient"]

_OPERATOR = "gradient"


@documented
def prepare_gradient(
    f: Callable[..., Any],
    backend: AbstractBackend,
    x: Any,
    *contexts: Context,
    strict: bool = True,
    has_aux: bool = False,
    value: bool = False,
) -> Prep:
    """Prepare ``gradient`` and ``value_and_gradient`` of ``f`` at arguments like ``x``.

    The prep may be reused for any ``x`` and context values with the same array
    family, shape, dtype and device; the values of each call are the ones used.
    On compiled backends this is where compilation happens, once.

    Args:
        f: scalar-valued function, called as ``f(x, *context_values)``.
        backend: a selector such as ``di.AutoJAX(jit=True)``.
        x: the point's type and shape to prepare for (its values do not matter).
        {contexts}
        {strict}
        {has_aux}
        {value}

    Returns:
        A :class:`di.Prep` for ``gradient`` and ``value_and_gradient``.

    Raises:
        InvalidInputError: ``x`` is not a real floating array, or a context is
            not wrapped.
        UnsupportedContextError: the backend cannot use one of the contexts.
        BackendNotInstalledError: the backend's engine is not installed.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x ** 2).sum()
        >>> prep = di.prepare_gradient(f, di.AutoFiniteDiff(), np.zeros(2))
        >>> di.gradient(f, prep, di.AutoFiniteDiff(), np.array([1.0, 2.0])).round(6)
        array([2., 4.])
    """
    return prepare_operator(_OPERATOR, f, backend, x, None, contexts, strict, has_aux=has_aux, value=value)


@documented
@operator_function(_OPERATOR)
def gradient(f: Callable[..., Any], *args: Any, out: Any = None, has_aux: bool = False) -> Any:
    """Gradient of a scalar-valued ``f`` at ``x``.

    Called as ``gradient(f, prep, backend, x, *contexts)`` with a prep from
    :func:`di.prepare_gradient`, or ``gradient(f, backend, x, *contexts)``, which
    prepares and then runs (the prep is kept: the next call like it reuses it, see :func:`di.cache_info`).

    Args:
        f: scalar-valued function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, *contexts``.
        {out}
        {has_aux}

    Returns:
        The gradient, in the array family, shape, dtype and device of ``x``.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        InvalidOutputError: ``f`` does not return a real scalar.
        OutBufferError: ``out`` does not fit.
        Exception: whatever ``f`` raises, unchanged.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x, a: (a * x ** 2).sum()
        >>> di.gradient(f, di.AutoFiniteDiff(), np.array([1.0, 2.0]), di.Constant(0.5)).round(6)
        array([1., 2.])
    """


@documented
@operator_function(_OPERATOR)
def value_and_gradient(f: Callable[..., Any], *args: Any, out: Any = None, has_aux: bool = False) -> Any:
    """Value and gradient of a scalar-valued ``f`` at ``x``, in one pass.

    Same calling forms and prep as :func:`di.gradient`.

    Args:
        f: scalar-valued function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, *contexts``.
        out: optional buffer for the gradient, as in :func:`di.gradient`.
        {has_aux}

    Returns:
        ``(y, g)``: ``y`` a 0-d array and ``g`` the gradient, both in ``x``'s
        array family.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        InvalidOutputError: ``f`` does not return a real scalar.
        OutBufferError: ``out`` does not fit.

    Examples:
        >>> import numpy as np, di
        >>> y, g = di.value_and_gradient(lambda x: (x ** 2).sum(), di.AutoFiniteDiff(), np.array([3.0]))
        >>> float(y), g.round(6)
        (9.0, array([6.]))
    """
