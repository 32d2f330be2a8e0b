"""PyTensor's selector: :class:`AutoPyTensor`. Building one imports nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from di.backends.selectors import AbstractBackend
from di.errors import InvalidOptionError, InvalidOptionTypeError

__all__ = ["AutoPyTensor"]

_MODES = ("FAST_COMPILE", "FAST_RUN", "C", "CVM", "NUMBA", "JAX", "PYTORCH", "MLX")


@dataclass(frozen=True)
class AutoPyTensor(AbstractBackend):
    """PyTensor: ``f`` applied once to symbolic variables at preparation, the
    derivative graph built with ``pytensor.gradient`` and compiled with
    ``pytensor.function``.

    PyTensor is symbolic: there is no eager variant. Every prep holds compiled
    functions only, one per operator program and signature; ``f`` is not called
    again after preparation. Contexts are symbolic inputs (a changed value is
    read without compiling again), except those compiled in: ints, strings and
    other hashable non-array values, and any ``di.Constant(value,
    static=True)`` (an array too), each new value of which compiles again.

    Args:
        mode: PyTensor's compilation mode, passed to ``pytensor.function``:
            ``None`` for PyTensor's default (its Numba linker in 3.0),
            ``"FAST_COMPILE"`` (Python linker, few rewrites: quick to compile,
            slower to run), ``"C"``, ``"CVM"``, ``"NUMBA"``, ``"JAX"``, ...

    Raises:
        InvalidOptionTypeError: ``mode`` is not a string or ``None``.
        InvalidOptionError: ``mode`` is not one of PyTensor's predefined modes.

    Examples:
        >>> import di
        >>> di.AutoPyTensor(mode="FAST_COMPILE")
        AutoPyTensor(mode='FAST_COMPILE')
    """

    mode: str | None = None

    compiles: ClassVar[bool] = True
    """Every PyTensor prep compiles (the adapter's ``compile_option``): there is no
    eager PyTensor."""

    def __post_init__(self) -> None:
        if self.mode is None:
            return
        if not isinstance(self.mode, str):
            raise InvalidOptionTypeError(
                f"AutoPyTensor(mode=...) takes the name of a PyTensor mode or None, not {type(self.mode).__name__}"
            )
        if self.mode not in _MODES:
            raise InvalidOptionError(
                f"AutoPyTensor(mode={self.mode!r}): PyTensor's modes are {', '.join(map(repr, _MODES))} "
                f"(or None for its default)"
            )
