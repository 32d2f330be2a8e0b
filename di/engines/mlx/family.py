"""The MLX family: ``mlx.core.array``, MLX's one array class (concrete, lazy, or
traced by ``mx.grad``, ``mx.vmap`` and ``mx.compile`` alike).

Conversions keep the dtype: ``mx.array(numpy_float64_array)`` would give
float32, so NumPy arrays are converted with their dtype named. float64 exists in
MLX on the CPU only: :meth:`MlxFamily.scope` runs an engine's call on the CPU
stream when a 64-bit array is among its inputs. NumPy has no bfloat16: MLX's
crosses the hub as ml_dtypes' bfloat16, by its bits.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from di.families.family import Family, extended_precision, numpy_lacks
from di.families.registry import is_64_bit

__all__ = ["FAMILY", "MlxFamily", "mlx_dtype"]

_NO_MLX_DTYPE = ("float128", "complex128", "complex256")  # (MLX has complex64 only)


def mlx_dtype(name: str) -> Any:
    """The MLX dtype named ``name`` (``"float64"`` -> ``mx.float64``)."""
    return getattr(sys.modules["mlx.core"], "bool_" if name == "bool" else name)


class MlxFamily(Family):
    """MLX arrays. Written in place with ``a[...] = b`` (an MLX array is updated,
    never aliased into NumPy memory): ``out=`` buffers and ``Cache`` contexts work."""

    name = "mlx"
    display = "MLX"
    module = "mlx.core"
    mutable = True

    def array_types(self, module: ModuleType) -> tuple[type, ...]:
        return (module.array,)

    def to_numpy(self, value: Any) -> np.ndarray:
        if value.dtype == sys.modules["mlx.core"].bfloat16:
            import ml_dtypes

            return np.array(value.view(sys.modules["mlx.core"].uint16)).view(ml_dtypes.bfloat16)
        return np.array(value)  # (a copy: the caller owns a writable array)

    def from_numpy(self, array: np.ndarray) -> Any:
        import mlx.core as mx

        array = np.asarray(array)
        if numpy_lacks(array.dtype):  # ml_dtypes' bfloat16: MLX takes its bits
            return mx.array(np.array(array).view(np.uint16)).view(mx.bfloat16)
        if any(stride < 0 for stride in array.strides):  # MLX refuses negative strides
            array = np.ascontiguousarray(array)
        with self.scope((array.dtype,)):
            return mx.array(array, dtype=mlx_dtype(array.dtype.name))

    def takes_dtype(self, dtype: Any) -> bool:
        try:
            name = np.dtype(dtype).name
        except TypeError:  # an MLX dtype, which NumPy does not know
            name = self.describe_dtype(dtype)
        return not extended_precision(dtype) and name not in _NO_MLX_DTYPE

    def dlpack_source(self, value: Any) -> Any:
        import mlx.core as mx

        mx.eval(value)  # a lazy array has no buffer to share yet
        return value

    def namespace(self) -> Any:
        from di.engines.mlx.functions import build_namespace

        return build_namespace()

    def scope(self, dtypes: Sequence[Any] = ()) -> contextlib.AbstractContextManager[Any]:
        if any(is_64_bit(dtype) for dtype in dtypes):
            mx = sys.modules.get("mlx.core")
            if mx is not None and mx.default_device() != mx.cpu:
                return mx.stream(mx.cpu)  # type: ignore[no-any-return]  # float64 runs on the CPU only
        return contextlib.nullcontext()

    def astype(self, array: Any, dtype_name: str) -> Any:
        return array.astype(mlx_dtype(dtype_name))

    def write_out(self, out: Any, result: Any) -> Any:
        out[...] = result
        sys.modules["mlx.core"].eval(out)
        return out

    def copy(self, value: Any) -> Any:
        import mlx.core as mx

        copied = mx.array(mx.stop_gradient(value))
        mx.eval(copied)
        return copied

    def index(self, positions: np.ndarray) -> Any:
        import mlx.core as mx

        return mx.array(positions.astype(np.int32) if positions.size < 2**31 else positions)

    def scatter(self, data: Any, positions: Any, size: int) -> Any:
        import mlx.core as mx

        result = mx.zeros((size,), dtype=data.dtype)
        result[positions] = data
        return result

    def block(self, value: Any) -> None:
        sys.modules["mlx.core"].eval(value)

    def literal(self, value: Any, like: Any) -> Any:
        import mlx.core as mx

        return mx.array(np.asarray(value), dtype=like.dtype)


FAMILY = MlxFamily()
"""The MLX family's record."""


def on_cpu_stream(dtypes: Sequence[Any]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """The scope for inputs of ``dtypes``: MLX's CPU stream for 64-bit ones."""
    return lambda: FAMILY.scope(dtypes)
