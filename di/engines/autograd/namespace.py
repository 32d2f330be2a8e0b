"""The array API over ``autograd.numpy``, for ``f`` evaluated on autograd's boxes.

Imported only by :func:`di.array_namespace` (through the table of
:mod:`di.engines.autograd.array_api`), once it has seen an autograd ``ArrayBox``
(so autograd is already imported). Three tables say what each
array-API name becomes:

* :data:`DIFFERENTIABLE`: an ``autograd.numpy`` function (or a small adapter
  built from such functions) that autograd differentiates in reverse and
  forward mode;
* :data:`REVERSE_ONLY`: functions autograd differentiates in reverse mode only
  (it has no JVP for them): a forward-mode trace through them raises
  :class:`~di.errors.UnsupportedOperatorError`;
* :data:`NO_DERIVATIVE`: functions autograd cannot differentiate at all: applied
  to a traced value they raise :class:`~di.errors.UnsupportedOperatorError` with
  what to write instead; applied to plain values they compute as NumPy does.

Every other array-API function (comparisons, integer and boolean results,
rounding, creation from shapes, dtype queries) has no derivative to carry and is
array-api-compat's NumPy function applied to the unboxed values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import array_api_compat.numpy as compat_numpy
import array_api_compat.numpy.linalg as compat_linalg
import autograd.numpy as anp
import numpy as np
from autograd.core import JVPNode, primitive_jvps, primitive_vjps
from autograd.extend import Box, defjvp, defjvp_argnums, defvjp, defvjp_argnums, primitive
from autograd.tracer import getval

from di.engines.autograd.casting import astype
from di.engines.autograd.casting import cast as _cast
from di.errors import UnsupportedOperatorError

__all__ = ["DIFFERENTIABLE", "NO_DERIVATIVE", "REVERSE_ONLY", "AutogradNamespace", "build_namespace"]

_OTHER_ENGINES = "AutoJAX, AutoTorch or AutoFiniteDiff"


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


_KEEPING_DTYPE = {
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
        x = _KEEPING_DTYPE["maximum"](x, min)
    if max is not None:
        x = _KEEPING_DTYPE["minimum"](x, max)
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


def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:
    return anp.linalg.norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def cholesky(x: Any, /, *, upper: bool = False) -> Any:
    lower = _LINALG["cholesky"](x)
    return anp.conj(matrix_transpose(lower)) if upper else lower


def eigh(x: Any, /) -> Any:
    eigenvalues, eigenvectors = _LINALG["eigh"](x)
    return compat_linalg.EighResult(eigenvalues, eigenvectors)


def eigvalsh(x: Any, /) -> Any:
    return _LINALG["eigh"](x)[0]


def slogdet(x: Any, /) -> Any:
    sign, logabsdet = _LINALG["slogdet"](x)
    return compat_linalg.SlogdetResult(sign, logabsdet)


# autograd differentiates these in reverse mode only, some in float64 for float32 values.
_LINALG = {
    name: _in_value_dtype(getattr(anp.linalg, name))
    for name in ("cholesky", "det", "eigh", "inv", "pinv", "slogdet", "solve", "svd")
}


def svd(x: Any, /, *, full_matrices: bool = True) -> Any:
    u, s, vh = _LINALG["svd"](x, full_matrices=full_matrices)
    return compat_linalg.SVDResult(u, s, vh)


def svdvals(x: Any, /) -> Any:
    return _LINALG["svd"](x, compute_uv=False)


def pinv(x: Any, /, *, rtol: Any = None) -> Any:
    if rtol is not None and _has_box((x,)):
        _raise_no_derivative("linalg.pinv", "autograd differentiates pinv only with its default tolerance: omit rtol")
    return _LINALG["pinv"](x) if rtol is None else compat_linalg.pinv(x, rtol=rtol)


# --- the tables --------------------------------------------------------------------------------------

_SAME_NAME = (
    "abs add conj cos cosh divide exp expm1 imag log log1p logaddexp multiply "
    "negative real reciprocal remainder sin sinh sqrt square subtract tan tanh "
    "expand_dims matmul moveaxis prod repeat roll squeeze sum tensordot tile tril triu"
)
_RENAMED = {
    "acos": "arccos",
    "acosh": "arccosh",
    "asin": "arcsin",
    "asinh": "arcsinh",
    "atan": "arctan",
    "atan2": "arctan2",
    "atanh": "arctanh",
    "pow": "power",
    "linalg.matmul": "matmul",
    "linalg.outer": "outer",
    "linalg.tensordot": "tensordot",
}
_ADAPTERS: dict[str, Callable[..., Any]] = {
    "astype": astype,
    "mean": mean,
    "asarray": asarray,
    "broadcast_arrays": broadcast_arrays,
    "broadcast_to": broadcast_to,
    "clip": clip,
    "concat": concat,
    "copysign": copysign,
    "cumulative_sum": cumulative_sum,
    "diff": diff,
    "flip": flip,
    "full": full,
    "linspace": linspace,
    "matrix_transpose": matrix_transpose,
    "permute_dims": permute_dims,
    "positive": positive,
    "reshape": reshape,
    "sort": sort,
    "stack": stack,
    "std": std,
    "take": take,
    "unstack": unstack,
    "var": var,
    "vecdot": vecdot,
    "where": where,
    "linalg.cross": cross,
    "linalg.diagonal": diagonal,
    "linalg.matrix_norm": matrix_norm,
    "linalg.matrix_transpose": matrix_transpose,
    "linalg.trace": trace,
    "linalg.vecdot": vecdot,
    "linalg.vector_norm": vector_norm,
}

#: array-API name -> the function autograd differentiates in both modes.
DIFFERENTIABLE: dict[str, Callable[..., Any]] = {
    **{name: getattr(anp, name) for name in _SAME_NAME.split()},
    **_KEEPING_DTYPE,
    **{name: getattr(anp, numpy_name) for name, numpy_name in _RENAMED.items()},
    **_ADAPTERS,
}

#: array-API name -> the function autograd differentiates in reverse mode only.
REVERSE_ONLY: dict[str, Callable[..., Any]] = {
    "hypot": anp.hypot,
    "linalg.cholesky": cholesky,
    "linalg.det": _LINALG["det"],
    "linalg.eigh": eigh,
    "linalg.eigvalsh": eigvalsh,
    "linalg.inv": _LINALG["inv"],
    "linalg.pinv": pinv,
    "linalg.slogdet": slogdet,
    "linalg.solve": _LINALG["solve"],
    "linalg.svd": svd,
    "linalg.svdvals": svdvals,
}

#: array-API name -> what to write instead, for functions autograd cannot differentiate.
NO_DERIVATIVE: dict[str, str] = {
    "cumulative_prod": "for positive x, xp.exp(xp.cumulative_sum(xp.log(x), axis=...)) is differentiable",
    "take_along_axis": "index with integer arrays (x[rows, cols]) or use xp.take",
    "meshgrid": "build the grid with xp.reshape and xp.broadcast_to",
    "nextafter": "it has no useful derivative; compute it on constants only",
    "unique_values": "sort and compare with constants, or keep it outside f",
    "unique_counts": "sort and compare with constants, or keep it outside f",
    "unique_inverse": "sort and compare with constants, or keep it outside f",
    "unique_all": "sort and compare with constants, or keep it outside f",
    "linalg.matrix_power": "multiply with xp.matmul (and xp.linalg.inv for negative powers)",
    "linalg.qr": "use xp.linalg.cholesky or xp.linalg.svd where they fit",
}

#: array-API names with no derivative to carry: array-api-compat's NumPy on unboxed values.
NO_DERIVATIVE_NEEDED = (
    "all any argmax argmin argsort count_nonzero nonzero searchsorted "
    "equal not_equal greater greater_equal less less_equal isfinite isinf isnan signbit "
    "logical_and logical_not logical_or logical_xor "
    "bitwise_and bitwise_invert bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor "
    "ceil floor floor_divide round sign trunc "
    "arange empty empty_like eye from_dlpack full_like ones ones_like zeros zeros_like "
    "can_cast finfo iinfo isdtype result_type "
    "linalg.matrix_rank"
).split()

_VALUES = (
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 complex64 complex128 "
    "e inf nan newaxis pi __array_api_version__ __array_namespace_info__"
).split()


# --- wrappers for the three kinds --------------------------------------------------------------------


def _has_box(args: Sequence[Any]) -> bool:
    return any(isinstance(a, Box) or (isinstance(a, (list, tuple)) and _has_box(a)) for a in args)


def _has_forward_box(args: Sequence[Any]) -> bool:
    for a in args:
        if isinstance(a, (list, tuple)) and _has_forward_box(a):
            return True
        while isinstance(a, Box):
            if isinstance(a._node, JVPNode):
                return True
            a = a._value
    return False


def _unboxed(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_unboxed(v) for v in value)
    return getval(value)


def _compat_function(name: str) -> Callable[..., Any] | None:
    """array-api-compat's NumPy function ``name`` (``None`` where this version lacks it)."""
    module, _, attribute = name.rpartition(".")
    return getattr(compat_linalg if module == "linalg" else compat_numpy, attribute, None)


