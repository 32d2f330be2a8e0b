"""TensorFlow's NumPy behavior, on only while ``AutoTensorFlow`` runs ``f``.

Functions written once with the array API (``xp = di.array_namespace(x)``) use
its operators and methods on ``x``: ``a @ x`` for a matrix and a vector, ``x.T``,
``x.reshape(...)``, ``x.astype(...)``, NumPy's indexing and type promotion (a
float32 tensor times a float64 array is float64). Plain TensorFlow has none of
them (its ``@`` is ``tf.matmul``, for matrices only). TensorFlow's own switch,
``tf.experimental.numpy.experimental_enable_numpy_behavior()``, gives them all,
but it is process-wide and has no "off". :func:`numpy_behavior` is that switch
scoped: it turns the same three pieces on (the ``tf.Tensor`` methods, NumPy-style
slicing, NumPy-style promotion in the operators), with the array API's ``.mT``, while ``AutoTensorFlow``'s
programs run ``f`` (an eager call, or the trace of a compiled one: a compiled
program runs without it) and puts back exactly what was there before, whatever
the caller had set. It covers ``f`` alone: a tape's backward pass, after ``f``
has returned, runs TensorFlow's gradient functions (and a ``tf.custom_gradient``'s)
with TensorFlow's behavior as the caller has it, as they were written, and
without the promotion's Python on each of their operators (forward mode's
derivatives are computed while ``f`` runs, with it). A program running ``f`` in another thread keeps it on until
the last one ends; TensorFlow code in other threads sees it meanwhile (the
switch is TensorFlow's module state: it cannot be per thread). Its promotion
skips TensorFlow's casts of operands already of the result's dtype (an op each:
they doubled an eager operator's time), with the same results.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops, override_binary_operator
from tensorflow.python.ops.numpy_ops import np_math_ops

from di.backends.scoping import NestedSwitch

__all__ = ["numpy_behavior"]

# the attributes TensorFlow's switch adds to tf.Tensor (np_math_ops._enable_numpy_methods)
_METHODS = (
    "T",
    "ndim",
    "size",
    "__pos__",
    "tolist",
    "transpose",
    "flatten",
    "reshape",
    "ravel",
    "clip",
    "astype",
    "__round__",
    "max",
    "mean",
    "min",
    "data",
)
_ABSENT = object()


def _enabled_methods() -> dict[str, Any]:
    """The methods TensorFlow's switch sets, read off a throwaway class, and the
    array API's ``mT``, which it lacks."""
    holder = type("NumpyMethods", (), {})
    np_math_ops._enable_numpy_methods(holder)
    return {**{name: holder.__dict__[name] for name in _METHODS}, "mT": property(tf.linalg.matrix_transpose)}


_ON = _enabled_methods()

_numpy_promotion = override_binary_operator.maybe_promote_tensors
_PYTHON_NUMBERS = (float, int)
_Tensor = tf.Tensor


def _promote_when_needed(*tensors: Any, force_same_dtype: bool = False) -> Any:
    """TensorFlow's NumPy promotion of an operator's operands, skipped where it
    changes nothing: TensorFlow's own casts every operand, even one already of
    the result's dtype (an op per operand, most of an eager operator's time).
    Tensors of one dtype, and a Python number beside a floating tensor (weak, as
    NumPy takes it: the tensor's dtype), pass as they are; anything else is
    promoted by TensorFlow.

    A number after the tensor in an operator (``x * 2.0``, ``force_same_dtype``
    false) goes on as it is: TensorFlow's operator converts it to the tensor's
    dtype itself, as it does with the behavior off. Before it (``2.0 * x``,
    ``force_same_dtype``) it is converted here, as TensorFlow's own promotion
    does with the behavior off."""
    if len(tensors) == 2:  # (every operator: the common cases without the loop)
        first, second = tensors
        if isinstance(first, _Tensor):
            if isinstance(second, _Tensor):
                dtype, other = first.dtype, second.dtype
                if dtype is other or dtype == other:  # (TensorFlow's dtypes are interned: `is` first)
                    return tensors
            elif not force_same_dtype and second.__class__ in _PYTHON_NUMBERS and first.dtype.is_floating:
                return tensors
    dtype = None
    numbers_too = False
    for value in tensors:
        if isinstance(value, _Tensor):
            value_dtype = value.dtype
            if dtype is None:
                dtype = value_dtype
            elif value_dtype is not dtype and value_dtype != dtype:  # (TensorFlow's dtypes are interned: `is` first)
                return _numpy_promotion(*tensors, force_same_dtype=force_same_dtype)
        elif value.__class__ in _PYTHON_NUMBERS or (
            isinstance(value, numbers.Real) and not isinstance(value, np.generic)
        ):  # (the exact Python types first: the ABC's check is the slow one)
            numbers_too = True
        else:
            return _numpy_promotion(*tensors, force_same_dtype=force_same_dtype)
    if dtype is None or (numbers_too and not dtype.is_floating):
        return _numpy_promotion(*tensors, force_same_dtype=force_same_dtype)
    if numbers_too:  # a Python number takes the tensor's dtype (NumPy's weak scalar), as TensorFlow's casts did
        return [v if isinstance(v, _Tensor) else ops.convert_to_tensor(v, dtype) for v in tensors]
    return tensors


_NAMES = tuple(_ON)
_METHODS_ON = tuple(_ON.items())
_LEGACY = ops._get_promo_mode_enum("legacy")  # (what set_dtype_conversion_mode("legacy") sets)


class _Switch(NestedSwitch):
    """The scoped switch: on at the first entry, restored at the last exit.

    It runs twice per eager call, so it writes TensorFlow's module state
    directly (the dtype conversion mode, the slicing flag) rather than through
    its setters, and reads ``tf.Tensor``'s attributes in one pass."""

    __slots__ = ()

    def switch_on(self) -> tuple[Any, bool, list[Any]]:
        tensor = tf.Tensor
        get = tensor.__dict__.get
        saved = (ops._dtype_conversion_mode, ops._numpy_style_slicing, [get(name, _ABSENT) for name in _NAMES])
        ops._dtype_conversion_mode = _LEGACY
        override_binary_operator.maybe_promote_tensors = _promote_when_needed
        ops._numpy_style_slicing = True
        for name, method in _METHODS_ON:
            setattr(tensor, name, method)
        return saved

    def switch_off(self, saved: tuple[Any, bool, list[Any]]) -> None:
        mode, slicing, methods = saved
        ops._dtype_conversion_mode = mode
        override_binary_operator.maybe_promote_tensors = _numpy_promotion
        ops._numpy_style_slicing = slicing
        tensor = tf.Tensor
        for name, method in zip(_NAMES, methods):
            if method is _ABSENT:
                delattr(tensor, name)
            else:
                setattr(tensor, name, method)


_SWITCH = _Switch()


def numpy_behavior() -> _Switch:
    """TensorFlow's NumPy behavior while the ``with`` block runs (see the module).

    Returns:
        A context manager; nested and concurrent uses keep the behavior on until
        the last one ends, which restores what was there before the first.

    Examples:
        >>> import tensorflow as tf
        >>> from di.engines.tensorflow.behavior import numpy_behavior
        >>> with numpy_behavior():
        ...     (tf.ones((2, 3)) @ tf.ones(3)).shape
        TensorShape([2])
        >>> hasattr(tf.ones(3), "T")
        False
    """
    return _SWITCH
