"""The array-API signatures over ``autograd.numpy``'s differentiable functions:
small functions that autograd differentiates (in reverse and forward mode, or in
reverse mode only for some of the linear algebra), written with
``autograd.numpy`` where the array API's signature or semantics differ from
NumPy's, and derivatives kept in the dtype of the value they belong to. The
namespace's tables (:mod:`.namespace`) map array-API names to them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import array_api_compat.numpy.linalg as compat_linalg
import autograd.numpy as anp
import numpy as np
from autograd.core import primitive_jvps, primitive_vjps
from autograd.extend import Box, defjvp, defjvp_argnums, defvjp, defvjp_argnums, primitive
from autograd.tracer import getval

from di.engines.autograd.casting import astype
from di.engines.autograd.casting import cast as _cast

__all__ = [
    "KEEPING_DTYPE",
    "concat",
    "stack",
    "reshape",
    "permute_dims",
    "matrix_transpose",
    "vecdot",
    "flip",
    "take",
    "unstack",
    "broadcast_to",
    "broadcast_arrays",
    "where",
    "clip",
    "copysign",
    "positive",
    "cumulative_sum",
    "mean",
    "var",
    "std",
    "sort",
    "diff",
    "asarray",
    "full",
    "linspace",
    "diagonal",
    "trace",
    "cross",
    "vector_norm",
    "matrix_norm",
    "cholesky",
    "eigh",
    "eigvalsh",
    "slogdet",
    "LINALG",
    "svd",
    "svdvals",
]

# --- adapters: the array-API signature over autograd.numpy's differentiable functions ------------


def _in_dtype(derivative: Any, like: Any) -> Any:
    dtype = anp.result_type(like)
    return derivative if anp.result_type(derivative) == dtype else _cast(derivative, dtype)


def _in_value_dtype(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` differentiated by autograd's own rules, their results cast to the dtype of
    the value they belong to (autograd's rules for it compute float32 values' derivatives in
    float64)."""
    wrapped = primitive(function)
    vjp_maker = primitive_vjps[function]

    def vjp_argnums(argnums: Any, ans: Any, args: Any, kwargs: Any) -> Callable[[Any], Any]:
        vjps = vjp_maker(argnums, ans, args, kwargs)
        return lambda g: tuple(_in_dtype(d, args[i]) for i, d in zip(argnums, vjps(g)))

    defvjp_argnums(wrapped, vjp_argnums)
    if function in primitive_jvps:
        jvp_maker = primitive_jvps[function]
        defjvp_argnums(wrapped, lambda argnums, gs, ans, *rest: _in_dtype(jvp_maker(argnums, gs, ans, *rest), ans))
    return wrapped


KEEPING_DTYPE = {
    name: _in_value_dtype(getattr(anp, name)) for name in ("log2", "log10", "max", "maximum", "min", "minimum")
}


def concat(arrays: Sequence[Any], /, *, axis: int | None = 0) -> Any:
    if axis is None:
        return anp.concatenate([anp.reshape(a, (-1,)) for a in arrays])
    return anp.concatenate(list(arrays), axis=axis)


def stack(arrays: Sequence[Any], /, *, axis: int = 0) -> Any:
    # Not autograd's stack, whose forward rule returns float64 tangents for float32 values.
    return anp.concatenate([anp.expand_dims(a, axis) for a in arrays], axis=axis)


def reshape(x: Any, /, shape: tuple[int, ...], *, copy: bool | None = None) -> Any:
    return anp.reshape(x, shape)


def permute_dims(x: Any, /, axes: tuple[int, ...]) -> Any:
    return anp.transpose(x, axes)


def matrix_transpose(x: Any, /) -> Any:
    return anp.swapaxes(x, -1, -2)


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    return anp.sum(anp.conj(x1) * x2, axis=axis)


def _axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    return tuple(a % ndim for a in ((axis,) if isinstance(axis, int) else axis))


def flip(x: Any, /, *, axis: int | Sequence[int] | None = None) -> Any:
    # Slicing is differentiated in both modes (autograd's flip is not).
    flipped = _axes(axis, anp.ndim(x))
    return x[tuple(slice(None, None, -1) if i in flipped else slice(None) for i in range(anp.ndim(x)))]


def take(x: Any, indices: Any, /, *, axis: int | None = None) -> Any:
    if axis is None:
        return anp.reshape(x, (-1,))[indices]
    index: list[Any] = [slice(None)] * anp.ndim(x)
    index[axis] = indices
    return x[tuple(index)]


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Any, ...]:
    moved = anp.moveaxis(x, axis, 0)
    return tuple(moved[i] for i in range(anp.shape(moved)[0]))


