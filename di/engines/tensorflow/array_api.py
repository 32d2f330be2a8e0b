"""The array API over TensorFlow, for ``f`` evaluated on TensorFlow tensors (eager,
under a ``tf.GradientTape`` or a ``tf.autodiff.ForwardAccumulator``, or symbolic
inside ``tf.function``), and for the family's own computations (the fallbacks,
pytree ``x`` flattened into one vector).

array-api-compat has no TensorFlow namespace, so :func:`di.array_namespace`
answers this one for tensors (through :mod:`di.engines.tensorflow.namespace`,
the record's :class:`~di.backends.engine.NamespaceOverride`). Each array-API name is a
TensorFlow function (``tf.experimental.numpy``'s where its signature is the
array API's, ``tf``'s own otherwise), so the tape and the forward accumulator
differentiate everything ``f`` computes with it. Names the table does not list
fall back to ``tf.experimental.numpy``'s function of the same name.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow.experimental.numpy as tnp

from di.families.numpy import NUMPY_SPELLINGS

__all__ = ["TensorFlowNamespace", "tensorflow_namespace"]


def _dtype(dtype: Any) -> Any:
    """A dtype of any spelling (``tf.float64``, ``np.float64``, ``"float64"``) as TensorFlow's."""
    return None if dtype is None else tf.as_dtype(getattr(dtype, "name", dtype) if isinstance(dtype, str) else dtype)


def _axis(axis: Any) -> Any:
    return list(axis) if isinstance(axis, tuple) else axis


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: Any = None) -> Any:
    if isinstance(obj, (tf.Tensor, tf.Variable)):
        tensor = tf.convert_to_tensor(obj)
        if dtype is not None and tensor.dtype != _dtype(dtype):
            return tf.cast(tensor, _dtype(dtype))
        if not copy:
            return tensor
        # a copy of the memory (tf.identity shares it), where XLA does not trace it
        return tf.raw_ops.DeepCopy(x=tensor) if hasattr(tensor, "numpy") else tf.identity(tensor)
    if isinstance(obj, (list, tuple)) and any(isinstance(item, (tf.Tensor, tf.Variable)) for item in obj):
        tensor = tf.stack([asarray(item, dtype=dtype) for item in obj])
        return tensor
    return tnp.asarray(obj, dtype=_dtype(dtype))


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    target = _dtype(dtype)
    x = tf.convert_to_tensor(x)
    if target.is_complex and not x.dtype.is_complex:
        # tf.complex's gradient takes the real part; tf.cast's casts a complex gradient to a real dtype,
        # which is right but logs "discard the imaginary part" at every backward pass
        real = tf.cast(x, target.real_dtype)
        return tf.complex(real, tf.zeros_like(real))
    return tf.cast(x, target)


def reshape(x: Any, /, shape: Sequence[int], *, copy: Any = None) -> Any:
    return tf.reshape(x, shape)


def concat(arrays: Sequence[Any], /, *, axis: int | None = 0) -> Any:
    if axis is None:
        return tf.concat([tf.reshape(a, (-1,)) for a in arrays], 0)
    return tf.concat(list(arrays), axis)


def stack(arrays: Sequence[Any], /, *, axis: int = 0) -> Any:
    return tf.stack(list(arrays), axis)


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Any, ...]:
    return tuple(tf.unstack(x, axis=axis))


def permute_dims(x: Any, /, axes: Sequence[int]) -> Any:
    return tf.transpose(x, list(axes))


def matrix_transpose(x: Any, /) -> Any:
    return tf.linalg.matrix_transpose(x)


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    return tf.reduce_sum(x1 * x2, axis=axis)


