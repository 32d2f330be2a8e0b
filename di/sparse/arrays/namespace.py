"""The array namespace of the sparsity tracer: what ``di.array_namespace`` returns
for a :class:`~di.sparse.arrays.tracer.Traced` array (its ``__array_namespace__``).

Every function of the array API standard has a rule. Elementwise functions are
sorted by what their derivatives keep: ``linear`` (sums: no second-order pair),
``product`` (``u * v``: the pairs across ``u`` and ``v``), ``quotient``,
``nonlinear`` (every pair), ``piecewise`` (``abs``, ``maximum``: first order
kept, second derivative zero) and ``zero`` (comparisons, ``floor``, ``sign``:
no derivative). Rearrangements are computed on element positions; reductions,
cumulative functions, ``sort`` (each output depends on its whole line) and
``matmul`` combine rows. A name outside the standard that NumPy's namespace has
is followed conservatively (each output depends on every input), with a note.
Called without traced arrays, every function is NumPy's.
"""

from __future__ import annotations

import builtins
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import array_api_compat.numpy
import numpy as np
import scipy.sparse as sp

from di.sparse.arrays import tracer as _tracer

# The rules' helpers under private names: this module's public names are the namespace's.
from di.sparse.arrays.rules import along_lines as _lines
from di.sparse.arrays.rules import binary as _binary
from di.sparse.arrays.rules import computed as _numpy
from di.sparse.arrays.rules import elementwise as _elementwise
from di.sparse.arrays.rules import everything as _everything
from di.sparse.arrays.rules import joined as _joined
from di.sparse.arrays.rules import lift as _lift
from di.sparse.arrays.rules import linear_map as _linear_map
from di.sparse.arrays.rules import positions_of as _positions
from di.sparse.arrays.rules import rearranged as _rearranged
from di.sparse.arrays.rules import reduced as _reduced
from di.sparse.arrays.rules import reduction as _reduction
from di.sparse.arrays.rules import rows_at as _rows
from di.sparse.arrays.rules import tape_of as _tape
from di.sparse.arrays.rules import unary as _unary
from di.sparse.arrays.rules import value_of as _value
from di.sparse.arrays.rules import zero_reduction as _zero_reduction
from di.sparse.arrays.tracer import Tape, Traced, cross, union

_np_xp: Any = array_api_compat.numpy

# --- constants and data types (NumPy's) --------------------------------------------------

e, pi, inf, nan, newaxis = np.e, np.pi, np.inf, np.nan, None
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
float32, float64, complex64, complex128 = np.float32, np.float64, np.complex64, np.complex128
finfo, iinfo, isdtype, can_cast = _np_xp.finfo, _np_xp.iinfo, _np_xp.isdtype, _np_xp.can_cast

# --- helpers ---------------------------------------------------------------------------


# --- elementwise -------------------------------------------------------------------------


_UNARY = {
    "linear": ("negative", "positive", "real", "imag", "conj"),
    "piecewise": ("abs",),
    "nonlinear": (
        "acos acosh asin asinh atan atanh cos cosh exp expm1 log log1p log2 log10 sin sinh sqrt square tan tanh "
        "reciprocal cbrt"
    ).split(),
    "zero": "ceil floor round trunc sign signbit isfinite isinf isnan logical_not bitwise_invert".split(),
}
_BINARY = {
    "linear": ("add", "subtract", "remainder"),
    "piecewise": ("maximum", "minimum", "copysign", "nextafter"),
    "product": ("multiply",),
    "quotient": ("divide",),
    "nonlinear": ("pow", "atan2", "hypot", "logaddexp"),
    "zero": (
        "equal not_equal less less_equal greater greater_equal logical_and logical_or logical_xor floor_divide "
        "bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift"
    ).split(),
}
multiply = _binary("product", _np_xp.multiply)
conj = _unary("linear", _np_xp.conj)
for _kind, _names in _UNARY.items():
    for _name in _names:
        globals()[_name] = _unary(_kind, getattr(_np_xp, _name))
