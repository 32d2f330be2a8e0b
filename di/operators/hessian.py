"""``hessian`` and ``value_gradient_and_hessian``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.operators.call import operator_function
from di.operators.prepare import prepare_operator
from di.operators.table import documented
from di.prep.base import Prep

__all__ = ["hessian", "prepare_hessian", "value_gradient_and_hessian"]

_OPERATOR = "hessian"


@documented
def prepare_hessian(
    f: Callable[..., Any],
    backend: AbstractBackend,
    x: Any,
    *contexts: Context,
    strict: bool = True,
    value: bool = False,
) -> Prep:
    """Prepare ``hessian`` and ``value_gradient_and_hessian`` of ``f`` at arguments like ``x``.

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
        A :class:`di.Prep` serving ``hessian`` and ``value_gradient_and_hessian``.

    Raises:
        InvalidInputError: bad ``x`` or contexts.
        UnsupportedContextError: the backend cannot use one of the contexts.
        BackendNotInstalledError: the engine is missing.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x ** 3).sum()
        >>> backend = di.AutoFiniteDiff()
        >>> prep = di.prepare_hessian(f, backend, np.zeros(2))
        >>> di.hessian(f, prep, backend, np.array([1.0, 2.0])).round(3)
        array([[ 6.,  0.],
               [ 0., 12.]])
    """
    return prepare_operator(_OPERATOR, f, backend, x, None, contexts, strict, value=value)


@documented
@operator_function(_OPERATOR)
def hessian(f: Callable[..., Any], *args: Any, out: Any = None) -> Any:
    """Hessian of a scalar-valued ``f`` at ``x``, of shape ``x.shape + x.shape``.

    Called as ``hessian(f, prep, backend, x, *contexts)`` with a prep from
    :func:`di.prepare_hessian`, or ``hessian(f, backend, x, *contexts)``, which prepares
    and then runs (the prep is kept: the next call like it reuses it, see :func:`di.cache_info`).

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, *contexts``.
        {out}

    Returns:
        The Hessian, in ``x``'s array family.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        InvalidOutputError: ``f``'s output does not suit the operator.
        OutBufferError: ``out`` does not fit.

    Examples:
        >>> import numpy as np, di
        >>> di.hessian(lambda x: (x ** 3).sum(), di.AutoFiniteDiff(), np.array([1.0, 2.0])).round(4)
        array([[ 6.,  0.],
               [ 0., 12.]])
    """


@documented
@operator_function(_OPERATOR)
def value_gradient_and_hessian(f: Callable[..., Any], *args: Any, out: Any = None) -> Any:
    """``hessian`` together with the value and the gradient, from one prep.

    Same calling forms and prep as :func:`di.hessian`.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, *contexts``.
        {out}

    Returns:
        ``(y, g, H)``.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        OutBufferError: ``out`` does not fit.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x ** 3).sum()
        >>> y, g, h = di.value_gradient_and_hessian(f, di.AutoFiniteDiff(), np.array([1.0, 2.0]))
        >>> float(y), g.round(4), h.round(3)
        (9.0, array([ 3., 12.]), array([[ 6.,  0.],
               [ 0., 12.]]))
    """
