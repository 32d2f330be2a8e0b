"""The benchmarked functions, each written once for every engine.

Plain operators and array methods only (``*``, ``**``, slicing, ``.sum()``), which
numpy, torch, JAX (and its tracers) and autograd's ``ArrayBox`` all accept, so
the native and the ``di`` side run exactly the same ``f`` and no array-API
namespace lookup dilutes the per-call overhead being measured.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FUNCTIONS", "VECTOR_FUNCTIONS", "coupled_cubic", "rosenbrock", "sum_of_squares"]


def sum_of_squares(x: Any) -> Any:
    """``sum(x_i^2)``; gradient ``2 x``."""
    return (x * x).sum()


def rosenbrock(x: Any) -> Any:
    """The extended Rosenbrock function (Moré, Garbow and Hillstrom), ``n`` even:
    ``sum_i 100 (x_{2i+1} - x_{2i}^2)^2 + (1 - x_{2i})^2``."""
    first = x[0::2]  # x_0, x_2, ...
    second = x[1::2]  # x_1, x_3, ...
    return (100.0 * (second - first * first) ** 2 + (1.0 - first) ** 2).sum()


FUNCTIONS = {"sum_of_squares": sum_of_squares, "rosenbrock": rosenbrock}


def coupled_cubic(x: Any) -> Any:
    """A vector function for jacobian, pushforward and pullback: ``x_i^3 - x_i
    sum_j x_j^2 / n`` (a diagonal plus a dense rank-one jacobian)."""
    return x * x * x - x * (x * x).sum() / x.shape[0]


VECTOR_FUNCTIONS = {"coupled_cubic": coupled_cubic}
