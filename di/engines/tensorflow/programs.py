"""The operators as TensorFlow computations: pure functions of ``(fx, x,
[tangents])`` that run eagerly or inside ``tf.function`` alike.

``fx(x)`` is ``f`` at ``x`` with the contexts bound, returning ``(y, aux)``
(``aux`` ``None`` without ``has_aux``). Each function returns ``(result, aux)``,
``result`` being the ``value_and_*`` tuple of its operator (``aux`` ``None`` for
the second-order ones, which take no ``has_aux``). Reverse mode is
``tf.GradientTape``, forward mode ``tf.autodiff.ForwardAccumulator``;
Jacobians and Hessians are the tape's ``jacobian``, vectorised with ``pfor``.
Derivatives never come back as ``None``: an output not connected to ``x`` has
zero derivatives (``UnconnectedGradients.ZERO``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf
from tensorflow.python.eager import record

from di.engines.tensorflow.shapes import EAGER, eager_shape

__all__ = [
    "derivative",
    "gradient",
    "hessian",
    "hvp",
    "jacobian",
    "pullback",
    "pushforward",
    "second_derivative",
    "value",
]

ZERO = tf.UnconnectedGradients.ZERO

Fx = Callable[[Any], tuple[Any, Any]]

EAGER_LOOP_OUTPUTS = 64  # where one eager reverse pass per output stops beating a pfor trace per call


def _cast(value: Any, like: Any) -> Any:
    dtype, target = value.dtype, like.dtype
    return value if dtype is target or dtype == target else tf.cast(value, target)  # (interned dtypes: `is` first)


def _same_shape(a: Any, b: Any) -> bool:
    """Whether two tensors have one shape: eager ones' read as tuples (a new
    tensor's ``.shape`` builds a ``TensorShape``), symbolic ones' compared as
    ``TensorShape``s (unknown dimensions alike)."""
    if a.__class__ is EAGER and b.__class__ is EAGER:
        return eager_shape(a) == eager_shape(b)
    return bool(a.shape == b.shape)


def value(fx: Fx, x: Any) -> tuple[Any, Any]:
    """``(y, aux)``."""
    return fx(x)


def gradient(fx: Fx, x: Any) -> tuple[tuple[Any, Any], Any]:
    """``((y, g), aux)``: one reverse pass."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y, aux = fx(x)
    return (y, _cast(tape.gradient(y, x, unconnected_gradients=ZERO), x)), aux


def pullback(fx: Fx, x: Any, ty: Sequence[Any]) -> tuple[tuple[Any, tuple[Any, ...]], Any]:
    """``((y, (cotangents...)), aux)``: ``f`` evaluated once, one reverse pass per
    cotangent (a persistent tape for several)."""
    with tf.GradientTape(persistent=len(ty) > 1) as tape:
        tape.watch(x)
        y, aux = fx(x)
    products = []
    # (the cotangents made ready first: the reverse pass comes early in this frame's code, whose
    # line TensorFlow looks up at each of its operations, reading the code from the start)
    for t in _cotangents(ty, y):
        products.append(_cast(tape.gradient(y, x, output_gradients=t, unconnected_gradients=ZERO), x))
    return (y, tuple(products)), aux


def _cotangents(ty: Sequence[Any], y: Any) -> list[Any]:
    """The cotangents as tensors of ``y``'s dtype, each of ``y``'s shape."""
    cotangents = []
    for t in ty:
        t = t if isinstance(t, tf.Tensor) else tf.convert_to_tensor(t)
        if not _same_shape(t, y):  # the tape would broadcast it, silently
            raise ValueError(f"a cotangent of shape {tuple(t.shape)} for an output of shape {tuple(y.shape)}")
        cotangents.append(_cast(t, y))
    return cotangents


def pushforward(fx: Fx, x: Any, tx: Sequence[Any]) -> tuple[tuple[Any, tuple[Any, ...]], Any]:
    """``((y, (tangents...)), aux)``: one forward pass per tangent (``f`` evaluated
    in each; the last one's ``aux``)."""
    if not tx:
        y, aux = fx(x)
        return (y, ()), aux
    products = []
    for t in tx:
        with tf.autodiff.ForwardAccumulator(x, _cast(t, x)) as accumulator:
            y, aux = fx(x)
        products.append(accumulator.jvp(y, unconnected_gradients=ZERO))
    return (y, tuple(products)), aux


def derivative(fx: Fx, x: Any) -> tuple[tuple[Any, Any], Any]:
    """``((y, dy), aux)``: one forward pass along ones (``x`` is a scalar, or its
    elements move together)."""
    with tf.autodiff.ForwardAccumulator(x, tf.ones_like(x)) as accumulator:
        y, aux = fx(x)
    return (y, accumulator.jvp(y, unconnected_gradients=ZERO)), aux


def second_derivative(fx: Fx, x: Any) -> tuple[tuple[Any, Any, Any], None]:
    """``((y, dy, d2y), None)``: forward over forward, two nested accumulators along ones;
    reverse over forward (the tape's jacobian of the accumulator's derivative)
    where a tape outside records ``x``, which TensorFlow cannot differentiate
    nested accumulators under. Under XLA (``jit_compile``), where TensorFlow has
    no gradient for what nested accumulators need (:func:`_without_xla_gradient`),
    reverse over reverse."""
    try:
        return _forward_second_derivative(fx, x)
    except LookupError as error:
        if not _without_xla_gradient(error):
            raise
    with tf.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with tf.GradientTape(persistent=True) as inner:
            inner.watch(x)
            y, _ = fx(x)
        dy = tf.reshape(_tape_jacobian(inner, y, x), tf.shape(y))  # (x is 0-d: y's shape)
    d2y = _tape_jacobian(outer, dy, x)
    return (y, _cast(dy, y), _cast(tf.reshape(d2y, tf.shape(dy)), y)), None