for _kind, _names in _BINARY.items():
    for _name in _names:
        globals()[_name] = _binary(_kind, getattr(_np_xp, _name))


def clip(x: Any, /, min: Any = None, max: Any = None) -> Any:
    """Piecewise linear in all its arguments."""
    arguments = [x] + [bound for bound in (min, max) if bound is not None]
    return _elementwise("piecewise", lambda v, *bounds: _clip_values(v, min, max, bounds), *arguments)


def _clip_values(v: Any, low: Any, high: Any, bounds: Sequence[Any]) -> Any:
    values = list(bounds)
    return np.clip(v, values.pop(0) if low is not None else None, values.pop(0) if high is not None else None)


def where(condition: Any, x1: Any, x2: Any, /) -> Any:
    """The branch each element takes when the condition is known (constants) or
    read at the point (the local tracer, a branch); otherwise both."""
    tape = _tape([condition, x1, x2])
    if tape is None:
        return np.where(condition, x1, x2)
    c, a, b = (_lift(v, tape) for v in (condition, x1, x2))
    if not c.known and not tape.local:
        return _elementwise("piecewise", lambda u, v: np.where(c.value, u, v), a, b)
    shape = np.broadcast_shapes(c.shape, a.shape, b.shape)
    picks = np.broadcast_to(c.value.astype(np.bool_), shape)

    def chosen(parts: Sequence[np.ndarray]) -> np.ndarray:
        return np.where(picks, np.broadcast_to(parts[0], shape), np.broadcast_to(parts[1], shape))

    return _joined(chosen, [a, b])


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    """Kept for floating targets; a cast to integers or booleans has no derivative."""
    kind = "linear" if np.issubdtype(np.dtype(dtype), np.inexact) else "zero"
    return _elementwise(kind, lambda v: np.asarray(v).astype(dtype), x)


# --- rearrangements ------------------------------------------------------------------------


def _arranging(function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(x: Any, /, *args: Any, **options: Any) -> Any:
        if not isinstance(x, Traced):
            return function(x, *args, **options)
        return _rearranged(function, x, *args, **options)

    rule.__name__ = function.__name__
    return rule


def _without_copy(function: Callable[..., Any]) -> Callable[..., Any]:
    def call(a: Any, *args: Any, copy: Any = None, **options: Any) -> Any:
        return function(a, *args, **options)

    return call


reshape = _arranging(_without_copy(np.reshape))
permute_dims = _arranging(np.transpose)
matrix_transpose = _arranging(lambda a: np.swapaxes(a, -1, -2))
expand_dims = _arranging(np.expand_dims)
squeeze = _arranging(np.squeeze)
flip = _arranging(np.flip)
roll = _arranging(np.roll)
moveaxis = _arranging(np.moveaxis)
broadcast_to = _arranging(np.broadcast_to)
tile = _arranging(np.tile)
repeat = _arranging(np.repeat)
swapaxes = _arranging(np.swapaxes)
ravel = _arranging(np.ravel)
diagonal = _arranging(np.diagonal)


def _masking(function: Callable[..., Any]) -> Callable[..., Any]:
    """``tril``/``triu``: positions shifted by one so that the zeroed entries read ``-1``."""

    def rule(x: Any, /, *, k: int = 0) -> Any:
        if not isinstance(x, Traced):
            return function(x, k=k)
        positions = function(_positions(x) + 1, k=k) - 1
        return _rows(x, positions, function(x.value, k=k))

    return rule


tril, triu = _masking(np.tril), _masking(np.triu)


def concat(arrays: Sequence[Any], /, *, axis: int | None = 0) -> Any:
    if _tape(arrays) is None:
        return np.concatenate(arrays, axis=axis)

    def joined(parts: Sequence[np.ndarray]) -> np.ndarray:
        return np.concatenate([np.reshape(p, -1) for p in parts] if axis is None else parts, axis=axis or 0)

    return _joined(joined, arrays)


def stack(arrays: Sequence[Any], /, *, axis: int = 0) -> Any:
    if _tape(arrays) is None:
        return np.stack(arrays, axis=axis)
    return _joined(lambda parts: np.stack(parts, axis=axis), arrays)


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Any, ...]:
    return tuple(take(x, np.asarray(i), axis=axis) for i in range(x.shape[axis]))


