"""Generic operators built from an adapter's primitives.

An adapter that implements one primitive, ``pushforward`` (forward mode) or
``pullback`` (reverse mode), gets every other operator from here, through
:func:`programs`, the one place that picks an adapter's native method or the
fallback below:

* jacobian: columns from pushforwards of the unit tangents, or rows from
  pullbacks of the unit cotangents;
* pushforward from pullback and pullback from pushforward: through the jacobian;
* gradient: one pullback of the cotangent 1, or the jacobian's single row;
* derivative: one pushforward of the tangent 1, or the jacobian;
* hvp: forward over reverse, a pushforward of the adapter's own gradient (the
  engine differentiates its own program, so this needs an engine that can);
* hessian: hvps of the unit tangents; second derivative: a pushforward of the
  derivative.

Every program here takes and returns what adapter programs do: caller-family
inputs, engine-family outputs. Unit tangents and cotangents are numpy arrays
made at preparation (programs convert tangents from any family). The pieces the
fallbacks are made of (the basis, the direction, errors named for the operator
asked) are in :mod:`di.backends.derived`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from di.backends.aux import with_aux
from di.backends.capabilities import AUX_FAMILIES, OPERATOR_FAMILIES, SECOND_ORDER_FAMILIES
from di.backends.derived import (
    engine_tangent,
    fresh_copy,
    numpy_dtype,
    output_of,
    prefers_forward,
    raise_as,
    reported_as,
    unit_arrays,
)
from di.backends.protocol import Adapter, Programs, keeping_error
from di.contexts import Context, rewrap_context
from di.errors import InvalidOptionTypeError, InvalidOutputError, UnsupportedOperatorError
from di.families import converter, family_of, get_family

__all__ = [
    "FALLBACKS",
    "derivative_programs",
    "gradient_programs",
    "hessian_programs",
    "hvp_programs",
    "jacobian_programs",
    "programs",
    "pullback_programs",
    "pushforward_programs",
    "second_derivative_programs",
]


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(getattr(value, "shape", ()))


def _values(contexts: Sequence[Context]) -> list[Any]:
    return [c.value for c in contexts]


def jacobian_programs(
    adapter: Adapter,
    f: Callable[..., Any],
    x: Any,
    contexts: Sequence[Context],
    forward: bool | None = None,
    *,
    has_aux: bool = False,
) -> Programs:
    """``jacobian`` / ``value_and_jacobian`` from pushforwards (``forward=True``) or
    pullbacks (``False``); ``None`` picks with :func:`prefers_forward`."""
    x_shape = _shape(x)
    y_prep = output_of(adapter, f, x, contexts, has_aux)
    y_shape = _shape(y_prep)
    xp = get_family(adapter.capabilities.family).namespace()
    scope = adapter.scope([x, *_values(contexts)])
    if forward is None:
        forward = prefers_forward(adapter, math.prod(x_shape), math.prod(y_shape))

    def assemble(slices: tuple[Any, ...], axis: int, y_shape: tuple[int, ...], dtype: Any) -> Any:
        if not slices:
            return xp.zeros((*y_shape, *x_shape), dtype=dtype)
        return xp.stack(slices, axis=axis).reshape((*y_shape, *x_shape))

    if forward:
        seeds = unit_arrays(x_shape, numpy_dtype(x))
        primitives = programs(adapter, "pushforward", f, x, contexts, seeds, has_aux=has_aux)
        full, plain, axis = primitives["value_and_pushforward"], primitives["pushforward"], -1
    else:
        seeds = unit_arrays(y_shape, numpy_dtype(y_prep))
        primitives = programs(adapter, "pullback", f, x, contexts, seeds, has_aux=has_aux)
        full, plain, axis = primitives["value_and_pullback"], primitives["pullback"], 0
    finish = with_aux(has_aux, lambda result: (result[0], assemble(result[1], axis, result[0].shape, result[0].dtype)))
    # the plain jacobian runs the plain primitive: f's output shape is the prepared one
    finish_plain = with_aux(has_aux, lambda slices: assemble(slices, axis, y_shape, y_prep.dtype))

    named = ("pushforward",) if forward else ("pullback",)

    def value_and_jacobian(x: Any, *values: Any) -> Any:
        with scope():
            try:
                return finish(full(x, seeds, *values))
            except InvalidOutputError as err:  # the caller asked for a jacobian, not for the primitive
                raise_as("jacobian", named, err)

    def jacobian(x: Any, *values: Any) -> Any:
        with scope():
            try:
                return finish_plain(plain(x, seeds, *values))
            except InvalidOutputError as err:
                raise_as("jacobian", named, err)

    return {"jacobian": jacobian, "value_and_jacobian": value_and_jacobian}


def _jacobians(
    adapter: Adapter, f: Callable[..., Any], x: Any, contexts: Sequence[Context], forward: bool, has_aux: bool
) -> Programs:
    """The adapter's own jacobian programs, else ones built in the given mode."""
    if adapter.has_native("jacobian"):
        return programs(adapter, "jacobian", f, x, contexts, has_aux=has_aux)
    return jacobian_programs(adapter, f, x, contexts, forward=forward, has_aux=has_aux)


