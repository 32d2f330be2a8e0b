"""The array API over ``pytensor.tensor``, for ``f`` applied to PyTensor's
symbolic variables.

array-api-compat has no namespace for PyTensor; :func:`di.array_namespace`
answers this one for a symbolic variable (the engine record's
:class:`~di.backends.engine.NamespaceOverride`), built once PyTensor is loaded.
Each array-API name is PyTensor's function of that name, or, where PyTensor
names or shapes it otherwise (``concat``, ``permute_dims``, ``astype``, ...), a
small function over PyTensor's. Every function builds graph: PyTensor
differentiates all of them.
"""

from __future__ import annotations

import di.engines.pytensor.imported  # noqa: F401  (first: PyTensor imported, its recursion limit undone)

# isort: split
import math
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.tensor import linalg as pt_linalg
from pytensor.tensor.exceptions import NotScalarConstantError

from di.families.numpy import NUMPY_SPELLINGS

__all__ = ["build_namespace"]

_SAME_NAME = (
    "abs add all any argmax argmin broadcast_arrays broadcast_to ceil clip cos cosh diff einsum empty "
    "empty_like equal exp expand_dims expm1 flip floor full_like greater greater_equal isfinite isinf "
    "isnan less less_equal log log1p log2 log10 logaddexp matmul maximum minimum moveaxis not_equal "
    "ones_like repeat reshape round searchsorted sign sin sinh sort sqrt square squeeze stack sum take "
    "take_along_axis tan tanh tensordot tile tril triu trunc var std where zeros_like real imag conj angle"
).split()

_RENAMED = {
    **NUMPY_SPELLINGS,
    "multiply": "mul",
    "subtract": "sub",
    "divide": "true_div",
    "floor_divide": "floor_div",
    "remainder": "mod",
    "negative": "neg",
    "pow": "pow",  # (not NumPy's "power")
    "logical_and": "and_",
    "logical_or": "or_",
    "logical_not": "invert",
    "bitwise_invert": "invert",
    "reciprocal": "reciprocal",
    "cumulative_sum": "cumsum",
    "cumulative_prod": "cumprod",
}


