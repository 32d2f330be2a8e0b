"""TensorFlow: its selector, adapter, array family, ``DifferentiateWith`` host and
the array namespace ``f`` computes with on TensorFlow tensors (TensorFlow has no
array-API namespace of its own).

:data:`ENGINE` is the record the registries read; importing this package imports
neither TensorFlow nor the adapter (``import tensorflow`` takes seconds).
"""

from __future__ import annotations

from di.backends.engine import Engine, NamespaceOverride
from di.engines.tensorflow.selector import AutoTensorFlow

__all__ = ["ENGINE"]

ENGINE = Engine(
    name="tensorflow",
    selectors=(AutoTensorFlow,),
    adapter="di.engines.tensorflow.adapter:TensorFlowAdapter",
    display="TensorFlow",
    aliases=("tf",),
    labels={"tensorflow": AutoTensorFlow(), "tensorflow-compile": AutoTensorFlow(compile=True)},
    fastest=("tensorflow", "tensorflow-compile"),
    compiled=("tensorflow-compile",),
    module="tensorflow",
    extra="tensorflow",
    distributions=("tensorflow-cpu", "tensorflow"),
    family="di.engines.tensorflow.family:FAMILY",
    host="di.engines.tensorflow.host:HOST",
    # array-api-compat has no TensorFlow namespace (it refuses tensors): di answers one
    # whose array-API names are TensorFlow functions, which the tape and the
    # forward accumulator differentiate, eager and inside tf.function.
    namespace=NamespaceOverride(
        replaces="tensorflow",
        build="di.engines.tensorflow.namespace:build_namespace",
        traced="tensorflow.python.types.core:Tensor",
        mixes_with="numpy",
    ),
)
"""TensorFlow's record: ``AutoFastest`` measures ``AutoTensorFlow()`` and, with
``include_compiled``, ``AutoTensorFlow(compile=True)``."""