def _raise_no_derivative(name: str, hint: str) -> None:
    raise UnsupportedOperatorError(
        f"autograd has no derivative of {name} (called on a traced value in f through di.array_namespace): "
        f"{hint}, or differentiate this f with {_OTHER_ENGINES}."
    )


def _reverse_only(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def reverse_only(*args: Any, **kwargs: Any) -> Any:
        if _has_forward_box(args):
            raise UnsupportedOperatorError(
                f"autograd differentiates {name} in reverse mode only, and AutoAutograd's pushforward and "
                f"derivative use its forward mode: ask for pullback, gradient, jacobian, hvp or hessian, "
                f"or use {_OTHER_ENGINES} for this f."
            )
        return function(*args, **kwargs)

    return _named(reverse_only, name)


def _no_derivative(name: str, hint: str, plain: Callable[..., Any]) -> Callable[..., Any]:
    def no_derivative(*args: Any, **kwargs: Any) -> Any:
        if _has_box(args) or _has_box(tuple(kwargs.values())):
            _raise_no_derivative(name, hint)
        return plain(*args, **kwargs)

    return _named(no_derivative, name)


def _no_derivative_needed(name: str, plain: Callable[..., Any]) -> Callable[..., Any]:
    def constant(*args: Any, **kwargs: Any) -> Any:
        return plain(*_unboxed(args), **{key: _unboxed(value) for key, value in kwargs.items()})

    return _named(constant, name)


def _named(function: Callable[..., Any], name: str) -> Callable[..., Any]:
    function.__name__ = function.__qualname__ = name.rpartition(".")[2]
    return function


class AutogradNamespace:
    """The array API over ``autograd.numpy``: see :func:`di.array_namespace`.

    Attributes are the array-API functions, dtypes and constants; ``linalg`` is the
    linear-algebra extension. A name outside the array API raises
    ``AttributeError`` saying so.
    """

    def __init__(self, name: str, members: dict[str, Any]) -> None:
        self.__name__ = name
        self.__dict__.update(members)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{self.__name__} has no {name!r}: di.array_namespace gives autograd values the array API standard's "
            "names only (https://data-apis.org/array-api/latest/API_specification/), each mapped to what autograd "
            "differentiates. Write f with those names, or use another engine for this f."
        )

    def __repr__(self) -> str:
        return f"<array namespace {self.__name__}>"


def build_namespace() -> AutogradNamespace:
    """The namespace, built from the tables.

    Returns:
        An :class:`AutogradNamespace` whose ``linalg`` attribute is the extension.
    """
    functions: dict[str, Any] = {
        **DIFFERENTIABLE,
        **{name: _reverse_only(name, function) for name, function in REVERSE_ONLY.items()},
    }
    for name, hint in NO_DERIVATIVE.items():
        if (plain := _compat_function(name)) is not None:
            functions[name] = _no_derivative(name, hint, plain)
    for name in NO_DERIVATIVE_NEEDED:
        if (plain := _compat_function(name)) is not None:
            functions[name] = _no_derivative_needed(name, plain)
    top = {name: function for name, function in functions.items() if not name.startswith("linalg.")}
    linalg = {name.removeprefix("linalg."): f for name, f in functions.items() if name.startswith("linalg.")}
    top.update({name: getattr(compat_numpy, name) for name in _VALUES if hasattr(compat_numpy, name)})
    top["linalg"] = AutogradNamespace("di.array_namespace(autograd).linalg", linalg)
    return AutogradNamespace("di.array_namespace(autograd)", top)
