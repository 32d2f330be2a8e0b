"""``pullback`` and ``value_and_pullback``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.operators.call import operator_function
from di.operators.prepare import prepare_operator
from di.operators.table import documented
from di.prep.base import Prep

__all__ = ["prepare_pullback", "prepare_pullback_same_point", "pullback", "value_and_pullback"]

_OPERATOR = "pullback"


@documented
def prepare_pullback(
    f: Callable[..., Any],
    backend: AbstractBackend,
    x: Any,
    ty: tuple[Any, ...],
    *contexts: Context,
    strict: bool = True,
    has_aux: bool = False,
    value: bool = False,
) -> Prep:
    """Prepare ``pullback`` and ``value_and_pullback`` of ``f`` at arguments like ``x``.

    The prep may be reused for any values of ``x``, of ty and of the contexts with
    the same array family, shape, dtype and device. Compiled backends compile here.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        backend: a backend selector.
        x: an input like the ones the calls will pass (its values do not matter).
        ty: tuple of cotangents shaped like f(x) (one result per element).
        {contexts}
        {strict}
        {has_aux}
        {value}

    Returns:
        A :class:`di.Prep` serving ``pullback`` and ``value_and_pullback``.

    Raises:
        InvalidInputError: bad ``x``, ty or contexts.
        UnsupportedContextError: the backend cannot use one of the contexts.
        BackendNotInstalledError: the engine is missing.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: x ** 2
        >>> backend = di.AutoFiniteDiff()
        >>> prep = di.prepare_pullback(f, backend, np.zeros(2), (np.ones(2),))
        >>> di.pullback(f, prep, backend, np.array([1.0, 2.0]), (np.array([1.0, 1.0]),))[0].round(4)
        array([2., 4.])
    """
    return prepare_operator(_OPERATOR, f, backend, x, ty, contexts, strict, has_aux=has_aux, value=value)


@documented
def prepare_pullback_same_point(
    f: Callable[..., Any],
    backend: AbstractBackend,
    x: Any,
    ty: tuple[Any, ...],
    *contexts: Context,
    strict: bool = True,
) -> Prep:
    """Prepare ``pullback`` at one point: the forward sweep runs once here and every
    call reuses it for new cotangents.

    The prep serves only this ``x`` and these ``Constant`` values: in strict mode a
    call at another point raises :class:`di.PreparationMismatchError` (compared by
    value). Unlike other preps it holds the point and the engine's residuals.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        backend: a backend selector.
        x: the point.
        ty: cotangents like the ones the calls will pass.
        *contexts: ``di.Constant`` / ``di.Cache`` wrappers.
        strict: check each call's arguments, and that it is at this point.

    Returns:
        A :class:`di.Prep` for ``pullback`` and ``value_and_pullback`` at this point.

    Raises:
        InvalidInputError: bad ``x``, ``ty`` or contexts.
        BackendNotInstalledError: the engine is missing.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: x ** 2
        >>> x = np.array([1.0, 2.0])
        >>> prep = di.prepare_pullback_same_point(f, di.AutoFiniteDiff(), x, (np.ones(2),))
        >>> di.pullback(f, prep, di.AutoFiniteDiff(), x, (np.array([1.0, 0.0]),))[0].round(4)
        array([2., 0.])
    """
    return prepare_operator(_OPERATOR, f, backend, x, ty, contexts, strict, same_point=True)


@documented
@operator_function(_OPERATOR)
def pullback(f: Callable[..., Any], *args: Any, has_aux: bool = False) -> Any:
    """Vector-Jacobian products (VJPs) of ``f`` at ``x``, one per cotangent in the tuple ``ty``.

    Called as ``pullback(f, prep, backend, x, ty, *contexts)`` with a prep from
    :func:`di.prepare_pullback`, or ``pullback(f, backend, x, ty, *contexts)``, which prepares
    and then runs (the prep is kept: the next call like it reuses it, see :func:`di.cache_info`).

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, ty, *contexts``.
        {has_aux}

    Returns:
        A tuple with one input cotangent (shaped like ``x``) per cotangent.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        InvalidOutputError: ``f``'s output does not suit the operator.

    Examples:
        >>> import numpy as np, di
        >>> tx = di.pullback(lambda x: x ** 2, di.AutoFiniteDiff(), np.array([1.0, 2.0]), (np.array([0.0, 1.0]),))
        >>> tx[0].round(6)
        array([0., 4.])
    """


@documented
@operator_function(_OPERATOR)
def value_and_pullback(f: Callable[..., Any], *args: Any, has_aux: bool = False) -> Any:
    """``pullback`` together with the value, from one prep.

    Same calling forms and prep as :func:`di.pullback`.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, ty, *contexts``.
        {has_aux}

    Returns:
        ``(y, tuple)``.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: x ** 2
        >>> y, (dx,) = di.value_and_pullback(f, di.AutoFiniteDiff(), np.array([1.0, 2.0]), (np.ones(2),))
        >>> y, dx.round(4)
        (array([1., 4.]), array([2., 4.]))
    """
