"""The TensorFlow host: ``g = di.DifferentiateWith(f, backend)`` as a TensorFlow
operation, its derivatives from ``backend``.

``g`` called on tensors is one ``tf.custom_gradient`` operation over ``x``'s
leaves and the ``Constant`` operands: its value runs ``f`` with ``backend``'s
engine and its gradient is ``backend``'s pullback, each a
``tf.numpy_function`` (so that it runs eagerly and inside ``tf.function``
alike). The pullback is itself a ``tf.custom_gradient`` operation whose
gradient with respect to the cotangent is ``backend``'s pushforward (the
pullback is linear in it, and its transpose is the pushforward): TensorFlow's
forward mode (``tf.autodiff.ForwardAccumulator``), which differentiates an
operation's gradient with respect to the cotangent, gets ``backend``'s
pushforward so.

What it refuses, with :class:`di.UnsupportedOperatorError`: a second derivative
through ``g`` (a tape recording ``x`` while ``g``'s gradient is computed: its
pullback's derivative with respect to ``x`` is not ``backend``'s to give), and
``tf.function(jit_compile=True)`` (XLA cannot compile a call out to Python).
``g`` differentiates ``x`` only: the ``Constant`` operands get no gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record

from di.errors import UnsupportedOperatorError
from di.families import converter, family_of
from di.mixing.calls import Call, handover
from di.mixing.core import DifferentiateWith, Host

__all__ = ["HOST", "TensorFlowHost"]

Spec = tuple[tuple[int, ...], str]


class _Site:
    """One signature of ``g``: its :class:`Call`, how many ``x`` leaves and
    operands it takes, and the specs of its inputs and outputs."""

    __slots__ = ("call", "g", "nc", "nx", "x_specs", "y_specs")

    def __init__(self, g: DifferentiateWith, call: Call, x_specs: Sequence[Spec], y_specs: Sequence[Spec], nc: int):
        self.g, self.call, self.nc = g, call, nc
        self.nx = len(x_specs)
        self.x_specs, self.y_specs = list(x_specs), list(y_specs)

    def _inner(self, arrays: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any]]:
        family = self.call.family
        inner = [handover(np.asarray(a), family) for a in arrays]
        return inner[: self.nx], inner[self.nx : self.nx + self.nc], inner[self.nx + self.nc :]

    @staticmethod
    def _numpy(leaves: Sequence[Any], specs: Sequence[Spec]) -> list[np.ndarray]:
        arrays = [np.asarray(converter(family_of(leaf), "numpy")(leaf)) for leaf in leaves]
        return [a if a.dtype.name == dtype else a.astype(dtype) for a, (_, dtype) in zip(arrays, specs)]

    def value(self, *arrays: Any) -> list[np.ndarray]:
        x, operands, _ = self._inner(arrays)
        return self._numpy(self.call.value(x, operands), self.y_specs)

    def pullback(self, *arrays: Any) -> list[np.ndarray]:
        x, operands, cotangents = self._inner(arrays)
        return self._numpy(self.call.pullback(x, operands, [cotangents])[0], self.x_specs)

    def pushforward(self, *arrays: Any) -> list[np.ndarray]:
        x, operands, tangents = self._inner(arrays)
        return self._numpy(self.call.pushforward(x, operands, [tangents])[0], self.y_specs)


def _python_call(function: Any, inputs: Sequence[Any], specs: Sequence[Spec], name: str) -> list[Any]:
    """``function`` of ``inputs`` as a TensorFlow operation returning tensors of ``specs``."""
    outputs = tf.numpy_function(function, list(inputs), [tf.as_dtype(dtype) for _, dtype in specs], name=name)
    if not isinstance(outputs, (list, tuple)):  # (one output comes back bare)
        outputs = [outputs]
    for output, (shape, _) in zip(outputs, specs):
        output.set_shape(shape)
    return list(outputs)


def _second_order(site: _Site) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(
        f"{site.g!r} inside TensorFlow: a second derivative through g (a tape recording x while g's gradient is "
        f"computed: nested tapes, a Hessian) needs the derivative of {site.g.backend!r}'s pullback with respect to x, "
        f"which g does not provide. Compute second derivatives of f with di directly (di.hessian(f, "
        f"{site.g.backend!r}, x), di.hvp)."
    )


def _pullback(site: _Site, point: Sequence[Any], cotangents: Sequence[Any]) -> list[Any]:
    """``backend``'s pullback at ``point`` as an operation whose gradient with respect
    to the cotangents is ``backend``'s pushforward (its transpose)."""

    @tf.custom_gradient  # type: ignore[misc]
    def pull(*cotangents: Any) -> Any:
        leaves = _python_call(site.pullback, [*point, *cotangents], site.x_specs, "di_pullback")

        def transpose(*tangents: Any, variables: Any = None) -> Any:
            if record.should_record_backprop(list(point[: site.nx])):
                raise _second_order(site)
            filled = [tf.zeros(shape, dtype) if t is None else t for t, (shape, dtype) in zip(tangents, site.x_specs)]
            return _python_call(site.pushforward, [*point, *filled], site.y_specs, "di_pushforward")

        return leaves, transpose

    return pull(*cotangents)  # type: ignore[no-any-return]


def _operation(site: _Site, arguments: Sequence[Any]) -> list[Any]:
    """``g`` of ``x``'s leaves and the operands as one differentiable operation."""

    @tf.custom_gradient  # type: ignore[misc]
    def value(*arguments: Any) -> Any:
        outputs = _python_call(site.value, arguments, site.y_specs, "di_value")

        def gradient(*cotangents: Any, variables: Any = None) -> Any:
            if record.should_record_backprop(list(arguments[: site.nx])):
                raise _second_order(site)
            filled = [tf.zeros(shape, dtype) if c is None else c for c, (shape, dtype) in zip(cotangents, site.y_specs)]
            return [*_pullback(site, arguments, filled), *([None] * site.nc)]

        return outputs, gradient

    return value(*arguments)  # type: ignore[no-any-return]


class TensorFlowHost(Host):
    """``g`` inside TensorFlow's tapes and forward accumulators (see the module's description)."""

    display = "TensorFlow"

    def owns(self, value: Any) -> bool:
        return isinstance(value, (tf.Tensor, tf.Variable))

    def call(self, g: DifferentiateWith, x: Any, leaves: list[Any], treedef: Any, values: list[Any]) -> Any:
        leaves = [tf.convert_to_tensor(leaf) for leaf in leaves]
        positions = g.operand_positions(self, values)
        operands = [tf.convert_to_tensor(values[i]) for i in positions]
        x_specs = [(tuple(leaf.shape), leaf.dtype.name) for leaf in leaves]
        operand_specs = {i: (tuple(v.shape), v.dtype.name) for i, v in zip(positions, operands)}
        call = g.call_for(treedef, x_specs, values, operand_specs)
        concrete = all(hasattr(v, "numpy") for v in (*leaves, *operands))
        if concrete:
            family = call.family
            output = call.output(
                [handover(v.numpy(), family) for v in leaves], [handover(v.numpy(), family) for v in operands]
            )
        else:  # inside tf.function: f is evaluated at zeros of the signature, once
            output = call.output()
        site = _Site(g, call, x_specs, output.specs, len(operands))
        return output.unflatten(_operation(site, [*leaves, *operands]))


HOST = TensorFlowHost()
