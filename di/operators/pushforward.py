"""``pushforward`` and ``value_and_pushforward``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.operators.call import operator_function
from di.operators.prepare import prepare_operator
from di.operators.table import documented
from di.prep.base import Prep

__all__ = ["prepare_pushforward", "pushforward", "value_and_pushforward"]

_OPERATOR = "pushforward"


@documented
def prepare_pushforward(
    f: Callable[..., Any],
    backend: AbstractBackend,
    x: Any,
    tx: tuple[Any, ...],
    *contexts: Context,
    strict: bool = True,
    has_aux: bool = False,
    value: bool = False,
) -> Prep:
    """Prepare ``pushforward`` and ``value_and_pushforward`` of ``f`` at arguments like ``x``.

    The prep may be reused for any values of ``x``, of tx and of the contexts with
    the same array family, shape, dtype and device. Compiled backends compile here.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        backend: a backend selector.
        x: an input like the ones the calls will pass (its values do not matter).
        tx: tuple of tangents shaped like x (one result per element).
        {contexts}
        {strict}
        {has_aux}
        {value}

    Returns:
        A :class:`di.Prep` serving ``pushforward`` and ``value_and_pushforward``.

    Raises:
        InvalidInputError: bad ``x``, tx or contexts.
        UnsupportedContextError: the backend cannot use one of the contexts.
        BackendNotInstalledError: the engine is missing.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: x ** 2
        >>> backend = di.AutoFiniteDiff()
        >>> prep = di.prepare_pushforward(f, backend, np.zeros(2), (np.ones(2),))
        >>> di.pushforward(f, prep, backend, np.array([1.0, 2.0]), (np.array([1.0, 1.0]),))[0].round(4)
        array([2., 4.])
    """
    return prepare_operator(_OPERATOR, f, backend, x, tx, contexts, strict, has_aux=has_aux, value=value)


@documented
@operator_function(_OPERATOR)
def pushforward(f: Callable[..., Any], *args: Any, has_aux: bool = False) -> Any:
    """Jacobian-vector products (JVPs) of ``f`` at ``x``, one per tangent in the tuple ``tx``.

    Called as ``pushforward(f, prep, backend, x, tx, *contexts)`` with a prep from
    :func:`di.prepare_pushforward`, or ``pushforward(f, backend, x, tx, *contexts)``, which prepares
    and then runs (the prep is kept: the next call like it reuses it, see :func:`di.cache_info`).

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, tx, *contexts``.
        {has_aux}

    Returns:
        A tuple with one output tangent (shaped like ``f``'s output) per tangent.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        InvalidOutputError: ``f``'s output does not suit the operator.

    Examples:
        >>> import numpy as np, di
        >>> ty = di.pushforward(lambda x: x ** 2, di.AutoFiniteDiff(), np.array([1.0, 2.0]), (np.array([1.0, 0.0]),))
        >>> ty[0].round(6)
        array([2., 0.])
    """


@documented
@operator_function(_OPERATOR)
def value_and_pushforward(f: Callable[..., Any], *args: Any, has_aux: bool = False) -> Any:
    """``pushforward`` together with the value, from one prep.

    Same calling forms and prep as :func:`di.pushforward`.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, tx, *contexts``.
        {has_aux}

    Returns:
        ``(y, tuple)``.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: x ** 2
        >>> y, (dy,) = di.value_and_pushforward(f, di.AutoFiniteDiff(), np.array([1.0, 2.0]), (np.ones(2),))
        >>> y, dy.round(4)
        (array([1., 4.]), array([2., 4.]))
    """