def _reduction(function: Any) -> Any:
    def reduce(x: Any, /, *, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Any:
        if dtype is not None:
            x = tf.cast(x, _dtype(dtype))
        return function(x, axis=_axis(axis), keepdims=keepdims)

    return reduce


def _statistic(moment: str) -> Any:
    def statistic(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Any:
        axis = _axis(axis)
        mean = tf.reduce_mean(x, axis=axis, keepdims=True)
        squares = tf.reduce_sum(tf.square(x - mean), axis=axis, keepdims=keepdims)
        count = tf.cast(tf.size(x) // tf.size(mean), x.dtype)
        variance = squares / (count - correction)
        return variance if moment == "var" else tf.sqrt(variance)

    return statistic


def _cumulative(function: Any) -> Any:
    def cumulative(x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False) -> Any:
        if dtype is not None:
            x = tf.cast(x, _dtype(dtype))
        if axis is None:
            x, axis = tf.reshape(x, (-1,)), 0
        result = function(x, axis=axis)
        if include_initial:
            shape = tf.tensor_scatter_nd_update(tf.shape(x), [[axis % len(x.shape)]], [1])
            start = tf.zeros(shape, x.dtype) if function is tf.math.cumsum else tf.ones(shape, x.dtype)
            result = tf.concat([start, result], axis)
        return result

    return cumulative


def _extremum(function: Any) -> Any:
    def extremum(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
        return function(x, axis=_axis(axis), keepdims=keepdims)

    return extremum


def where(condition: Any, x1: Any, x2: Any, /) -> Any:
    return tnp.where(condition, x1, x2)


def clip(x: Any, /, min: Any = None, max: Any = None) -> Any:
    if min is not None:
        x = tf.maximum(x, tf.cast(min, x.dtype))
    if max is not None:
        x = tf.minimum(x, tf.cast(max, x.dtype))
    return x


def flip(x: Any, /, *, axis: Any = None) -> Any:
    axes = list(range(len(x.shape))) if axis is None else [axis] if isinstance(axis, int) else list(axis)
    return tf.reverse(x, axes)


def roll(x: Any, /, shift: Any, *, axis: Any = None) -> Any:
    if axis is None:
        return tf.reshape(tf.roll(tf.reshape(x, (-1,)), shift, 0), tf.shape(x))
    return tf.roll(x, shift, axis)


def sort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
    return tf.sort(x, axis=axis, direction="DESCENDING" if descending else "ASCENDING")


def argsort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
    return tf.argsort(x, axis=axis, direction="DESCENDING" if descending else "ASCENDING", stable=stable)


def take(x: Any, indices: Any, /, *, axis: int | None = None) -> Any:
    return tnp.take(x, indices, axis=axis)


def expand_dims(x: Any, /, *, axis: int = 0) -> Any:
    return tf.expand_dims(x, axis)


def squeeze(x: Any, /, axis: Any) -> Any:
    return tf.squeeze(x, _axis(axis) if not isinstance(axis, int) else [axis])


def broadcast_to(x: Any, /, shape: Sequence[int]) -> Any:
    return tf.broadcast_to(x, shape)


def matmul(x1: Any, x2: Any, /) -> Any:
    return tnp.matmul(x1, x2)


def tensordot(x1: Any, x2: Any, /, *, axes: Any = 2) -> Any:
    return tf.tensordot(x1, x2, axes)


def _creation(function: Any) -> Any:
    def create(shape: Any, *, dtype: Any = None, device: Any = None) -> Any:
        return function(shape, dtype=_dtype(dtype) or tf.float64)

    return create


def _like(function: Any) -> Any:
    def create(x: Any, /, *, dtype: Any = None, device: Any = None) -> Any:
        return function(x, dtype=_dtype(dtype) or x.dtype)

    return create


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Any:
    return tf.fill(shape if not isinstance(shape, int) else (shape,), tf.constant(fill_value, _dtype(dtype)))


def full_like(x: Any, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Any:
    return tf.fill(tf.shape(x), tf.constant(fill_value, _dtype(dtype) or x.dtype))


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None, device: Any = None) -> Any:
    return tnp.eye(n_rows, n_cols, k=k, dtype=_dtype(dtype) or tf.float64)


def arange(start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None) -> Any:
    return tnp.arange(start, stop, step, dtype=_dtype(dtype))


def linspace(
    start: Any, stop: Any, /, num: int, *, dtype: Any = None, device: Any = None, endpoint: bool = True
) -> Any:
    return tnp.linspace(start, stop, num, endpoint=endpoint, dtype=_dtype(dtype))


def isdtype(dtype: Any, kind: Any) -> bool:
    dtype = _dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if not isinstance(kind, str):
        return bool(dtype == _dtype(kind))
    kinds = {
        "bool": dtype.is_bool,
        "signed integer": dtype.is_integer and not dtype.is_unsigned,
        "unsigned integer": dtype.is_integer and dtype.is_unsigned,
        "integral": dtype.is_integer,
        "real floating": dtype.is_floating,
        "complex floating": dtype.is_complex,
        "numeric": dtype.is_integer or dtype.is_floating or dtype.is_complex,
    }
    return bool(kinds[kind])


def from_dlpack(x: Any, /, *, device: Any = None, copy: Any = None) -> Any:
    return tf.experimental.dlpack.from_dlpack(x.__dlpack__())


def result_type(*arrays_and_dtypes: Any) -> Any:
    dtypes = [np.dtype(_dtype(getattr(a, "dtype", a)).as_numpy_dtype) for a in arrays_and_dtypes]
    return tf.as_dtype(np.result_type(*dtypes))


def _linalg() -> Any:
    def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
        if ord == 2:
            return tf.sqrt(tf.reduce_sum(tf.square(x), axis=_axis(axis), keepdims=keepdims))
        return tf.norm(x, ord=ord, axis=_axis(axis), keepdims=keepdims)

    def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:
        return tf.norm(x, ord="fro" if ord == "fro" else ord, axis=[-2, -1], keepdims=keepdims)

    table = {
        "vector_norm": vector_norm,
        "matrix_norm": matrix_norm,
        "det": tf.linalg.det,
        "inv": tf.linalg.inv,
        "solve": tf.linalg.solve,
        "cholesky": lambda x, /, *, upper=False: tf.linalg.cholesky(x),
        "eigh": tf.linalg.eigh,
        "eigvalsh": tf.linalg.eigvalsh,
        "trace": lambda x, /, *, offset=0, dtype=None: tf.linalg.trace(x),
        "matmul": matmul,
        "matrix_transpose": matrix_transpose,
        "vecdot": vecdot,
        "tensordot": tensordot,
        "diagonal": lambda x, /, *, offset=0: tf.linalg.diag_part(x, k=offset),
        "slogdet": tf.linalg.slogdet,
        "outer": lambda x1, x2, /: tf.tensordot(x1, x2, axes=0),
    }
    return type("linalg", (), {name: staticmethod(function) for name, function in table.items()})()


_RENAMED = {
    **NUMPY_SPELLINGS,
    "bitwise_invert": "invert",
    "bitwise_left_shift": "left_shift",
    "bitwise_right_shift": "right_shift",
}

_DTYPES: tuple[str, ...] = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_DTYPES += ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")


class TensorFlowNamespace:
    """The array API over TensorFlow: every name a function the tape and the
    forward accumulator differentiate (see the module's docstring).

    Examples:
        >>> import tensorflow as tf
        >>> from di.engines.tensorflow.array_api import tensorflow_namespace
        >>> xp = tensorflow_namespace()
        >>> float(xp.sum(xp.concat([tf.ones(2), xp.zeros(1, dtype=tf.float32)])))
        2.0
    """

    __name__ = "di.engines.tensorflow.namespace"
    pi = math.pi
    e = math.e
    inf = math.inf
    nan = math.nan
    newaxis = None

    def __init__(self) -> None:
        table: dict[str, Any] = {
            "asarray": asarray,
            "astype": astype,
            "reshape": reshape,
            "concat": concat,
            "stack": stack,
            "unstack": unstack,
            "permute_dims": permute_dims,
            "matrix_transpose": matrix_transpose,
            "vecdot": vecdot,
            "sum": _reduction(tf.reduce_sum),
            "prod": _reduction(tf.reduce_prod),
            "mean": _reduction(tf.reduce_mean),
            "max": _extremum(tf.reduce_max),
            "min": _extremum(tf.reduce_min),
            "all": _extremum(tf.reduce_all),
            "any": _extremum(tf.reduce_any),
            "var": _statistic("var"),
            "std": _statistic("std"),
            "cumulative_sum": _cumulative(tf.math.cumsum),
            "cumulative_prod": _cumulative(tf.math.cumprod),
            "where": where,
            "clip": clip,
            "flip": flip,
            "roll": roll,
            "sort": sort,
            "argsort": argsort,
            "take": take,
            "expand_dims": expand_dims,
            "squeeze": squeeze,
            "broadcast_to": broadcast_to,
            "matmul": matmul,
            "tensordot": tensordot,
            "zeros": _creation(tf.zeros),
            "ones": _creation(tf.ones),
            "empty": _creation(tf.zeros),
            "zeros_like": _like(tf.zeros_like),
            "ones_like": _like(tf.ones_like),
            "empty_like": _like(tf.zeros_like),
            "full": full,
            "full_like": full_like,
            "eye": eye,
            "arange": arange,
            "linspace": linspace,
            "isdtype": isdtype,
            "result_type": result_type,
            "from_dlpack": from_dlpack,
            "einsum": tf.einsum,
            "square": tf.square,
            "sqrt": tf.sqrt,
            "exp": tf.exp,
            "log": tf.math.log,
            "sin": tf.sin,
            "cos": tf.cos,
            "tanh": tf.tanh,
            "abs": tf.abs,
            "maximum": tf.maximum,
            "minimum": tf.minimum,
            "linalg": _linalg(),
        }
        for name, value in table.items():
            setattr(self, name, value)
        for name in _DTYPES:
            setattr(self, name, getattr(tf, name))

    def __getattr__(self, name: str) -> Any:
        value = getattr(tnp, _RENAMED.get(name, name), None)
        if value is None:
            raise AttributeError(f"the TensorFlow array namespace of di has no {name!r}")
        setattr(self, name, value)
        return value


@functools.cache
def tensorflow_namespace() -> TensorFlowNamespace:
    """The namespace, built once.

    Examples:
        >>> from di.engines.tensorflow.array_api import tensorflow_namespace
        >>> tensorflow_namespace() is tensorflow_namespace()
        True
    """
    return TensorFlowNamespace()
