"""Test functions with analytic gradients, written once with ``di.array_namespace``.

Every ``f`` obtains its namespace with ``xp = di.array_namespace(x)``, as a user
would (from ``x``, the array ``f`` is differentiated with respect to), so the same code
runs on numpy arrays, torch tensors, JAX arrays and tracers, and autograd
``ArrayBox``es. The analytic ``grad`` and ``value`` are plain
numpy, computed in float64 from the numpy values of ``x`` and of the contexts.

Contexts are built as numpy values (``di`` converts them to the backend's family);
a ``Scenario`` whose ``f`` writes into a ``Cache`` with ``buf[...] = ...`` is marked
``writes_cache`` and only runs on backends that can write into arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import di

__all__ = ["SCENARIOS", "Scenario", "negated", "scenario"]


@dataclass(frozen=True)
class Scenario:
    """One test function.

    Attributes:
        name: test id.
        f: the function, called as ``f(x, *context_values)``.
        make_x: ``rng -> x`` (a numpy array of the scenario's dtype and shape).
        make_contexts: ``rng -> (Constant(...) | Cache(...), ...)`` with numpy values.
        grad: analytic gradient, ``grad(x, *context_values) -> numpy float64``.
        value: analytic value, ``value(x, *context_values) -> float``.
        writes_cache: ``f`` writes into a ``Cache`` (not on JAX or autograd).
    """

    name: str
    f: Callable[..., Any]
    make_x: Callable[[np.random.Generator], np.ndarray]
    make_contexts: Callable[[np.random.Generator], tuple[di.Context, ...]]
    grad: Callable[..., np.ndarray]
    value: Callable[..., float]
    writes_cache: bool = False

    def build(self, seed: int = 0) -> tuple[np.ndarray, tuple[di.Context, ...]]:
        """``(x, contexts)`` from a seeded generator (same seed, same values)."""
        rng = np.random.default_rng(seed)
        return self.make_x(rng), self.make_contexts(rng)

    def expected(self, x: Any, contexts: Sequence[di.Context]) -> tuple[float, np.ndarray]:
        """``(value, gradient)`` at ``x`` (numpy) in float64."""
        x64 = np.asarray(x, dtype=np.float64)
        values = [_as_float64(c.value) for c in contexts]
        return float(self.value(x64, *values)), np.asarray(self.grad(x64, *values), dtype=np.float64)

    def __repr__(self) -> str:
        return f"Scenario({self.name})"


def _as_float64(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.astype(np.float64)
    return value


def negated(contexts: Sequence[di.Context]) -> tuple[di.Context, ...]:
    """Contexts of the same kinds, shapes and dtypes but other values, for preparation:
    ``Constant(a)`` -> ``Constant(-a)`` (floats and arrays; ints are kept), ``Cache`` -> a
    fresh buffer full of NaN (its initial value must not matter)."""
    result: list[di.Context] = []
    for context in contexts:
        value = context.value
        if isinstance(context, di.Cache):
            result.append(di.Cache(np.full_like(value, np.nan)))
        elif isinstance(value, (np.ndarray, float)):
            result.append(di.Constant(-value))
        else:
            result.append(di.Constant(value))
    return tuple(result)


def _no_contexts(rng: np.random.Generator) -> tuple[di.Context, ...]:
    return ()


def _normal(shape: tuple[int, ...], dtype: Any = np.float64) -> Callable[[np.random.Generator], np.ndarray]:
    def make(rng: np.random.Generator) -> np.ndarray:
        return np.asarray(rng.normal(size=shape), dtype=dtype)

    return make


def _uniform(low: float, high: float, shape: tuple[int, ...], dtype: Any = np.float64):
    def make(rng: np.random.Generator) -> np.ndarray:
        return np.asarray(rng.uniform(low, high, size=shape), dtype=dtype)

    return make


# --- the functions ----------------------------------------------------------------


def sum_squares(x):
    xp = di.array_namespace(x)
    return xp.sum(x**2)


def sin_squared_plus_float(x):
    # Python float constants, including an additive one that has no gradient.
    xp = di.array_namespace(x)
    return 0.5 * xp.sum(xp.sin(x) ** 2) + 3.0


def logsumexp(x):
    xp = di.array_namespace(x)
    m = xp.max(x)
    return xp.log(xp.sum(xp.exp(x - m))) + m


def _logsumexp_grad(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def rosenbrock(x):
    return _rosenbrock_sum(x[1:], x[:-1])


def _rosenbrock_sum(tail, head):
    xp = di.array_namespace(tail)
    return xp.sum(100.0 * (tail - head**2) ** 2 + (1.0 - head) ** 2)


def _rosenbrock_value(x):
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


def _rosenbrock_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return g


def quadratic_form(x, a, b):
    # A Constant matrix (not symmetric, to catch a transposed gradient) and vector.
    xp = di.array_namespace(x)
    return 0.5 * xp.sum(x * (a @ x)) - xp.sum(b * x)


def matrix_x(x, b):
    # 2-d x times a Constant matrix.
    xp = di.array_namespace(x)
    return xp.sum((x @ b) ** 2)


def cubic_0d(x):
    # 0-d x: the result is already a scalar.
    return x**3 + 2.0 * x - 1.0


def exp_one_element(x):
    xp = di.array_namespace(x)
    return xp.sum(xp.exp(2.0 * x))


def tanh_float32(x):
    xp = di.array_namespace(x)
    return xp.sum(xp.tanh(x))


def weighted_float32(x, w):
    xp = di.array_namespace(x)
    return xp.sum(w * x**2) / 2.0


def float_and_int_constants(x, scale, power):
    # A Python float Constant (traced under jit) and a Python int one (static).
    xp = di.array_namespace(x)
    return scale * xp.sum(x**power)


def cache_scratch(x, w, buf):
    # Writes into the Cache buffer, then uses what it wrote.
    xp = di.array_namespace(x)
    buf[...] = w * x
    return xp.sum(buf**2)


def cache_2d_with_float(x, scale, buf):
    xp = di.array_namespace(x)
    buf[...] = scale * x
    return xp.sum(xp.sin(buf))


def constant_output(x):
    # Independent of x, yet computed from x (an engine that traces f refuses a bare
    # Python float, which could as well be a value cut off by float() or .item()):
    # the gradient is zero.
    xp = di.array_namespace(x)
    return xp.sum(x) * 0.0 + 1.5


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "sum_squares",
        sum_squares,
        _normal((5,)),
        _no_contexts,
        lambda x: 2.0 * x,
        lambda x: float(np.sum(x**2)),
    ),
    Scenario(
        "sin_squared_plus_float",
        sin_squared_plus_float,
        _normal((2, 3)),
        _no_contexts,
        lambda x: np.sin(x) * np.cos(x),
        lambda x: float(0.5 * np.sum(np.sin(x) ** 2) + 3.0),
    ),
    Scenario(
        "logsumexp",
        logsumexp,
        _normal((7,)),
        _no_contexts,
        _logsumexp_grad,
        lambda x: float(np.log(np.sum(np.exp(x - x.max()))) + x.max()),
    ),
    Scenario(
        "rosenbrock",
        rosenbrock,
        _uniform(-1.5, 1.5, (4,)),
        _no_contexts,
        _rosenbrock_grad,
        _rosenbrock_value,
    ),
    Scenario(
        "quadratic_form_constants",
        quadratic_form,
        _normal((4,)),
        lambda rng: (di.Constant(rng.normal(size=(4, 4))), di.Constant(rng.normal(size=4))),
        lambda x, a, b: 0.5 * (a + a.T) @ x - b,
        lambda x, a, b: float(0.5 * x @ a @ x - b @ x),
    ),
    Scenario(
        "matrix_x",
        matrix_x,
        _normal((3, 4)),
        lambda rng: (di.Constant(rng.normal(size=(4, 2))),),
        lambda x, b: 2.0 * (x @ b) @ b.T,
        lambda x, b: float(np.sum((x @ b) ** 2)),
    ),
    Scenario(
        "cubic_0d",
        cubic_0d,
        _normal(()),
        _no_contexts,
        lambda x: 3.0 * x**2 + 2.0,
        lambda x: float(x**3 + 2.0 * x - 1.0),
    ),
    Scenario(
        "exp_one_element",
        exp_one_element,
        _normal((1,)),
        _no_contexts,
        lambda x: 2.0 * np.exp(2.0 * x),
        lambda x: float(np.sum(np.exp(2.0 * x))),
    ),
    Scenario(
        "tanh_float32",
        tanh_float32,
        _normal((6,), np.float32),
        _no_contexts,
        lambda x: 1.0 - np.tanh(x) ** 2,
        lambda x: float(np.sum(np.tanh(x))),
    ),
    Scenario(
        "weighted_float32",
        weighted_float32,
        _normal((5,), np.float32),
        lambda rng: (di.Constant(rng.uniform(0.5, 2.0, size=5).astype(np.float32)),),
        lambda x, w: w * x,
        lambda x, w: float(np.sum(w * x**2) / 2.0),
    ),
    Scenario(
        "float_and_int_constants",
        float_and_int_constants,
        _uniform(0.5, 1.5, (3,)),
        lambda rng: (di.Constant(2.5), di.Constant(3)),
        lambda x, scale, power: scale * power * x ** (power - 1),
        lambda x, scale, power: float(scale * np.sum(x**power)),
    ),
    Scenario(
        "cache_scratch",
        cache_scratch,
        _normal((5,)),
        lambda rng: (di.Constant(rng.uniform(0.5, 2.0, size=5)), di.Cache(np.full(5, np.nan))),
        lambda x, w, buf: 2.0 * w**2 * x,
        lambda x, w, buf: float(np.sum((w * x) ** 2)),
        writes_cache=True,
    ),
    Scenario(
        "cache_2d_with_float",
        cache_2d_with_float,
        _normal((2, 3)),
        lambda rng: (di.Constant(0.7), di.Cache(np.zeros((2, 3)))),
        lambda x, scale, buf: scale * np.cos(scale * x),
        lambda x, scale, buf: float(np.sum(np.sin(scale * x))),
        writes_cache=True,
    ),
    Scenario(
        "constant_output",
        constant_output,
        _normal((3,)),
        _no_contexts,
        lambda x: np.zeros_like(x),
        lambda x: 1.5,
    ),
)

_BY_NAME = {s.name: s for s in SCENARIOS}


def scenario(name: str) -> Scenario:
    """The scenario called ``name``."""
    return _BY_NAME[name]
