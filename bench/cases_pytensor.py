"""PyTensor's bench cases: ``di.AutoPyTensor()`` against the fastest native spelling.

An expert writes each operator several ways, every one a compiled
``pytensor.function`` (PyTensor's default mode, as ``AutoPyTensor()``): the
gradient as ``grad`` or as ``pullback`` of the scalar; the Jacobian with
``jacobian(vectorize=True)`` (vectorized pullbacks) or the scan-based
``jacobian``; the pushforward with the ops' own forward rules or as a double
pullback; the hvp as ``hessian_vector_product``, ``pushforward`` of the gradient
or ``pullback`` of the gradient (the Hessian is symmetric). At each size every
spelling is timed once and the fastest is the native side of the row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import di
from bench.cases import (
    GRADIENT,
    HVP,
    JACOBIAN,
    PULLBACK,
    PUSHFORWARD,
    VALUE_AND_GRADIENT,
    Case,
    Engine,
    _breakdown,
    _di_side,
    _pair,
)

__all__ = ["ENGINE", "SPELLINGS"]

SPELLINGS = {
    GRADIENT: ("grad", "pullback of the scalar"),
    VALUE_AND_GRADIENT: ("[f, grad]",),
    JACOBIAN: ("jacobian(vectorize=True)", "jacobian (scan)"),
    PUSHFORWARD: ("pushforward(use_op_pushforward=True) (the ops' R_op)", "pushforward (double pullback)"),
    PULLBACK: ("pullback",),
    HVP: ("hessian_vector_product", "pushforward of grad (Rop(grad))", "pullback of grad (Lop(grad))"),
}
"""The native spellings timed for each operator."""


def _fastest(thunks: Sequence[Callable[[], Any]]) -> Callable[[], Any]:
    """The thunk that runs fastest (the best of a few calls each, after a warm-up)."""
    if len(thunks) == 1:
        return thunks[0]
    best, best_time = thunks[0], float("inf")
    for thunk in thunks:
        thunk()
        elapsed = min(_timed(thunk) for _ in range(5))
        if elapsed < best_time:
            best, best_time = thunk, elapsed
    return best


def _thunk(function: Any, args: tuple[Any, ...]) -> Callable[[], Any]:
    """A call of a compiled function; several outputs as a tuple (as ``di`` returns them).
    ``trust_input``: the expert's call skips PyTensor's argument checks, as ``di``'s does."""
    function.trust_input = True
    if len(function.maker.fgraph.outputs) > 1:
        return lambda: tuple(function(*args))
    return lambda: function(*args)


def _timed(thunk: Callable[[], Any]) -> float:
    start = time.perf_counter()
    thunk()
    return time.perf_counter() - start


def _natives(f: Any, g: Any, x: np.ndarray, v: np.ndarray, operators: Sequence[str]) -> dict[str, Any]:
    import importlib

    import pytensor
    import pytensor.tensor as pt

    gradients: Any = importlib.import_module("pytensor.gradient")  # (its stubs reject Variable | None results)
    grad, jacobian, hessian_vector_product = gradients.grad, gradients.jacobian, gradients.hessian_vector_product
    pullback, pushforward = gradients.pullback, gradients.pushforward

    dtype = x.dtype.name
    with pytensor.config.change_flags(floatX=dtype):
        x_var = pt.tensor("x", dtype=dtype, shape=x.shape)
        v_var = pt.tensor("v", dtype=dtype, shape=x.shape)
        y = f(x_var)
        z = g(x_var)
        w_var = pt.tensor("w", dtype=dtype, shape=x.shape)  # the bench's vector functions map R^n to R^n
        spellings: dict[str, list[Any]] = {}
        if GRADIENT in operators:
            spellings[GRADIENT] = [
                pytensor.function([x_var], grad(y, x_var)),
                pytensor.function([x_var], pullback(y, x_var, pt.ones_like(y))),
            ]
        if VALUE_AND_GRADIENT in operators:
            spellings[VALUE_AND_GRADIENT] = [pytensor.function([x_var], [y, grad(y, x_var)])]
        if JACOBIAN in operators:
            spellings[JACOBIAN] = [
                pytensor.function([x_var], jacobian(z, x_var, vectorize=True)),
                pytensor.function([x_var], jacobian(z, x_var)),
            ]
        if PUSHFORWARD in operators:
            spellings[PUSHFORWARD] = [
                pytensor.function([x_var, v_var], pushforward(z, x_var, v_var, use_op_pushforward=True)),
                pytensor.function([x_var, v_var], pushforward(z, x_var, v_var)),
            ]
        if PULLBACK in operators:
            spellings[PULLBACK] = [pytensor.function([x_var, w_var], pullback(z, x_var, w_var))]
        if HVP in operators:
            gradient = grad(y, x_var)
            spellings[HVP] = [
                pytensor.function([x_var, v_var], hessian_vector_product(y, x_var, v_var)),
                pytensor.function([x_var, v_var], pushforward(gradient, x_var, v_var)),
                pytensor.function([x_var, v_var], pullback(gradient, x_var, v_var)),
            ]
    arguments = {PUSHFORWARD: (x, v), HVP: (x, v), PULLBACK: (x, v)}
    natives = {}
    for operator, functions in spellings.items():
        args = arguments.get(operator, (x,))
        natives[operator] = _fastest([_thunk(fn, args) for fn in functions])
    return natives


def _pytensor(
    f: Callable[..., Any], g: Callable[..., Any], x_np: np.ndarray, dtype: str, operators: Sequence[str]
) -> Case:
    x = x_np.astype(dtype)
    v = np.cos(x_np).astype(dtype)
    backend = di.AutoPyTensor()
    natives = _natives(f, g, x, v, operators)
    through_di = _di_side(backend, f, g, x, v, operators, block=False)
    breakdown = _breakdown(f, backend, x, block=False) if GRADIENT in operators else {}
    return Case(_pair(natives, through_di), breakdown=breakdown)


ENGINE: Engine = Engine(
    "AutoPyTensor()",
    {operator: "the fastest of " + ", ".join(names) for operator, names in SPELLINGS.items()},
    _pytensor,
    "pytensor",
    quick_sizes=(1_000,),
    operators=tuple(op for op in SPELLINGS),  # unprepared: a PyTensor compile per call
)
"""PyTensor's bench engine (``bench/cases.py``'s ``ENGINES["pytensor"]``)."""
