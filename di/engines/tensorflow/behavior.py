"""TensorFlow's NumPy behavior, which ``AutoTensorFlow`` turns on when first used.

Functions written once with the array API (``xp = di.array_namespace(x)``) use
its operators and methods on ``x``: ``a @ x`` for a matrix and a vector, ``x.T``,
``x.reshape(...)``, ``x.astype(...)``, and NumPy's type promotion (a float32
tensor times a float64 array is float64). Plain TensorFlow has none of them
(its ``@`` is ``tf.matmul``, for matrices only). TensorFlow's own switch,
``tf.experimental.numpy.experimental_enable_numpy_behavior()``, gives them all;
it is process-wide, and ``di`` turns it on (with TensorFlow's defaults) the first
time an ``AutoTensorFlow`` selector or the array namespace of a tensor is used.
Code that ran before keeps its results: the switch adds methods and lets mixed
dtypes promote where TensorFlow raised.
"""

from __future__ import annotations

import functools

import tensorflow as tf

__all__ = ["enable_numpy_behavior"]


@functools.cache
def enable_numpy_behavior() -> None:
    """Turn on TensorFlow's NumPy behavior, once.

    Examples:
        >>> import tensorflow as tf
        >>> from di.engines.tensorflow.behavior import enable_numpy_behavior
        >>> enable_numpy_behavior()
        >>> (tf.ones((2, 3)) @ tf.ones(3)).shape
        TensorShape([2])
    """
    tf.experimental.numpy.experimental_enable_numpy_behavior()
