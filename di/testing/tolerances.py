"""Default tolerances: by backend, dtype and derivative order."""

from __future__ import annotations

from typing import Any

from di.backends.selectors import AutoFiniteDiff
from di.testing.arrays import dtype_name

__all__ = ["default_tolerances"]


def _finite_difference_methods(backend: Any) -> list[str]:
    """The finite-difference methods a backend (or a combination of backends) uses."""
    if isinstance(backend, AutoFiniteDiff):
        return [backend.method]
    methods: list[str] = []
    for attribute in ("outer", "inner", "dense"):
        inner = getattr(backend, attribute, None)
        if inner is not None and inner is not backend:
            methods += _finite_difference_methods(inner)
    return methods


def default_tolerances(backend: Any, dtype: Any, order: int = 1) -> tuple[float, float]:
    """The default ``(rtol, atol)`` for a backend, a dtype and a derivative order.

    Automatic differentiation is exact up to rounding: float64 gets ``rtol=1e-9``,
    float32 ``2e-4``, float16/bfloat16 ``1e-2``. Finite differences add their
    truncation and cancellation error, more for forward than central differences
    and more for second order; the looser of the two applies. A result passes
    when its NaN and infinite entries are the reference's and, over the finite
    entries, ``max|result - reference| <= atol + rtol * max|reference|``.

    Args:
        backend: the backend selector (finite differences are recognised inside
            combinations with ``outer``/``inner`` attributes too).
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
    name = dtype_name(dtype)
    if "16" in name:
        rtol, atol = 1e-2, 1e-4
    elif "32" in name:
        rtol, atol = 2e-4, 1e-7
    else:
        rtol, atol = 1e-9, 1e-12
    for method in _finite_difference_methods(backend):
        if method == "forward":
            fd_rtol, fd_atol = (1e-5, 1e-8) if order == 1 else (1e-3, 1e-6)
        else:
            fd_rtol, fd_atol = (1e-6, 1e-9) if order == 1 else (1e-4, 1e-7)
        rtol, atol = max(rtol, fd_rtol), max(atol, fd_atol)
    return rtol, atol