def pushforward_programs(
    adapter: Adapter,
    f: Callable[..., Any],
    x: Any,
    tx: Sequence[Any],
    contexts: Sequence[Context],
    *,
    has_aux: bool = False,
) -> Programs:
    """``pushforward`` through the jacobian (the adapter's own, else reverse mode):
    ``J @ t`` per tangent."""
    jacobians = _jacobians(adapter, f, x, contexts, False, has_aux)
    value_and_jacobian, jacobian = jacobians["value_and_jacobian"], jacobians["jacobian"]
    xp = get_family(adapter.capabilities.family).namespace()
    to_engine = engine_tangent(adapter)
    x_ndim = len(_shape(x))
    scope = adapter.scope([x, *_values(contexts)])

    def value_and_pushforward(x: Any, tx: Sequence[Any], *values: Any) -> Any:
        def contract(result: Any) -> Any:
            y, jac = result
            return y, tuple(xp.tensordot(jac, to_engine(t), axes=x_ndim) for t in tx)

        with scope():
            return with_aux(has_aux, contract)(value_and_jacobian(x, *values))

    def pushforward(x: Any, tx: Sequence[Any], *values: Any) -> Any:
        def contract(jac: Any) -> Any:
            return tuple(xp.tensordot(jac, to_engine(t), axes=x_ndim) for t in tx)

        with scope():
            return with_aux(has_aux, contract)(jacobian(x, *values))  # the plain jacobian: no value

    return {"pushforward": pushforward, "value_and_pushforward": value_and_pushforward}


def pullback_programs(
    adapter: Adapter,
    f: Callable[..., Any],
    x: Any,
    ty: Sequence[Any],
    contexts: Sequence[Context],
    *,
    has_aux: bool = False,
) -> Programs:
    """``pullback`` through the jacobian (the adapter's own, else forward mode):
    ``t @ J`` per cotangent."""
    jacobians = _jacobians(adapter, f, x, contexts, True, has_aux)
    value_and_jacobian, jacobian = jacobians["value_and_jacobian"], jacobians["jacobian"]
    xp = get_family(adapter.capabilities.family).namespace()
    to_engine = engine_tangent(adapter)
    x_ndim = len(_shape(x))
    scope = adapter.scope([x, *_values(contexts)])

    def value_and_pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
        def contract(result: Any) -> Any:
            y, jac = result
            return y, tuple(xp.tensordot(to_engine(t), jac, axes=y.ndim) for t in ty)

        with scope():
            return with_aux(has_aux, contract)(value_and_jacobian(x, *values))

    def pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
        def contract(jac: Any) -> Any:
            return tuple(xp.tensordot(to_engine(t), jac, axes=jac.ndim - x_ndim) for t in ty)

        with scope():
            return with_aux(has_aux, contract)(jacobian(x, *values))  # the plain jacobian: no value

    return {"pullback": pullback, "value_and_pullback": value_and_pullback}


