"""The steps of finite differences, and the precision they follow.

First order: coordinate ``i`` moves by ``h_i = step * max(1, |x_i|)``, rounded so
that ``x_i + h_i`` is exact (:func:`coordinate_steps`); a pushforward along ``t``
moves by ``h * t``, with ``h`` such that the coordinate ``t`` weighs most in
(``|t_i| max(1, |x_i|)`` largest) moves as it would alone
(:func:`directional_step`). Second order takes the larger step ``eps**(1/4)``.

``eps`` is float64's unless ``f`` returns a coarser float (an ``f`` that computes
in float32 or float16): the steps then follow its output's precision, since a
float64 step would difference away all of float32's digits (:func:`output_eps`,
:class:`Precision`).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from di.engines.finitediff.selector import AutoFiniteDiff

__all__ = [
    "EPS",
    "FLOAT64",
    "Precision",
    "coordinate_steps",
    "directional_step",
    "largest_magnitude",
    "output_eps",
    "relative_step",
]


EPS = float(np.finfo(np.float64).eps)


_COARSER_EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
"""Machine epsilon of the float dtypes coarser than float64, by name (the same in
every family: ``float32``, ``torch.float32``)."""


FLOAT64 = np.dtype(np.float64)


def relative_step(selector: AutoFiniteDiff, eps: float = EPS) -> float:
    """The relative step: the selector's, or eps**(1/3) (central) / eps**(1/2)
    (forward), which balance truncation and rounding error for outputs of
    precision ``eps`` (float64's by default)."""
    if selector.step is not None:
        return float(selector.step)
    return eps ** (1 / 3) if selector.method == "central" else eps**0.5


def output_eps(y: Any) -> float:
    """The machine epsilon of ``f``'s output ``y``: its float dtype's when coarser
    than float64 (float32, float16, bfloat16 of any family), else float64's."""
    dtype = getattr(y, "dtype", None)
    if dtype is None or dtype is FLOAT64:
        return EPS
    return _COARSER_EPS.get(str(dtype).rsplit(".", 1)[-1], EPS)


def coordinate_steps(flat: Any, step: float) -> Any:
    h = step * np.maximum(1.0, np.abs(flat))
    return (flat + h) - flat  # exactly representable


def directional_step(step: float, point: Any, t: Any, t_scale: float) -> float:
    """The step ``h`` of a difference along ``t`` (``point`` moves by ``h * t``):
    the coordinate ``t`` weighs most in, by ``|t_i| max(1, |x_i|)``, moves by
    ``step * max(1, |x_i|)`` (by ``t_scale = max|t|`` when ``t`` weighs all
    coordinates alike), as it would along its own axis; so a tangent along one
    coordinate takes that coordinate's step, whatever the scale of the others.
    ``|t_i| max(1, |x_i|)`` is ``max(|t_i|, |x_i t_i|)``, whose largest is
    ``max(t_scale, max|x t|)``: two array operations fewer on the hot path."""
    return step * max(t_scale, float(np.abs(point * t).max())) / (t_scale * t_scale)


def largest_magnitude(a: Any) -> float:
    """``max(|a|)`` as a float, 0 for an empty array (NaN propagates). The
    method, not ``np.max``: a microsecond less per call, which is most of it at
    n = 1e3."""
    return float(np.abs(a).max()) if a.size else 0.0


class Precision(threading.local):
    """The precision of ``f``'s output as last seen in this thread (``eps``) and the
    steps it calls for. Per thread: one call's steps never come from another's."""

    def __init__(self, selector: AutoFiniteDiff) -> None:
        self.selector = selector
        self.set(EPS)

    def set(self, eps: float) -> None:
        self.eps = eps
        self.first_step, self.second_step = relative_step(self.selector, eps), eps**0.25
