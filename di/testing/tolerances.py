"""Default tolerances: by backend, dtype and derivative order."""

from __future__ import annotations

from typing import Any

from di.backends.selectors import AbstractBackend, registered_for
from di.testing.arrays import dtype_name

__all__ = ["approximates", "default_tolerances"]


def _approximations(backend: Any, order: int) -> list[tuple[float, float]]:
    """The ``(rtol, atol)`` of each approximating engine a backend (or a combination
    of backends) uses: what the nearest record in its selector class's MRO that
    declares ``tolerances`` says (a subclass of an engine's selector approximates
    as that engine does)."""
    if isinstance(backend, AbstractBackend):
        for base in type(backend).__mro__:
            record = registered_for(base)
            if record is not None and record.tolerances is not None:
                return [record.tolerances(backend, order)]
    found: list[tuple[float, float]] = []
    for attribute in ("outer", "inner", "dense"):
        inner = getattr(backend, attribute, None)
        if inner is not None and inner is not backend:
            found += _approximations(inner, order)
    return found


def approximates(backend: Any) -> bool:
    """Whether a backend approximates derivatives rather than computing them exactly.

    An engine that approximates says so in its record (its ``tolerances``);
    a combination (:class:`di.SecondOrder`, :class:`di.AutoSparse`) approximates
    when an engine inside it does.

    Args:
        backend: a backend selector, or a combination of them.

    Returns:
        ``True`` for finite differences and combinations using them.

    Examples:
        >>> import di
        >>> from di.testing import approximates
        >>> approximates(di.AutoFiniteDiff()), approximates(di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX()))
        (True, True)
        >>> approximates(di.AutoJAX(jit=True))
        False
    """
    return bool(_approximations(backend, 1))


def default_tolerances(backend: Any, dtype: Any, order: int = 1) -> tuple[float, float]:
    """The default ``(rtol, atol)`` for a backend, a dtype and a derivative order.

    Automatic differentiation is exact up to rounding: float64 gets ``rtol=1e-9``,
    float32 ``2e-4``, float16/bfloat16 ``1e-2``. An engine that approximates says
    how much it adds in its record (``tolerances``: finite differences add their
    truncation and cancellation error, more for forward than central differences
    and more for second order); the looser of the two applies. A result passes
    when its NaN and infinite entries are the reference's and, over the finite
    entries, ``max|result - reference| <= atol + rtol * max|reference|``.

    Args:
        backend: the backend selector (approximating engines are recognised
            inside combinations with ``outer``/``inner``/``dense`` attributes too).
        dtype: the dtype of ``x`` (of any array family), or its name.
        order: 1 for first-order operators, 2 for second-order ones.

    Returns:
        ``(rtol, atol)``.

    Examples:
        >>> import numpy as np, di
        >>> from di.testing import default_tolerances
        >>> default_tolerances(di.AutoJAX(), np.float64), default_tolerances(di.AutoFiniteDiff(), np.float64)
        ((1e-09, 1e-12), (1e-06, 1e-09))
    """
    name = {"complex64": "float32", "complex128": "float64"}.get(dtype_name(dtype), dtype_name(dtype))
    if "16" in name:
        rtol, atol = 1e-2, 1e-4
    elif "32" in name:
        rtol, atol = 2e-4, 1e-7
    else:
        rtol, atol = 1e-9, 1e-12
    for engine_rtol, engine_atol in _approximations(backend, order):
        rtol, atol = max(rtol, engine_rtol), max(atol, engine_atol)
    return rtol, atol
