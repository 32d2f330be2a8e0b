"""``di`` inside TensorFlow's own transforms: ``tf.function`` (with and without
``jit_compile``), an outer ``tf.GradientTape`` around a ``di`` call, and
``tf.vectorized_map``, on ``AutoTensorFlow`` eager and compiled.

Every operator, prepared strictly outside the transform and unprepared, agrees
with TensorFlow's own spelling of the same derivative run inside the same
transform; same-point preps are refused, as on every engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from transform_cases import OPERATORS, T, X, appliers, compositions, curve, di_function, prepare, scalar, vector

import di

tf = pytest.importorskip("tensorflow")

BACKENDS = [pytest.param(di.AutoTensorFlow(), id="eager"), pytest.param(di.AutoTensorFlow(compile=True), id="compiled")]


APPLY = appliers("tf")
"""``apply(fn, x)``: ``fn`` run inside the transform at the tensor ``x``
(``tests/transform_cases.py``): the tape takes the gradient of the sum of
``fn``'s output, ``vectorized_map`` maps over ``[x, 2 x]``."""


def _jit(fn: Callable[[Any], Any], x: Any) -> Any:
    return tf.function(fn, jit_compile=True)(x)


def _gradient(x: Any) -> Any:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = scalar(x)
    return tape.gradient(y, x)


def _hvp(x: Any) -> Any:
    with tf.autodiff.ForwardAccumulator(x, tf.constant(T, x.dtype)) as accumulator:
        g = _gradient(x)
    return accumulator.jvp(g)


def _hessian(x: Any) -> Any:
    with tf.GradientTape() as tape:
        tape.watch(x)
        g = _gradient(x)
    return tape.jacobian(g, x)


def _jacobian(x: Any) -> Any:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = vector(x)
    return tape.jacobian(y, x)


def _pushforward(x: Any) -> Any:
    with tf.autodiff.ForwardAccumulator(x, tf.constant(T, x.dtype)) as accumulator:
        y = vector(x)
    return accumulator.jvp(y)


def _pullback(x: Any) -> Any:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = vector(x)
    return tape.gradient(y, x, output_gradients=tf.constant(T, x.dtype))


def _derivative_at(s: Any) -> Any:
    with tf.autodiff.ForwardAccumulator(s, tf.ones_like(s)) as accumulator:
        y = curve(s)
    return accumulator.jvp(y)


def _derivative(x: Any) -> Any:
    return _derivative_at(x[0])


def _second_derivative(x: Any) -> Any:
    s = x[0]
    with tf.GradientTape() as tape:  # (nested accumulators under an outer tape: TensorFlow raises)
        tape.watch(s)
        dy = _derivative_at(s)
    return tape.jacobian(dy, s)


NATIVE: dict[str, Callable[[Any], Any]] = {
    "gradient": _gradient,
    "derivative": _derivative,
    "jacobian": _jacobian,
    "pushforward": _pushforward,
    "pullback": _pullback,
    "hvp": _hvp,
    "hessian": _hessian,
    "second_derivative": _second_derivative,
}


def test_every_declared_transform_is_tested() -> None:
    assert {c.transform for c in compositions(di.AutoTensorFlow())} == set(APPLY)
    assert set(NATIVE) == set(OPERATORS)


# The compiled selector's programs are tf.functions of their own: inside tf.function (its nesting)
# and under an outer tape (the gradient of a compiled call); eager everywhere. (Lean: each case
# traces every operator's programs.)
CASES = [
    *[
        pytest.param(transform, BACKENDS[0].values[0], id=f"{transform}-eager")
        for transform in [*APPLY, "tf.function(jit_compile=True)"]
    ],
    *[
        pytest.param(transform, BACKENDS[1].values[0], id=f"{transform}-compiled")
        for transform in ("tf.function", "tf.GradientTape")
    ],
]


@pytest.mark.parametrize(("transform", "backend"), CASES)
def test_operator_inside_transform_agrees_with_tensorflow(transform: str, backend: Any) -> None:
    apply = _jit if transform == "tf.function(jit_compile=True)" else APPLY[transform]
    composition = next(c for c in compositions(backend) if c.transform == transform.split("(")[0])
    x = tf.constant(X)
    for operator in OPERATORS:
        assert composition.composes(operator) and composition.composes("unprepared")
        expected = apply(NATIVE[operator], x).numpy()
        prep = prepare(operator, backend, x, T)
        for prepared in (prep, None):
            result = apply(di_function(operator, backend, prepared, T), x)
            np.testing.assert_allclose(result.numpy(), expected, rtol=1e-10, atol=1e-12, err_msg=operator)


def test_same_point_preps_are_refused_inside() -> None:
    backend = di.AutoTensorFlow()
    assert not compositions(backend)[0].composes("same point")
    x = tf.constant(X)
    prep = di.prepare_pullback_same_point(vector, backend, x, (T,))
    with pytest.raises(Exception, match=r"inside tf\.function") as caught:  # (autograph wraps what f raises)
        APPLY["tf.function"](lambda x: di.pullback(vector, prep, backend, x, (T,))[0], x)
    assert "UnsupportedOperatorError" in str(caught.value) or isinstance(caught.value, di.UnsupportedOperatorError)