def broadcast_arrays(*arrays: Any) -> list[Any]:
    shape = np.broadcast_shapes(*[np.shape(_value(a)) for a in arrays])
    return [broadcast_to(a, shape) for a in arrays]


def _index_value(index: Any, tape: Tape) -> tuple[Any, bool]:
    """A NumPy index for ``index`` and whether it is known."""
    if isinstance(index, Traced):
        return index.value, index.known
    if isinstance(index, tuple):
        parts = [_index_value(part, tape) for part in index]
        return tuple(p for p, _ in parts), builtins.all(k for _, k in parts)
    return index, True


def getitem(x: Traced, key: Any) -> Traced:
    """Basic and advanced indexing; indices computed from ``x`` (by either tracer:
    the local pattern must hold wherever ``f`` takes the same branches, and an
    ``argmax`` moves without one) make each output depend on all of ``x``."""
    index, known = _index_value(key, x.tape)
    if known:
        return _rearranged(lambda a: a[index], x)
    return _everything(x, np.asarray(x.value[index]), "indexing with indices computed from x")


def take(x: Any, indices: Any, /, *, axis: int | None = None) -> Any:
    if not isinstance(x, Traced):
        return np.take(x, _value(indices), axis=axis)
    index, known = _index_value(indices, x.tape)
    if known:
        return _rearranged(lambda a: np.take(a, index, axis=axis), x)
    return _everything(x, np.take(x.value, index, axis=axis), "take with indices computed from x")


def take_along_axis(x: Any, indices: Any, /, *, axis: int = -1) -> Any:
    if not isinstance(x, Traced):
        return np.take_along_axis(x, _value(indices), axis=axis)
    index, known = _index_value(indices, x.tape)
    if known:
        return _rearranged(lambda a: np.take_along_axis(a, index, axis=axis), x)
    return _everything(x, np.take_along_axis(x.value, index, axis=axis), "take_along_axis with indices computed from x")


# --- reductions and lines ------------------------------------------------------------------


sum = _reduction(False, np.sum)
mean = _reduction(False, np.mean)
max = _reduction(False, np.max)
min = _reduction(False, np.min)
prod = _reduction(True, np.prod)
std = _reduction(True, np.std)
var = _reduction(True, np.var)


argmax, argmin = _zero_reduction(np.argmax), _zero_reduction(np.argmin)
all, any = _zero_reduction(np.all), _zero_reduction(np.any)
count_nonzero, argsort = _zero_reduction(np.count_nonzero), _zero_reduction(np.argsort)


def sort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
    """Dense in its axis: a sorted value may come from anywhere on its line."""
    value = np.sort(_value(x), axis=axis)
    value = np.flip(value, axis=axis) if descending else value
    if not isinstance(x, Traced):
        return value
    return _lines(x, axis, value, nonlinear=False)


def _cumulative(nonlinear: bool, function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False) -> Any:
        if not isinstance(x, Traced):
            return function(x, axis=axis, dtype=dtype, include_initial=include_initial)
        if axis is None:
            x, axis = reshape(x, (-1,)), 0
        axis = axis % x.ndim
        value = np.asarray(_numpy(function, x.value, axis=axis, dtype=dtype))
        positions = np.moveaxis(_positions(x), axis, -1)
        length = x.shape[axis]
        lines = positions.reshape(-1, length)
        later, earlier = np.tril_indices(length)
        rows = lines[:, later].reshape(-1)
        cols = lines[:, earlier].reshape(-1)
        reducer = sp.csr_array((np.ones(rows.size, dtype=np.bool_), (rows, cols)), shape=(x.size, x.size))
        first = None if x.first is None else sp.csr_array(reducer @ x.first, dtype=np.bool_)
        second = None if x.second is None else sp.csr_array(reducer @ x.second, dtype=np.bool_)
        if nonlinear and x.tape.second_order:
            second = union([second, cross(first, first, x.tape.n)])
        out = Traced(value, first, second, x.known, x.tape)
        if include_initial:
            start = np.zeros_like(np.take(value, [0], axis=axis)) + (1 if nonlinear else 0)
            out = concat([start, out], axis=axis)
        return out

    rule.__name__ = function.__name__
    return rule