def _without_xla_gradient(error: LookupError) -> bool:
    """Whether ``error`` is TensorFlow's missing gradient of an XLA op: inside
    ``jit_compile`` the gradient of a ``Slice`` (of ``tf.concat``'s gradient) is an
    ``XlaDynamicUpdateSlice``, which has none, and a forward accumulator's
    derivative differentiates gradients (natively too: nested accumulators of
    ``concat([v[1:], v[:1]])`` fail in a fresh process, reverse over reverse
    compiles). ``f``'s own ``LookupError`` (a ``KeyError``) is not one."""
    message = str(error)
    return message.startswith("No gradient defined for operation") and "(op type: Xla" in message


def _forward_second_derivative(fx: Fx, x: Any) -> tuple[tuple[Any, Any, Any], None]:
    """:func:`second_derivative` by forward over forward, or reverse over forward
    where a tape outside records ``x``."""
    one = tf.ones_like(x)
    if record.should_record_backprop([x]):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            with tf.autodiff.ForwardAccumulator(x, one) as accumulator:
                y, _ = fx(x)
            dy = accumulator.jvp(y, unconnected_gradients=ZERO)
        d2y = _tape_jacobian(tape, dy, x)
        return (y, dy, _cast(tf.reshape(d2y, tf.shape(dy)), y)), None
    with tf.autodiff.ForwardAccumulator(x, one) as outer:
        with tf.autodiff.ForwardAccumulator(x, one) as inner:
            y, _ = fx(x)
        dy = inner.jvp(y, unconnected_gradients=ZERO)
    return (y, dy, _cast(outer.jvp(dy, unconnected_gradients=ZERO), y)), None


def _tape_jacobian(tape: tf.GradientTape, y: Any, x: Any) -> Any:
    """``tape.jacobian`` (of a persistent ``tape``), vectorised (``pfor``), or
    the loop where ``f`` uses an op that ``pfor`` cannot vectorise; eagerly, for
    at most ``EAGER_LOOP_OUTPUTS`` output elements, one reverse pass per element.

    Eagerly, ``tape.jacobian`` builds and traces a new ``tf.function`` on every
    call (``pfor`` and its ``while_loop`` fallback alike), whatever the size of
    ``f``; reverse passes with one-hot cotangents trace nothing. Measured on two
    loaded cores, same process: 16 outputs 0.14-0.20 s looped against 0.66-0.89 s
    with ``pfor``; 200 outputs 1.8-2.4 s looped against 0.72-0.78 s.
    """
    count = y.shape.num_elements()
    if tf.executing_eagerly() and count <= EAGER_LOOP_OUTPUTS:
        basis = tf.reshape(tf.eye(count, dtype=y.dtype), (count, *y.shape))
        rows = [tape.gradient(y, x, output_gradients=basis[i], unconnected_gradients=ZERO) for i in range(count)]
        return tf.reshape(tf.stack(rows), (*y.shape, *x.shape))
    try:
        return tape.jacobian(y, x, unconnected_gradients=ZERO, experimental_use_pfor=True)
    except (ValueError, NotImplementedError, tf.errors.InvalidArgumentError):  # pragma: no cover - an op pfor lacks
        return tape.jacobian(y, x, unconnected_gradients=ZERO, experimental_use_pfor=False)


def jacobian(fx: Fx, x: Any) -> tuple[tuple[Any, Any], Any]:
    """``((y, J), aux)``, ``J`` of shape ``y.shape + x.shape`` in ``y``'s dtype:
    the tape's vectorised jacobian (one batched reverse pass)."""
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y, aux = fx(x)
    if y.shape.num_elements() == 0 or x.shape.num_elements() == 0:
        return (y, tf.zeros(tuple(y.shape) + tuple(x.shape), y.dtype)), aux
    return (y, _cast(_tape_jacobian(tape, y, x), y)), aux


def hvp(fx: Fx, x: Any, tx: Sequence[Any]) -> tuple[tuple[Any, tuple[Any, ...]], None]:
    """``((g, (H t...)), None)``: reverse over reverse, ``f`` evaluated once, one
    reverse pass of the gradient per tangent (``H`` is symmetric, so the
    gradient's pullback along ``t`` is ``H t``). TensorFlow's forward mode would
    compute the same reverse pass of the gradient, and one more."""
    with tf.GradientTape(persistent=len(tx) > 1) as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y, _ = fx(x)
        g = inner.gradient(y, x, unconnected_gradients=ZERO)
    products = []
    for t in tx:  # (a loop in this frame: a generator's frame would be one more at each operation)
        products.append(_cast(outer.gradient(g, x, output_gradients=_cast(t, g), unconnected_gradients=ZERO), x))
    return (_cast(g, x), tuple(products)), None


def hessian(fx: Fx, x: Any) -> tuple[tuple[Any, Any, Any], None]:
    """``((y, g, H), None)``: the vectorised jacobian of the gradient (reverse over reverse)."""
    with tf.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y, _ = fx(x)
        g = inner.gradient(y, x, unconnected_gradients=ZERO)
    if x.shape.num_elements() == 0:
        return (y, g, tf.zeros(tuple(x.shape) * 2, x.dtype)), None
    return (y, _cast(g, x), _cast(_tape_jacobian(outer, g, x), x)), None
