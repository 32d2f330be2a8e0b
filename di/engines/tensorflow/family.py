"""The TensorFlow family: ``tf.Tensor`` (eager, and the symbolic tensors of a
``tf.function`` trace) and ``tf.Variable``, read as tensors.

Detection is by class through ``sys.modules``: nothing is imported until a
tensor exists. Tensors are immutable (``mutable = False``): a conversion from
NumPy copies, and so does ``.numpy()``, so results never share memory with
``x``. A ``tf.Variable`` given as ``x`` or as a context is read as the tensor of
its current value (its value is never assigned).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from di.families.family import Family, Matcher, by_numpy, extended_precision

__all__ = ["FAMILY", "TensorFlowFamily", "is_symbolic"]


def is_symbolic(value: Any) -> bool:
    """Whether ``value`` is a symbolic tensor of a ``tf.function`` trace (a graph
    tensor, which has no value to read).

    Examples:
        >>> from di.engines.tensorflow.family import is_symbolic
        >>> is_symbolic(1.0)
        False
    """
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(value, tf.Tensor) and not hasattr(value, "numpy")


def _tensor_classes() -> tuple[type, ...]:
    """The classes of eager and symbolic tensors."""
    from tensorflow.python.framework.ops import EagerTensor, SymbolicTensor

    return (EagerTensor, SymbolicTensor)


class TensorFlowFamily(Family):
    """TensorFlow tensors (and variables, read as tensors), on the host CPU or any
    device TensorFlow places them on."""

    name = "tensorflow"
    display = "TensorFlow"
    module = "tensorflow"
    mutable = False

    def array_types(self, module: ModuleType) -> tuple[type, ...]:
        return (module.Tensor, module.Variable)

    def to_numpy(self, value: Any) -> np.ndarray:
        try:
            array = value.numpy()  # (a copy: the caller's array; a NumPy scalar for a 0-d tensor)
        except AttributeError:
            raise TypeError(
                "a symbolic TensorFlow tensor (inside tf.function) has no value to convert to NumPy: call di inside "
                "the traced function with AutoTensorFlow, whose programs trace into it"
            ) from None
        return array if array.__class__ is np.ndarray else np.asarray(array)

    def from_numpy(self, array: np.ndarray) -> Any:
        import tensorflow as tf

        return tf.convert_to_tensor(np.asarray(array))  # a copy, keeping the dtype (bfloat16 too)

    def from_dlpack(self, value: Any) -> Any:
        if by_numpy(value):
            return NotImplemented
        import tensorflow as tf

        return tf.experimental.dlpack.from_dlpack(value.__dlpack__())

    def dlpack_source(self, value: Any) -> Any:
        tf = sys.modules["tensorflow"]
        return tf.convert_to_tensor(value) if isinstance(value, tf.Variable) else value

    def takes_dtype(self, dtype: Any) -> bool:
        return not extended_precision(dtype)

    def device(self, value: Any) -> Any:
        return getattr(value, "device", None) or None

    def is_default_device(self, device: Any) -> bool:
        return device is None or "CPU:0" in str(device)

    def describe_dtype(self, dtype: Any) -> str:
        return str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]

    def is_floating(self, dtype: Any) -> bool:
        return bool(getattr(dtype, "is_floating", False)) or self.describe_dtype(dtype) == "bfloat16"

    def matcher(self, value: Any) -> Matcher:
        from di.engines.tensorflow.shapes import EAGER, eager_shape

        shape, dtype = value.shape, value.dtype
        classes = _tensor_classes() if isinstance(value, sys.modules["tensorflow"].Tensor) else (value.__class__,)

        def matches(given: Any) -> bool:
            # an eager tensor and a symbolic one (the same x inside tf.function) are alike
            return given.__class__ in classes and given.dtype == dtype and given.shape == shape

        if value.__class__ is not EAGER:
            return matches
        dims = eager_shape(value)

        def matches_eager(given: Any) -> bool:
            # (a strict prep's comparison at every call: an eager tensor's dtype, interned, by
            # identity first, its shape as a tuple; a new tensor's .shape builds a TensorShape)
            if given.__class__ is EAGER:
                given_dtype = given.dtype
                return (given_dtype is dtype or given_dtype == dtype) and eager_shape(given) == dims
            return matches(given)

        return matches_eager

    def key(self, value: Any) -> Any:
        return (value.__class__, self.shape(value), self.describe_dtype(value.dtype), str(self.device(value)))

    def shape(self, value: Any) -> tuple[int, ...]:
        return tuple(value.shape)

    def traced_by(self, value: Any) -> str:
        return "tf.function" if is_symbolic(value) else ""

    def annotation(self, value: Any) -> str:
        tf = sys.modules["tensorflow"]
        if isinstance(value, tf.Variable):
            return "a tf.Variable, read as a tensor"
        return "traced by tf.function" if is_symbolic(value) else ""

    def namespace(self) -> Any:
        from di.engines.tensorflow.array_api import tensorflow_namespace

        return tensorflow_namespace()

    def astype(self, array: Any, dtype_name: str) -> Any:
        tf = sys.modules["tensorflow"]
        return tf.cast(array, getattr(tf, dtype_name))

    def copy(self, value: Any) -> Any:
        tf = sys.modules["tensorflow"]
        return tf.identity(value)

    def literal(self, value: Any, like: Any) -> Any:
        tf = sys.modules["tensorflow"]
        return tf.constant(np.asarray(value), dtype=like.dtype)

    def sparse_matrix(self, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]) -> Callable[[Any], Any]:
        """A ``tf.sparse.SparseTensor`` in row-major (CSR) order, as
        ``tf.sparse`` expects (its index tensor is immutable: results may share it)."""
        import tensorflow as tf

        rows = np.repeat(np.arange(shape[0], dtype=np.int64), np.diff(indptr))
        coordinates = tf.constant(np.stack([rows, indices.astype(np.int64)], axis=1).reshape(-1, 2))
        dense_shape = tf.constant(np.asarray(shape, dtype=np.int64))

        def sparse_tensor(data: Any) -> Any:
            return tf.sparse.SparseTensor(coordinates, data, dense_shape)

        return sparse_tensor

    def sparse_to_numpy(self, value: Any) -> np.ndarray | None:
        tf = sys.modules["tensorflow"]
        if not isinstance(value, tf.sparse.SparseTensor):
            return None
        return self.to_numpy(tf.sparse.to_dense(value))

    def sparse_to_scipy(self, value: Any) -> Any:
        tf = sys.modules["tensorflow"]
        if not isinstance(value, tf.sparse.SparseTensor):
            return None
        import scipy.sparse as sp

        if len(value.shape) != 2:
            return sp.csr_array(self.sparse_to_numpy(value))
        rows, columns = self.to_numpy(value.indices).T
        shape = tuple(int(size) for size in self.to_numpy(value.dense_shape))
        return sp.csr_array(sp.coo_array((self.to_numpy(value.values), (rows, columns)), shape=shape))


FAMILY = TensorFlowFamily()
