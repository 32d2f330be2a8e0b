"""The preparation of an operator at a complex ``x``: the real view's prep, its
results mapped back.

The operator layer hands a request whose ``x`` is complex to
:func:`prepare_complex`, with its own preparation (``prepare``, which reaches any
backend: an engine or a strategy). The request becomes one over the real view
``r`` of ``x`` and the real function ``g`` (:func:`~di.complex.view.real_function`);
its prep's programs are wrapped to split ``x`` (and the tangents) on the way in
and to combine the results on the way out, part by part of the operator's
layout. Nothing here names an engine: every engine, and every strategy, gets a
real request, so they all return the convention of ``docs/complex.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from di.complex.tree import TreeView
from di.complex.view import RealView, is_complex_value, real_function
from di.errors import InvalidInputError, InvalidOutputError, UnsupportedOperatorError
from di.families import family_of, get_family
from di.prep.base import Prep
from di.prep.info import StrategyInfo
from di.prep.strategy import PrepareRequest

__all__ = ["COMPLEX_OUTPUTS", "holomorphic_tolerance", "native_at_complex_x", "prepare_complex"]

COMPLEX_OUTPUTS = ("derivative", "jacobian", "pushforward", "pullback")
"""The operator families whose ``f`` may return complex values at a complex ``x``
(``gradient``, ``hvp`` and ``hessian`` need a real-valued ``f``)."""

Programs = dict[str, Callable[..., Any]]
Convert = Callable[[Any], Any]


def holomorphic_tolerance(complex_dtype: str) -> float:
    """How far (relative to the Jacobian's largest entry) ``df/db`` may be from
    ``i df/da`` for a complex ``f`` to count as holomorphic (the Cauchy-Riemann
    equations): rounding and finite differences stay well inside it, a
    non-holomorphic ``f`` (``conj``, ``abs``, ``real``) misses it by far.

    Examples:
        >>> from di.complex.strategy import holomorphic_tolerance
        >>> holomorphic_tolerance("complex64"), holomorphic_tolerance("complex128")
        (0.001, 1e-06)
    """
    return 1e-3 if complex_dtype == "complex64" else 1e-6


def native_at_complex_x(request: PrepareRequest, capabilities: Any) -> bool:
    """Whether an engine's own programs of ``request``'s operator run at its
    complex ``x`` as it is, without the real view: the engine declares they
    give the convention (:attr:`~di.backends.capabilities.Capabilities.complex_native`,
    measured against the real view in ``tests/test_complex.py``), and its
    arrays hold ``x``'s dtype (else the real view's refusal says what to do).

    Args:
        request: the checked request; its ``x`` is a complex array.
        capabilities: the engine adapter's :class:`~di.backends.capabilities.Capabilities`.

    Returns:
        ``True`` to prepare ``request`` on the engine as it is.

    Examples:
        >>> import numpy as np, di
        >>> from di.backends.capabilities import Capabilities
        >>> from di.complex.strategy import native_at_complex_x
        >>> from di.prep.strategy import PrepareRequest
        >>> request = PrepareRequest("gradient", abs, np.ones(2, np.complex64), None, (), True)
        >>> native_at_complex_x(request, Capabilities(complex_native=frozenset({"gradient"})))
        True
        >>> native_at_complex_x(request, Capabilities())
        False
    """
    if request.operator not in capabilities.complex_native or family_of(request.x) is None:  # (a pytree x)
        return False
    x = request.x
    name = _complex_name(x, family_of(x) or "numpy")
    return bool(get_family(capabilities.family).takes_dtype(np.dtype(name)))


def prepare_complex(
    request: PrepareRequest,
    operators: Mapping[str, Any],
    prepare: Callable[[PrepareRequest], Prep],
) -> tuple[Programs, StrategyInfo]:
    """The programs (and the strategy info) of ``request``, whose ``x`` is a complex array.

    Args:
        request: the checked request; its ``x`` is a complex array.
        operators: the operator table (:data:`di.operators.table.OPERATORS`): each
            family's ``names`` and ``layout(name)``.
        prepare: the operator layer's preparation of a checked request on the
            request's backend.

    Returns:
        ``(programs, info)``: for each of the operator's names, a program taking
        the complex ``x`` (and tangents) and the context values, returning the
        caller's results; the info of the real view's prep.

    Raises:
        InvalidInputError: ``second_derivative`` (no real view of it is offered),
            complex cotangents of a real-valued ``f``.
        InvalidOutputError: ``f`` returns complex values for an operator that
            needs a real-valued ``f`` (raised by the real view's preparation).
    """
    operator = request.operator
    if operator == "second_derivative":
        raise InvalidInputError(
            "second_derivative at a complex x is not offered: take di.derivative of a function that calls "
            "di.derivative, or differentiate the real and imaginary parts as real functions of real arguments "
            "(see the complex numbers page of the documentation)."
        )
    x, f, values = request.x, request.f, [context.value for context in request.contexts]
    complex_output = False
    if operator in COMPLEX_OUTPUTS:  # whether f's output is complex decides the output's real view
        y = f(x, *values)
        complex_output = is_complex_value(y[0] if request.has_aux else y)
    inner_operator = "jacobian" if operator == "derivative" else operator
    split: Convert
    if family_of(x) is None:  # a pytree with complex leaves
        tree = TreeView(x)
        if complex_output:
            raise InvalidOutputError(
                f"{operator} of a complex-valued f of a pytree x with complex leaves is not offered: differentiate "
                f"the real functions xp.real(f(x)) and xp.imag(f(x)), or pass the complex leaf as the array x."
            )
        g, split = tree.real_function(f, False, request.has_aux), tree.split
        convert: Any = _TreeConverters(tree)
    else:
        family = family_of(x) or "numpy"
        view = RealView(family, _complex_name(x, family))
        g, split = real_function(f, view.complex_dtype, complex_output, request.has_aux), view.split
        convert = _Converters(view, len(tuple(x.shape)), complex_output, operator)
    tangents = _inner_tangents(request, split, complex_output)
    inner = prepare(replace(request, operator=inner_operator, f=g, x=split(x), tangents=tangents, facts=None))
    programs: Programs = {}
    inner_names = operators[inner_operator].names
    for name, inner_name in zip(operators[operator].names, inner_names):
        parts = [convert.part(kind) for kind in operators[inner_operator].layout(inner_name)]
        programs[name] = _program(inner.programs[inner_name], split, request, parts, complex_output)
    return programs, inner.info


def _complex_name(x: Any, family: str) -> str:
    """``"complex64"`` or ``"complex128"``: ``x``'s precision."""
    name = get_family(family).describe_dtype(x.dtype)
    return "complex64" if name == "complex64" else "complex128"


def _inner_tangents(request: PrepareRequest, split: Convert, complex_output: bool) -> tuple[Any, ...] | None:
    """The real view's tangents: a tangent of ``x`` split like ``x``; a
    cotangent split when ``f``'s output is complex, else as it is (real).

    Raises:
        InvalidInputError: a complex cotangent of a real-valued ``f``.
    """
    tangents = request.tangents
    if tangents is None:
        return None
    if request.operator != "pullback" or complex_output:
        return tuple(split(t) for t in tangents)
    for index, tangent in enumerate(tangents):
        if is_complex_value(tangent):
            raise InvalidInputError(
                f"ty[{index}] is complex, but f returns real values: cotangents live in f's output space, so "
                f"pass a real one (xp.real(w)), or make f complex-valued."
            )
    return tuple(tangents)


def _program(
    inner: Callable[..., Any], split: Convert, request: PrepareRequest, parts: Sequence[Convert], complex_output: bool
) -> Any:
    """The program at a complex ``x``: ``inner`` on the real views, its result
    converted part by part (``parts``, from the operator's layout), ``aux``
    passed through."""
    has_aux = request.has_aux
    if len(parts) == 1:
        (only,) = parts
        if has_aux:
            convert: Convert = lambda result: (only(result[0]), result[1])
        else:
            convert = only
    else:
        first, rest = parts[0], parts[1:]

        def convert(result: Any) -> Any:
            head = (first(result[0][0]), result[0][1]) if has_aux else first(result[0])
            return (head, *(part(value) for part, value in zip(rest, result[1:])))

    if request.tangents is None:
        return lambda x, *values: convert(inner(split(x), *values))
    # a cotangent of a real-valued f is real: passed as it is
    split_tangent = split if request.operator != "pullback" or complex_output else _identity

    def with_tangents(x: Any, tangents: Any, *values: Any) -> Any:
        return convert(inner(split(x), tuple(split_tangent(t) for t in tangents), *values))

    return with_tangents


class _Converters:
    """Converters of the real view's results back to the caller's, one per part of
    an operator's layout (:attr:`di.operators.table.Operator.layouts`)."""

    def __init__(self, view: RealView, x_ndim: int, complex_output: bool, operator: str) -> None:
        self.view, self.x_ndim, self.complex_output, self.operator = view, x_ndim, complex_output, operator

    def part(self, kind: str) -> Convert:
        view = self.view
        if kind in ("-", "XX"):  # a real value; the real Hessian (2, *x.shape, 2, *x.shape)
            return _identity
        if kind == "X":
            return view.combine
        if kind == "X*":
            return lambda results: tuple(view.combine(r) for r in results)
        if kind == "Y":
            return view.combine if self.complex_output else _identity
        if kind == "Y*":
            if self.complex_output:
                return lambda results: tuple(view.combine(r) for r in results)
            return _identity
        if kind == "YX":
            return self.jacobian
        raise ValueError(f"unknown layout part {kind!r}")

    def jacobian(self, real: Any) -> Any:
        """The Jacobian at a complex ``x`` from the real view's, of shape
        ``(*out, 2, *x.shape)`` (``out`` itself ``(2, *f(x).shape)`` for a complex
        ``f``): for a real-valued ``f``, each row in the gradient's convention
        (``df/da + i df/db``); for a complex ``f``, the complex derivative
        ``df/da``, once ``df/db = i df/da`` (holomorphic) is checked.

        Raises:
            InvalidOutputError: a complex ``f`` that is not holomorphic at ``x``.
        """
        view = self.view
        matrix = view.family.sparse_to_scipy(real)  # a sparse matrix (AutoSparse): its real view flattened
        if matrix is not None or family_of(real) != view.family.name:
            return self._sparse_jacobian(real, matrix)
        axis = len(tuple(real.shape)) - self.x_ndim - 1
        if not self.complex_output:
            return view.combine(real, axis)
        along_a, along_b = view.combine(view.part(real, 0, axis)), view.combine(view.part(real, 1, axis))
        self._check_holomorphic(along_a, along_b)
        return along_a

    def _sparse_jacobian(self, real: Any, matrix: Any) -> Any:
        """A sparse jacobian at a complex ``x`` from the real view's sparse matrix
        (``AutoSparse``): its columns are the real parts' then the imaginary parts'
        (and, for a complex ``f``, its rows the real parts' then the imaginary
        parts'), recombined in SciPy and returned in the caller's family, its
        pattern the union of the two halves'.

        Raises:
            UnsupportedOperatorError: a family whose sparse matrices SciPy cannot read.
            InvalidOutputError: a complex ``f`` that is not holomorphic at ``x``.
        """
        view, family = self.view, self.view.family
        if matrix is None:
            raise UnsupportedOperatorError(
                f"a sparse {self.operator} at a complex x is not offered for {type(real).__name__} results: pass "
                f"dense_result=True to di.AutoSparse, or differentiate the real and imaginary parts as real arrays."
            )
        import scipy.sparse as sp

        dtype = np.dtype(view.complex_dtype)
        columns = matrix.shape[1] // 2
        along_a, along_b = (matrix[:, :columns].astype(dtype), matrix[:, columns:].astype(dtype))
        if self.complex_output:
            rows = matrix.shape[0] // 2
            along_a, along_b = along_a[:rows] + along_a[rows:] * 1j, along_b[:rows] + along_b[rows:] * 1j
            if along_a.nnz or along_b.nnz:
                residual = float(abs(along_b - along_a * 1j).max())
                scale = float(abs(along_a).max()) + float(abs(along_b).max())
                self._refuse_non_holomorphic(residual, scale)
            combined = along_a
        else:
            combined = along_a + along_b * 1j
        with family.scope(("float64",) if view.wide else ()):
            return family.sparse_from_scipy(sp.csr_array(combined))

    def _check_holomorphic(self, along_a: Any, along_b: Any) -> None:
        xp = self.view.xp
        try:
            if not _size(along_a):
                return
            with self.view.family.scope((self.view.real_dtype,)):
                residual = float(xp.max(xp.abs(along_b - along_a * 1j)))
                scale = float(xp.max(xp.abs(along_a))) + float(xp.max(xp.abs(along_b)))
        except Exception:  # a traced value (inside jax.jit): no number to compare here
            return
        self._refuse_non_holomorphic(residual, scale)

    def _refuse_non_holomorphic(self, residual: float, scale: float) -> None:
        if residual > holomorphic_tolerance(self.view.complex_dtype) * max(scale, 1.0):
            raise InvalidOutputError(
                f"{self.operator} of a complex-valued f at a complex x is the complex derivative, which exists only "
                f"where f is holomorphic, and f is not at this x (df/db differs from i df/da by {residual:.3g}, "
                f"the Cauchy-Riemann equations fail: f uses conj, abs, real or imag of x). Differentiate the real "
                f"functions xp.real(f(x)) and xp.imag(f(x)) instead (their jacobians hold df/da + i df/db), or use "
                f"pushforward, which is defined for every f."
            )


class _TreeConverters:
    """:class:`_Converters` for a pytree ``x`` with complex leaves (and a
    real-valued ``f``): each complex leaf's place converted as an array ``x``'s
    result, the real leaves' as they are."""

    def __init__(self, tree: TreeView) -> None:
        self.tree = tree

    def part(self, kind: str) -> Convert:
        tree = self.tree
        if kind in ("-", "XX", "Y", "Y*"):  # real values; the real Hessian's blocks
            return _identity
        if kind == "X":
            return tree.combine
        if kind == "X*":
            return lambda results: tuple(tree.combine(r) for r in results)
        if kind == "YX":  # each leaf's block (*out, 2, *leaf.shape): rows in the gradient's convention
            return lambda real: tree.map_leaves(
                real, lambda view, ndim, leaf: view.combine(leaf, len(tuple(leaf.shape)) - ndim - 1)
            )
        raise ValueError(f"unknown layout part {kind!r}")


def _identity(value: Any) -> Any:
    return value


def _size(value: Any) -> int:
    size = 1
    for extent in tuple(value.shape):
        size *= int(extent)
    return size