def broadcast_to(x: Any, /, shape: tuple[int, ...]) -> Any:
    # autograd's broadcast_to differentiates same-rank broadcasts only: add the leading axes first.
    missing = len(shape) - anp.ndim(x)
    return anp.broadcast_to(anp.reshape(x, (1,) * missing + anp.shape(x)) if missing > 0 else x, shape)


def broadcast_arrays(*arrays: Any) -> list[Any]:
    shape = np.broadcast_shapes(*(anp.shape(a) for a in arrays))
    return [broadcast_to(a, shape) for a in arrays]


@primitive
def _select(condition: Any, x1: Any, x2: Any) -> Any:
    return np.where(condition, x1, x2)


# autograd's own where rules pad with float64 zeros (a float32 f gets float64 derivatives);
# these keep the cotangent's dtype, and use _select itself, so they nest.
defvjp(
    _select,
    None,
    lambda ans, condition, x1, x2: lambda g: _select(condition, g, anp.zeros_like(g)),
    lambda ans, condition, x1, x2: lambda g: _select(condition, anp.zeros_like(g), g),
)
defjvp(
    _select,
    None,
    lambda g, ans, condition, x1, x2: _select(condition, g, anp.zeros_like(g)),
    lambda g, ans, condition, x1, x2: _select(condition, anp.zeros_like(g), g),
)


def where(condition: Any, x1: Any, x2: Any, /) -> Any:
    # A traced operand is broadcast to the result's shape first, so that its derivative
    # (through broadcast_to's rules) comes back in its own shape.
    shape = np.broadcast_shapes(anp.shape(condition), anp.shape(x1), anp.shape(x2))
    x1, x2 = (broadcast_to(a, shape) if isinstance(a, Box) and anp.shape(a) != shape else a for a in (x1, x2))
    return _select(getval(condition), x1, x2)


def clip(x: Any, /, min: Any = None, max: Any = None) -> Any:
    if min is not None:
        x = KEEPING_DTYPE["maximum"](x, min)
    if max is not None:
        x = KEEPING_DTYPE["minimum"](x, max)
    return x


def copysign(x1: Any, x2: Any, /) -> Any:
    return _select(np.signbit(getval(x2)), -anp.abs(x1), anp.abs(x1))


def positive(x: Any, /) -> Any:
    return x


def cumulative_sum(x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False) -> Any:
    if axis is None:
        if anp.ndim(x) > 1:
            raise ValueError("cumulative_sum needs axis= for arrays of more than one dimension")
        axis = 0
    total = anp.cumsum(x if dtype is None else astype(x, dtype), axis=axis)
    if not include_initial:
        return total
    shape = list(anp.shape(total))
    shape[axis] = 1
    return anp.concatenate([np.zeros(shape, dtype=anp.result_type(total)), total], axis=axis)


# mean, var and std from sums: autograd's own rules for them return float64 derivatives
# for float32 values; a sum divided by a Python number keeps the dtype.


def _count(x: Any, axis: Any) -> int:
    return int(np.prod([anp.shape(x)[i] for i in _axes(axis, anp.ndim(x))]))


