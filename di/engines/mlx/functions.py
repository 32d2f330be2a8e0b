"""The array API over ``mlx.core``: what ``di.array_namespace`` answers for MLX
arrays (through :mod:`di.engines.mlx.namespace`) and what the fallbacks compute
with (the family's namespace).

``mlx.core`` has almost every array-API name, each a function MLX
differentiates, compiles and vectorises; this namespace is ``mlx.core`` with the
few differences fixed:

* ``asarray`` keeps a NumPy array's dtype (``mx.array`` of a float64 NumPy array
  gives float32: a silent truncation of the data ``f`` closes over), and so does
  ``from_dlpack`` (``mx.from_dlpack`` of a float64 array gives float32 too);
* ``bool`` (MLX calls it ``bool_``), ``hypot``, ``copysign`` and ``nonzero``,
  which MLX lacks, built from its functions;
* the ``linalg`` functions run on the CPU stream, where MLX has them, with the array
  API's ``vector_norm`` and ``matrix_norm`` (MLX has ``norm``);
* the reductions that have a value on an empty array (``sum``, ``prod``, ``mean``,
  ``var``, ``std``, ``all``, ``any``, ``count_nonzero`` and the norms) answer it
  without MLX's CPU reduction, which reads past its plan on an empty axis of a
  non-contiguous array and, depending on what memory held, returns a wrong value
  or never returns (``mx.sum(mx.zeros((0, 4)).T, axis=1)`` hangs in MLX 0.32).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import mlx.core as mx
import numpy as np

__all__ = ["MLX_NAMESPACE", "build_namespace"]


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Any:
    """``mx.array`` keeping a NumPy array's dtype unless ``dtype`` names another."""
    if isinstance(obj, mx.array):
        result = obj if dtype is None else obj.astype(dtype)
        return mx.array(result) if copy else result
    if dtype is None and isinstance(obj, (np.ndarray, np.generic)):
        obj = np.asarray(obj)
        dtype = getattr(mx, obj.dtype.name) if obj.dtype.kind in "biufc" else None
    return mx.array(obj) if dtype is None else mx.array(obj, dtype=dtype)


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    """The array API's ``astype`` (``mx.astype`` takes no ``copy``): ``x`` itself
    when it has ``dtype`` and no copy is asked, else a new array."""
    if x.dtype == dtype:
        return mx.array(x) if copy else x
    return mx.astype(x, dtype)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Any:
    """An array of another library as an MLX array of its dtype (``mx.from_dlpack``
    reads float64 as float32), through a NumPy view of it."""
    if isinstance(x, mx.array):
        return x
    array = np.from_dlpack(x)
    return mx.array(array, dtype=getattr(mx, array.dtype.name))


def hypot(x1: Any, x2: Any, /) -> Any:
    return mx.sqrt(mx.square(x1) + mx.square(x2))


def copysign(x1: Any, x2: Any, /) -> Any:
    return mx.where(mx.logical_or(x2 < 0, mx.logical_and(x2 == 0, mx.reciprocal(x2) < 0)), -mx.abs(x1), mx.abs(x1))


def nonzero(x: Any, /) -> tuple[Any, ...]:
    """The indices of the nonzero elements (a value-dependent shape: eager only)."""
    return tuple(mx.array(index) for index in np.nonzero(np.array(x)))


def _empty_safe(reduction: Any, empty_value: float | bool) -> Any:
    """``reduction`` (an ``mlx.core`` reduction), answering ``empty_value`` in MLX's
    own result shape and dtype when ``x`` has no elements, without running it."""

    @functools.wraps(reduction)
    def reduce(x: Any, /, *args: Any, **kwargs: Any) -> Any:
        if x.size != 0:
            return reduction(x, *args, **kwargs)
        unevaluated = reduction(x, *args, **kwargs)  # (its shape and dtype: never evaluated)
        return mx.full(unevaluated.shape, mx.array(empty_value, dtype=unevaluated.dtype))

    return reduce


_EMPTY_VALUES: dict[str, float | bool] = {
    "sum": 0.0,
    "prod": 1.0,
    "mean": float("nan"),
    "var": float("nan"),
    "std": float("nan"),
    "all": True,
    "any": False,
    "count_nonzero": 0,
}


_EMPTY_SAFE = {name: _empty_safe(getattr(mx, name), value) for name, value in _EMPTY_VALUES.items()}


class _Linalg:
    """``mx.linalg`` with its functions on the CPU stream (the one that has them)."""

    def __getattr__(self, name: str) -> Any:
        function = getattr(mx.linalg, name)
        return functools.partial(function, stream=mx.cpu) if callable(function) else function

    @staticmethod
    def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
        """The array API's ``vector_norm`` (MLX has ``norm`` only), over every axis
        by default (``mx.linalg.norm`` takes at most two axes)."""
        if x.size == 0:  # (MLX's reduction of an empty array: see the module's docstring)
            return _EMPTY_SAFE["sum"](x, axis=axis, keepdims=keepdims)
        if axis is None:
            norm = mx.linalg.norm(mx.reshape(x, (-1,)), ord=ord, axis=0, stream=mx.cpu)
            return mx.reshape(norm, (1,) * x.ndim) if keepdims else norm
        return mx.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims, stream=mx.cpu)

    @staticmethod
    def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:
        """The array API's ``matrix_norm``: over the last two axes."""
        if x.size == 0:
            return _EMPTY_SAFE["sum"](x, axis=(-2, -1), keepdims=keepdims)
        return mx.linalg.norm(x, ord=ord, axis=[-2, -1], keepdims=keepdims, stream=mx.cpu)


class _Namespace(ModuleType):
    """``mlx.core``, with the names of :data:`_OVERRIDES` replaced."""

    def __getattr__(self, name: str) -> Any:
        return getattr(mx, name)


_OVERRIDES: dict[str, Any] = {
    "asarray": asarray,
    "astype": astype,
    "from_dlpack": from_dlpack,
    "bool": mx.bool_,
    "hypot": hypot,
    "copysign": copysign,
    "nonzero": nonzero,
    "linalg": _Linalg(),
    **_EMPTY_SAFE,
}

MLX_NAMESPACE = _Namespace("di_mlx_namespace", "The array API over mlx.core, as di.array_namespace answers it.")
"""The namespace itself (one instance)."""
for _name, _function in _OVERRIDES.items():
    setattr(MLX_NAMESPACE, _name, _function)


def build_namespace() -> Any:
    """The array API over ``mlx.core`` (one instance, built once).

    Examples:
        >>> import mlx.core as mx
        >>> from di.engines.mlx.functions import build_namespace
        >>> import numpy as np
        >>> xp = build_namespace()
        >>> xp.asarray(np.zeros(2)).dtype, xp.sin is mx.sin
        (mlx.core.float64, True)
    """
    return MLX_NAMESPACE
