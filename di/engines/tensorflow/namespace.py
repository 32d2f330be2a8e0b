"""The namespace :func:`di.array_namespace` answers for TensorFlow tensors (the
record's :class:`~di.backends.engine.NamespaceOverride`): the array API over
TensorFlow of :mod:`di.engines.tensorflow.array_api`."""

from __future__ import annotations

from di.engines.tensorflow.array_api import TensorFlowNamespace, tensorflow_namespace

__all__ = ["build_namespace"]


def build_namespace() -> TensorFlowNamespace:
    """The array API over TensorFlow, built once (imported only once a tensor exists).

    Examples:
        >>> import tensorflow as tf, di
        >>> from di.engines.tensorflow.namespace import build_namespace
        >>> xp = di.array_namespace(tf.ones(2))
        >>> xp is build_namespace(), float(xp.sum(xp.sin(tf.zeros(2))))
        (True, 0.0)
    """
    return tensorflow_namespace()