def gradient_programs(
    adapter: Adapter, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
) -> Programs:
    """``gradient``: one pullback of the cotangent 1, or the forward jacobian's row."""
    if adapter.has_native("pullback"):
        one = (np.ones((), dtype=numpy_dtype(output_of(adapter, f, x, contexts, has_aux))),)
        pullback = programs(adapter, "pullback", f, x, contexts, one, has_aux=has_aux)
        return _with_one_seed(pullback, "pullback", one, ("gradient", "value_and_gradient"), has_aux)

    jacobians = jacobian_programs(adapter, f, x, contexts, forward=True, has_aux=has_aux)
    value_and_jacobian, jacobian = jacobians["value_and_jacobian"], jacobians["jacobian"]
    x_shape = _shape(x)
    as_gradient = with_aux(has_aux, lambda result: (result[0], result[1].reshape(x_shape)))
    as_plain_gradient = with_aux(has_aux, lambda jac: jac.reshape(x_shape))

    def value_and_gradient_from_jacobian(x: Any, *values: Any) -> Any:
        return as_gradient(value_and_jacobian(x, *values))

    def gradient_from_jacobian(x: Any, *values: Any) -> Any:
        return as_plain_gradient(jacobian(x, *values))

    return {"gradient": gradient_from_jacobian, "value_and_gradient": value_and_gradient_from_jacobian}


def derivative_programs(
    adapter: Adapter, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
) -> Programs:
    """``derivative`` of a function of a scalar: one pushforward of the tangent 1,
    or the reverse jacobian (shaped like the output)."""
    if not adapter.has_native("pushforward"):
        jacobian = jacobian_programs(adapter, f, x, contexts, forward=False, has_aux=has_aux)
        named = ("jacobian", "pullback")
        return {
            "derivative": reported_as("derivative", named, jacobian["jacobian"]),
            "value_and_derivative": reported_as("derivative", named, jacobian["value_and_jacobian"]),
        }
    one = (np.ones((), dtype=numpy_dtype(x)),)
    pushforward = programs(adapter, "pushforward", f, x, contexts, one, has_aux=has_aux)
    return _with_one_seed(pushforward, "pushforward", one, ("derivative", "value_and_derivative"), has_aux)


def _with_one_seed(primitive: Programs, name: str, seed: tuple[Any], names: tuple[str, str], has_aux: bool) -> Programs:
    """An operator's two programs from a primitive's (``name``: pushforward or
    pullback) run on one seed: the single product is the operator's result."""
    full_primitive, plain_primitive = primitive[f"value_and_{name}"], primitive[name]
    finish = with_aux(has_aux, lambda result: (result[0], result[1][0]))
    finish_plain = with_aux(has_aux, lambda result: result[0])

    def full(x: Any, *values: Any) -> Any:
        try:
            return finish(full_primitive(x, seed, *values))
        except InvalidOutputError as err:  # the caller asked for names[0], not for the primitive
            raise_as(names[0], (name,), err)

    def plain(x: Any, *values: Any) -> Any:
        try:
            return finish_plain(plain_primitive(x, seed, *values))
        except InvalidOutputError as err:
            raise_as(names[0], (name,), err)

    return {names[0]: keeping_error(plain, plain_primitive), names[1]: keeping_error(full, full_primitive)}


def _in_engine(adapter: Adapter, x: Any, contexts: Sequence[Context]) -> tuple[Any, list[Context]]:
    """``x`` and the contexts converted to the engine's family, for preparing an
    inner program that the engine will differentiate again."""
    family = adapter.capabilities.family
    with adapter.scope([x, *_values(contexts)])():
        x_engine = converter(family_of(x), family)(np.asarray(x) if isinstance(x, float) else x)
        engine_contexts = [rewrap_context(c, converter(family_of(c.value), family)(c.value)) for c in contexts]
    return x_engine, engine_contexts