cumulative_sum = _cumulative(False, np.cumsum)
cumulative_prod = _cumulative(True, np.cumprod)


def diff(x: Any, /, *, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> Any:
    if not isinstance(x, Traced):
        return np.diff(x, axis=axis, n=n, **({} if prepend is None else {"prepend": prepend}))
    parts = [p for p in (prepend, x, append) if p is not None]
    x = concat(parts, axis=axis) if len(parts) > 1 else x
    for _ in range(n):
        length = x.shape[axis]
        x = take(x, np.arange(1, length), axis=axis) - take(x, np.arange(length - 1), axis=axis)
    return x


# --- linear algebra ------------------------------------------------------------------------


def matmul(x1: Any, x2: Any, /) -> Any:
    """Rows combined by the zero pattern of a constant 2-D side; otherwise a
    broadcast product summed over the shared axis."""
    tape = _tape([x1, x2])
    if tape is None:
        return np.matmul(x1, x2)
    a, b = _lift(x1, tape), _lift(x2, tape)
    value = np.asarray(_numpy(np.matmul, a.value, b.value))
    constant_b = b.first is None and b.known and b.ndim == 2
    constant_a = a.first is None and a.known and a.ndim == 2
    if constant_b and a.ndim >= 1:
        k, p = b.shape
        batch = a.size // k
        reducer = sp.kron(sp.identity(batch, dtype=np.bool_, format="csr"), sp.csr_array(b.value.T != 0))
        return _linear_map(a, sp.csr_array(reducer), value)
    if constant_a and b.ndim >= 1:
        k = a.shape[1]
        p = 1 if b.ndim == 1 else b.shape[-1]
        batch = b.size // (k * p)
        inner = sp.kron(sp.csr_array(a.value != 0), sp.identity(p, dtype=np.bool_, format="csr"))
        reducer = sp.kron(sp.identity(batch, dtype=np.bool_, format="csr"), inner)
        return _linear_map(b, sp.csr_array(reducer), value)
    left = a if a.ndim > 1 else expand_dims(a, axis=0)
    right = b if b.ndim > 1 else expand_dims(b, axis=1)
    product = multiply(expand_dims(left, axis=-1), expand_dims(right, axis=-3))
    return reshape(sum(product, axis=-2), value.shape)


def tensordot(x1: Any, x2: Any, /, *, axes: Any = 2) -> Any:
    if _tape([x1, x2]) is None:
        return np.tensordot(x1, x2, axes=axes)
    a_shape, b_shape = np.shape(_value(x1)), np.shape(_value(x2))
    if isinstance(axes, int):
        a_axes, b_axes = list(range(len(a_shape) - axes, len(a_shape))), list(range(axes))
    else:
        a_axes, b_axes = [list(np.atleast_1d(v)) for v in axes]
    a_axes = [int(v) % len(a_shape) for v in a_axes]
    b_axes = [int(v) % len(b_shape) for v in b_axes]
    a_free = [i for i in range(len(a_shape)) if i not in a_axes]
    b_free = [i for i in range(len(b_shape)) if i not in b_axes]
    size = math.prod(a_shape[i] for i in a_axes)
    left = reshape(permute_dims(x1, (*a_free, *a_axes)), (-1, size))
    right = reshape(permute_dims(x2, (*b_axes, *b_free)), (size, -1))
    shape = (*[a_shape[i] for i in a_free], *[b_shape[i] for i in b_free])
    return reshape(matmul(left, right), shape)


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    return sum(multiply(conj(x1), x2), axis=axis)


def outer(x1: Any, x2: Any, /) -> Any:
    return multiply(reshape(x1, (-1, 1)), reshape(x2, (1, -1)))


# --- creation and the rest -------------------------------------------------------------------


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: Any = None) -> Any:
    if isinstance(obj, Traced):
        return obj if dtype is None else astype(obj, dtype)
    if isinstance(obj, (list, tuple)) and _tape(obj) is not None:
        return stack([asarray(item, dtype=dtype) for item in obj])
    return np.asarray(obj, dtype=dtype)


