"""The derivative rules of ``jax.custom_jvp`` and ``jax.custom_vjp`` calls.

A differentiated call follows its rule, not its primal (a straight-through
``round`` has a zero primal derivative and an identity rule), so the interpreter
reads the rule's program: the ``jvp`` of the call (its tangent outputs as a
function of its tangent inputs) for ``custom_jvp``; for ``custom_vjp`` the
``vjp`` of the call (its input cotangents as a function of its output
cotangents), read with one index set per output element and transposed. The
primal values enter as unknown constants (they change coefficients, never which
tangents meet), so the result is the rule's exact pattern. The interpreter
unites it with the primal's dependencies (a finite-difference backend
differentiates the primal). A rule JAX cannot trace here bounds the call: every
output element depends on every input, with a note.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from di.sparse.jaxpr.values import DenseDependencies, _all_of, _Value

__all__ = ["CUSTOM", "rule_dependencies"]

CUSTOM = frozenset({"custom_jvp_call", "custom_vjp_call"})


def rule_dependencies(
    eqn: Any,
    values: Sequence[_Value],
    n: int,
    run: Callable[[int, Any, Sequence[Any], Sequence[_Value]], tuple[list[_Value], list[str]]],
    note: Callable[[str, str], None],
) -> list[sp.csr_array | None]:
    """The dependencies of each output of a custom-rule call through its rule.

    Args:
        eqn: the ``custom_jvp_call`` or ``custom_vjp_call`` equation.
        values: its operands.
        n: the number of inputs of ``f``.
        run: ``run(n, jaxpr, consts, inputs) -> (outputs, notes)`` of an interpreter over ``n`` inputs.
        note: the interpreter's ``note(name, why)``.
    """
    name = eqn.primitive.name
    moving = [i for i, v in enumerate(values) if v.deps is not None]
    try:
        if name == "custom_jvp_call":
            return _pushed(eqn, values, moving, n, run, note)
        return _pulled(eqn, values, moving, n, run, note)
    except DenseDependencies:
        raise  # the whole pattern is taken as dense: not this call's rule failing
    except Exception as err:
        note(
            name,
            f"its derivative rule could not be traced ({type(err).__name__}): every output element taken to "
            "depend on every input of the call",
        )
        return [_all_of(values, math.prod(tuple(v.aval.shape)), n) for v in eqn.outvars]


def _call(eqn: Any) -> Callable[..., Any]:
    """The equation as a function of its operands (rebinding its primitive, rules included)."""
    primitive = eqn.primitive
    params = primitive.get_bind_params(eqn.params)
    if isinstance(params, tuple):  # older JAX: (subfuns, params)
        subfuns, rest = params
        return lambda *args: primitive.bind(*subfuns, *args, **rest)
    return lambda *args: primitive.bind(*args, **params)


def _traced(eqn: Any, moving: list[int], rule: Callable[..., Any], extra: Sequence[Any]) -> Any:
    """``make_jaxpr`` of ``rule(*operands, *extra)`` with abstract operands (the
    moving ones also given as ``extra``: tangents or cotangents), in 64-bit mode
    when an operand is 64-bit."""
    import jax

    call = _call(eqn)
    avals = [v.aval for v in eqn.invars]
    k = len(avals)

    def program(*args: Any) -> Any:
        operands = list(args[:k])

        def moved(*parts: Any) -> Any:
            full = list(operands)
            for i, part in zip(moving, parts):
                full[i] = part
            return call(*full)

        return rule(moved, [operands[i] for i in moving], list(args[k:]))

    abstract = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in avals]
    wide = any(np.dtype(a.dtype).itemsize == 8 for a in avals)
    with jax.enable_x64(wide):
        return jax.make_jaxpr(program)(*abstract, *extra)


def _primals(values: Sequence[_Value]) -> list[_Value]:
    """The operands as values that depend on nothing (their known values kept)."""
    return [_Value(None, v.const, v.shape, v.floating) for v in values]


def _pushed(eqn: Any, values: Sequence[_Value], moving: list[int], n: int, run: Any, note: Any) -> list[Any]:
    import jax

    def rule(moved: Any, primals: list[Any], tangents: list[Any]) -> Any:
        return jax.jvp(moved, tuple(primals), tuple(tangents))[1]

    extra = [jax.ShapeDtypeStruct(tuple(eqn.invars[i].aval.shape), eqn.invars[i].aval.dtype) for i in moving]
    closed = _traced(eqn, moving, rule, extra)
    tangents = [values[i] for i in moving]
    outputs, notes = run(n, closed.jaxpr, closed.consts, [*_primals(values), *tangents])
    for line in notes:
        note(*line.split(": ", 1))
    return [o.deps for o in outputs]


def _pulled(eqn: Any, values: Sequence[_Value], moving: list[int], n: int, run: Any, note: Any) -> list[Any]:
    import jax

    out_avals = [v.aval for v in eqn.outvars]
    sizes = [math.prod(tuple(a.shape)) for a in out_avals]
    m = sum(sizes)

    def rule(moved: Any, primals: list[Any], cotangents: list[Any]) -> Any:
        back = jax.vjp(moved, *primals)[1]
        return back(cotangents if eqn.primitive.multiple_results else cotangents[0])

    extra = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in out_avals]
    closed = _traced(eqn, moving, rule, extra)
    # One index set per output element: an input cotangent's set is its column of the call's Jacobian.
    offsets = np.cumsum([0, *sizes])
    identity = sp.csr_array(sp.identity(m, dtype=bool, format="csr"))
    cotangents = [
        _Value(sp.csr_array(identity[offsets[i] : offsets[i + 1]]), None, tuple(a.shape), True)
        for i, a in enumerate(out_avals)
    ]
    pulled, notes = run(m, closed.jaxpr, closed.consts, [*_primals(values), *cotangents])
    for line in notes:
        note(*line.split(": ", 1))
    total: sp.csr_array | None = None
    for i, back in zip(moving, pulled):
        if back.deps is not None and values[i].deps is not None:
            part = sp.csr_array(back.deps.T @ values[i].deps, dtype=bool)
            total = part if total is None else sp.csr_array(total + part)
    if total is None:
        return [None] * len(out_avals)
    return [sp.csr_array(total[offsets[i] : offsets[i + 1]]) for i in range(len(out_avals))]