def hvp_programs(
    adapter: Adapter, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
) -> Programs:
    """``hvp`` forward over reverse: the pushforward of the adapter's own gradient."""
    x_engine, engine_contexts = _in_engine(adapter, x, contexts)
    inner_gradient = programs(adapter, "gradient", f, x_engine, engine_contexts)["gradient"]
    outer = programs(adapter, "pushforward", inner_gradient, x, contexts, tx)

    def gradient_and_hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
        return outer["value_and_pushforward"](x, tx, *values)

    return {"hvp": outer["pushforward"], "gradient_and_hvp": gradient_and_hvp}


def hessian_programs(adapter: Adapter, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
    """``hessian`` from the hvps of the unit tangents."""
    x_shape = _shape(x)
    tangents = unit_arrays(x_shape, numpy_dtype(x))
    gradient_and_hvp = programs(adapter, "hvp", f, x, contexts, tangents)["gradient_and_hvp"]
    value = adapter.prepare_value_program(f, x, contexts)
    xp = get_family(adapter.capabilities.family).namespace()
    scope = adapter.scope([x, *_values(contexts)])

    def gradient_and_hessian(x: Any, *values: Any) -> Any:
        with scope():
            g, columns = gradient_and_hvp(x, tangents, *values)
            if not columns:
                return g, xp.zeros((*x_shape, *x_shape), dtype=g.dtype)
            return g, xp.stack(columns).reshape((*x_shape, *x_shape))

    def hessian(x: Any, *values: Any) -> Any:
        return gradient_and_hessian(x, *values)[1]

    def value_gradient_and_hessian(x: Any, *values: Any) -> Any:
        g, h = gradient_and_hessian(x, *values)
        return value(x, *values), g, h

    return {"hessian": hessian, "value_gradient_and_hessian": value_gradient_and_hessian}


def second_derivative_programs(
    adapter: Adapter, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
) -> Programs:
    """``second_derivative``: the derivative of the adapter's own derivative."""
    x_engine, engine_contexts = _in_engine(adapter, x, contexts)
    inner = programs(adapter, "derivative", f, x_engine, engine_contexts)["derivative"]
    outer = programs(adapter, "derivative", inner, x, contexts)["value_and_derivative"]
    value = adapter.prepare_value_program(f, x, contexts)

    def value_derivative_and_second_derivative(x: Any, *values: Any) -> Any:
        d, d2 = outer(x, *values)
        return value(x, *values), d, d2

    def second_derivative(x: Any, *values: Any) -> Any:
        return outer(x, *values)[1]

    return {
        "second_derivative": second_derivative,
        "value_derivative_and_second_derivative": value_derivative_and_second_derivative,
    }


_SAME_POINT = frozenset({"pullback_same_point", "hvp_same_point"})


def _handing_out_copies(adapter: Adapter, operator: str, built: Programs, prepared: list[Any]) -> Programs:
    """An adapter's own same-point programs, with the value (``value_and_pullback``)
    or gradient (``gradient_and_hvp``) they computed at preparation handed out as a
    copy on each call, as the fallbacks below do: a native program may return the
    array it keeps, and a caller freeing it would break the prep for good."""
    plain, full = _PROGRAM_NAMES[operator]
    program, fresh, scope = built[full], fresh_copy(adapter), adapter.scope(prepared)

    def copying(x: Any, tangents: Sequence[Any], *values: Any) -> Any:
        first, products = program(x, tangents, *values)
        with scope():  # (a value or gradient of a pytree x, which the engine takes as it is, leaf by leaf)
            return adapter.tree_map(fresh, first), products

    return {plain: built[plain], full: keeping_error(copying, program)}


def pullback_same_point_programs(
    adapter: Adapter, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context]
) -> Programs:
    """Same-point ``pullback``: the jacobian is computed once, at preparation, and
    each call contracts new cotangents with it."""
    values = _values(contexts)
    y, jac = programs(adapter, "jacobian", f, x, contexts)["value_and_jacobian"](x, *values)
    xp = get_family(adapter.capabilities.family).namespace()
    to_engine, fresh = engine_tangent(adapter), fresh_copy(adapter)
    scope = adapter.scope([x, *values])

    def value_and_pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
        with scope():
            # (a cotangent in the jacobian's dtype: the products in x's, as other pullbacks give them)
            cotangents = [xp.asarray(to_engine(t), dtype=jac.dtype) for t in ty]
            return fresh(y), tuple(xp.tensordot(t, jac, axes=len(_shape(y))) for t in cotangents)

    def pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
        return value_and_pullback(x, ty, *values)[1]

    return {"pullback": pullback, "value_and_pullback": value_and_pullback}


