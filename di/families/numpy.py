"""The NumPy family: ``ndarray`` and NumPy scalars; the hub every conversion passes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from di.families.family import Family, Matcher

__all__ = ["FAMILY", "NUMPY_SPELLINGS", "NumpyFamily"]

NUMPY_SPELLINGS = {
    "acos": "arccos",
    "acosh": "arccosh",
    "asin": "arcsin",
    "asinh": "arcsinh",
    "atan": "arctan",
    "atan2": "arctan2",
    "atanh": "arctanh",
    "pow": "power",
}
"""The array API's names that NumPy 1.x and the libraries modelled on it spell
otherwise: what a namespace override mapping the array API onto such a library
starts from."""


class NumpyFamily(Family):
    """NumPy arrays. A NumPy scalar (``np.float64(1.0)``, what NumPy arithmetic
    makes of a 0-d array) is the same argument as a 0-d array of its dtype."""

    name = "numpy"
    display = "NumPy"
    module = "numpy"

    def array_types(self, module: ModuleType) -> tuple[type, ...]:
        return (np.ndarray, np.generic)

    def is_array(self, value: Any) -> bool:
        return isinstance(value, (np.ndarray, np.generic))

    def refusal(self, value: Any, name: str) -> str:
        if value.__class__ is np.ndarray or isinstance(value, np.generic):
            return ""
        array = name if " " not in name else "value"  # x, x['w'], tx[0]: expressions the caller can write
        if isinstance(value, np.ma.MaskedArray):
            return (
                f"{name} is a NumPy masked array (np.ma.MaskedArray): the engines convert it to its data and drop "
                f"the mask, which f itself would honour. Pass {array}.filled(fill_value) or "
                f"np.asarray({array}) explicitly (and apply the mask in f, e.g. with the mask as a di.Constant)."
            )
        if isinstance(value, np.matrix):
            return (
                f"{name} is an np.matrix, whose * is a matrix product where f receives it as it is and an "
                f"elementwise product where an engine converts it. Pass np.asarray({array}) (and write @ for "
                f"matrix products)."
            )
        return ""

    def to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def from_numpy(self, array: np.ndarray) -> Any:
        return array

    def shape(self, value: Any) -> tuple[int, ...]:
        return tuple(np.shape(value))

    def describe_dtype(self, dtype: Any) -> str:
        return str(np.dtype(dtype))

    def matcher(self, value: Any) -> Matcher:
        cls, shape, dtype = value.__class__, value.shape, value.dtype
        if shape == ():  # a 0-d array or a NumPy scalar: either is the same argument
            return lambda given: (
                (given.__class__ is cls or given.__class__ is np.ndarray or isinstance(given, np.generic))
                and (given.shape == () and given.dtype == dtype)
            )
        return lambda given: given.__class__ is cls and given.shape == shape and given.dtype == dtype

    def fields(self, value: Any) -> tuple[type, Any, Any] | None:
        if value.shape == ():  # (the matcher also takes NumPy scalars for 0-d arrays)
            return None
        return value.__class__, value.shape, value.dtype

    def key(self, value: Any) -> Any:
        cls = np.ndarray if isinstance(value, np.generic) else value.__class__
        return (cls, tuple(value.shape), str(value.dtype))

    def namespace(self) -> Any:
        import array_api_compat.numpy

        return array_api_compat.numpy

    def astype(self, array: Any, dtype_name: str) -> Any:
        return np.asarray(array).astype(dtype_name, copy=False)

    def write_out(self, out: Any, result: Any) -> Any:
        np.copyto(out, result)
        return out

    def read_only(self, array: Any) -> bool:
        return not array.flags.writeable

    def scatter(self, data: Any, positions: Any, size: int) -> Any:
        result = np.zeros(size, dtype=np.asarray(data).dtype)
        result[positions] = data
        return result

    def sparse_to_numpy(self, value: Any) -> np.ndarray | None:
        scipy_sparse = sys.modules.get("scipy.sparse")
        if scipy_sparse is None or not scipy_sparse.issparse(value):
            return None
        return np.asarray(value.toarray())

    def sparse_to_scipy(self, value: Any) -> Any:
        scipy_sparse = sys.modules.get("scipy.sparse")
        if scipy_sparse is None or not scipy_sparse.issparse(value):
            return None
        return scipy_sparse.csr_array(value, copy=True)

    def copy(self, value: Any) -> Any:
        return np.array(value, copy=True)

    def sparse_matrix(self, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]) -> Callable[[Any], Any]:
        import scipy.sparse as sp

        def csr(data: Any) -> Any:
            # Index arrays are copied: a caller sorting or pruning a result must not change the prep.
            return sp.csr_array((np.asarray(data), indices.copy(), indptr.copy()), shape=shape)

        return csr


FAMILY = NumpyFamily()
