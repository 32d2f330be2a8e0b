"""The built-in scenarios: functions written once with the array API, points,
contexts and analytic answers for every operator.

:func:`default_scenarios` returns the built-in set (the :class:`Scenario` record
itself is in :mod:`di.testing.scenario`). Every function in it is written once
with ``xp = di.array_namespace(x)``, so the same code runs, and is differentiated
correctly, on the arrays of every registered family and under every engine's
tracing. The scenarios are NumPy data; :meth:`Scenario.with_family` (what
``default_scenarios(families=...)`` calls) converts them to any registered
family. No engine is imported here.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

import di
from di.contexts import Cache, Constant, Context
from di.families import family_of, get_family
from di.testing.arrays import copy_tree, from_numpy_in, pytree_leaves, to_numpy, tree_map
from di.testing.scenario import AUX_OPERATORS, OPERATORS, OperatorSpec, PrepArgs, Scenario, replace_scenario

__all__ = [
    "AUX_OPERATORS",
    "OPERATORS",
    "SCENARIO_GROUPS",
    "OperatorSpec",
    "PrepArgs",
    "Scenario",
    "ScenarioGroup",
    "copy_tree",
    "default_scenarios",
    "pytree_leaves",
    "replace_scenario",
    "to_numpy",
    "tree_map",
]


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


# --- analytic references (NumPy, float64) --------------------------------------------------


def _diag_tensor(values: np.ndarray) -> np.ndarray:
    """The ``x.shape + x.shape`` tensor with ``values`` on its diagonal."""
    n = values.size
    return (np.eye(n) * values.reshape(-1)).reshape(values.shape + values.shape)


def _sum_sin_grad(x: np.ndarray) -> np.ndarray:
    return np.cos(x) * x + np.sin(x)


def _sum_sin_hess(x: np.ndarray) -> np.ndarray:
    return _diag_tensor(2 * np.cos(x) - x * np.sin(x))


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


def _cached_sum_grad(x: np.ndarray) -> np.ndarray:
    return 2 * x * np.sin(x) + x**2 * np.cos(x)


def _cached_sum_hess(x: np.ndarray) -> np.ndarray:
    return _diag_tensor(2 * np.sin(x) + 4 * x * np.cos(x) - x**2 * np.sin(x))


def _tanh2_grad(x: np.ndarray) -> np.ndarray:
    t = np.tanh(x)
    return 2 * t * (1 - t**2)


def _tanh2_hess(x: np.ndarray) -> np.ndarray:
    t = np.tanh(x)
    return _diag_tensor(2 * (1 - t**2) * (1 - 3 * t**2))


def _rounded(values: np.ndarray, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """``values`` in ``dtype`` (what the scenario holds) and that back in float64
    (where the references are computed, so they are exact for the stored point)."""
    stored = np.asarray(values, dtype=dtype)
    return stored, stored.astype(np.float64)


_SUFFIX = {np.float64: "f64", np.float32: "f32"}


def _first_order_scenarios(rng: np.random.Generator, dtype: Any) -> list[Scenario]:
    """Gradient, derivative, jacobian, pushforward and pullback scenarios in ``dtype``."""
    sfx = _SUFFIX[dtype]
    tag = {"float64" if dtype is np.float64 else "float32"}
    out: list[Scenario] = []

    def vec(n: int, low: float = -1.0, high: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        return _rounded(rng.uniform(low, high, n), dtype)

    def mat(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        return _rounded(rng.uniform(-1, 1, shape), dtype)

    # gradient
    x, x64 = vec(5)
    out.append(Scenario("gradient", sum_sin, x, res1=_sum_sin_grad(x64), name=f"gradient/sum_sin/{sfx}", tags=tag))
    x, x64 = vec(5)
    a, a64 = mat((5, 5))
    out.append(
        Scenario(
            "gradient",
            quadratic,
            x,
            contexts=(Constant(a),),
            res1=(a64 + a64.T) @ x64 / 2,
            name=f"gradient/quadratic_constant/{sfx}",
            tags=tag | {"constant"},
        )
    )
    x, x64 = vec(4)
    out.append(
        Scenario("gradient", rosenbrock, x, res1=_rosenbrock_grad(x64), name=f"gradient/rosenbrock/{sfx}", tags=tag)
    )
    # derivative (scalar x)
    x, x64 = _rounded(np.asarray(rng.uniform(-1, 1)), dtype)
    e = np.exp(x64)
    out.append(
        Scenario(
            "derivative", sin_exp, x, res1=(np.cos(x64) + np.sin(x64)) * e, name=f"derivative/sin_exp/{sfx}", tags=tag
        )
    )
    c = 1.5
    out.append(
        Scenario(
            "derivative",
            scalar_to_vector,
            x,
            contexts=(Constant(c),),
            res1=np.array([c * np.cos(c * x64), 3 * x64**2, -np.exp(-x64)]),
            name=f"derivative/scalar_to_vector_constant/{sfx}",
            tags=tag | {"constant"},
        )
    )
    # jacobian
    x, x64 = vec(4)
    out.append(
        Scenario(
            "jacobian", sin_times_x, x, res1=np.diag(_sum_sin_grad(x64)), name=f"jacobian/sin_times_x/{sfx}", tags=tag
        )
    )
    x, x64 = vec(5)
    a, a64 = mat((3, 5))
    t = np.tanh(a64 @ x64)
    out.append(
        Scenario(
            "jacobian",
            tanh_linear,
            x,
            contexts=(Constant(a),),
            res1=(1 - t**2)[:, None] * a64,
            name=f"jacobian/tanh_linear_wide/{sfx}",
            tags=tag | {"constant"},
        )
    )
    # pushforward
    x, x64 = vec(4)
    a, a64 = mat((3, 4))
    tx = [vec(4) for _ in range(3)]
    out.append(
        Scenario(
            "pushforward",
            linear_of_squares,
            x,
            contexts=(Constant(a),),
            tangents=tuple(t for t, _ in tx),
            res1=tuple(a64 @ (2 * x64 * t64) for _, t64 in tx),
            name=f"pushforward/linear_of_squares_batched/{sfx}",
            tags=tag | {"constant"},
        )
    )
    # pullback
    x, x64 = vec(5)
    a, a64 = mat((3, 5))
    t = np.tanh(a64 @ x64)
    ty = [vec(3) for _ in range(2)]
    out.append(
        Scenario(
            "pullback",
            tanh_linear,
            x,
            contexts=(Constant(a),),
            tangents=tuple(w for w, _ in ty),
            res1=tuple(a64.T @ ((1 - t**2) * w64) for _, w64 in ty),
            name=f"pullback/tanh_linear_batched/{sfx}",
            tags=tag | {"constant"},
        )
    )
    return out


def _second_order_scenarios(rng: np.random.Generator, dtype: Any) -> list[Scenario]:
    """hvp, hessian and second-derivative scenarios in ``dtype``."""
    sfx = _SUFFIX[dtype]
    tag = {"float64" if dtype is np.float64 else "float32"}
    out: list[Scenario] = []

    def vec(n: int) -> tuple[np.ndarray, np.ndarray]:
        return _rounded(rng.uniform(-1, 1, n), dtype)

    x, x64 = vec(5)
    v, v64 = vec(5)
    out.append(
        Scenario(
            "hvp",
            sum_sin,
            x,
            tangents=(v,),
            res1=_sum_sin_grad(x64),
            res2=(_sum_sin_hess(x64) @ v64,),
            name=f"hvp/sum_sin/{sfx}",
            tags=tag,
        )
    )
    x, x64 = vec(4)
    out.append(
        Scenario(
            "hessian",
            rosenbrock,
            x,
            res1=_rosenbrock_grad(x64),
            res2=_rosenbrock_hess(x64),
            name=f"hessian/rosenbrock/{sfx}",
            tags=tag,
        )
    )
    x, x64 = vec(5)
    out.append(
        Scenario(
            "hessian",
            sum_sin,
            x,
            res1=_sum_sin_grad(x64),
            res2=_sum_sin_hess(x64),
            name=f"hessian/sum_sin/{sfx}",
            tags=tag,
        )
    )
    x, x64 = _rounded(np.asarray(rng.uniform(-1, 1)), dtype)
    e = np.exp(x64)
    out.append(
        Scenario(
            "second_derivative",
            sin_exp,
            x,
            res1=(np.cos(x64) + np.sin(x64)) * e,
            res2=2 * np.cos(x64) * e,
            name=f"second_derivative/sin_exp/{sfx}",
            tags=tag,
        )
    )
    return out


def _float64_only_scenarios(rng: np.random.Generator) -> list[Scenario]:
    """Scenarios with caches, matrices, 0-d and 1-element points, Python floats: float64."""
    tag = {"float64"}
    out: list[Scenario] = []

    def vec(n: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
        return rng.uniform(low, high, n)

    def mat(shape: tuple[int, ...]) -> np.ndarray:
        return rng.uniform(-1, 1, shape)

    # --- gradient
    x, w, scale = vec(5), vec(5, 0.5, 1.5), 0.7
    out.append(
        Scenario(
            "gradient",
            weighted_exp,
            x,
            contexts=(Constant(w), Constant(scale)),
            res1=w * scale * np.exp(scale * x),
            name="gradient/weighted_exp_constants/f64",
            tags=tag | {"constant"},
        )
    )
    x = mat((2, 3))
    out.append(
        Scenario(
            "gradient", sum_tanh_squared, x, res1=_tanh2_grad(x), name="gradient/matrix_tanh/f64", tags=tag | {"matrix"}
        )
    )
    x = vec(5)
    out.append(
        Scenario(
            "gradient",
            cached_sum,
            x,
            contexts=(Cache(np.full(5, np.nan)),),
            res1=_cached_sum_grad(x),
            name="gradient/cached_sum/f64",
            tags=tag | {"cache"},
        )
    )
    x = np.asarray(0.3)
    out.append(
        Scenario(
            "gradient",
            square_exp,
            x,
            res1=(2 * x + x**2) * np.exp(x),
            name="gradient/square_exp_0d/f64",
            tags=tag | {"0d"},
        )
    )
    x = vec(1)
    out.append(
        Scenario("gradient", sum_sin, x, res1=_sum_sin_grad(x), name="gradient/sum_sin_1elem/f64", tags=tag | {"1elem"})
    )
    # --- derivative
    x = np.asarray(0.4)
    m, n = mat((2, 2)), mat((2, 2))
    out.append(
        Scenario(
            "derivative",
            scalar_to_matrix,
            x,
            contexts=(Constant(m), Constant(n)),
            res1=np.cos(x) * m + 2 * x * n,
            name="derivative/scalar_to_matrix_constants/f64",
            tags=tag | {"constant", "matrix"},
        )
    )
    w = vec(3, 0.5, 2.0)
    out.append(
        Scenario(
            "derivative",
            cached_scalar_to_vector,
            x,
            contexts=(Constant(w), Cache(np.full(3, np.nan))),
            res1=w * np.cos(w * x),
            name="derivative/cached_scalar_to_vector/f64",
            tags=tag | {"constant", "cache"},
        )
    )
    out.append(
        Scenario(
            "derivative",
            cubic_polynomial,
            0.7,
            res1=np.asarray(3 * 0.7**2 - 2),
            name="derivative/cubic_python_float/f64",
            tags=tag | {"python-float"},
        )
    )
    # --- jacobian
    x = vec(2)
    b = mat((6, 2))
    out.append(
        Scenario(
            "jacobian",
            exp_linear,
            x,
            contexts=(Constant(b),),
            res1=np.exp(b @ x)[:, None] * b,
            name="jacobian/exp_linear_tall/f64",
            tags=tag | {"constant"},
        )
    )
    x, b = mat((2, 3)), mat((3, 2))
    jac = np.einsum("ik,lj->ijkl", np.eye(2), b)  # d(x @ B)[i, j] / dx[k, l] = delta_ik B[l, j]
    out.append(
        Scenario(
            "jacobian",
            matrix_product,
            x,
            contexts=(Constant(b),),
            res1=jac,
            name="jacobian/matrix_product/f64",
            tags=tag | {"constant", "matrix"},
        )
    )
    x = vec(4)
    out.append(
        Scenario(
            "jacobian",
            cached_cube,
            x,
            contexts=(Cache(np.full(4, np.nan)),),
            res1=np.diag(3 * x**2),
            name="jacobian/cached_cube/f64",
            tags=tag | {"cache"},
        )
    )
    x = vec(3)
    out.append(
        Scenario(
            "jacobian", sum_squares, x, res1=2 * x, name="jacobian/scalar_output/f64", tags=tag | {"scalar-output"}
        )
    )
    # --- pushforward
    x, v = vec(4), vec(4)
    out.append(
        Scenario(
            "pushforward",
            sin_times_x,
            x,
            tangents=(v,),
            res1=(_sum_sin_grad(x) * v,),
            name="pushforward/sin_times_x/f64",
            tags=tag,
        )
    )
    x, v1, v2 = vec(4), vec(4), vec(4)
    out.append(
        Scenario(
            "pushforward",
            sum_exp,
            x,
            tangents=(v1, v2),
            res1=(np.asarray(np.exp(x) @ v1), np.asarray(np.exp(x) @ v2)),
            name="pushforward/scalar_output_batched/f64",
            tags=tag | {"scalar-output"},
        )
    )
    x, v = mat((2, 3)), mat((2, 3))
    out.append(
        Scenario(
            "pushforward",
            tanh,
            x,
            tangents=(v,),
            res1=((1 - np.tanh(x) ** 2) * v,),
            name="pushforward/matrix_tanh/f64",
            tags=tag | {"matrix"},
        )
    )
    x, v = vec(4), vec(4)
    out.append(
        Scenario(
            "pushforward",
            cached_cube,
            x,
            contexts=(Cache(np.full(4, np.nan)),),
            tangents=(v,),
            res1=(3 * x**2 * v,),
            name="pushforward/cached_cube/f64",
            tags=tag | {"cache"},
        )
    )
    # --- pullback
    x, w = vec(4), vec(4)
    out.append(
        Scenario(
            "pullback",
            sin_times_x,
            x,
            tangents=(w,),
            res1=(_sum_sin_grad(x) * w,),
            name="pullback/sin_times_x/f64",
            tags=tag,
        )
    )
    x, c = vec(4), 1.3
    out.append(
        Scenario(
            "pullback",
            scaled_sum_squares,
            x,
            contexts=(Constant(c),),
            tangents=(np.asarray(2.0),),
            res1=(2.0 * 2 * c * x,),
            name="pullback/scalar_output_constant/f64",
            tags=tag | {"constant", "scalar-output"},
        )
    )
    x, b, w = mat((2, 3)), mat((3, 2)), mat((2, 2))
    out.append(
        Scenario(
            "pullback",
            matrix_product,
            x,
            contexts=(Constant(b),),
            tangents=(w,),
            res1=(w @ b.T,),
            name="pullback/matrix_product/f64",
            tags=tag | {"constant", "matrix"},
        )
    )
    x, w = vec(4), vec(4)
    out.append(
        Scenario(
            "pullback",
            cached_cube,
            x,
            contexts=(Cache(np.full(4, np.nan)),),
            tangents=(w,),
            res1=(3 * x**2 * w,),
            name="pullback/cached_cube/f64",
            tags=tag | {"cache"},
        )
    )
    # --- hvp
    x, a = vec(5), mat((5, 5))
    sym = (a + a.T) / 2
    v1, v2 = vec(5), vec(5)
    out.append(
        Scenario(
            "hvp",
            quadratic,
            x,
            contexts=(Constant(a),),
            tangents=(v1, v2),
            res1=sym @ x,
            res2=(sym @ v1, sym @ v2),
            name="hvp/quadratic_constant_batched/f64",
            tags=tag | {"constant"},
        )
    )
    x, v = vec(5), vec(5)
    out.append(
        Scenario(
            "hvp",
            cached_sum,
            x,
            contexts=(Cache(np.full(5, np.nan)),),
            tangents=(v,),
            res1=_cached_sum_grad(x),
            res2=(_cached_sum_hess(x) @ v,),
            name="hvp/cached_sum/f64",
            tags=tag | {"cache"},
        )
    )
    x, w, scale, v = vec(5), vec(5, 0.5, 1.5), 0.7, vec(5)
    out.append(
        Scenario(
            "hvp",
            weighted_exp,
            x,
            contexts=(Constant(w), Constant(scale)),
            tangents=(v,),
            res1=w * scale * np.exp(scale * x),
            res2=(w * scale**2 * np.exp(scale * x) * v,),
            name="hvp/weighted_exp_constants/f64",
            tags=tag | {"constant"},
        )
    )
    # --- hessian
    x, a = vec(4), mat((4, 4))
    out.append(
        Scenario(
            "hessian",
            quadratic,
            x,
            contexts=(Constant(a),),
            res1=(a + a.T) @ x / 2,
            res2=(a + a.T) / 2,
            name="hessian/quadratic_constant/f64",
            tags=tag | {"constant"},
        )
    )
    x = mat((2, 3))
    out.append(
        Scenario(
            "hessian",
            sum_tanh_squared,
            x,
            res1=_tanh2_grad(x),
            res2=_tanh2_hess(x),
            name="hessian/matrix_tanh/f64",
            tags=tag | {"matrix"},
        )
    )
    x = vec(4)
    out.append(
        Scenario(
            "hessian",
            cached_sum,
            x,
            contexts=(Cache(np.full(4, np.nan)),),
            res1=_cached_sum_grad(x),
            res2=_cached_sum_hess(x),
            name="hessian/cached_sum/f64",
            tags=tag | {"cache"},
        )
    )
    # --- second derivative
    x, c = np.asarray(-0.6), 1.5
    out.append(
        Scenario(
            "second_derivative",
            scalar_to_vector,
            x,
            contexts=(Constant(c),),
            res1=np.array([c * np.cos(c * x), 3 * x**2, -np.exp(-x)]),
            res2=np.array([-(c**2) * np.sin(c * x), 6 * x, np.exp(-x)]),
            name="second_derivative/scalar_to_vector_constant/f64",
            tags=tag | {"constant"},
        )
    )
    m, n = mat((2, 2)), mat((2, 2))
    out.append(
        Scenario(
            "second_derivative",
            scalar_to_matrix,
            x,
            contexts=(Constant(m), Constant(n)),
            res1=np.cos(x) * m + 2 * x * n,
            res2=-np.sin(x) * m + 2 * n,
            name="second_derivative/scalar_to_matrix_constants/f64",
            tags=tag | {"constant", "matrix"},
        )
    )
    w = vec(3, 0.5, 2.0)
    out.append(
        Scenario(
            "second_derivative",
            cached_scalar_to_vector,
            x,
            contexts=(Constant(w), Cache(np.full(3, np.nan))),
            res1=w * np.cos(w * x),
            res2=-(w**2) * np.sin(w * x),
            name="second_derivative/cached_scalar_to_vector/f64",
            tags=tag | {"constant", "cache"},
        )
    )
    out.append(
        Scenario(
            "second_derivative",
            cubic_polynomial,
            -0.3,
            res1=np.asarray(3 * 0.09 - 2),
            res2=np.asarray(-1.8),
            name="second_derivative/cubic_python_float/f64",
            tags=tag | {"python-float"},
        )
    )
    return out


def _pytree_scenarios(rng: np.random.Generator) -> list[Scenario]:
    """Gradients with respect to a dict of arrays (tagged ``"pytree"``)."""
    out: list[Scenario] = []
    for dtype in (np.float64, np.float32):
        a, a64 = _rounded(rng.uniform(-1, 1, 3), dtype)
        b, b64 = _rounded(rng.uniform(-1, 1, (2, 2)), dtype)
        ga = 2 * a64
        ga[0] += np.sin(b64).sum()
        out.append(
            Scenario(
                "gradient",
                pytree_sum,
                {"a": a, "b": b},
                res1={"a": ga, "b": a64[0] * np.cos(b64)},
                name=f"gradient/pytree_dict/{_SUFFIX[dtype]}",
                tags={"pytree", "float64" if dtype is np.float64 else "float32"},
            )
        )
    return out


def _away_from_kinks(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` values with magnitudes in [0.2, 1] at least 0.8 / n apart, random signs and at
    least one positive: ``where(x > 0, ...)`` and ``max`` are smooth around them."""
    magnitudes = 0.2 + 0.8 * (rng.permutation(n) + rng.uniform(0.1, 0.9, n)) / n
    signs = np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0)
    signs[rng.integers(n)] = 1.0
    return signs * magnitudes


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


