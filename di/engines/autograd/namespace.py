"""The array API over ``autograd.numpy``, for ``f`` evaluated on autograd's boxes.

Imported only by :func:`di.array_namespace` (through the table of
:mod:`di.engines.autograd.array_api`), once it has seen an autograd ``ArrayBox``
(so autograd is already imported). Three tables say what each
array-API name becomes:

* :data:`DIFFERENTIABLE`: an ``autograd.numpy`` function (or a small adapter
  built from such functions: :mod:`di.engines.autograd.functions`) that autograd
  differentiates in reverse and forward mode;
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
from autograd.core import JVPNode
from autograd.extend import Box
from autograd.tracer import getval

from di.engines.autograd.casting import astype
from di.engines.autograd.functions import (
    KEEPING_DTYPE,
    LINALG,
    asarray,
    broadcast_arrays,
    broadcast_to,
    cholesky,
    clip,
    concat,
    copysign,
    cross,
    cumulative_sum,
    diagonal,
    diff,
    eigh,
    eigvalsh,
    flip,
    full,
    linspace,
    matrix_norm,
    matrix_transpose,
    mean,
    permute_dims,
    positive,
    reshape,
    slogdet,
    sort,
    stack,
    std,
    svd,
    svdvals,
    take,
    trace,
    unstack,
    var,
    vecdot,
    vector_norm,
    where,
)
from di.errors import UnsupportedOperatorError
from di.families.numpy import NUMPY_SPELLINGS

__all__ = ["DIFFERENTIABLE", "NO_DERIVATIVE", "REVERSE_ONLY", "AutogradNamespace", "build_namespace"]

_OTHER_ENGINES = "AutoJAX, AutoTorch or AutoFiniteDiff"


# --- a linear algebra function refusing what autograd cannot differentiate ----------------------


def pinv(x: Any, /, *, rtol: Any = None) -> Any:
    if rtol is not None and _has_box((x,)):
        _raise_no_derivative("linalg.pinv", "autograd differentiates pinv only with its default tolerance: omit rtol")
    return LINALG["pinv"](x) if rtol is None else compat_linalg.pinv(x, rtol=rtol)


# --- the tables --------------------------------------------------------------------------------------

_SAME_NAME = (
    "abs add conj cos cosh divide exp expm1 imag log log1p logaddexp multiply "
    "negative real reciprocal remainder sin sinh sqrt square subtract tan tanh "
    "expand_dims matmul moveaxis prod repeat roll squeeze sum tensordot tile tril triu"
)
_RENAMED = {
    **NUMPY_SPELLINGS,
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
    **KEEPING_DTYPE,
    **{name: getattr(anp, numpy_name) for name, numpy_name in _RENAMED.items()},
    **_ADAPTERS,
}

#: array-API name -> the function autograd differentiates in reverse mode only.
REVERSE_ONLY: dict[str, Callable[..., Any]] = {
    "hypot": anp.hypot,
    "linalg.cholesky": cholesky,
    "linalg.det": LINALG["det"],
    "linalg.eigh": eigh,
    "linalg.eigvalsh": eigvalsh,
    "linalg.inv": LINALG["inv"],
    "linalg.pinv": pinv,
    "linalg.slogdet": slogdet,
    "linalg.solve": LINALG["solve"],
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