def mean(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    return anp.sum(x, axis=axis, keepdims=keepdims) / _count(x, axis)


def var(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Any:
    deviation = x - mean(x, axis=axis, keepdims=True)
    squares = anp.real(deviation * anp.conj(deviation))
    return anp.sum(squares, axis=axis, keepdims=keepdims) / (_count(x, axis) - correction)


def std(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Any:
    return anp.sqrt(var(x, axis=axis, correction=correction, keepdims=keepdims))


def sort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
    ascending = anp.sort(x, axis=axis, kind="stable" if stable else "quicksort")
    return flip(ascending, axis=axis) if descending else ascending


def diff(x: Any, /, *, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> Any:
    if prepend is not None or append is not None:
        parts = [p for p in (prepend, x, append) if p is not None]
        x = anp.concatenate([broadcast_to(p, _edge_shape(p, x, axis)) for p in parts], axis=axis)
    return anp.diff(x, n=n, axis=axis)


def _edge_shape(part: Any, x: Any, axis: int) -> tuple[int, ...]:
    shape = list(anp.shape(x))
    shape[axis] = anp.shape(part)[axis] if anp.ndim(part) == anp.ndim(x) else 1
    return tuple(shape)


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Any:
    return anp.array(obj, dtype=dtype)


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Any:
    return anp.full(shape, fill_value, dtype=dtype)


def linspace(
    start: Any, stop: Any, /, num: int, *, dtype: Any = None, device: Any = None, endpoint: bool = True
) -> Any:
    fractions = np.linspace(0.0, 1.0, num, endpoint=endpoint, dtype=np.result_type(getval(start), getval(stop), 1.0))
    points = start + (stop - start) * fractions
    return points if dtype is None else astype(points, dtype)


def diagonal(x: Any, /, *, offset: int = 0) -> Any:
    # Integer-array indexing: autograd's diagonal differentiates the main diagonal of the last two axes only.
    rows, columns = anp.shape(x)[-2:]
    row = np.arange(max(0, -offset), max(0, min(rows, columns - offset)))
    return x[..., row, row + offset]


def trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> Any:
    total = anp.sum(diagonal(x, offset=offset), axis=-1)
    return total if dtype is None else astype(total, dtype)


def cross(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    return anp.cross(x1, x2, axis=axis)


_NORMS_OF_ABS: dict[float, Callable[..., Any]] = {1: anp.sum, np.inf: anp.max, -np.inf: anp.min}


def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: float = 2) -> Any:
    # The reduced axes moved last and flattened into one: a vector norm along it.
    reduced = _axes(axis, anp.ndim(x))
    kept = [i for i in range(anp.ndim(x)) if i not in reduced]
    moved = anp.transpose(x, [*kept, *reduced])
    flat = anp.reshape(moved, (*anp.shape(moved)[: len(kept)], -1))
    if ord in _NORMS_OF_ABS:  # autograd's norm differentiates ord > 1 only
        norm = _NORMS_OF_ABS[ord](anp.abs(flat), axis=-1)
    else:
        norm = anp.linalg.norm(flat, ord=ord, axis=-1)
    if keepdims:
        return anp.reshape(norm, tuple(1 if i in reduced else n for i, n in enumerate(anp.shape(x))))
    return norm


_NORMS_OF_SINGULAR_VALUES: dict[Any, Callable[..., Any]] = {2: anp.max, -2: anp.min, "nuc": anp.sum}


def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:
    # Each norm from functions autograd differentiates: its norm's gradient takes no
    # negative axes (NumPy's AxisError once reduced), no keepdims over two axes (a
    # wrong shape) and no ord other than "fro" for matrices; the norms of singular
    # values from the singular values.
    if ord in _NORMS_OF_SINGULAR_VALUES:
        norm = _NORMS_OF_SINGULAR_VALUES[ord](anp.linalg.svd(x, full_matrices=False)[1], axis=-1)
    elif ord == "fro":
        norm = anp.sqrt(anp.sum(x * x, axis=(anp.ndim(x) - 2, anp.ndim(x) - 1)))
    elif ord in (1, -1, np.inf, -np.inf):  # 1: the largest column sum of |x|; inf: the largest row sum
        sums = anp.sum(anp.abs(x), axis=-2 if abs(ord) == 1 else -1)
        norm = _NORMS_OF_ABS[np.inf if ord > 0 else -np.inf](sums, axis=-1)
    else:
        norm = anp.linalg.norm(x, ord=ord, axis=(anp.ndim(x) - 2, anp.ndim(x) - 1))
    return anp.reshape(norm, (*anp.shape(norm), 1, 1)) if keepdims else norm


def cholesky(x: Any, /, *, upper: bool = False) -> Any:
    lower = LINALG["cholesky"](x)
    return anp.conj(matrix_transpose(lower)) if upper else lower


def eigh(x: Any, /) -> Any:
    eigenvalues, eigenvectors = LINALG["eigh"](x)
    return compat_linalg.EighResult(eigenvalues, eigenvectors)


def eigvalsh(x: Any, /) -> Any:
    return LINALG["eigh"](x)[0]


def slogdet(x: Any, /) -> Any:
    sign, logabsdet = LINALG["slogdet"](x)
    return compat_linalg.SlogdetResult(sign, logabsdet)


# autograd differentiates these in reverse mode only, some in float64 for float32 values.
LINALG = {
    name: _in_value_dtype(getattr(anp.linalg, name))
    for name in ("cholesky", "det", "eigh", "inv", "pinv", "slogdet", "solve", "svd")
}


def svd(x: Any, /, *, full_matrices: bool = True) -> Any:
    u, s, vh = LINALG["svd"](x, full_matrices=full_matrices)
    return compat_linalg.SVDResult(u, s, vh)


def svdvals(x: Any, /) -> Any:
    return LINALG["svd"](x, compute_uv=False)
