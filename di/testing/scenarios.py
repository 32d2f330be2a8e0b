"""The built-in scenarios: functions written once with the array API, points,
contexts and analytic answers for every operator.

:func:`default_scenarios` returns the built-in set (the :class:`Scenario` record
itself is in :mod:`di.testing.scenario`). It is written as tables: each function
with its analytic derivatives (an :class:`~di.testing.scenario_table.Analytic`),
then one :class:`~di.testing.scenario_table.Row` per scenario (the operator, the
function, how ``x``, the contexts and the tangents are drawn, the tags) in the
groups of :data:`SCENARIO_GROUPS`, which :mod:`di.testing.scenario_table` builds.
Every function is written once with ``xp = di.array_namespace(x)``, so the same
code runs, and is differentiated correctly, on the arrays of every registered
family and under every engine's tracing. The scenarios are NumPy data;
:meth:`Scenario.with_family` (what ``default_scenarios(families=...)`` calls)
converts them to any registered family. No engine is imported here.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

import di
from di.contexts import Cache, Constant
from di.families import family_of, get_family
from di.pytrees import tree_flatten
from di.testing.arrays import from_numpy_in
from di.testing.scenario import OPERATORS, Scenario
from di.testing.scenario_table import SAME_X, Analytic, Fixed, NaNs, Point, Row, RowGroup, Uniform

__all__ = ["SCENARIO_GROUPS", "ScenarioGroup", "default_scenarios"]


# --- the functions, written once with the array API --------------------------------------


def _store(buf: Any, value: Any) -> Any:
    """Write ``value`` into the cache ``buf`` and return the buffer to read from.

    Arrays of an immutable family (and their tracers) cannot be written, so
    there the value itself is returned, as di documents for ``Cache`` on such
    engines: build new arrays.
    """
    family = family_of(buf)
    if family is not None and not get_family(family).mutable:
        return value
    buf[...] = value
    return buf


def sum_sin(x: Any) -> Any:
    """``sum(sin(x) * x)``."""
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x)


def quadratic(x: Any, a: Any) -> Any:
    """``x . (A x) / 2`` for a ``Constant`` matrix ``A`` (not symmetric)."""
    xp = di.array_namespace(x)
    return xp.sum(x * (a @ x)) / 2


def weighted_exp(x: Any, w: Any, scale: float) -> Any:
    """``sum(w * exp(scale * x))`` for a ``Constant`` vector ``w`` and float ``scale``."""
    xp = di.array_namespace(x)
    return xp.sum(w * xp.exp(scale * x))


def rosenbrock(x: Any) -> Any:
    """The Rosenbrock function ``sum(100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2)``."""
    xp = di.array_namespace(x)
    return xp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def sum_tanh_squared(x: Any) -> Any:
    """``sum(tanh(x)^2)``, for a matrix ``x``."""
    xp = di.array_namespace(x)
    return xp.sum(xp.tanh(x) ** 2)


def cached_sum(x: Any, buf: Any) -> Any:
    """``sum(x^2 sin x)``, with ``x^2`` written into the ``Cache`` ``buf`` first."""
    xp = di.array_namespace(x)
    squares = _store(buf, x * x)
    return xp.sum(squares * xp.sin(x))


def square_exp(x: Any) -> Any:
    """``x^2 exp(x)`` for a 0-d ``x``."""
    xp = di.array_namespace(x)
    return x**2 * xp.exp(x)


def pytree_sum(x: Any) -> Any:
    """``sum(a^2) + a[0] * sum(sin b)`` for ``x = {"a": vector, "b": matrix}``."""
    a, b = x["a"], x["b"]
    xp = di.array_namespace(a)
    return xp.sum(a**2) + a[0] * xp.sum(xp.sin(b))


def sin_exp(x: Any) -> Any:
    """``sin(x) exp(x)`` for a scalar ``x``."""
    xp = di.array_namespace(x)
    return xp.sin(x) * xp.exp(x)


def scalar_to_vector(x: Any, c: float) -> Any:
    """``[sin(c x), x^3, exp(-x)]`` for a scalar ``x`` and a float ``Constant`` ``c``."""
    xp = di.array_namespace(x)
    return xp.stack([xp.sin(c * x), x**3, xp.exp(-x)])


def scalar_to_matrix(x: Any, m: Any, n: Any) -> Any:
    """``sin(x) M + x^2 N`` for a scalar ``x`` and ``Constant`` matrices ``M``, ``N``."""
    xp = di.array_namespace(x)
    return xp.sin(x) * m + x**2 * n


def cached_scalar_to_vector(x: Any, w: Any, buf: Any) -> Any:
    """``sin(w x)``, with ``w x`` written into the ``Cache`` ``buf`` first."""
    xp = di.array_namespace(x)
    scaled = _store(buf, w * x)
    return xp.sin(scaled)


def cubic_polynomial(x: Any) -> Any:
    """``x^3 - 2 x``: plain operators only, so it also runs on Python floats."""
    return x**3 - 2 * x


def sin_times_x(x: Any) -> Any:
    """``sin(x) * x``, elementwise."""
    xp = di.array_namespace(x)
    return xp.sin(x) * x


def tanh_linear(x: Any, a: Any) -> Any:
    """``tanh(A x)`` for a ``Constant`` matrix ``A``."""
    xp = di.array_namespace(x)
    return xp.tanh(a @ x)


def exp_linear(x: Any, b: Any) -> Any:
    """``exp(B x)`` for a ``Constant`` matrix ``B`` (more outputs than inputs)."""
    xp = di.array_namespace(x)
    return xp.exp(b @ x)


def matrix_product(x: Any, b: Any) -> Any:
    """``x @ B`` for a matrix ``x`` and a ``Constant`` matrix ``B``."""
    return x @ b


def cached_cube(x: Any, buf: Any) -> Any:
    """``x^3``, with ``x^2`` written into the ``Cache`` ``buf`` first."""
    squares = _store(buf, x * x)
    return squares * x


def sum_squares(x: Any) -> Any:
    """``sum(x^2)``: a scalar output, for operators that accept any output."""
    xp = di.array_namespace(x)
    return xp.sum(x**2)


def linear_of_squares(x: Any, a: Any) -> Any:
    """``A (x^2)`` for a ``Constant`` matrix ``A``."""
    return a @ (x**2)


def sum_exp(x: Any) -> Any:
    """``sum(exp(x))``."""
    xp = di.array_namespace(x)
    return xp.sum(xp.exp(x))


def tanh(x: Any) -> Any:
    """``tanh(x)``, elementwise."""
    xp = di.array_namespace(x)
    return xp.tanh(x)


def scaled_sum_squares(x: Any, c: float) -> Any:
    """``c sum(x^2)`` for a float ``Constant`` ``c``."""
    xp = di.array_namespace(x)
    return c * xp.sum(x**2)


def concat_where_max(x: Any) -> Any:
    """``[where(x > 0, x^2, x / 2), max(x) x_0]``: a vector of one more element than ``x``."""
    xp = di.array_namespace(x)
    return xp.concat([xp.where(x > 0, x**2, 0.5 * x), xp.reshape(xp.max(x) * x[0], (1,))])


def row_max_of_product(x: Any, a: Any) -> Any:
    """``[max_j (x A)_ij for each row i, sum_i x_ij^2 for each column j]`` for a matrix ``x``."""
    xp = di.array_namespace(x)
    return xp.concat([xp.max(xp.matmul(x, a), axis=1), xp.sum(x * x, axis=0)])


def reshape_matmul_concat(x: Any, b: Any) -> Any:
    """``X = reshape(x, (2, 3))`` stacked as rows ``[X B; X^2]``: a matrix from a vector."""
    xp = di.array_namespace(x)
    matrix = xp.reshape(x, (2, 3))
    return xp.concat([xp.matmul(matrix, b), matrix**2], axis=0)


def stack_where_max(x: Any) -> Any:
    """Columns ``where(x > 0, x, x^3)`` and ``max(x) x``: a matrix from a vector."""
    xp = di.array_namespace(x)
    return xp.stack([xp.where(x > 0, x, x**3), xp.max(x) * x], axis=1)


# --- their analytic derivatives (NumPy, float64) -------------------------------------------------


def _diag_tensor(values: np.ndarray) -> np.ndarray:
    """The ``x.shape + x.shape`` tensor with ``values`` on its diagonal."""
    n = values.size
    return (np.eye(n) * values.reshape(-1)).reshape(values.shape + values.shape)


def _sum_sin_grad(x: np.ndarray) -> np.ndarray:
    return np.cos(x) * x + np.sin(x)


def _rosenbrock_grad(x: np.ndarray) -> np.ndarray:
    g = np.zeros_like(x)
    g[:-1] += -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return g


def _rosenbrock_hess(x: np.ndarray) -> np.ndarray:
    n = x.size
    h = np.zeros((n, n))
    for i in range(n - 1):
        h[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        h[i + 1, i + 1] += 200
        h[i, i + 1] = h[i + 1, i] = -400 * x[i]
    return h


def _tanh2_grad(x: np.ndarray) -> np.ndarray:
    t = np.tanh(x)
    return 2 * t * (1 - t**2)


def _tanh2_hess(x: np.ndarray) -> np.ndarray:
    t = np.tanh(x)
    return _diag_tensor(2 * (1 - t**2) * (1 - 3 * t**2))


def _pytree_sum_grad(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    a, b = x["a"], x["b"]
    ga = 2 * a
    ga[0] += np.sin(b).sum()
    return {"a": ga, "b": a[0] * np.cos(b)}


def _concat_where_max_jacobian(x: np.ndarray) -> np.ndarray:
    top = np.diag(np.where(x > 0, 2 * x, 0.5))
    last = np.zeros(x.size)
    last[0] += x.max()
    last[np.argmax(x)] += x[0]
    return np.vstack([top, last])


def _row_max_of_product_jacobian(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    rows, columns = x.shape
    jac = np.zeros((rows + columns, rows, columns))
    for i, j in enumerate(np.argmax(x @ a, axis=1)):
        jac[i, i, :] = a[:, j]
    for j in range(columns):
        jac[rows + j, :, j] = 2 * x[:, j]
    return jac


def _reshape_matmul_concat_jacobian(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    matrix = x.reshape(2, 3)
    product = np.einsum("ik,lj->ijkl", np.eye(2), b)  # d(X B)[i, j] / dX[k, l] = delta_ik B[l, j]
    square = np.einsum("ik,jl->ijkl", np.eye(2), np.eye(3)) * 2 * matrix[:, :, None, None]
    return np.concatenate([product, square]).reshape(4, 3, 6)


def _stack_where_max_jacobian(x: np.ndarray) -> np.ndarray:
    jac = np.zeros((x.size, 2, x.size))
    jac[:, 0, :] = np.diag(np.where(x > 0, 1.0, 3 * x**2))
    jac[:, 1, :] = x.max() * np.eye(x.size)
    jac[:, 1, np.argmax(x)] += x
    return jac


# Each function with its derivatives: ``first`` (gradient, derivative or jacobian) and ``second``
# (hessian or second derivative) take f's arguments; ``push``, ``pull`` and ``hvp`` take the tangent
# after them. Where they are left out, push and pull contract ``first`` and hvp is ``second @ v``.
SUM_SIN = Analytic(
    sum_sin,
    first=_sum_sin_grad,
    second=lambda x: _diag_tensor(2 * np.cos(x) - x * np.sin(x)),
)
QUADRATIC = Analytic(quadratic, first=lambda x, a: (a + a.T) @ x / 2, second=lambda x, a: (a + a.T) / 2)
WEIGHTED_EXP = Analytic(
    weighted_exp,
    first=lambda x, w, scale: w * scale * np.exp(scale * x),
    hvp=lambda x, w, scale, v: w * scale**2 * np.exp(scale * x) * v,
)
ROSENBROCK = Analytic(rosenbrock, first=_rosenbrock_grad, second=_rosenbrock_hess)
SUM_TANH_SQUARED = Analytic(sum_tanh_squared, first=_tanh2_grad, second=_tanh2_hess)
CACHED_SUM = Analytic(
    cached_sum,
    first=lambda x, _buf: 2 * x * np.sin(x) + x**2 * np.cos(x),
    second=lambda x, _buf: _diag_tensor(2 * np.sin(x) + 4 * x * np.cos(x) - x**2 * np.sin(x)),
)
SQUARE_EXP = Analytic(square_exp, first=lambda x: (2 * x + x**2) * np.exp(x))
PYTREE_SUM = Analytic(pytree_sum, first=_pytree_sum_grad)
SIN_EXP = Analytic(
    sin_exp, first=lambda x: (np.cos(x) + np.sin(x)) * np.exp(x), second=lambda x: 2 * np.cos(x) * np.exp(x)
)
SCALAR_TO_VECTOR = Analytic(
    scalar_to_vector,
    first=lambda x, c: np.array([c * np.cos(c * x), 3 * x**2, -np.exp(-x)]),
    second=lambda x, c: np.array([-(c**2) * np.sin(c * x), 6 * x, np.exp(-x)]),
)
SCALAR_TO_MATRIX = Analytic(
    scalar_to_matrix,
    first=lambda x, m, n: np.cos(x) * m + 2 * x * n,
    second=lambda x, m, n: -np.sin(x) * m + 2 * n,
)
CACHED_SCALAR_TO_VECTOR = Analytic(
    cached_scalar_to_vector,
    first=lambda x, w, _buf: w * np.cos(w * x),
    second=lambda x, w, _buf: -(w**2) * np.sin(w * x),
)
CUBIC_POLYNOMIAL = Analytic(
    cubic_polynomial, first=lambda x: np.asarray(3 * x**2 - 2), second=lambda x: np.asarray(6 * x)
)
SIN_TIMES_X = Analytic(
    sin_times_x,
    first=lambda x: np.diag(_sum_sin_grad(x)),
    push=lambda x, v: _sum_sin_grad(x) * v,
    pull=lambda x, w: _sum_sin_grad(x) * w,
)
TANH_LINEAR = Analytic(
    tanh_linear,
    first=lambda x, a: (1 - np.tanh(a @ x) ** 2)[:, None] * a,
    pull=lambda x, a, w: a.T @ ((1 - np.tanh(a @ x) ** 2) * w),
)
EXP_LINEAR = Analytic(exp_linear, first=lambda x, b: np.exp(b @ x)[:, None] * b)
MATRIX_PRODUCT = Analytic(
    matrix_product,
    first=lambda x, b: np.einsum("ik,lj->ijkl", np.eye(2), b),  # d(x @ B)[i, j] / dx[k, l] = delta_ik B[l, j]
    pull=lambda x, b, w: w @ b.T,
)
CACHED_CUBE = Analytic(
    cached_cube,
    first=lambda x, _buf: np.diag(3 * x**2),
    push=lambda x, _buf, v: 3 * x**2 * v,
    pull=lambda x, _buf, w: 3 * x**2 * w,
)
SUM_SQUARES = Analytic(sum_squares, first=lambda x: 2 * x)
LINEAR_OF_SQUARES = Analytic(linear_of_squares, push=lambda x, a, v: a @ (2 * x * v))
SUM_EXP = Analytic(sum_exp, push=lambda x, v: np.asarray(np.exp(x) @ v))
TANH = Analytic(tanh, push=lambda x, v: (1 - np.tanh(x) ** 2) * v)
SCALED_SUM_SQUARES = Analytic(scaled_sum_squares, pull=lambda x, c, w: w * 2 * c * x)
CONCAT_WHERE_MAX = Analytic(concat_where_max, first=_concat_where_max_jacobian)
ROW_MAX_OF_PRODUCT = Analytic(row_max_of_product, first=_row_max_of_product_jacobian)
RESHAPE_MATMUL_CONCAT = Analytic(reshape_matmul_concat, first=_reshape_matmul_concat_jacobian)
STACK_WHERE_MAX = Analytic(stack_where_max, first=_stack_where_max_jacobian)


# --- the tables ------------------------------------------------------------------------------------
# One row per scenario, named operator/label/f64 (the label defaults to f's name). Values are drawn
# in row order (x, then the contexts, then the tangents): reordering rows moves the points.

FIRST_ORDER = RowGroup(
    dtypes=(np.float64, np.float32),
    rows=(
        Row("gradient", SUM_SIN, x=Uniform(5)),
        Row("gradient", QUADRATIC, "quadratic_constant", x=Uniform(5), contexts=(Constant(Uniform(5, 5)),)),
        Row("gradient", ROSENBROCK, x=Uniform(4)),
        Row("derivative", SIN_EXP, x=Uniform()),
        Row("derivative", SCALAR_TO_VECTOR, "scalar_to_vector_constant", x=SAME_X, contexts=(Constant(1.5),)),
        Row("jacobian", SIN_TIMES_X, x=Uniform(4)),
        Row("jacobian", TANH_LINEAR, "tanh_linear_wide", x=Uniform(5), contexts=(Constant(Uniform(3, 5)),)),
        Row(
            "pushforward",
            LINEAR_OF_SQUARES,
            "linear_of_squares_batched",
            x=Uniform(4),
            contexts=(Constant(Uniform(3, 4)),),
            tangents=(Uniform(4),) * 3,
        ),
        Row(
            "pullback",
            TANH_LINEAR,
            "tanh_linear_batched",
            x=Uniform(5),
            contexts=(Constant(Uniform(3, 5)),),
            tangents=(Uniform(3),) * 2,
        ),
    ),
)
"""Gradient, derivative, jacobian, pushforward and pullback, in float64 and float32."""

SECOND_ORDER = RowGroup(
    dtypes=(np.float64, np.float32),
    rows=(
        Row("hvp", SUM_SIN, x=Uniform(5), tangents=(Uniform(5),)),
        Row("hessian", ROSENBROCK, x=Uniform(4)),
        Row("hessian", SUM_SIN, x=Uniform(5)),
        Row("second_derivative", SIN_EXP, x=Uniform()),
    ),
)
"""hvp, hessian and second derivative, in float64 and float32."""

_WEIGHTS = (Constant(Uniform(5, low=0.5, high=1.5)), Constant(0.7))
_MATRICES = (Constant(Uniform(2, 2)), Constant(Uniform(2, 2)))
_SCALED_CACHE = (Constant(Uniform(3, low=0.5, high=2.0)), Cache(NaNs(3)))

FLOAT64_ONLY = RowGroup(
    rows=(
        Row("gradient", WEIGHTED_EXP, "weighted_exp_constants", x=Uniform(5), contexts=_WEIGHTS),
        Row("gradient", SUM_TANH_SQUARED, "matrix_tanh", x=Uniform(2, 3), tags=("matrix",)),
        Row("gradient", CACHED_SUM, x=Uniform(5), contexts=(Cache(NaNs(5)),)),
        Row("gradient", SQUARE_EXP, "square_exp_0d", x=Fixed(0.3), tags=("0d",)),
        Row("gradient", SUM_SIN, "sum_sin_1elem", x=Uniform(1), tags=("1elem",)),
        Row(
            "derivative",
            SCALAR_TO_MATRIX,
            "scalar_to_matrix_constants",
            x=Fixed(0.4),
            contexts=_MATRICES,
            tags=("matrix",),
        ),
        Row("derivative", CACHED_SCALAR_TO_VECTOR, x=Fixed(0.4), contexts=_SCALED_CACHE),
        Row("derivative", CUBIC_POLYNOMIAL, "cubic_python_float", x=0.7, tags=("python-float",)),
        Row("jacobian", EXP_LINEAR, "exp_linear_tall", x=Uniform(2), contexts=(Constant(Uniform(6, 2)),)),
        Row(
            "jacobian",
            MATRIX_PRODUCT,
            x=Uniform(2, 3),
            contexts=(Constant(Uniform(3, 2)),),
            tags=("matrix",),
        ),
        Row("jacobian", CACHED_CUBE, x=Uniform(4), contexts=(Cache(NaNs(4)),)),
        Row("jacobian", SUM_SQUARES, "scalar_output", x=Uniform(3), tags=("scalar-output",)),
        Row("pushforward", SIN_TIMES_X, x=Uniform(4), tangents=(Uniform(4),)),
        Row(
            "pushforward",
            SUM_EXP,
            "scalar_output_batched",
            x=Uniform(4),
            tangents=(Uniform(4),) * 2,
            tags=("scalar-output",),
        ),
        Row(
            "pushforward",
            TANH,
            "matrix_tanh",
            x=Uniform(2, 3),
            tangents=(Uniform(2, 3),),
            tags=("matrix",),
        ),
        Row("pushforward", CACHED_CUBE, x=Uniform(4), contexts=(Cache(NaNs(4)),), tangents=(Uniform(4),)),
        Row("pullback", SIN_TIMES_X, x=Uniform(4), tangents=(Uniform(4),)),
        Row(
            "pullback",
            SCALED_SUM_SQUARES,
            "scalar_output_constant",
            x=Uniform(4),
            contexts=(Constant(1.3),),
            tangents=(Fixed(2.0),),
            tags=("scalar-output",),
        ),
        Row(
            "pullback",
            MATRIX_PRODUCT,
            x=Uniform(2, 3),
            contexts=(Constant(Uniform(3, 2)),),
            tangents=(Uniform(2, 2),),
            tags=("matrix",),
        ),
        Row("pullback", CACHED_CUBE, x=Uniform(4), contexts=(Cache(NaNs(4)),), tangents=(Uniform(4),)),
        Row(
            "hvp",
            QUADRATIC,
            "quadratic_constant_batched",
            x=Uniform(5),
            contexts=(Constant(Uniform(5, 5)),),
            tangents=(Uniform(5),) * 2,
        ),
        Row("hvp", CACHED_SUM, x=Uniform(5), contexts=(Cache(NaNs(5)),), tangents=(Uniform(5),)),
        Row("hvp", WEIGHTED_EXP, "weighted_exp_constants", x=Uniform(5), contexts=_WEIGHTS, tangents=(Uniform(5),)),
        Row("hessian", QUADRATIC, "quadratic_constant", x=Uniform(4), contexts=(Constant(Uniform(4, 4)),)),
        Row("hessian", SUM_TANH_SQUARED, "matrix_tanh", x=Uniform(2, 3), tags=("matrix",)),
        Row("hessian", CACHED_SUM, x=Uniform(4), contexts=(Cache(NaNs(4)),)),
        Row(
            "second_derivative",
            SCALAR_TO_VECTOR,
            "scalar_to_vector_constant",
            x=Fixed(-0.6),
            contexts=(Constant(1.5),),
        ),
        Row(
            "second_derivative",
            SCALAR_TO_MATRIX,
            "scalar_to_matrix_constants",
            x=Fixed(-0.6),
            contexts=_MATRICES,
            tags=("matrix",),
        ),
        Row("second_derivative", CACHED_SCALAR_TO_VECTOR, x=Fixed(-0.6), contexts=_SCALED_CACHE),
        Row("second_derivative", CUBIC_POLYNOMIAL, "cubic_python_float", x=-0.3, tags=("python-float",)),
    ),
)
"""Caches, matrices, 0-d and 1-element points, Python floats: float64 only."""

PYTREE = RowGroup(
    dtypes=(np.float64, np.float32),
    tags=("pytree",),
    rows=(Row("gradient", PYTREE_SUM, "pytree_dict", x={"a": Uniform(3), "b": Uniform(2, 2)}),),
)
"""Gradients with respect to a dict of arrays."""


def _away_from_kinks(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` values with magnitudes in [0.2, 1] at least 0.8 / n apart, random signs and at
    least one positive: ``where(x > 0, ...)`` and ``max`` are smooth around them."""
    magnitudes = 0.2 + 0.8 * (rng.permutation(n) + rng.uniform(0.1, 0.9, n)) / n
    signs = np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0)
    signs[rng.integers(n)] = 1.0
    return signs * magnitudes