def _push(jacobian: np.ndarray, tangent: np.ndarray) -> np.ndarray:
    return np.tensordot(jacobian, tangent, axes=tangent.ndim)


def _pull(jacobian: np.ndarray, cotangent: np.ndarray) -> np.ndarray:
    return np.tensordot(cotangent, jacobian, axes=cotangent.ndim)


def _array_api_scenarios(rng: np.random.Generator) -> list[Scenario]:
    """``concat``, ``stack``, ``reshape``, ``matmul``, ``where`` and ``max`` in vector->vector,
    matrix->vector and vector->matrix functions: jacobian, pushforward and pullback (tagged
    ``"array-api"``), at points away from the kinks of ``where`` and ``max``."""
    out: list[Scenario] = []
    x_vec = _away_from_kinks(rng, 5)
    while True:  # the row maxima of x A must be clear winners
        x_mat, a = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (4, 2))
        if np.min(np.abs(np.diff(x_mat @ a, axis=1))) > 0.2:
            break
    x_six, b = rng.uniform(-1, 1, 6), rng.uniform(-1, 1, (3, 3))
    x_four = _away_from_kinks(rng, 4)
    cases: list[tuple[Callable[..., Any], np.ndarray, tuple[Context, ...], np.ndarray, str]] = [
        (concat_where_max, x_vec, (), _concat_where_max_jacobian(x_vec), "vector"),
        (row_max_of_product, x_mat, (Constant(a),), _row_max_of_product_jacobian(x_mat, a), "matrix"),
        (reshape_matmul_concat, x_six, (Constant(b),), _reshape_matmul_concat_jacobian(x_six, b), "matrix"),
        (stack_where_max, x_four, (), _stack_where_max_jacobian(x_four), "matrix"),
    ]
    for f, x, contexts, jac, shape_tag in cases:
        name, tags = f.__name__, {"float64", "array-api", shape_tag} | ({"constant"} if contexts else set())
        y_shape = jac.shape[: jac.ndim - x.ndim]
        out.append(Scenario("jacobian", f, x, contexts=contexts, res1=jac, name=f"jacobian/{name}/f64", tags=tags))
        tx = rng.uniform(-1, 1, (2, *x.shape))
        out.append(
            Scenario(
                "pushforward",
                f,
                x,
                contexts=contexts,
                tangents=tuple(tx),
                res1=tuple(_push(jac, t) for t in tx),
                name=f"pushforward/{name}/f64",
                tags=tags,
            )
        )
        ty = rng.uniform(-1, 1, (2, *y_shape))
        out.append(
            Scenario(
                "pullback",
                f,
                x,
                contexts=contexts,
                tangents=tuple(ty),
                res1=tuple(_pull(jac, t) for t in ty),
                name=f"pullback/{name}/f64",
                tags=tags,
            )
        )
    # float32: the same functions at points rounded to float32, references from the rounded values
    x32, x64 = _rounded(x_vec, np.float32)
    out.append(
        Scenario(
            "jacobian",
            concat_where_max,
            x32,
            res1=_concat_where_max_jacobian(x64),
            name="jacobian/concat_where_max/f32",
            tags={"float32", "array-api", "vector"},
        )
    )
    x32, x64 = _rounded(x_four, np.float32)
    out.append(
        Scenario(
            "jacobian",
            stack_where_max,
            x32,
            res1=_stack_where_max_jacobian(x64),
            name="jacobian/stack_where_max/f32",
            tags={"float32", "array-api", "matrix"},
        )
    )
    return out