def hvp_same_point_programs(
    adapter: Adapter, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
) -> Programs:
    """Same-point ``hvp``: the Hessian is computed once, at preparation, and each
    call contracts new tangents with it."""
    values = _values(contexts)
    _, g, hessian = programs(adapter, "hessian", f, x, contexts)["value_gradient_and_hessian"](x, *values)
    xp = get_family(adapter.capabilities.family).namespace()
    to_engine, fresh = engine_tangent(adapter), fresh_copy(adapter)
    scope = adapter.scope([x, *values])
    x_ndim = len(_shape(x))

    def gradient_and_hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
        with scope():
            tangents = [xp.asarray(to_engine(t), dtype=hessian.dtype) for t in tx]  # (as in the pullback)
            return fresh(g), tuple(xp.tensordot(hessian, t, axes=x_ndim) for t in tangents)

    def hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
        return gradient_and_hvp(x, tx, *values)[1]

    return {"hvp": hvp, "gradient_and_hvp": gradient_and_hvp}


def _can_nest(adapter: Adapter, operator: str) -> bool:
    """Whether the fallback of ``operator`` can be built: second order from first
    order needs an engine that differentiates its own programs, unless a native
    second-order program it builds on (hvp for the hessian) is there."""
    if operator not in SECOND_ORDER_FAMILIES and operator != "hvp_same_point":
        return True
    if operator in ("hessian", "hvp_same_point") and (adapter.has_native("hvp") or adapter.has_native("hessian")):
        return True
    return adapter.differentiates_programs_of(adapter)


FALLBACKS: dict[str, Callable[..., Programs]] = {
    "pushforward": pushforward_programs,
    "pullback": pullback_programs,
    "gradient": gradient_programs,
    "derivative": derivative_programs,
    "jacobian": jacobian_programs,
    "hvp": hvp_programs,
    "hessian": hessian_programs,
    "second_derivative": second_derivative_programs,
    "pullback_same_point": pullback_same_point_programs,
    "hvp_same_point": hvp_same_point_programs,
}
"""The generic program builders, by operator (as in ``prepare_<operator>_programs``)."""

_PROGRAM_NAMES: dict[str, tuple[str, ...]] = {
    **OPERATOR_FAMILIES,
    "pullback_same_point": OPERATOR_FAMILIES["pullback"],
    "hvp_same_point": OPERATOR_FAMILIES["hvp"],
}
"""The programs each ``prepare_<operator>_programs`` must return, by name."""


def _check_programs(adapter: Adapter, operator: str, built: Any) -> None:
    """Refuse, once at preparation, what an adapter's ``prepare_<operator>_programs``
    returned when it is not a dict holding both of the operator's programs: the
    first call (or a fallback built on it) would fail with a bare ``KeyError``."""
    names = _PROGRAM_NAMES[operator]
    if isinstance(built, Mapping):
        wrong = [name for name in names if not callable(built.get(name))]
        if not wrong:
            return
        got = f"a dict without a callable {wrong[0]!r} (its keys: {', '.join(map(repr, built)) or 'none'})"
    else:
        got = f"a {type(built).__name__}"
    raise InvalidOptionTypeError(
        f"{type(adapter).__name__}.prepare_{operator}_programs (the adapter of {type(adapter.backend).__name__}) "
        f"returned {got}; it must return both programs: {{{names[0]!r}: ..., {names[1]!r}: ...}}"
    )


