"""Each operator as two pure MLX functions, the plain one and the ``value_and_*``
one, of ``(x, [tangents,] *context_values)``: what
:class:`~di.engines.mlx.programs.ProgramMaker` runs eagerly or compiles.

``checked`` is ``f`` with its output checked; under ``has_aux`` it returns
``(y, aux's MLX arrays)`` and the functions return ``(result, arrays)``.
Jacobians and hessians are ``mx.vmap`` over one ``mx.jvp`` or ``mx.vjp`` per
basis vector (MLX has no jacobian transform); a primitive MLX cannot vectorise
falls back to a loop over the basis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import mlx.core as mx

__all__ = [
    "CACHED_BASIS_MAX",
    "Bases",
    "derivative",
    "gradient",
    "hessian",
    "hvp",
    "jacobian",
    "pullback",
    "pushforward",
    "second_derivative",
]

CACHED_BASIS_MAX = 1 << 20
"""The most elements of a basis (an identity matrix, ``n * n``) a Jacobian or
Hessian program keeps between calls (8 MiB in float64, ``n`` = 1024): making
it again cost 4-10 ms of the 20-50 ms an eager float64 Jacobian took at n = 1e3."""

Pair = tuple[Callable[..., Any], Callable[..., Any]]


def _values_closed(checked: Callable[..., Any], values: Sequence[Any]) -> Callable[[Any], Any]:
    return lambda x: checked(x, *values)


class _Capture:
    """``f`` returning ``(y, arrays)`` as a function of ``x`` returning ``y``, the
    arrays of its latest evaluation kept (read after the transform that
    evaluated it)."""

    def __init__(self, fx: Callable[[Any], Any]) -> None:
        self.fx = fx
        self.arrays: tuple[Any, ...] = ()

    def __call__(self, x: Any) -> Any:
        y, self.arrays = self.fx(x)
        return y


def _no_jvp(error: RuntimeError) -> bool:
    """Whether MLX refused forward mode through a primitive (``scatter``, the
    derivative of an indexing of ``x``, has no JVP: "JVP not ..."; a cumulative
    product, minimum or maximum: "JVP is not implemented ..."): reverse mode then
    computes the same products (:func:`jvp`)."""
    text = str(error)
    return "JVP not" in text or "JVP is not" in text


def jvp(fy: Callable[[Any], Any], x: Any, t: Any) -> tuple[Any, Any]:
    """``(f(x), J t)``: ``mx.jvp``, or where MLX has no forward rule for a
    primitive of ``f``, the transpose of the pullback: ``u -> J^T u`` is linear,
    and its own pullback along ``t`` is ``J t`` (two reverse passes)."""
    try:
        (y,), (dy,) = mx.jvp(fy, [x], [t])
        return y, dy
    except RuntimeError as err:
        if not _no_jvp(err):
            raise
    y = fy(x)

    def transposed(u: Any) -> Any:
        return mx.vjp(fy, [x], [u])[1][0]

    (_,), (dy,) = mx.vjp(transposed, [mx.zeros_like(y)], [t])
    return y, dy


def _y_only(checked: Callable[..., Any], values: Sequence[Any], has_aux: bool) -> tuple[Callable[[Any], Any], Any]:
    fx = _values_closed(checked, values)
    if not has_aux:
        return fx, None
    capture = _Capture(fx)
    return capture, capture


def _result(output: Any, capture: _Capture | None) -> Any:
    return output if capture is None else (output, capture.arrays)


def _plain(full: Callable[..., Any], has_aux: bool = False) -> Callable[..., Any]:
    if has_aux:

        def plain_with_aux(*args: Any) -> Any:
            result, arrays = full(*args)
            return result[-1], arrays

        return plain_with_aux
    return lambda *args: full(*args)[-1]


def gradient(checked: Callable[..., Any], has_aux: bool, caches: bool = False) -> Pair:
    if caches:  # f must write into the very arrays it is given: the transform closes over them
        return _closing_gradient(checked, has_aux)
    # the transforms are made once: MLX differentiates with respect to the first argument
    # (argnums=0) and passes copies of the context values on
    value_and_grad = mx.value_and_grad(checked)
    if not has_aux:
        return mx.grad(checked), value_and_grad

    def value_and_gradient_aux(x: Any, *values: Any) -> Any:
        (y, arrays), g = value_and_grad(x, *values)
        return (y, g), arrays

    return _plain(value_and_gradient_aux, True), value_and_gradient_aux


def _closing_gradient(checked: Callable[..., Any], has_aux: bool) -> Pair:
    """``gradient`` with a transform made at each call, closing over the context
    values (MLX's transforms copy their arguments: a ``Cache`` written by ``f``
    must be the array the program holds)."""

    def value_and_gradient(x: Any, *values: Any) -> Any:
        (y, g) = mx.value_and_grad(_values_closed(checked, values))(x)
        return ((y[0], g), y[1]) if has_aux else (y, g)

    return _plain(value_and_gradient, has_aux), value_and_gradient


def pushforward(checked: Callable[..., Any], has_aux: bool) -> Pair:
    def value_and_pushforward(x: Any, tx: Sequence[Any], *values: Any) -> Any:
        if not has_aux and not values and len(tx) == 1:  # (the common call: one mx.jvp of f itself)
            try:
                (value,), (product,) = mx.jvp(checked, [x], [tx[0]])
                return value, (product,)
            except RuntimeError as err:
                if not _no_jvp(err):
                    raise
        fy, capture = _y_only(checked, values, has_aux)
        if not tx:
            return _result((fy(x), ()), capture)
        y, products = None, []
        for t in tx:
            y, dy = jvp(fy, x, t)
            products.append(dy)
        return _result((y, tuple(products)), capture)

    return _plain(value_and_pushforward, has_aux), value_and_pushforward


def pullback(checked: Callable[..., Any], has_aux: bool) -> Pair:
    def value_and_pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
        if not has_aux and not values and len(ty) == 1:  # (the common call: one mx.vjp of f itself)
            (value,), (product,) = mx.vjp(checked, [x], [ty[0]])
            return value, (product,)
        fy, capture = _y_only(checked, values, has_aux)
        if not ty:
            return _result((fy(x), ()), capture)
        y, products = None, []
        for t in ty:
            (y,), (dx,) = mx.vjp(fy, [x], [t.astype(y.dtype) if y is not None and t.dtype != y.dtype else t])
            products.append(dx)
        return _result((y, tuple(products)), capture)

    return _plain(value_and_pullback, has_aux), value_and_pullback


def derivative(checked: Callable[..., Any], has_aux: bool) -> Pair:
    def value_and_derivative(x: Any, *values: Any) -> Any:
        fy, capture = _y_only(checked, values, has_aux)
        y, dy = jvp(fy, x, mx.ones_like(x))
        return _result((y, dy), capture)

    return _plain(value_and_derivative, has_aux), value_and_derivative


def _basis(shape: Sequence[int], dtype: Any) -> Any:
    size = 1
    for n in shape:
        size *= n
    return mx.eye(size, dtype=dtype).reshape((size, *shape))


class Bases:
    """The basis vectors a Jacobian or Hessian program pushes forward or pulls
    back, one identity matrix per shape and dtype: made once and kept (up to
    :data:`CACHED_BASIS_MAX` elements), where it can be made outside any MLX
    transform (at preparation, :meth:`prime`, so that a compiled program's trace
    reads it as a constant instead of making it at every call; or at an eager
    call); inside a transform (the program's own trace, a caller's ``mx.vmap``
    or ``mx.compile``), one not kept is made there."""

    def __init__(self) -> None:
        self._made: dict[tuple[tuple[int, ...], Any], Any] = {}

    def __call__(self, shape: Sequence[int], dtype: Any) -> Any:
        key = (tuple(shape), dtype)
        basis = self._made.get(key)
        if basis is None:
            basis = _basis(shape, dtype)
            self._keep(key, basis)
        return basis

    def prime(self, shape: Sequence[int], dtype: Any) -> None:
        """Make and keep the basis of ``shape`` and ``dtype`` now."""
        self(shape, dtype)

    def _keep(self, key: tuple[tuple[int, ...], Any], basis: Any) -> None:
        if basis.size > CACHED_BASIS_MAX:
            return
        try:
            mx.eval(basis)  # (MLX refuses inside compile and vmap: the basis is a value of that trace)
        except ValueError:
            return
        self._made[key] = basis


def _vectorised(function: Callable[[Any], Any], basis: Any) -> Any:
    """``function`` of each row of ``basis``, stacked: ``mx.vmap`` where MLX can
    vectorise every primitive, else a loop."""
    if basis.shape[0] == 0:
        return None
    try:
        return mx.vmap(function)(basis)
    except ValueError as err:  # a primitive without a vmap rule
        if "vmap" not in str(err).lower() and "Not implemented" not in str(err):
            raise
        return mx.stack([function(basis[i]) for i in range(basis.shape[0])])


_NO_FORWARD_RULE: Any = object()
"""What :func:`_columns` returns where MLX has no forward rule for a primitive of ``f``."""


def _columns(fy: Callable[[Any], Any], x: Any, bases: Bases) -> Any:
    """The Jacobian's columns, one pushforward of each basis vector of ``x``
    stacked (``None`` for an ``x`` without elements), or :data:`_NO_FORWARD_RULE`."""
    try:
        return _vectorised(lambda t: mx.jvp(fy, [x], [t])[1][0], bases(x.shape, x.dtype))
    except RuntimeError as err:  # no forward rule for a primitive of f: reverse mode
        if not _no_jvp(err):
            raise
        return _NO_FORWARD_RULE


def _from_columns(columns: Any, x: Any, y_shape: tuple[int, ...]) -> Any:
    """The Jacobian of shape ``(*y_shape, *x.shape)`` from its stacked ``columns``."""
    if x.ndim == 1 and len(y_shape) == 1:  # (the transpose as it is, a view: a reshape of it would copy)
        return columns.T
    return columns.reshape((x.size, math.prod(y_shape))).T.reshape((*y_shape, *x.shape))


def _jacobian_of(fy: Callable[[Any], Any], x: Any, y: Any, forward: bool, bases: Bases) -> Any:
    if forward:
        columns = _columns(fy, x, bases)
        if columns is _NO_FORWARD_RULE:
            return _jacobian_of(fy, x, y, False, bases)
        if columns is None:
            return mx.zeros((*y.shape, *x.shape), dtype=y.dtype)
        return _from_columns(columns, x, y.shape)
    rows = _vectorised(lambda c: mx.vjp(fy, [x], [c])[1][0], bases(y.shape, y.dtype))
    if rows is None:
        return mx.zeros((*y.shape, *x.shape), dtype=y.dtype)
    return _from_rows(rows, x, y.shape, y.dtype)


def _from_rows(rows: Any, x: Any, y_shape: tuple[int, ...], y_dtype: Any) -> Any:
    """The Jacobian of shape ``(*y_shape, *x.shape)`` and dtype ``y_dtype`` from its
    stacked ``rows`` (one pullback of each basis vector of ``f(x)``)."""
    if rows.dtype != y_dtype:
        rows = rows.astype(y_dtype)
    return rows if len(y_shape) == 1 else rows.reshape((*y_shape, *x.shape))


_COTANGENT_SHAPE = "does not match cotangent shape"
"""MLX's refusal of a cotangent of another shape than the output's (``mx.vjp``)."""


def _jacobian_alone(fy: Callable[[Any], Any], x: Any, forward: bool, bases: Bases, last: list[Any]) -> Any:
    """The Jacobian of ``fy`` at ``x`` without ``fy(x)`` evaluated beside it (the
    plain Jacobian: an extra evaluation of ``f`` was a sixth of the eager call at
    n = 32). Forward mode reads ``f(x)``'s shape off the columns. Reverse mode
    pulls back the basis of the output that ``last[0]`` holds (its shape and dtype
    at the latest call), and the pullbacks' own evaluation of ``f`` confirms it:
    MLX refuses a cotangent of another shape, and a dtype that differs is seen;
    then (and at the first call) ``f(x)`` is evaluated for them, as
    :func:`_jacobian_of` does."""
    if forward:
        columns = _columns(fy, x, bases)
        if columns is _NO_FORWARD_RULE:
            return _jacobian_alone(fy, x, False, bases, last)
        if columns is None:  # (x has no elements: f(x) says the shape of the zeros)
            return _jacobian_of(fy, x, fy(x), True, bases)
        return _from_columns(columns, x, columns.shape[1:])
    guess = last[0]
    if guess is not None:
        shape, dtype = guess
        others: list[Any] = []  # (outputs of another shape or dtype than the guess)

        def pulled(c: Any) -> Any:
            (y,), (dx,) = mx.vjp(fy, [x], [c])
            if y.shape != shape or y.dtype != dtype:
                others.append(y)
            return dx

        try:
            rows = _vectorised(pulled, bases(shape, dtype))
        except ValueError as err:
            if _COTANGENT_SHAPE not in str(err):
                raise
        else:
            if not others:
                return _from_rows(rows, x, shape, dtype)
    y = fy(x)
    if y.__class__ is mx.array and y.size:  # (an output with no elements pulls nothing back to confirm it)
        last[0] = (y.shape, y.dtype)
    return _jacobian_of(fy, x, y, False, bases)


def jacobian(checked: Callable[..., Any], has_aux: bool, forward: bool, bases: Bases) -> Pair:
    def value_and_jacobian(x: Any, *values: Any) -> Any:
        fy, capture = _y_only(checked, values, has_aux)
        y = fy(x)  # (and aux, kept by this evaluation)
        arrays = capture.arrays if capture is not None else ()
        jac = _jacobian_of(fy, x, y, forward, bases)
        return (y, jac) if capture is None else ((y, jac), arrays)

    if has_aux:  # (aux is kept by an evaluation of f outside the transforms)
        return _plain(value_and_jacobian, has_aux), value_and_jacobian
    last: list[Any] = [None]  # (the shape and dtype of f(x) at the latest call: see _jacobian_alone)

    def plain_jacobian(x: Any, *values: Any) -> Any:
        return _jacobian_alone(_values_closed(checked, values), x, forward, bases, last)

    return plain_jacobian, value_and_jacobian


def _hessian_product(grad: Callable[[Any], Any], x: Any, t: Any, forward: bool) -> Any:
    if forward:
        return mx.jvp(grad, [x], [t])[1][0]
    return mx.vjp(grad, [x], [t])[1][0]


def hvp(checked: Callable[..., Any], caches: bool = False) -> Pair:
    grad_of_all = mx.grad(checked)

    def gradient_and_hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
        def grad(x: Any) -> Any:
            return mx.grad(_values_closed(checked, values))(x) if caches else grad_of_all(x, *values)

        if not caches and not values and len(tx) == 1:  # (the common call: one mx.jvp of mx.grad of f)
            try:
                (g,), (product,) = mx.jvp(grad_of_all, [x], [tx[0]])
                return g, (product,)
            except RuntimeError as err:
                if not _no_jvp(err):
                    raise
        if not tx:
            return grad(x), ()
        try:
            outputs = [mx.jvp(grad, [x], [t]) for t in tx]
        except RuntimeError as err:  # forward over reverse refused: reverse over reverse
            if not _no_jvp(err):
                raise
            outputs = [mx.vjp(grad, [x], [t]) for t in tx]
        return outputs[-1][0][0], tuple(products[0] for _, products in outputs)

    return _plain(gradient_and_hvp), gradient_and_hvp


def _hessian_of(grad: Callable[[Any], Any], x: Any, bases: Bases) -> Any:
    basis = bases(x.shape, x.dtype)
    try:
        columns = _vectorised(lambda t: _hessian_product(grad, x, t, True), basis)
    except RuntimeError as err:  # forward over reverse refused: reverse over reverse
        if not _no_jvp(err):
            raise
        columns = _vectorised(lambda t: _hessian_product(grad, x, t, False), basis)
    if columns is None:
        return mx.zeros((*x.shape, *x.shape), dtype=x.dtype)
    if x.ndim == 1:  # (the transpose as it is, a view: a reshape of it would copy)
        return columns.T
    return columns.reshape((x.size, x.size)).T.reshape((*x.shape, *x.shape))


def hessian(checked: Callable[..., Any], bases: Bases) -> Pair:
    def value_gradient_and_hessian(x: Any, *values: Any) -> Any:
        fx = _values_closed(checked, values)
        y, g = mx.value_and_grad(fx)(x)
        return y, g, _hessian_of(mx.grad(fx), x, bases)

    def plain_hessian(x: Any, *values: Any) -> Any:
        return _hessian_of(mx.grad(_values_closed(checked, values)), x, bases)

    return plain_hessian, value_gradient_and_hessian


def _second_by_reverse(fx: Callable[[Any], Any], x: Any) -> tuple[Any, Any]:
    """``(f'(x), f''(x))`` at a scalar ``x`` by reverse over reverse, one pullback per
    entry of ``f``'s output: for an ``f`` whose derivative MLX cannot differentiate
    in forward mode, nor transpose (a ``gather`` at indices computed from ``x``, as
    in the derivative of ``max``: "Cannot calculate JVP/VJP with respect to
    indices"), which plain reverse over reverse differentiates."""
    y = fx(x)

    def first(t: Any, cotangent: Any) -> Any:
        return mx.vjp(fx, [t], [cotangent])[1][0]

    def both(cotangent: Any) -> tuple[Any, Any]:
        (dy,), (d2y,) = mx.vjp(lambda t: first(t, cotangent), [x], [mx.ones_like(x)])
        return dy, d2y

    pairs = [both(cotangent) for cotangent in _basis(y.shape, y.dtype)]
    dy = mx.stack([pair[0] for pair in pairs]).reshape(y.shape) if pairs else mx.zeros_like(y)
    d2y = mx.stack([pair[1] for pair in pairs]).reshape(y.shape) if pairs else mx.zeros_like(y)
    return dy, d2y


def second_derivative(checked: Callable[..., Any]) -> Pair:
    def value_derivative_and_second_derivative(x: Any, *values: Any) -> Any:
        fx = _values_closed(checked, values)
        one = mx.ones_like(x)

        def derivative(x: Any) -> Any:
            return jvp(fx, x, one)[1]

        try:
            dy, d2y = jvp(derivative, x, one)
        except ValueError as err:
            if "with respect to indices" not in str(err):
                raise
            dy, d2y = _second_by_reverse(fx, x)
        return fx(x), dy, d2y

    return _plain(value_derivative_and_second_derivative), value_derivative_and_second_derivative
