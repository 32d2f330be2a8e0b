"""The MLX host: ``g = di.DifferentiateWith(f, backend)`` called on MLX arrays is
an ``mx.custom_function`` whose ``vjp`` is ``backend``'s pullback and whose
``jvp`` is its pushforward (one inner call for every leaf of ``x``).

MLX's eager transforms (``mx.grad``, ``mx.value_and_grad``, ``mx.vjp``,
``mx.jvp``) run on values, so ``g`` hands the inner engine NumPy copies of
them and brings its results back as MLX arrays, in the dtypes ``f`` returned
(pullbacks in ``x``'s). MLX has no host callback: under ``mx.compile`` and
``mx.vmap`` nothing can leave MLX's graph, so ``g`` is refused there with a
:class:`di.UnsupportedOperatorError`. The derivative rules are computed outside
MLX, so MLX cannot differentiate them again: each is itself an
``mx.custom_function`` whose own derivative rules refuse, so a second derivative
through ``g`` (``mx.grad`` of ``mx.grad``, ``mx.jvp`` of ``mx.grad``, ``AutoMLX``'s
``hvp``, ``hessian`` and ``second_derivative``) is one
:class:`di.UnsupportedOperatorError`, never a silent zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from di.engines.mlx.family import mlx_dtype
from di.errors import InvalidInputError, UnsupportedOperatorError
from di.families import converter, family_of
from di.mixing.core import DifferentiateWith, Host

__all__ = ["HOST", "MLXHost"]

_EVAL_IN_TRANSFORM = "Attempting to eval an array during function transformations"


def _numpy(g: DifferentiateWith, value: Any) -> np.ndarray:
    """An MLX array's values as NumPy (MLX's eager transforms give concrete ones)."""
    try:
        return np.array(value)
    except ValueError as err:
        if _EVAL_IN_TRANSFORM not in str(err):
            raise
        raise UnsupportedOperatorError(
            f"{g!r} cannot run inside mx.compile or mx.vmap: MLX has no host callback, so f (differentiated by "
            f"{g.backend!r}) cannot be evaluated on traced MLX values. Call g outside mx.compile and mx.vmap (inside "
            f"mx.grad, mx.vjp and mx.jvp it works), or write f with MLX and differentiate it with di.AutoMLX()."
        ) from err


def _to_mlx(values: Sequence[Any], dtypes: Sequence[Any]) -> list[Any]:
    arrays = [converter(family_of(v), "numpy")(v) if family_of(v) != "numpy" else v for v in values]
    return [mx.array(np.asarray(a), dtype=mlx_dtype(np.dtype(d).name)) for a, d in zip(arrays, dtypes)]


def _items(value: Any, count: int) -> list[Any]:
    return [value] if count == 1 else list(value)


def _second_order_error(g: DifferentiateWith) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(
        f"{g!r} inside MLX: a second derivative through g (mx.grad of mx.grad, mx.jvp of mx.grad, an hvp, hessian or "
        f"second_derivative of a function calling g) needs the derivative of {g.backend!r}'s pullback or pushforward "
        f"with respect to x, which MLX cannot take: they are computed outside MLX's graph. Compute second "
        f"derivatives of f with di directly (di.hessian(f, {g.backend!r}, x), di.hvp), or write f with "
        f"di.array_namespace so MLX differentiates it natively."
    )


def _first_order_only(g: DifferentiateWith, rule: Any) -> Any:
    """``rule`` (a derivative rule computed outside MLX) as an ``mx.custom_function``
    whose own derivatives refuse: MLX calls them only when something differentiates
    the rule's results, which would otherwise be constants to it (a silent zero)."""
    wrapped = mx.custom_function(rule)

    @wrapped.vjp
    def refuse_pullback(primals: Any, cotangents: Any, outputs: Any) -> Any:
        raise _second_order_error(g)

    @wrapped.jvp
    def refuse_pushforward(primals: Any, tangents: Any) -> Any:
        raise _second_order_error(g)

    return wrapped


class MLXHost(Host):
    """``g`` inside MLX's eager transforms (see the module's description)."""

    display = "MLX"
    classes = (mx.array,)

    def owns(self, value: Any) -> bool:
        return isinstance(value, mx.array)

    def call(self, g: DifferentiateWith, x: Any, leaves: list[Any], treedef: Any, values: list[Any]) -> Any:
        positions = g.operand_positions(self, values)
        operands = [values[i] for i in positions]
        point = [_numpy(g, leaf) for leaf in leaves]
        plain_operands = [_numpy(g, v) for v in operands]
        x_specs = [(p.shape, p.dtype.name) for p in point]
        operand_specs = {i: (v.shape, v.dtype.name) for i, v in zip(positions, plain_operands)}
        call = g.call_for(treedef, x_specs, values, operand_specs)
        output = call.output(point, plain_operands)
        x_dtypes = [p.dtype for p in point]
        y_dtypes = [np.dtype(dtype) for _, dtype in output.specs]
        nx, ny = len(leaves), len(y_dtypes)

        def split(arrays: Sequence[Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
            plain = [np.array(a) for a in arrays]
            return plain[:nx], plain[nx:]

        @mx.custom_function
        def primitive(*arrays: Any) -> Any:
            xs, ops = split(arrays)
            results = _to_mlx(call.value(xs, ops), y_dtypes)
            return results[0] if ny == 1 else tuple(results)

        nargs = nx + len(operands)

        def pullback_rule(*arrays: Any) -> Any:
            primals, cotangents = arrays[:nargs], arrays[nargs:]
            xs, ops = split(primals)
            (grads,) = call.pullback(xs, ops, [[np.array(c) for c in cotangents]])
            results = _to_mlx(grads, x_dtypes) + [mx.zeros_like(v) for v in primals[nx:]]
            return results[0] if len(results) == 1 else tuple(results)

        def pushforward_rule(*arrays: Any) -> Any:
            primals, tangents = arrays[:nargs], arrays[nargs:]
            xs, ops = split(primals)
            x_tangents = [np.array(t) for t in tangents[:nx]]
            (products,) = call.pushforward(xs, ops, [x_tangents])
            results = _to_mlx(products, y_dtypes)
            return results[0] if ny == 1 else tuple(results)

        pullback_once, pushforward_once = _first_order_only(g, pullback_rule), _first_order_only(g, pushforward_rule)

        # mx.custom_function passes one argument (one output) bare, several as a tuple
        @primitive.vjp
        def pullback(primals: Any, cotangents: Any, outputs: Any) -> Any:
            return pullback_once(*_items(primals, nargs), *_items(cotangents, ny))

        @primitive.jvp
        def pushforward(primals: Any, tangents: Any) -> Any:
            primals, tangents = _items(primals, nargs), _items(tangents, nargs)
            for k, tangent in enumerate(tangents[nx:]):
                if tangent is not None and np.any(np.array(tangent)):
                    raise InvalidInputError(
                        f"{g!r} inside MLX: a tangent along context {positions[k] + 1}, a Constant, which g does not "
                        f"differentiate. Make it part of x (a tuple or dict of the arrays to differentiate)."
                    )
            x_tangents = [mx.zeros_like(p) if t is None else t for p, t in zip(primals[:nx], tangents[:nx])]
            return pushforward_once(*primals[:nx], *primals[nx:], *x_tangents)

        result: Any = primitive(*leaves, *operands)
        return output.unflatten([result] if ny == 1 else list(result))


HOST = MLXHost()
