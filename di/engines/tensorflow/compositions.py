"""What composes inside TensorFlow's own transforms: a ``di`` call of
``AutoTensorFlow`` run inside them (``tests/test_transforms_tensorflow.py``)."""

from __future__ import annotations

from di.backends.transforms import Composition

__all__ = ["COMPOSITIONS"]

_SAME_POINT = frozenset({"same point"})

COMPOSITIONS = (
    Composition(
        "tf.function",
        _SAME_POINT,
        run="di.engines.tensorflow.inside:function",
        note="With or without jit_compile: AutoTensorFlow's programs trace into the caller's graph (a compiled "
        "prep's tf.function is nested in it). An unprepared call prepares at each trace.",
    ),
    Composition(
        "tf.GradientTape",
        _SAME_POINT,
        note="An outer tape (or forward accumulator) around a di call differentiates it: higher order is "
        "TensorFlow's own.",
    ),
    Composition(
        "tf.vectorized_map",
        _SAME_POINT,
        run="di.engines.tensorflow.inside:vectorized_map",
        note="x is one example: prepare with its shape (a strict prep compares it).",
    ),
)
"""What composes inside each TensorFlow transform: every operator, prepared (strict)
or not; same-point preps are refused (they compare the point by value)."""
