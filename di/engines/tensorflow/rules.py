"""How TensorFlow's outputs and errors inside ``f`` look to ``di``'s output
contract (:class:`~di.backends.outputs.OutputRules`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record

from di.backends.misuse import written_x_error
from di.backends.outputs import OutputRules
from di.backends.selectors import AbstractBackend
from di.engines.tensorflow.shapes import EAGER, eager_shape
from di.errors import InvalidOutputError

__all__ = ["RULES", "accepts_array", "accepts_scalar", "is_tensor"]


def is_tensor(value: Any) -> bool:
    """Whether ``value`` is a TensorFlow tensor (eager or symbolic) or variable."""
    return isinstance(value, (tf.Tensor, tf.Variable))


def accepts_array(y: Any) -> bool:
    """The common output of an array operator told at a glance: an eager floating
    tensor with at least one dimension, which :func:`~di.backends.outputs.check_output`
    passes as it is (only a 0-d one needs the look at the tape). ``False``
    sends ``y`` to the full check."""
    return y.__class__ is EAGER and y.dtype.is_floating and eager_shape(y) != ()


def accepts_scalar(y: Any) -> bool:
    """The common output of a scalar operator told at a glance: a 0-d eager
    floating tensor that a tape records (computed from ``x``), which
    :func:`~di.backends.outputs.check_output` passes as it is. ``False`` sends
    ``y`` to the full check (a one-element array made 0-d, an output the tapes
    do not record, anything else)."""
    return y.__class__ is EAGER and eager_shape(y) == () and y.dtype.is_floating and record.should_record_backprop((y,))


class _Rules(OutputRules):
    """TensorFlow outputs: tensors, eager or symbolic. An eager tensor converts
    with ``float()`` (as torch's does): what cannot be seen is a Python number
    returned, which carries no derivative, or a NumPy array (``np.sin(x)`` on an
    eager tensor computes in NumPy, off the tape)."""

    traces = True
    # float(symbolic) and the like: TypeError; np.sin(symbolic): NotImplementedError;
    # .item() or .reshape() of a tensor: AttributeError
    conversion_errors = (TypeError, NotImplementedError, AttributeError)

    def is_traced(self, y: Any, x: Any) -> bool:
        # a scalar a tape recording x does not record was cut off it (tf.stop_gradient,
        # a new tensor): its gradient would be zeros
        return is_tensor(y) and (record.should_record_backprop([y]) or not record.should_record_backprop([x]))

    def scalar(self, y: Any) -> Any:
        return tf.reshape(y, ())

    def accepts_array(self, y: Any) -> bool:
        return is_tensor(y) and (y.dtype.is_floating or y.dtype == tf.bfloat16)

    def translate(
        self, error: BaseException, backend: AbstractBackend, operator: str, values: Sequence[Any]
    ) -> BaseException | None:
        if isinstance(error, TypeError) and "does not support item assignment" in str(error):
            # x[0] = 5.0: tensors are immutable. With a context that reaches f as a tensor (a
            # Cache), the write may be into it: TensorFlow's own error then, as it is
            return None if any(is_tensor(value) for value in values) else written_x_error(backend, operator)
        if not isinstance(error, tf.errors.OperatorNotAllowedInGraphError):
            return None
        return InvalidOutputError(
            f"{operator} cannot differentiate f with {backend!r}: f uses a value computed from x as a Python bool or "
            f"in Python control flow (an if, a while, a bool()), and {backend!r} traces f once into a tf.function "
            f"graph, where the value is not known. Write the branch with array operations (xp.where(condition, a, "
            f"b), tf.cond), or use AutoTensorFlow() (eager), which runs f op by op."
        )

    def is_conversion_error(self, error: BaseException) -> str:
        text = str(error)
        if "Tensor" not in text:
            return ""
        if "float()" in text:
            return "float()"
        if "int()" in text or "__index__" in text:
            return "int()"
        if "has no attribute 'item'" in text:
            return ".item()"
        if "has no attribute 'tolist'" in text:
            return ".tolist()"
        return ""

    def foreign_cause(self, error: BaseException) -> str:
        return "numpy" if "Cannot convert a symbolic" in str(error) and "numpy" in str(error) else ""

    def foreign_output(self, y: Any) -> str:
        # np.sin(x) on an eager tensor is a NumPy array: computed off the tape
        return "numpy" if isinstance(y, (np.ndarray, np.generic)) else ""


RULES = _Rules()
