"""Leaves of a pytree ``x`` keep their own dtype (docs/arrays.md), in every mode of
every backend: a float32 leaf beside float64 ones, in forward mode too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import assert_close

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
