"""The ``linalg`` and ``fft`` extensions of the sparsity tracer's namespace
(``xp.linalg``, ``xp.fft``), set on :mod:`di.sparse.arrays.namespace` when this
module is imported.

Matrix functions (``inv``, ``solve``, ``det``, ``cholesky``, ``eigh``, ``qr``,
``svd``, ...) make every output depend on every input: exact for one matrix,
whose inverse or factors are dense in general, and conservative for a stack of
matrices. ``vector_norm`` is a reduction; ``diagonal``, ``trace``, ``matmul``,
``matrix_transpose``, ``tensordot``, ``vecdot`` and ``outer`` are the main
namespace's rules. The one-dimensional transforms of ``fft`` make each output
depend on its whole line along the transformed axis (they are linear: no
second-order pairs); the n-dimensional ones on every input; ``fftshift`` and
``ifftshift`` rearrange.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import array_api_compat.numpy
import numpy as np

from di.sparse.arrays import namespace
from di.sparse.arrays.rules import computed, positions_of, reduced, reduction, rows_at, tape_of, value_of
from di.sparse.arrays.tracer import Traced

__all__ = ["fft", "linalg"]

_np_xp: Any = array_api_compat.numpy


def _whole(function: Callable[..., Any], *, linear: bool) -> Callable[..., Any]:
    """Every output element depending on every element of every traced argument."""

    def rule(*arguments: Any, **options: Any) -> Any:
        tape = tape_of(arguments)
        if tape is None:
            return function(*arguments, **options)
        traced = [a for a in arguments if isinstance(a, Traced)]
        flat = [namespace.reshape(t, (-1,)) for t in traced]
        joined = namespace.concat(flat) if len(flat) > 1 else flat[0]
        result = _evaluated(function, arguments, options)
        outputs = result if isinstance(result, tuple) else (result,)
        every = np.ones((1, joined.size), dtype=np.bool_)
        spread = [reduced(joined, every, np.asarray(out), nonlinear=not linear, broadcast=True) for out in outputs]
        if not isinstance(result, tuple):
            return spread[0]
        return type(result)(*spread) if hasattr(result, "_fields") else tuple(spread)

    rule.__name__ = getattr(function, "__name__", "rule")
    return rule


def _evaluated(function: Callable[..., Any], arguments: tuple[Any, ...], options: dict[str, Any]) -> Any:
    """``function`` of the values; where those are unknown (the global tracer)
    and the point's values fail (a singular matrix), of random values of the same
    shapes, which give the output's shape."""
    try:
        return computed(function, *[value_of(a) for a in arguments], **options)
    except Exception:
        if all(a.known or a.tape.local for a in arguments if isinstance(a, Traced)):
            raise
        rng = np.random.default_rng(0)
        stand_ins = [
            rng.standard_normal(a.shape).astype(a.dtype)
            if isinstance(a, Traced) and not (a.known or a.tape.local)
            else value_of(a)
            for a in arguments
        ]
        return computed(function, *stand_ins, **options)


def _along_axis(function: Callable[..., Any]) -> Callable[..., Any]:
    """A linear transform along one axis: each output depends on its input line."""

    def rule(x: Any, /, *args: Any, axis: int = -1, **options: Any) -> Any:
        if not isinstance(x, Traced):
            return function(x, *args, axis=axis, **options)
        value = np.asarray(computed(function, x.value, *args, axis=axis, **options))
        axis = axis % x.ndim
        groups = np.moveaxis(positions_of(x), axis, -1).reshape(-1, x.shape[axis])
        lines = reduced(x, groups, np.zeros(groups.shape[0]), nonlinear=False)
        moved_shape = (*np.delete(np.asarray(value.shape), axis), value.shape[axis])
        line_index = np.broadcast_to(np.arange(groups.shape[0]).reshape(*moved_shape[:-1], 1), moved_shape)
        return rows_at(lines, np.moveaxis(line_index, -1, axis), value)

    rule.__name__ = function.__name__
    return rule


def _shift(function: Callable[..., Any]) -> Callable[..., Any]:
    def rule(x: Any, /, *, axes: Any = None) -> Any:
        if not isinstance(x, Traced):
            return function(x, axes=axes)
        return rows_at(x, function(positions_of(x), axes=axes), function(x.value, axes=axes))

    return rule


def _diagonal(x: Any, /, *, offset: int = 0) -> Any:
    if not isinstance(x, Traced):
        return np.diagonal(x, offset=offset, axis1=-2, axis2=-1)
    positions = np.diagonal(positions_of(x), offset=offset, axis1=-2, axis2=-1)
    return rows_at(x, positions, np.diagonal(x.value, offset=offset, axis1=-2, axis2=-1))


def _trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> Any:
    return namespace.sum(_diagonal(x, offset=offset), axis=-1)


_MATRIX_FUNCTIONS = (
    "cholesky cond cross det eig eigh eigvals eigvalsh inv lstsq matrix_norm matrix_power matrix_rank multi_dot "
    "norm pinv qr slogdet solve svd svdvals tensorinv tensorsolve"
).split()

linalg = types.SimpleNamespace(
    **{name: _whole(getattr(_np_xp.linalg, name), linear=False) for name in _MATRIX_FUNCTIONS},
    vector_norm=reduction(True, _np_xp.linalg.vector_norm),
    diagonal=_diagonal,
    trace=_trace,
    matmul=namespace.matmul,
    matrix_transpose=namespace.matrix_transpose,
    tensordot=namespace.tensordot,
    vecdot=namespace.vecdot,
    outer=namespace.outer,
)

_LINES = "fft ifft rfft irfft hfft ihfft".split()
_WHOLE = "fft2 ifft2 fftn ifftn rfft2 irfft2 rfftn irfftn".split()
fft = types.SimpleNamespace(
    **{name: _along_axis(getattr(np.fft, name)) for name in _LINES},
    **{name: _whole(getattr(np.fft, name), linear=True) for name in _WHOLE},
    fftshift=_shift(np.fft.fftshift),
    ifftshift=_shift(np.fft.ifftshift),
    fftfreq=np.fft.fftfreq,
    rfftfreq=np.fft.rfftfreq,
)

namespace.linalg = linalg  # type: ignore[attr-defined]
namespace.fft = fft  # type: ignore[attr-defined]
