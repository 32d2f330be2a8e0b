"""The real view of a complex array, in the caller's family and inside the engines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from di import loaders
from di.errors import InvalidInputError, UnsupportedOperatorError
from di.families import get_family

__all__ = ["RealView", "is_complex_value", "real_function", "refuse_complex"]


def is_complex_value(value: Any) -> bool:
    """Whether ``value`` (an array of any family, a traced value, a Python number)
    holds complex numbers.

    Examples:
        >>> import numpy as np
        >>> from di.complex.view import is_complex_value
        >>> is_complex_value(np.ones(2, np.complex64)), is_complex_value(np.ones(2)), is_complex_value(1j)
        (True, False, True)
    """
    if isinstance(value, complex):
        return True
    return "complex" in str(getattr(value, "dtype", ""))


class RealView:
    """How a complex array of one family and precision is split into its real
    view (shape ``(2, *shape)``, ``[0]`` the real part, ``[1]`` the imaginary
    part) and rebuilt from it.

    Args:
        family: the caller's array family (``"numpy"``, ``"torch"``, ...).
        complex_dtype: ``"complex64"`` or ``"complex128"``.

    Examples:
        >>> import numpy as np
        >>> from di.complex.view import RealView
        >>> view = RealView("numpy", "complex64")
        >>> r = view.split(np.array([1 + 2j, 3 - 4j], np.complex64))
        >>> r.tolist(), r.dtype.name
        ([[1.0, 3.0], [2.0, -4.0]], 'float32')
        >>> view.combine(r)
        array([1.+2.j, 3.-4.j], dtype=complex64)
    """

    __slots__ = ("_combiners", "_split_fused", "complex_dtype", "family", "real_dtype", "wide", "xp")

    def __init__(self, family: str, complex_dtype: str) -> None:
        self.family = get_family(family)
        self.xp = self.family.namespace()
        self.complex_dtype = complex_dtype
        self.real_dtype = "float32" if complex_dtype == "complex64" else "float64"
        self.wide = complex_dtype == "complex128"  # (JAX makes 64-bit dtypes 32-bit outside its scope)
        # one call each where the family compiles (Family.fused): a few eager operations cost
        # more than the gradient itself at small sizes on JAX
        self._split_fused = self.family.fused(self._split)
        self._combiners: dict[int, Callable[[Any], Any]] = {}

    def split(self, value: Any) -> Any:
        """``value``'s real view: a real array of the caller's family. A real
        ``value`` (a real tangent of a complex ``x``) gets a zero imaginary part."""
        if self.wide:
            with self.family.scope(("float64",)):
                return self._split_fused(value)
        return self._split_fused(value)

    def combine(self, real: Any, axis: int = 0) -> Any:
        """The complex array whose real view is ``real`` along ``axis``."""
        combiner = self._combiners.get(axis)
        if combiner is None:
            combiner = self._combiners[axis] = self.family.fused(lambda value: self._combine(value, axis))
        if self.wide:
            with self.family.scope(("float64",)):
                return combiner(real)
        return combiner(real)

    def _split(self, value: Any) -> Any:
        xp = self.xp
        if not is_complex_value(value):
            value = xp.astype(value, getattr(xp, self.real_dtype))
            return xp.stack([value, xp.zeros_like(value)])
        return xp.stack([xp.real(value), xp.imag(value)])

    def _combine(self, real: Any, axis: int) -> Any:
        xp = self.xp
        dtype = getattr(xp, self.complex_dtype)
        return xp.astype(self.part(real, 0, axis), dtype) + xp.astype(self.part(real, 1, axis), dtype) * 1j

    @staticmethod
    def part(real: Any, index: int, axis: int = 0) -> Any:
        """``real``'s slice ``index`` along ``axis`` (the axis dropped)."""
        return real[(slice(None),) * axis + (index, ...)]


def _rebuilt(r: Any, complex_dtype: str) -> Any:
    """The complex value whose real view is ``r`` (an engine's value)."""
    xp = loaders.array_namespace(r)
    if "float64" in str(r.dtype):  # an engine that evaluates in float64 whatever x's dtype (finite differences)
        complex_dtype = "complex128"
    dtype = getattr(xp, complex_dtype, None)
    if dtype is None:  # (MLX has complex64 only)
        raise InvalidInputError(
            f"x is a {complex_dtype} array, but this backend's engine computes in arrays "
            f"({getattr(xp, '__name__', type(r).__module__)}) that have no {complex_dtype}: cast x to complex64 "
            f"(x.astype(np.complex64)), or use a backend whose engine has {complex_dtype}."
        )
    return xp.astype(r[0, ...], dtype) + xp.astype(r[1, ...], dtype) * 1j


def _split_output(y: Any) -> Any:
    """A complex output's real view (an engine's value); a real one as it is."""
    if not is_complex_value(y):
        return y
    xp = loaders.array_namespace(y)
    return xp.stack([xp.real(y), xp.imag(y)])


def real_function(f: Callable[..., Any], complex_dtype: str, split_output: bool, has_aux: bool) -> Callable[..., Any]:
    """``g(r, *values) = f(r[0] + i r[1], *values)``, with a complex output split
    into its real view when ``split_output`` (the operators that allow complex
    outputs), and ``aux`` passed through.

    Examples:
        >>> import numpy as np, di
        >>> from di.complex.view import real_function
        >>> g = real_function(lambda z: z * z, "complex128", True, False)
        >>> g(np.array([[1.0], [2.0]])).tolist()  # (1 + 2i)^2 = -3 + 4i
        [[-3.0], [4.0]]
    """

    g: Callable[..., Any]
    if not split_output:

        def g(r: Any, *values: Any) -> Any:
            return f(_rebuilt(r, complex_dtype), *values)

    elif has_aux:

        def g(r: Any, *values: Any) -> Any:
            y, aux = f(_rebuilt(r, complex_dtype), *values)
            return _split_output(y), aux

    else:

        def g(r: Any, *values: Any) -> Any:
            return _split_output(f(_rebuilt(r, complex_dtype), *values))

    # what an engine that cannot differentiate complex values, or lacks this dtype, refuses (refuse_complex)
    g.real_view_of = f  # type: ignore[attr-defined]
    g.complex_dtype = complex_dtype  # type: ignore[attr-defined]
    return g


def refuse_complex(f: Callable[..., Any], backend: Any, capabilities: Any) -> None:
    """Refuse, at preparation, the real view of a complex ``x`` (``f`` made by
    :func:`real_function`) on an engine that cannot differentiate through complex
    values (:attr:`di.backends.capabilities.Capabilities.complex_numbers`), or
    whose arrays lack ``x``'s complex dtype. Any other ``f`` passes.

    Raises:
        UnsupportedOperatorError: naming the backend, why and what to do.
    """
    if getattr(f, "real_view_of", None) is None:
        return
    if not capabilities.complex_numbers:
        note = capabilities.complex_note
        raise UnsupportedOperatorError(f"{backend!r} cannot differentiate f at a complex x: {note}")
    dtype = f.complex_dtype  # type: ignore[attr-defined]
    engine = get_family(capabilities.family)
    if not engine.takes_dtype(np.dtype(dtype)):
        raise UnsupportedOperatorError(
            f"{backend!r} cannot take x of dtype {dtype}: its engine computes in {engine.display or engine.name} "
            f"arrays, which have no {dtype}. Cast x to complex64 (x.astype(np.complex64)), or use a backend whose "
            f"engine has {dtype}."
        )
