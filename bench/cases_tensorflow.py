"""TensorFlow's bench cases: ``AutoTensorFlow`` against the fastest native spelling
of each operator, eager and inside ``tf.function(jit_compile=True)``.

Where an expert has several spellings, each is timed once at build time and the
fastest is the native side (its label names the candidates): ``tape.jacobian``
(vectorised) or one ``ForwardAccumulator`` per input for ``jacobian``, forward
over reverse or reverse over reverse for ``hvp``. Both sides run the same
TensorFlow functions (the bench's functions written with ``tf`` operations:
tensors have no ``.sum()`` method) on tensors, so neither converts anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import di
from bench.cases import (
    GRADIENT,
    HVP,
    JACOBIAN,
    OPERATORS,
    PULLBACK,
    PUSHFORWARD,
    UNPREPARED,
    VALUE_AND_GRADIENT,
    Case,
    Engine,
    Thunk,
    _breakdown,
    _di_side,
    _pair,
)
from bench.functions import coupled_cubic, rosenbrock, sum_of_squares

__all__ = ["ENGINES"]


def _tensorflow_functions() -> dict[Callable[..., Any], Callable[..., Any]]:
    import tensorflow as tf

    def tf_sum_of_squares(x: Any) -> Any:
        return tf.reduce_sum(x * x)

    def tf_rosenbrock(x: Any) -> Any:
        first, second = x[0::2], x[1::2]
        return tf.reduce_sum(100.0 * (second - first * first) ** 2 + (1.0 - first) ** 2)

    def tf_coupled_cubic(x: Any) -> Any:
        return x * x * x - x * tf.reduce_sum(x * x) / x.shape[0]

    return {sum_of_squares: tf_sum_of_squares, rosenbrock: tf_rosenbrock, coupled_cubic: tf_coupled_cubic}


def _fastest(candidates: dict[str, Thunk]) -> Thunk:
    """The fastest of several native spellings (median of a few calls after a warm-up)."""
    best, best_time = None, float("inf")
    for thunk in candidates.values():
        thunk()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            thunk()
            times.append(time.perf_counter() - start)
        if np.median(times) < best_time:
            best, best_time = thunk, float(np.median(times))
    assert best is not None
    return best


def tape_spellings(f: Callable[..., Any], g: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    """The native spellings of a TensorFlow user, eager (wrap them in ``tf.function`` to
    compile): ``gradient``, ``value_and_gradient``, ``jacobian`` (pfor), ``pushforward``,
    ``pullback``, and the hvp ``forward_over_reverse`` and ``reverse_over_reverse``; of
    ``f`` (scalar) and ``g`` (vector)."""
    import tensorflow as tf

    def gradient(x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        return tape.gradient(y, x)

    def value_and_gradient(x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        return y, tape.gradient(y, x)

    def tape_jacobian(x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = g(x)
        return tape.jacobian(y, x, experimental_use_pfor=True)

    def pushforward(x: Any, v: Any) -> Any:
        with tf.autodiff.ForwardAccumulator(x, v) as accumulator:
            y = g(x)
        return accumulator.jvp(y)

    def pullback(x: Any, v: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = g(x)
        return tape.gradient(y, x, output_gradients=v)

    def forward_over_reverse(x: Any, v: Any) -> Any:
        with tf.autodiff.ForwardAccumulator(x, v) as accumulator:
            gradient_x = gradient(x)
        return accumulator.jvp(gradient_x)

    def reverse_over_reverse(x: Any, v: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            gradient_x = gradient(x)
        return tape.gradient(gradient_x, x, output_gradients=v)

    return {
        "gradient": gradient,
        "value_and_gradient": value_and_gradient,
        "jacobian": tape_jacobian,
        "pushforward": pushforward,
        "pullback": pullback,
        "forward_over_reverse": forward_over_reverse,
        "reverse_over_reverse": reverse_over_reverse,
    }


def _tensorflow(compiled: bool) -> Callable[..., Case]:
    def build(
        f: Callable[..., Any], g: Callable[..., Any], x_np: np.ndarray, dtype: str, operators: Sequence[str]
    ) -> Case:
        import tensorflow as tf

        own = _tensorflow_functions()
        f, g = own.get(f, f), own.get(g, g)
        x = tf.constant(x_np.astype(dtype))
        v = tf.constant(np.cos(x_np).astype(dtype))
        backend = di.AutoTensorFlow(compile=compiled)

        def program(function: Callable[..., Any]) -> Callable[..., Any]:
            return tf.function(function, jit_compile=True) if compiled else function

        spelled = {name: program(function) for name, function in tape_spellings(f, g).items()}
        natives: dict[str, Thunk] = {
            GRADIENT: lambda: spelled["gradient"](x),
            VALUE_AND_GRADIENT: lambda: spelled["value_and_gradient"](x),
            PUSHFORWARD: lambda: spelled["pushforward"](x, v),
            PULLBACK: lambda: spelled["pullback"](x, v),
        }
        if JACOBIAN in operators:
            natives[JACOBIAN] = lambda: spelled["jacobian"](x)
        if HVP in operators:
            forward, reverse = spelled["forward_over_reverse"], spelled["reverse_over_reverse"]
            natives[HVP] = _fastest({"forward over reverse": lambda: forward(x, v), "reverse": lambda: reverse(x, v)})
        through_di = _di_side(backend, f, g, x, v, operators, block=False)
        breakdown = _breakdown(f, backend, x, block=False) if GRADIENT in operators else {}
        return Case(_pair(natives, through_di), breakdown=breakdown)

    return build


_NATIVES = {
    GRADIENT: "tape.gradient(f(x), x)",
    VALUE_AND_GRADIENT: "f(x) and tape.gradient(f(x), x)",
    JACOBIAN: "tape.jacobian(g(x), x) (pfor)",
    PUSHFORWARD: "ForwardAccumulator(x, v).jvp(g(x))",
    PULLBACK: "tape.gradient(g(x), x, output_gradients=v)",
    HVP: "the faster of forward over reverse (ForwardAccumulator around a tape) and reverse over reverse",
}

ENGINES = {
    "tensorflow": Engine(
        "AutoTensorFlow()",
        {op: f"{text} (eager)" for op, text in _NATIVES.items()},
        _tensorflow(False),
        "tensorflow",
        min_pairs=101,  # eager calls of milliseconds, each pair exposed to the machine's load: more pairs
    ),
    "tensorflow-compile": Engine(
        "AutoTensorFlow(compile=True)",
        {op: f"tf.function(jit_compile=True) of {text}" for op, text in _NATIVES.items()},
        _tensorflow(True),
        "tensorflow",
        operators=tuple(op for op in OPERATORS if op != UNPREPARED),  # unprepared: a trace per call
    ),
}
"""TensorFlow's rows, eager and compiled."""