def _like(function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(x: Any, /, *args: Any, dtype: Any = None, device: Any = None) -> Any:
        return function(np.asarray(_value(x)).shape, *args, dtype=dtype or np.asarray(_value(x)).dtype)

    return rule


zeros_like, ones_like, empty_like = _like(np.zeros), _like(np.ones), _like(np.zeros)
full_like = _like(np.full)
zeros, ones, empty, full, arange, linspace, eye = np.zeros, np.ones, np.empty, np.full, np.arange, np.linspace, np.eye
meshgrid = np.meshgrid


def result_type(*arrays_and_dtypes: Any) -> Any:
    return np.result_type(*[_value(a) for a in arrays_and_dtypes])


def searchsorted(x1: Any, x2: Any, /, **options: Any) -> Any:
    return _elementwise("zero", lambda a, v: np.searchsorted(a, v, **options), x1, x2)


def nonzero(x: Any, /) -> Any:
    """Indices where the value is nonzero: known locally, refused by the global tracer."""
    return np.nonzero(x.known_value("nonzero") if isinstance(x, Traced) else x)


def _unique(x: Traced) -> tuple[Traced, np.ndarray, np.ndarray, np.ndarray]:
    """The unique values (each the first element equal to it), their first
    indices, the inverse indices and the counts."""
    flat = np.reshape(x.known_value("unique"), -1)
    values, index, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
    return _rows(reshape(x, (-1,)), index, values), index, inverse.reshape(x.shape), counts


def unique_values(x: Any, /) -> Any:
    return _unique(x)[0] if isinstance(x, Traced) else _np_xp.unique_values(x)


def unique_counts(x: Any, /) -> Any:
    if not isinstance(x, Traced):
        return _np_xp.unique_counts(x)
    values, _, _, counts = _unique(x)
    return _np_xp.UniqueCountsResult(values, counts)


def unique_inverse(x: Any, /) -> Any:
    if not isinstance(x, Traced):
        return _np_xp.unique_inverse(x)
    values, _, inverse, _ = _unique(x)
    return _np_xp.UniqueInverseResult(values, inverse)


def unique_all(x: Any, /) -> Any:
    if not isinstance(x, Traced):
        return _np_xp.unique_all(x)
    values, index, inverse, counts = _unique(x)
    return _np_xp.UniqueAllResult(values, index, inverse, counts)


def from_dlpack(x: Any, /, **options: Any) -> Any:
    return x if isinstance(x, Traced) else np.from_dlpack(x, **options)


_tracer.NAMESPACE = sys.modules[__name__]
globals()["bool"] = np.bool_  # the array API's name, set here so annotations above keep the builtin


def __getattr__(name: str) -> Any:
    """NumPy's other functions, followed conservatively with a note."""
    target = getattr(_np_xp, name)
    if not callable(target) or isinstance(target, type):
        return target

    def conservative(*arguments: Any, **options: Any) -> Any:
        tape = _tape(arguments)
        if tape is None:
            return target(*arguments, **options)
        tape.note(f"{name}: unknown to the sparsity tracer: every output element taken to depend on every input")
        traced = [a for a in arguments if isinstance(a, Traced)]
        inputs = concat([reshape(t, (-1,)) for t in traced]) if len(traced) > 1 else reshape(traced[0], (-1,))
        values = [_value(a) for a in arguments]
        result = _numpy(target, *values, **options)
        outputs = result if isinstance(result, tuple) else (result,)
        spread = [
            _reduced(inputs, np.ones((1, inputs.size), dtype=np.bool_), np.asarray(out), nonlinear=True, broadcast=True)
            for out in outputs
        ]
        return tuple(spread) if isinstance(result, tuple) else spread[0]

    return conservative