_WITH_TANGENTS = frozenset({"pushforward", "pullback", "hvp", "pullback_same_point", "hvp_same_point"})


def programs(
    adapter: Adapter,
    operator: str,
    f: Callable[..., Any],
    x: Any,
    contexts: Sequence[Context],
    tangents: Sequence[Any] | None = None,
    *,
    has_aux: bool = False,
) -> Programs:
    """The programs of ``operator`` on ``adapter``: its native method when it has
    one, else the generic fallback built from its primitives.

    Args:
        adapter: the engine's adapter.
        operator: an operator family (``"gradient"``, ``"hvp"``, ...) or a
            same-point one (``"pullback_same_point"``, ``"hvp_same_point"``).
        f: the function, called as ``f(x, *context_values)``.
        x: the point to prepare at.
        contexts: the contexts, in ``f``'s order.
        tangents: the tangents (``pushforward``, ``hvp``) or cotangents
            (``pullback``) of operators that take them.
        has_aux: ``f`` returns ``(y, aux)`` (first-order families only, see
            :data:`di.backends.capabilities.AUX_FAMILIES`); the programs then return
            ``(result, aux)``.

    Returns:
        The programs of the family, by name (``{"gradient": ..., "value_and_gradient": ...}``).

    Raises:
        UnsupportedOperatorError: the adapter implements neither ``operator`` nor
            a primitive to build it from, or not ``has_aux`` for it.

    Examples:
        >>> import numpy as np, di
        >>> from di.backends.fallbacks import programs
        >>> from di.backends.registry import get_adapter
        >>> adapter = get_adapter(di.AutoFiniteDiff())
        >>> gradient = programs(adapter, "gradient", lambda x: (x * x).sum(), np.zeros(2), [])["gradient"]
        >>> gradient(np.array([1.0, 2.0])).round(6)
        array([2., 4.])
    """
    takes_tangents = operator in _WITH_TANGENTS
    arguments: tuple[Any, ...] = (f, x, tangents, contexts) if takes_tangents else (f, x, contexts)
    options = {"has_aux": True} if has_aux else {}
    if has_aux and operator not in AUX_FAMILIES:
        raise UnsupportedOperatorError(f"{operator} does not take has_aux: f must return its output alone.")
    if adapter.has_native(operator):
        method = getattr(adapter, f"prepare_{operator}_programs")
        if has_aux and operator not in adapter.capabilities.aux:
            raise UnsupportedOperatorError(
                f"{adapter.backend!r} does not support has_aux for {operator}: its adapter's capabilities do not "
                f"list {operator} in aux. Call f without auxiliary outputs, or use another backend."
            )
        built = method(*arguments, **options)
        _check_programs(adapter, operator, built)
        if operator in _SAME_POINT:
            return _handing_out_copies(adapter, operator, built, [x, *_values(contexts)])
        return built  # type: ignore[no-any-return]
    if not adapter.has_primitive():
        raise UnsupportedOperatorError(
            f"{adapter.backend!r} does not implement {operator}, nor a pushforward or pullback to build it from."
        )
    if not _can_nest(adapter, operator):
        raise UnsupportedOperatorError(
            f"{adapter.backend!r} cannot compute {operator}: its engine cannot differentiate its own first-order "
            f"programs, from which {operator} would be built (nesting it in itself would give a wrong second "
            f"derivative). Use di.SecondOrder(di.AutoFiniteDiff(), {adapter.backend!r}), or implement "
            f"prepare_{operator}_programs on its adapter."
        )
    return FALLBACKS[operator](adapter, *arguments, **options)
