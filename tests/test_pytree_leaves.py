"""Leaves of a pytree ``x`` keep their own dtype (docs/arrays.md), in every mode of
every backend: a float32 leaf beside float64 ones, in forward mode too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, assert_close, backend_id

import di

A, B = 2.0, np.array([1.0, 3.0])
TA, TB = 1.0, np.array([0.5, -1.0])
EXPECTED = TA * B + A * TB  # d(a * b) along (ta, tb)


def _leaves(a: Any, b: Any) -> dict[str, Any]:
    """The pytrees under test, each with the float32 leaf ``a`` and the float64 leaf ``b``."""
    return {"dict": {"a": a, "b": b}, "list": [a, b], "tuple": (a, b), "nested": {"p": [{"a": a}], "q": (b,)}}


def _pick(kind: str) -> Callable[[Any], tuple[Any, Any]]:
    """``(a, b)`` out of a pytree of ``kind``."""
    return {
        "dict": lambda x: (x["a"], x["b"]),
        "list": lambda x: (x[0], x[1]),
        "tuple": lambda x: (x[0], x[1]),
        "nested": lambda x: (x["p"][0]["a"], x["q"][0]),
    }[kind]


def _mixed(a: float, b: np.ndarray, kind: str) -> Any:
    return _leaves(np.array(a, np.float32), np.array(b, np.float64))[kind]


KINDS = list(_leaves(None, None))


@pytest.mark.parametrize("kind", KINDS)
def test_pushforward_of_mixed_dtype_leaves(backend: di.AbstractBackend, kind: str) -> None:
    pick = _pick(kind)

    def f(x: Any) -> Any:
        a, b = pick(x)
        xp = di.array_namespace(b)
        return xp.multiply(a, b)

    (pushed,) = di.pushforward(f, backend, _mixed(A, B, kind), (_mixed(TA, TB, kind),))
    assert_close(pushed, EXPECTED, backend, np.float32, f"pushforward, {kind}")


def test_value_and_pushforward_with_aux_of_mixed_dtype_leaves(backend: di.AbstractBackend) -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        y = x["a"] * x["b"]
        return y, xp.sum(y)

    x, t = _mixed(A, B, "dict"), _mixed(TA, TB, "dict")
    prep = di.prepare_pushforward(f, backend, x, (t,), has_aux=True)
    for what, result in (
        ("unprepared", di.value_and_pushforward(f, backend, x, (t,), has_aux=True)),
        ("prepared", di.value_and_pushforward(f, prep, backend, x, (t,), has_aux=True)),
    ):
        (y, aux), (pushed,) = result
        assert_close(y, A * B, backend, np.float32, f"value, {what}")
        assert_close(pushed, EXPECTED, backend, np.float32, f"pushforward, {what}")
        assert_close(aux, np.sum(A * B), backend, np.float32, f"aux, {what}")


def _coupled(x: Any) -> Any:
    xp = di.array_namespace(x["a"])
    return xp.sum(x["a"] ** 2 * xp.sum(x["b"] ** 3))


@pytest.mark.parametrize(
    "backend",
    [
        *BACKENDS,
        di.AutoTorch(compile=True, compile_options={"backend": "eager"}),
        di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX()),
    ],
    ids=lambda backend: backend_id(backend)[:40],
)
def test_hessian_blocks_of_mixed_leaves_take_the_dtype_of_their_row(backend: Any) -> None:
    """Block [i][j] of a hessian differentiates the gradient's leaf i: it has leaf
    i's dtype on every backend, as JAX gives it (the backends that flatten x gave
    leaf j's: H['a']['b'] float64 beside JAX's float32)."""
    x = {"a": np.array([1.0, 2.0], np.float32), "b": np.array([0.5, 1.5])}
    a, b = x["a"].astype(np.float64), x["b"]
    cubes = np.sum(b**3)
    exact = {
        "a": {"a": 2 * cubes * np.eye(2), "b": np.outer(2 * a, 3 * b**2)},
        "b": {"a": np.outer(3 * b**2, 2 * a), "b": np.sum(a**2) * np.diag(6 * b)},
    }
    for hessian in (di.hessian(_coupled, backend, x), di.value_gradient_and_hessian(_coupled, backend, x)[2]):
        for i in ("a", "b"):
            for j in ("a", "b"):
                block = hessian[i][j]
                assert str(block.dtype).rsplit(".", 1)[-1] == str(x[i].dtype), (i, j, block.dtype)
                np.testing.assert_allclose(np.asarray(block, dtype=np.float64), exact[i][j], rtol=1e-4, atol=1e-4)
