"""A call run inside TensorFlow's own transforms (the ``run`` hooks of
:data:`di.engines.tensorflow.compositions.COMPOSITIONS`): what the differential
fuzzer (:mod:`di.testing.fuzz`) compares with the same call made outside them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

__all__ = ["function", "vectorized_map"]


def function(call: Callable[[Any], Any], x: Any) -> Any:
    """``tf.function(call)(x)``: ``call`` traced into one graph (without AutoGraph,
    which rewrites Python control flow ``di``'s calls do not need).

    Examples:
        >>> import tensorflow as tf
        >>> from di.engines.tensorflow.inside import function
        >>> float(function(lambda x: x * 2.0, tf.ones(())))
        2.0
    """
    return tf.function(call, autograph=False)(x)


def vectorized_map(call: Callable[[Any], Any], x: Any) -> Any:
    """``call(x)`` computed by ``tf.vectorized_map`` over a batch of ``x`` and
    another point (``0.75 x``): the first result.

    Examples:
        >>> import tensorflow as tf
        >>> from di.engines.tensorflow.inside import vectorized_map
        >>> float(vectorized_map(lambda x: x * 2.0, tf.ones(())))
        2.0
    """
    batch = tf.nest.map_structure(lambda leaf: tf.stack([leaf, leaf * 0.75]), x)
    return tf.nest.map_structure(lambda result: result[0], tf.vectorized_map(call, batch))
