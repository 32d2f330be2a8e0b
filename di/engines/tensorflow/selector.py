"""TensorFlow's selector: :class:`AutoTensorFlow`. Building one imports nothing."""

from __future__ import annotations

from dataclasses import dataclass

from di.backends.selectors import AbstractBackend, check_flags

__all__ = ["AutoTensorFlow"]


@dataclass(frozen=True)
class AutoTensorFlow(AbstractBackend):
    """TensorFlow: ``tf.GradientTape`` for reverse mode, ``tf.autodiff.ForwardAccumulator``
    for forward mode.

    Args:
        compile: ``False`` runs ``f`` eagerly, op by op, every call. ``True``
            runs each operator as one ``tf.function(..., jit_compile=True)``
            program (XLA), traced once per input signature at preparation, with
            ``Constant`` arrays as tensor inputs (a changed value is read) and
            Python numbers and strings compiled in (one trace per value);
            ``docs/engines/tensorflow.md`` says what that means for ``f``.

    Examples:
        >>> import di
        >>> di.AutoTensorFlow(compile=True)
        AutoTensorFlow(compile=True)
    """

    compile: bool = False

    def __post_init__(self) -> None:
        check_flags(self, "compile")
