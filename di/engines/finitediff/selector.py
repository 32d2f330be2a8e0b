"""The finite-difference selector: :class:`AutoFiniteDiff`. Building one imports nothing."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Literal

from di.backends.selectors import AbstractBackend
from di.errors import InvalidOptionError

__all__ = ["AutoFiniteDiff"]


@dataclass(frozen=True)
class AutoFiniteDiff(AbstractBackend):
    """NumPy finite differences, evaluated in float64.

    Args:
        method: ``"central"`` (default, error O(h^2)) or ``"forward"`` (O(h), half
            the evaluations).
        step: relative step; ``None`` picks ``eps**(1/3)`` for central and
            ``eps**(1/2)`` for forward differences (eps of float64). Each
            coordinate's step is scaled by ``max(1, |x_i|)``.

    Examples:
        >>> import di
        >>> di.AutoFiniteDiff(method="forward")
        AutoFiniteDiff(method='forward', step=None)
    """

    method: Literal["central", "forward"] = "central"
    step: float | None = None

    def __post_init__(self) -> None:
        if self.method not in ("central", "forward"):
            raise InvalidOptionError(f"AutoFiniteDiff(method={self.method!r}): method must be 'central' or 'forward'")
        step = self.step
        if step is not None and not (
            isinstance(step, numbers.Real) and not isinstance(step, bool) and 0 < step < math.inf
        ):
            raise InvalidOptionError(f"AutoFiniteDiff(step={step!r}): step must be a positive float")


def tolerances(backend: AutoFiniteDiff, order: int) -> tuple[float, float]:
    """The error finite differences add to rounding: truncation and cancellation,
    more for forward than central differences and more for second order
    (the engine's ``tolerances`` hook, read by :func:`di.testing.default_tolerances`).

    Args:
        backend: the selector (its ``method`` decides).
        order: 1 for first-order operators, 2 for second-order ones.

    Returns:
        ``(rtol, atol)``.

    Examples:
        >>> import di
        >>> from di.engines.finitediff.selector import tolerances
        >>> tolerances(di.AutoFiniteDiff(), 1), tolerances(di.AutoFiniteDiff(method="forward"), 2)
        ((1e-06, 1e-09), (0.001, 1e-06))
    """
    if backend.method == "forward":
        return (1e-5, 1e-8) if order == 1 else (1e-3, 1e-6)
    return (1e-6, 1e-9) if order == 1 else (1e-4, 1e-7)
