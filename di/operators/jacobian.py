"""``jacobian`` and ``value_and_jacobian``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.operators.call import operator_function
from di.operators.prepare import prepare_operator
from di.operators.table import documented
from di.prep.base import Prep

__all__ = ["jacobian", "prepare_jacobian", "value_and_jacobian"]

_OPERATOR = "jacobian"


@documented
def prepare_jacobian(
    f: Callable[..., Any],
    backend: AbstractBackend,
    x: Any,
    *contexts: Context,
    strict: bool = True,
    has_aux: bool = False,
    value: bool = False,
) -> Prep:
    """Prepare ``jacobian`` and ``value_and_jacobian`` of ``f`` at arguments like ``x``.

    The prep may be reused for any values of ``x`` and of the contexts with
    the same array family, shape, dtype and device. Compiled backends compile here.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        backend: a backend selector.
        x: an input like the ones the calls will pass (its values do not matter).
        {contexts}
        {strict}
        {has_aux}
        {value}

    Returns:
        A :class:`di.Prep` serving ``jacobian`` and ``value_and_jacobian``.

    Raises:
        InvalidInputError: bad ``x`` or contexts.
        UnsupportedContextError: the backend cannot use one of the contexts.
        BackendNotInstalledError: the engine is missing.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: x ** 2
        >>> backend = di.AutoFiniteDiff()
        >>> prep = di.prepare_jacobian(f, backend, np.zeros(2))
        >>> di.jacobian(f, prep, backend, np.array([1.0, 2.0])).round(4)
        array([[2., 0.],
               [0., 4.]])
    """
    return prepare_operator(_OPERATOR, f, backend, x, None, contexts, strict, has_aux=has_aux, value=value)


@documented
@operator_function(_OPERATOR)
def jacobian(f: Callable[..., Any], *args: Any, out: Any = None, has_aux: bool = False) -> Any:
    """Jacobian of an array-to-array ``f`` at ``x``, of shape ``y.shape + x.shape``.

    Forward mode (one pushforward per input) or reverse mode (one pullback per output) is
    picked from the sizes unless the backend's ``mode`` says otherwise.

    Called as ``jacobian(f, prep, backend, x, *contexts)`` with a prep from
    :func:`di.prepare_jacobian`, or ``jacobian(f, backend, x, *contexts)``, which prepares
    and then runs (the prep is kept: the next call like it reuses it, see :func:`di.cache_info`).

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, *contexts``.
        {out}
        {has_aux}

    Returns:
        The jacobian, in ``x``'s array family.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        InvalidOutputError: ``f``'s output does not suit the operator.
        OutBufferError: ``out`` does not fit.

    Examples:
        >>> import numpy as np, di
        >>> di.jacobian(lambda x: x ** 2, di.AutoFiniteDiff(), np.array([1.0, 2.0])).round(6)
        array([[2., 0.],
               [0., 4.]])
    """


@documented
@operator_function(_OPERATOR)
def value_and_jacobian(f: Callable[..., Any], *args: Any, out: Any = None, has_aux: bool = False) -> Any:
    """``jacobian`` together with the value, from one prep.

    Same calling forms and prep as :func:`di.jacobian`.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, *contexts``.
        {out}
        {has_aux}

    Returns:
        ``(y, J)``.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        OutBufferError: ``out`` does not fit.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: x ** 2
        >>> y, jac = di.value_and_jacobian(f, di.AutoFiniteDiff(), np.array([1.0, 2.0]))
        >>> y, jac.round(4)
        (array([1., 4.]), array([[2., 0.],
               [0., 4.]]))
    """
