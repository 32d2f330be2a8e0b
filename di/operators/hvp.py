"""``hvp`` and ``gradient_and_hvp``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.operators.call import operator_function
from di.operators.prepare import prepare_operator
from di.operators.table import documented
from di.prep.base import Prep

__all__ = ["gradient_and_hvp", "hvp", "prepare_hvp", "prepare_hvp_same_point"]

_OPERATOR = "hvp"


@documented
def prepare_hvp(
    f: Callable[..., Any],
    backend: AbstractBackend,
    x: Any,
    tx: tuple[Any, ...],
    *contexts: Context,
    strict: bool = True,
    value: bool = False,
) -> Prep:
    """Prepare ``hvp`` and ``gradient_and_hvp`` of ``f`` at arguments like ``x``.

    The prep may be reused for any values of ``x``, of tx and of the contexts with
    the same array family, shape, dtype and device. Compiled backends compile here.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        backend: a backend selector.
        x: an input like the ones the calls will pass (its values do not matter).
        tx: tuple of tangents shaped like x (one result per element).
        {contexts}
        {strict}
        {value}

    Returns:
        A :class:`di.Prep` serving ``hvp`` and ``gradient_and_hvp``.

    Raises:
        InvalidInputError: bad ``x``, tx or contexts.
        UnsupportedContextError: the backend cannot use one of the contexts.
        BackendNotInstalledError: the engine is missing.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x ** 3).sum()
        >>> backend = di.AutoFiniteDiff()
        >>> prep = di.prepare_hvp(f, backend, np.zeros(2), (np.ones(2),))
        >>> di.hvp(f, prep, backend, np.array([1.0, 2.0]), (np.array([1.0, 1.0]),))[0].round(3)
        array([ 6., 12.])
    """
    return prepare_operator(_OPERATOR, f, backend, x, tx, contexts, strict, value=value)


@documented
def prepare_hvp_same_point(
    f: Callable[..., Any],
    backend: AbstractBackend,
    x: Any,
    tx: tuple[Any, ...],
    *contexts: Context,
    strict: bool = True,
) -> Prep:
    """Prepare ``hvp`` at one point: the linearisation of the gradient runs once here and every
    call reuses it for new tangents.

    The prep serves only this ``x`` and these ``Constant`` values: in strict mode a
    call at another point raises :class:`di.PreparationMismatchError` (compared by
    value). Unlike other preps it holds the point and the engine's residuals.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        backend: a backend selector.
        x: the point.
        tx: tangents like the ones the calls will pass.
        *contexts: ``di.Constant`` / ``di.Cache`` wrappers.
        strict: check each call's arguments, and that it is at this point.

    Returns:
        A :class:`di.Prep` for ``hvp`` and ``gradient_and_hvp`` at this point.

    Raises:
        InvalidInputError: bad ``x``, ``tx`` or contexts.
        BackendNotInstalledError: the engine is missing.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x ** 3).sum()
        >>> x = np.array([1.0, 2.0])
        >>> prep = di.prepare_hvp_same_point(f, di.AutoFiniteDiff(), x, (np.ones(2),))
        >>> di.hvp(f, prep, di.AutoFiniteDiff(), x, (np.array([1.0, 0.0]),))[0].round(4)
        array([6., 0.])
    """
    return prepare_operator(_OPERATOR, f, backend, x, tx, contexts, strict, same_point=True)


@documented
@operator_function(_OPERATOR)
def hvp(f: Callable[..., Any], *args: Any) -> Any:
    """Hessian-vector products of a scalar-valued ``f`` at ``x``, one per tangent in ``tx``.

    Forward over reverse where the engine can (JAX, torch.func); finite differences take
    differences of gradients.

    Called as ``hvp(f, prep, backend, x, tx, *contexts)`` with a prep from
    :func:`di.prepare_hvp`, or ``hvp(f, backend, x, tx, *contexts)``, which prepares
    and then runs (the prep is kept: the next call like it reuses it, see :func:`di.cache_info`).

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, tx, *contexts``.

    Returns:
        A tuple with one Hessian-vector product (shaped like ``x``) per tangent.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.
        InvalidOutputError: ``f``'s output does not suit the operator.

    Examples:
        >>> import numpy as np, di
        >>> hv = di.hvp(lambda x: (x ** 3).sum(), di.AutoFiniteDiff(), np.array([1.0, 2.0]), (np.array([1.0, 1.0]),))
        >>> hv[0].round(4)
        array([ 6., 12.])
    """


@documented
@operator_function(_OPERATOR)
def gradient_and_hvp(f: Callable[..., Any], *args: Any) -> Any:
    """``hvp`` together with the gradient, from one prep.

    Same calling forms and prep as :func:`di.hvp`.

    Args:
        f: the function, called as ``f(x, *context_values)``.
        *args: ``[prep,] backend, x, tx, *contexts``.

    Returns:
        ``(g, tuple)``: the gradient and the products.

    Raises:
        PreparationMismatchError: a strict prep used with other arguments.

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x ** 3).sum()
        >>> g, (hv,) = di.gradient_and_hvp(f, di.AutoFiniteDiff(), np.array([1.0, 2.0]), (np.ones(2),))
        >>> g.round(4), hv.round(3)
        (array([ 3., 12.]), array([ 6., 12.]))
    """