ScenarioGroup = Callable[[np.random.Generator], list[Scenario]]


def _sparse_group(rng: np.random.Generator) -> list[Scenario]:
    from di.testing.sparse_scenarios import sparse_scenario_arguments

    # Tagged "sparse": the runners run them on di.AutoSparse(backend).
    return [Scenario(**arguments) for arguments in sparse_scenario_arguments()]


def _aux_group(rng: np.random.Generator) -> list[Scenario]:
    from di.testing.aux_scenarios import aux_scenario_arguments

    # has_aux=True: the runners pass it and compare aux.
    return [Scenario(**arguments) for arguments in aux_scenario_arguments(rng)]


#: The groups :func:`default_scenarios` builds, by name. Each builder gets its own random
#: generator (from the seed and the group's name), so adding a group moves no other group's
#: points. A module adding scenarios adds its builder here.
SCENARIO_GROUPS: dict[str, ScenarioGroup] = {
    "first-order": lambda rng: _first_order_scenarios(rng, np.float64) + _first_order_scenarios(rng, np.float32),
    "second-order": lambda rng: _second_order_scenarios(rng, np.float64) + _second_order_scenarios(rng, np.float32),
    "float64-only": _float64_only_scenarios,
    "array-api": _array_api_scenarios,
    "sparse": _sparse_group,
    "pytree": _pytree_scenarios,
    "aux": _aux_group,
}


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
            result.append(scenario.with_family(family))
    return result