def _array_api_points(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The points of the array-api rows, away from the kinks of ``where`` and ``max``."""
    x_vec = _away_from_kinks(rng, 5)
    while True:  # the row maxima of x A must be clear winners
        x_mat, a = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (4, 2))
        if np.min(np.abs(np.diff(x_mat @ a, axis=1))) > 0.2:
            break
    x_six, b = rng.uniform(-1, 1, 6), rng.uniform(-1, 1, (3, 3))
    return {"x_vec": x_vec, "x_mat": x_mat, "a": a, "x_six": x_six, "b": b, "x_four": _away_from_kinks(rng, 4)}


def _jacobian_pushforward_pullback(
    function: Analytic, x: str, x_shape: tuple[int, ...], y_shape: tuple[int, ...], shape_tag: str, *contexts: str
) -> tuple[Row, ...]:
    """The three first-order rows of one array-api function, each pushforward and pullback with two tangents."""
    given = tuple(Constant(Point(c)) for c in contexts)
    tags = (shape_tag,)
    return (
        Row("jacobian", function, x=Point(x), contexts=given, tags=tags),
        Row("pushforward", function, x=Point(x), contexts=given, tangents=(Uniform(*x_shape),) * 2, tags=tags),
        Row("pullback", function, x=Point(x), contexts=given, tangents=(Uniform(*y_shape),) * 2, tags=tags),
    )


ARRAY_API = RowGroup(
    tags=("array-api",),
    points=_array_api_points,
    rows=(
        *_jacobian_pushforward_pullback(CONCAT_WHERE_MAX, "x_vec", (5,), (6,), "vector"),
        *_jacobian_pushforward_pullback(ROW_MAX_OF_PRODUCT, "x_mat", (3, 4), (7,), "matrix", "a"),
        *_jacobian_pushforward_pullback(RESHAPE_MATMUL_CONCAT, "x_six", (6,), (4, 3), "matrix", "b"),
        *_jacobian_pushforward_pullback(STACK_WHERE_MAX, "x_four", (4,), (4, 2), "matrix"),
        # float32: the same points rounded to float32, references from the rounded values
        Row("jacobian", CONCAT_WHERE_MAX, x=Point("x_vec"), dtype=np.float32, tags=("vector",)),
        Row("jacobian", STACK_WHERE_MAX, x=Point("x_four"), dtype=np.float32, tags=("matrix",)),
    ),
)
"""``concat``, ``stack``, ``reshape``, ``matmul``, ``where`` and ``max`` in vector->vector,
matrix->vector and vector->matrix functions: jacobian, pushforward and pullback."""


ScenarioGroup = Callable[[np.random.Generator], list[Scenario]]


def _sparse_group(rng: np.random.Generator) -> list[Scenario]:
    from di.testing.sparse_scenarios import sparse_scenario_arguments

    # Tagged "sparse": the runners run them on di.AutoSparse(backend).
    return [Scenario(**arguments) for arguments in sparse_scenario_arguments()]


def _aux_group(rng: np.random.Generator) -> list[Scenario]:
    from di.testing.aux_scenarios import aux_scenario_arguments

    # has_aux=True: the runners pass it and compare aux.
    return [Scenario(**arguments) for arguments in aux_scenario_arguments(rng)]


def _complex_group(rng: np.random.Generator) -> list[Scenario]:
    from di.testing.complex_scenarios import complex_scenario_arguments

    # complex x: the convention of docs/complex.md, on every engine that differentiates complex values
    return [Scenario(**arguments) for arguments in complex_scenario_arguments(rng)]


#: The groups :func:`default_scenarios` builds, by name. Each builder gets its own random
#: generator (from the seed and the group's name), so adding a group moves no other group's
#: points. A module adding scenarios adds its builder here.
SCENARIO_GROUPS: dict[str, ScenarioGroup] = {
    "first-order": FIRST_ORDER,
    "second-order": SECOND_ORDER,
    "float64-only": FLOAT64_ONLY,
    "array-api": ARRAY_API,
    "sparse": _sparse_group,
    "pytree": PYTREE,
    "aux": _aux_group,
    "complex": _complex_group,
}


def _holds(family: str, x: Any) -> bool:
    """Whether arrays of ``family`` hold ``x``'s dtype (every leaf's)."""
    record = get_family(family)
    return all(record.takes_dtype(leaf.dtype) for leaf in tree_flatten(x)[0] if hasattr(leaf, "dtype"))


def default_scenarios(
    *,
    operators: Iterable[str] | None = None,
    include_pytrees: bool = True,
    families: Sequence[str] = ("numpy",),
    seed: int = 0,
    groups: Iterable[str] | None = None,
) -> list[Scenario]:
    """The built-in scenarios: every operator, float32 and float64, contexts, shapes.

    They cover every operator of :data:`OPERATORS`; ``Constant`` arrays and
    floats; ``Cache`` buffers (filled with NaN: ``f`` must overwrite them) written
    with ``buf[...] = ...``; scalar, vector and matrix outputs; matrix, 0-d,
    1-element and Python-float inputs; ``concat``, ``stack``, ``reshape``,
    ``matmul``, ``where`` and ``max`` in vector->vector, matrix->vector and
    vector->matrix functions (tagged ``"array-api"``); and gradients with respect
    to a dict of arrays (tagged ``"pytree"``). Every function is written with
    ``xp = di.array_namespace(x)`` and every reference is analytic. Inputs are
    small, so the whole set runs in seconds per backend.

    Args:
        operators: keep only these operators (default: all).
        include_pytrees: include the ``"pytree"`` group.
        families: array families of ``x``: names of registered families (see
            :func:`di.families.families`, ``di.register_family``); each scenario
            is repeated per family (converting imports the family's library).
        seed: seed of the random points.
        groups: build only these groups of :data:`SCENARIO_GROUPS` (default: all).

    Returns:
        A list of :class:`Scenario`, ordered by operator.

    Raises:
        ValueError: an unknown operator, group or family.

    Examples:
        >>> from di.testing import default_scenarios
        >>> scenarios = default_scenarios()
        >>> len(scenarios) >= 30, sorted({s.operator for s in scenarios})[:3]
        (True, ['derivative', 'gradient', 'hessian'])
    """
    names = list(SCENARIO_GROUPS) if groups is None else list(groups)
    unknown_groups = set(names) - set(SCENARIO_GROUPS)
    if unknown_groups:
        raise ValueError(f"unknown scenario groups {sorted(unknown_groups)}; known: {', '.join(SCENARIO_GROUPS)}")
    scenarios: list[Scenario] = []
    for name in names:
        if name != "pytree" or include_pytrees:
            scenarios += SCENARIO_GROUPS[name](np.random.default_rng([seed, zlib.crc32(name.encode())]))
    if operators is not None:
        wanted = set(operators)
        unknown = wanted - set(OPERATORS)
        if unknown:
            raise ValueError(f"unknown operators {sorted(unknown)}; known: {', '.join(OPERATORS)}")
        scenarios = [s for s in scenarios if s.operator in wanted]
    order = list(OPERATORS)
    scenarios.sort(key=lambda s: order.index(s.operator))
    for family in families:
        from_numpy_in(family)  # an unknown family fails before any conversion
    own = family_of(np.empty(0))  # the family the scenarios are written in
    result: list[Scenario] = []
    for family in families:
        for scenario in scenarios:
            if family != own and isinstance(scenario.x, float):
                continue  # a Python float x has no family to convert to
            if family != own and not _holds(family, scenario.x):
                continue  # a dtype the family has not (MLX and complex128)
            result.append(scenario.with_family(family))
    return result
