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
the caller had set.

The switch covers ``f`` alone: a tape's backward pass, after ``f`` has returned,
runs TensorFlow's gradient functions (and a ``tf.custom_gradient``'s) with
TensorFlow's behavior as the caller has it, as they were written, and without the
promotion's Python on each of their operators (forward mode's derivatives are
computed while ``f`` runs, with it). A program running ``f`` in another thread
keeps it on until the last one ends; TensorFlow code in other threads sees it
meanwhile (the switch is TensorFlow's module state: it cannot be per thread). Its
promotion skips TensorFlow's casts of operands already of the result's dtype (an
op each: they doubled an eager operator's time), with the same results.

The methods are not set and deleted at each switch: any change to a class's
attributes invalidates Python's attribute caches for it and every subclass, and
TensorFlow's own Python then runs slower for the rest of the call (about 45 us of
an eager gradient at n = 1e3, 8 % of it). At the first switch each method is
installed once, as a gate (:class:`_Gated`) that gives the method while the
switch is on and, off, what ``tf.Tensor`` had before (a method of the caller's,
or nothing: an ``AttributeError``, as without di). Off, a tensor behaves as it
did: ``hasattr(x, "T")`` is false, unless the caller had given it one. Two
differences remain: ``dir(x)`` lists the gated names, and unary ``+x`` outside
``f`` raises ``AttributeError`` where TensorFlow raised ``TypeError``. ``ndim``
and ``__round__``, which ``tf.Tensor`` has with the same meaning, are left as
they are.
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

# the attributes TensorFlow's switch adds to tf.Tensor (np_math_ops._enable_numpy_methods), less
# ndim and __round__, which tf.Tensor has itself, with the same meaning
_METHODS = (
    "T",
    "size",
    "__pos__",
    "tolist",
    "transpose",
    "flatten",
    "reshape",
    "ravel",
    "clip",
    "astype",
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


_LEGACY = ops._get_promo_mode_enum("legacy")  # (what set_dtype_conversion_mode("legacy") sets)


class _Gated:
    """A method of the NumPy behavior on ``tf.Tensor``: ``method`` while the switch
    is on; off, ``before`` (what the class had), or an ``AttributeError`` where it
    had nothing (then ``tf.Tensor.__getattr__`` words it, as without di)."""

    __slots__ = ("before", "method", "name")

    def __init__(self, name: str, method: Any, before: Any) -> None:
        self.name, self.method, self.before = name, method, before

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if _STATE[0]:
            return self.method.__get__(instance, owner)
        if self.before is _ABSENT:
            raise AttributeError(self.name)
        return self.before.__get__(instance, owner) if hasattr(self.before, "__get__") else self.before


_STATE = [False]  # (whether the switch is on: read by every gate)
_GATES: dict[str, _Gated] = {}
_GATE_LIST: list[tuple[str, Any]] = [(name, _ABSENT) for name in _ON]  # (read at each switch; none yet)


def _install_gates() -> None:
    """Put a gate on ``tf.Tensor`` for each method where there is none: at the first
    switch, and again if something replaced one since (TensorFlow's own switch:
    what it set is then what a gate gives while off)."""
    tensor = tf.Tensor
    for name, method in _ON.items():
        current = tensor.__dict__.get(name, _ABSENT)
        if current is not _GATES.get(name):
            _GATES[name] = gate = _Gated(name, method, current)
            setattr(tensor, name, gate)
    _GATE_LIST[:] = list(_GATES.items())


class _Switch(NestedSwitch):
    """The scoped switch: on at the first entry, restored at the last exit.

    It runs twice per eager call, so it writes TensorFlow's module state
    directly (the dtype conversion mode, the slicing flag) rather than through
    its setters, and opens the methods' gates rather than setting them."""

    __slots__ = ()

    def switch_on(self) -> tuple[Any, bool]:
        get = tf.Tensor.__dict__.get
        for name, gate in _GATE_LIST:  # (a gate something replaced since: put back, what replaced it kept)
            if get(name) is not gate:
                _install_gates()
                break
        saved = (ops._dtype_conversion_mode, ops._numpy_style_slicing)
        ops._dtype_conversion_mode = _LEGACY
        override_binary_operator.maybe_promote_tensors = _promote_when_needed
        ops._numpy_style_slicing = True
        _STATE[0] = True
        return saved

    def switch_off(self, saved: tuple[Any, bool]) -> None:
        _STATE[0] = False
        mode, slicing = saved
        ops._dtype_conversion_mode = mode
        override_binary_operator.maybe_promote_tensors = _numpy_promotion
        ops._numpy_style_slicing = slicing


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