def _max(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return pt.max(x, axis=axis, keepdims=keepdims)


def _min(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return pt.min(x, axis=axis, keepdims=keepdims)


def _mean(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return pt.mean(x, axis=axis, keepdims=keepdims)


def _pairwise_product(x: Any, axis: int, length: int) -> Any:
    """The product along ``axis`` (of static ``length`` >= 1), the axis kept with
    length 1: halves multiplied until one entry is left, log2(length) products."""
    before = (slice(None),) * axis
    while length > 1:
        half = length // 2
        paired = x[(*before, slice(0, half))] * x[(*before, slice(half, 2 * half))]
        x = pt.concatenate([paired, x[(*before, slice(2 * half, length))]], axis=axis) if length % 2 else paired
        length = half + length % 2
    return x


def prod(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """``xp.prod`` as products of slices where the lengths are static: PyTensor's
    ``prod`` has no second derivative (its gradient, exact where ``x`` has zeros,
    is built of an op with no gradient), products of slices have every derivative,
    exact at zeros too. A length PyTensor does not know statically: its ``prod``."""
    x = pt.as_tensor_variable(x) if dtype is None else astype(x, dtype)
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(sorted(a % x.ndim for a in axes)) if x.ndim else ()
    lengths = [x.type.shape[a] for a in axes]
    if any(length is None or length == 0 for length in lengths):
        return pt.prod(x, axis=axis, keepdims=keepdims)
    for a, length in zip(axes, lengths, strict=True):
        x = _pairwise_product(x, a, length)
    return x if keepdims or not axes else pt.squeeze(x, axis=axes)


def concat(arrays: Sequence[Any], axis: int | None = 0) -> Any:
    """``xp.concat``: PyTensor's ``concatenate`` (``axis=None`` flattens first)."""
    if axis is None:
        return pt.concatenate([pt.flatten(a) for a in arrays])
    return pt.concatenate(list(arrays), axis=axis)


def permute_dims(x: Any, axes: Sequence[int]) -> Any:
    """``xp.permute_dims``: PyTensor's ``transpose``."""
    return pt.transpose(x, tuple(axes))


def matrix_transpose(x: Any) -> Any:
    """The transpose of the last two axes."""
    return pt.swapaxes(x, -1, -2)


def astype(x: Any, dtype: Any, copy: bool = True) -> Any:
    """``xp.astype``: PyTensor's ``cast`` (differentiable between floats)."""
    return pt.cast(x, np.dtype(dtype).name if not isinstance(dtype, str) else dtype)


def asarray(value: Any, dtype: Any = None, copy: Any = None) -> Any:
    """A symbolic variable as it is, or a constant of ``value``."""
    variable = pt.as_tensor_variable(value)
    return variable if dtype is None else astype(variable, dtype)


def vecdot(a: Any, b: Any, axis: int = -1) -> Any:
    """``xp.vecdot``: the sum of the products along ``axis``."""
    return pt.sum(a * b, axis=axis)


def unstack(x: Any, axis: int = 0) -> tuple[Any, ...]:
    """The slices of ``x`` along ``axis``, which must have a static length."""
    length = x.type.shape[axis]
    if length is None:
        raise TypeError("unstack needs an axis of static length on PyTensor")
    return tuple(pt.take(x, i, axis=axis) for i in range(length))


def positive(x: Any) -> Any:
    """``+x``."""
    return x


def hypot(a: Any, b: Any) -> Any:
    """``sqrt(a**2 + b**2)``."""
    return pt.sqrt(a * a + b * b)


def roll(x: Any, shift: int, axis: int | None = None) -> Any:
    """``xp.roll`` (PyTensor's ``roll``)."""
    return pt.roll(x, shift, axis=axis)


def copysign(a: Any, b: Any) -> Any:
    """``|a|`` with the sign of ``b``."""
    return pt.abs(a) * pt.switch(pt.lt(b, 0), -1.0, 1.0)


def _vector_norm(x: Any, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
    """The array API's ``vector_norm``: over every element by default (PyTensor's
    ``norm`` of a matrix without ``axis`` is a matrix norm: the spectral norm for
    ``ord=2``)."""
    if axis is None:
        norm = pt_linalg.norm(pt.reshape(x, (-1,)), ord=ord, axis=0)
        return pt.reshape(norm, (1,) * x.ndim) if keepdims else norm
    return pt_linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)


def _matrix_norm(x: Any, keepdims: bool = False, ord: Any = "fro") -> Any:
    """The array API's ``matrix_norm`` over the last two axes; the Frobenius norm
    from the elements (PyTensor's goes through a complex intermediate whose
    gradient it refuses)."""
    if ord == "fro":
        return pt.sqrt(pt.sum(x * x, axis=(-2, -1), keepdims=keepdims))
    return pt_linalg.norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def _linalg() -> Any:
    return types.SimpleNamespace(
        __name__="di.engines.pytensor.namespace.linalg",
        det=pt_linalg.det,
        inv=pt_linalg.inv,
        solve=pt_linalg.solve,
        cholesky=pt_linalg.cholesky,
        norm=pt_linalg.norm,
        vector_norm=_vector_norm,
        matrix_norm=_matrix_norm,
        slogdet=pt_linalg.slogdet,
        eigh=pt_linalg.eigh,
        svd=pt_linalg.svd,
        matmul=pt.matmul,
        trace=lambda x, offset=0: pt.trace(x, offset=offset),
        tensordot=pt.tensordot,
        vecdot=vecdot,
        matrix_transpose=matrix_transpose,
        diagonal=lambda x, offset=0: pt.diagonal(x, offset=offset, axis1=-2, axis2=-1),
    )


_CREATION = ("arange", "eye", "full", "linspace", "ones", "zeros")
"""Creation functions that give a NumPy array (a constant of the graph) when every
argument is a number: comparisons of a PyTensor variable are not elementwise
(``pt.arange(4) % 2 == 0`` is the Python ``False``: ``==`` compares the variables'
identities), and the array API's ``xp.arange(n) % 2 == 0`` must be a mask."""


def _creation(name: str) -> Any:
    symbolic, concrete = getattr(pt, name), getattr(np, name)

    def create(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        args = tuple(_folded(value) for value in args)
        kwargs = {key: _folded(value) for key, value in kwargs.items()}
        if any(isinstance(value, pt.Variable) for value in (*args, *kwargs.values())):
            return symbolic(*args, **kwargs)
        return concrete(*args, **kwargs)

    create.__name__ = name
    return create


def _folded(value: Any) -> Any:
    """A scalar variable PyTensor knows the value of (``v.shape[0]`` of a variable of
    static shape) as that number; any other value as it is."""
    if not isinstance(value, pt.TensorVariable) or value.ndim != 0:
        return value
    try:
        return pt.get_underlying_scalar_constant_value(value).item()
    except NotScalarConstantError:  # a value known only at run time
        return value


def build_namespace() -> types.SimpleNamespace:
    """The namespace :func:`di.array_namespace` answers for PyTensor's variables.

    Examples:
        >>> import numpy as np, pytensor.tensor as pt
        >>> from di.engines.pytensor.namespace import build_namespace
        >>> xp = build_namespace()
        >>> x = pt.vector("x", dtype="float64")
        >>> xp.concat([xp.sin(x), x]).eval({x: np.zeros(2)})
        array([0., 0., 0., 0.])
    """
    functions: dict[str, Any] = {name: getattr(pt, name) for name in _SAME_NAME if hasattr(pt, name)}
    functions.update({name: getattr(pt, target) for name, target in _RENAMED.items() if hasattr(pt, target)})
    functions.update({name: _creation(name) for name in _CREATION})
    functions.update(
        {
            "__name__": "di.engines.pytensor.namespace",
            "max": _max,
            "min": _min,
            "mean": _mean,
            "prod": prod,
            "concat": concat,
            "permute_dims": permute_dims,
            "matrix_transpose": matrix_transpose,
            "astype": astype,
            "asarray": asarray,
            "vecdot": vecdot,
            "unstack": unstack,
            "positive": positive,
            "hypot": hypot,
            "roll": roll,
            "copysign": copysign,
            "linalg": _linalg(),
            "pi": math.pi,
            "e": math.e,
            "inf": math.inf,
            "nan": math.nan,
            "newaxis": None,
        }
    )
    for dtype in (
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "bool",
    ):
        functions[dtype] = np.dtype(dtype)
    functions["finfo"] = np.finfo
    functions["iinfo"] = np.iinfo
    functions["isdtype"] = _isdtype
    return types.SimpleNamespace(**functions)


def _isdtype(dtype: Any, kind: Any) -> bool:
    import array_api_compat.numpy as compat

    return bool(compat.isdtype(np.dtype(str(dtype)), kind))  # type: ignore[attr-defined]
