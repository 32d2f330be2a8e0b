"""What the jaxpr interpreter knows of JAX's primitives: which are elementwise,
reductions, data movements, calls and loops, and how to fold constants in NumPy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "CALLS",
    "CUMULATIVE",
    "ELEMENTWISE",
    "LOOPS",
    "MOVES",
    "NUMPY_FOLDS",
    "REDUCTIONS",
    "SCATTERS",
    "ZERO_DERIVATIVE",
]

_FOLD_LIMIT = 50_000_000  # elements: larger constants are not evaluated (their zeros are then unknown)
_KRON_LIMIT = 50_000_000  # entries of a matrix-product dependency matrix before a coarser bound is used

# Primitives whose output elements each depend on the same element of every operand.
ELEMENTWISE = frozenset(
    """
    neg sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh exp exp2 log log1p expm1 sqrt rsqrt cbrt
    logistic erf erfc erf_inv lgamma digamma igamma igammac igamma_grad_a random_gamma_grad polygamma zeta
    bessel_i0e bessel_i1e regularized_incomplete_beta abs square integer_pow pow add add_any sub mul div rem max min
    atan2 nextafter convert_element_type copy copy_p reduce_precision clamp real imag conj complex
    optimization_barrier
    """.split()
)
# Primitives whose derivative is zero wherever it exists (and comparisons).
ZERO_DERIVATIVE = frozenset(
    "sign floor ceil round is_finite stop_gradient eq ne lt le gt ge and or not xor argmax argmin iota".split()
)
REDUCTIONS = frozenset("reduce_sum reduce_max reduce_min reduce_prod".split())
CUMULATIVE = frozenset("cumsum cumprod cummax cummin cumlogsumexp".split())
# Data movement: each output element is a copy of one operand element (or a constant).
MOVES = frozenset("pad gather dynamic_slice dynamic_update_slice".split())
SCATTERS = frozenset("scatter scatter-add scatter_add scatter-mul scatter_mul scatter-min scatter-max".split())
CALLS = frozenset(
    "pjit jit closed_call core_call remat checkpoint custom_jvp_call custom_vjp_call custom_vjp_call_jaxpr".split()
)
LOOPS = frozenset("while scan".split())
"""Loops: unrolled while their trip count is known, else bounded by a fixed point (:mod:`.loops`)."""


def numpy_pad(array: np.ndarray, value: Any, config: Any) -> np.ndarray:
    """``lax.pad`` in numpy: low, high (either may be negative) and interior padding per axis."""
    result = array
    for axis, (low, high, interior) in enumerate(config):
        low, high, interior = int(low), int(high), int(interior)
        length = result.shape[axis]
        spread_length = length + max(length - 1, 0) * interior
        spread_shape = list(result.shape)
        spread_shape[axis] = spread_length
        spread = np.full(spread_shape, value, dtype=result.dtype)
        index = [slice(None)] * result.ndim
        index[axis] = slice(None, None, interior + 1)
        spread[tuple(index)] = result
        widths = [(0, 0)] * result.ndim
        widths[axis] = (max(low, 0), max(high, 0))
        spread = np.pad(spread, widths, constant_values=value)
        index = [slice(None)] * result.ndim
        index[axis] = slice(max(-low, 0), spread.shape[axis] - max(-high, 0))
        result = spread[tuple(index)]
    return result


def _iota(params: dict[str, Any]) -> np.ndarray:
    shape, dimension = tuple(params["shape"]), int(params["dimension"])
    line = np.arange(shape[dimension]).reshape([-1 if d == dimension else 1 for d in range(len(shape))])
    return np.broadcast_to(line, shape)


def _select_n(params: dict[str, Any], predicate: Any, *cases: Any) -> Any:
    return np.choose(np.asarray(predicate).astype(np.int64), np.broadcast_arrays(*cases))


def _divide(params: dict[str, Any], a: Any, b: Any) -> Any:
    if np.issubdtype(np.result_type(a, b), np.integer):
        return np.trunc(np.true_divide(a, b))  # lax rounds integer division toward zero
    return np.true_divide(a, b)


def _elementwise(function: Callable[..., Any]) -> Callable[..., Any]:
    return lambda params, *operands: function(*operands)


NUMPY_FOLDS: dict[str, Callable[..., Any]] = {
    "add": _elementwise(np.add),
    "add_any": _elementwise(np.add),
    "sub": _elementwise(np.subtract),
    "mul": _elementwise(np.multiply),
    "div": _divide,
    "rem": _elementwise(np.fmod),
    "neg": _elementwise(np.negative),
    "max": _elementwise(np.maximum),
    "min": _elementwise(np.minimum),
    "abs": _elementwise(np.abs),
    "sign": _elementwise(np.sign),
    "eq": _elementwise(np.equal),
    "ne": _elementwise(np.not_equal),
    "lt": _elementwise(np.less),
    "le": _elementwise(np.less_equal),
    "gt": _elementwise(np.greater),
    "ge": _elementwise(np.greater_equal),
    "and": _elementwise(np.bitwise_and),
    "or": _elementwise(np.bitwise_or),
    "not": _elementwise(np.invert),
    "exp": _elementwise(np.exp),
    "log": _elementwise(np.log),
    "sin": _elementwise(np.sin),
    "cos": _elementwise(np.cos),
    "sqrt": _elementwise(np.sqrt),
    "integer_pow": lambda params, a: np.power(a, params["y"]),
    "select_n": _select_n,
    "convert_element_type": lambda params, a: np.asarray(a).astype(params["new_dtype"]),
    "copy": lambda params, a: np.array(a),
    "copy_p": lambda params, a: np.array(a),
    "iota": lambda params: _iota(params),
    "broadcast_in_dim": lambda params, a: np.broadcast_to(
        np.reshape(
            a,
            [
                np.shape(a)[list(params["broadcast_dimensions"]).index(d)] if d in params["broadcast_dimensions"] else 1
                for d in range(len(params["shape"]))
            ],
        ),
        tuple(params["shape"]),
    ),
    "reshape": lambda params, a: np.reshape(
        a if params.get("dimensions") is None else np.transpose(a, params["dimensions"]), params["new_sizes"]
    ),
    "transpose": lambda params, a: np.transpose(a, params["permutation"]),
    "squeeze": lambda params, a: np.squeeze(a, axis=tuple(params["dimensions"])),
    "expand_dims": lambda params, a: np.expand_dims(a, axis=tuple(params["dimensions"])),
    "rev": lambda params, a: np.flip(a, axis=tuple(params["dimensions"])),
    "slice": lambda params, a: np.asarray(a)[
        tuple(
            slice(start, limit, step)
            for start, limit, step in zip(
                params["start_indices"], params["limit_indices"], params.get("strides") or (1,) * np.ndim(a)
            )
        )
    ],
    "concatenate": lambda params, *arrays: np.concatenate(arrays, axis=int(params["dimension"])),
    "stack": lambda params, *arrays: np.stack(arrays, axis=int(params["axis"])),
    "tile": lambda params, a: np.tile(a, tuple(params["reps"])),
    "pad": lambda params, a, value: numpy_pad(np.asarray(a), value, params["padding_config"]),
    "reduce_sum": lambda params, a: np.sum(a, axis=tuple(params["axes"])),
    "reduce_max": lambda params, a: np.max(a, axis=tuple(params["axes"])),
    "reduce_min": lambda params, a: np.min(a, axis=tuple(params["axes"])),
}
"""Constant folding in numpy for the common primitives (JAX would compile each)."""
