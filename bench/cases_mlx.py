"""MLX's bench rows: ``AutoMLX()`` and ``AutoMLX(compile=True)`` against the
fastest native spelling of each operator.

An MLX expert has several spellings of most operators (``mx.grad``,
``mx.value_and_grad`` or ``mx.vjp`` for a gradient; ``mx.jvp`` or ``mx.vjp`` of
``mx.grad`` for an hvp; ``mx.vmap`` over ``mx.vjp`` or ``mx.jvp`` for a
jacobian), each also under ``mx.compile``. Each row's native side is the fastest
of them on this machine, measured when the case is built (the eager row among
the eager spellings, the compiled row among the compiled ones). Every native
call evaluates its result (``mx.eval``): MLX is lazy, and ``di`` evaluates its
results before it returns them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import di
from bench.cases import (
    GRADIENT,
    HESSIAN,
    HVP,
    JACOBIAN,
    MAX_N,
    PULLBACK,
    PUSHFORWARD,
    UNPREPARED,
    VALUE_AND_GRADIENT,
    Case,
    Engine,
    _breakdown,
    _di_side,
    _spelled,
)

__all__ = ["ENGINES"]

Thunk = Callable[[], Any]


def _fastest_first(spellings: dict[str, Thunk], repeats: int = 5) -> dict[str, Thunk]:
    """The spellings, the one whose best of ``repeats`` timed calls (after one
    warm-up, which compiles) is the shortest first: the per-call rows compare
    ``di`` with it, the fastest-spelling table with each."""
    times = {}
    for name, thunk in spellings.items():
        thunk()
        elapsed = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            thunk()
            elapsed = min(elapsed, time.perf_counter() - start)
        times[name] = elapsed
    return {name: spellings[name] for name in sorted(spellings, key=times.__getitem__)}


def _spellings(
    f: Callable[..., Any], g: Callable[..., Any], x: Any, v: Any, compiled: bool
) -> dict[str, dict[str, Thunk]]:
    import mlx.core as mx

    wrap = mx.compile if compiled else (lambda fn: fn)
    one = mx.array(1.0, dtype=x.dtype)
    eye = mx.eye(x.size, dtype=x.dtype)
    # evaluated now: mx.compile reads a lazy array its function closes over as a graph to
    # run at every call (the identity made again: 1.26 against 0.73 ms per compiled float64
    # Jacobian at n = 1e3), where di's programs read their basis evaluated, as a constant;
    # only at the sizes the Jacobian and Hessian rows run (at n = 1e5 it would take 40 GB)
    mx.eval(one)
    if x.size <= max(MAX_N.values()):
        mx.eval(eye)
    grad = mx.grad(f)
    functions: dict[str, dict[str, Callable[..., Any]]] = {
        GRADIENT: {
            "mx.grad": wrap(mx.grad(f)),
            "mx.value_and_grad": wrap(lambda x: mx.value_and_grad(f)(x)[1]),
            "mx.vjp": wrap(lambda x: mx.vjp(f, [x], [one])[1][0]),
        },
        VALUE_AND_GRADIENT: {
            "mx.value_and_grad": wrap(mx.value_and_grad(f)),
            "mx.vjp": wrap(lambda x: tuple(part[0] for part in mx.vjp(f, [x], [one]))),
        },
        JACOBIAN: {
            "mx.vmap(mx.vjp)": wrap(lambda x: mx.vmap(lambda c: mx.vjp(g, [x], [c])[1][0])(eye)),
            "mx.vmap(mx.jvp)": wrap(lambda x: mx.vmap(lambda t: mx.jvp(g, [x], [t])[1][0])(eye).T),
        },
        PUSHFORWARD: {"mx.jvp": wrap(lambda x, v: mx.jvp(g, [x], [v])[1][0])},
        PULLBACK: {"mx.vjp": wrap(lambda x, v: mx.vjp(g, [x], [v])[1][0])},
        HVP: {
            "mx.jvp(mx.grad)": wrap(lambda x, v: mx.jvp(grad, [x], [v])[1][0]),
            "mx.vjp(mx.grad)": wrap(lambda x, v: mx.vjp(grad, [x], [v])[1][0]),
        },
        HESSIAN: {
            "mx.vmap(mx.jvp(mx.grad))": wrap(lambda x: mx.vmap(lambda t: mx.jvp(grad, [x], [t])[1][0])(eye)),
            "mx.vmap(mx.vjp(mx.grad))": wrap(lambda x: mx.vmap(lambda t: mx.vjp(grad, [x], [t])[1][0])(eye)),
        },
    }
    takes_v = {PUSHFORWARD, PULLBACK, HVP}

    def evaluated(result: Any) -> Any:
        mx.eval(result)
        return result

    def thunk(function: Callable[..., Any], with_v: bool) -> Thunk:
        if with_v:
            return lambda: evaluated(function(x, v))
        return lambda: evaluated(function(x))

    return {op: {name: thunk(fn, op in takes_v) for name, fn in table.items()} for op, table in functions.items()}


def _mlx(compile: bool) -> Callable[..., Case]:
    def build(
        f: Callable[..., Any], g: Callable[..., Any], x_np: np.ndarray, dtype: str, operators: Sequence[str]
    ) -> Case:
        import mlx.core as mx

        x = mx.array(x_np, dtype=getattr(mx, dtype))
        v = mx.array(np.cos(x_np), dtype=getattr(mx, dtype))
        backend = di.AutoMLX(compile=compile)
        wanted = {GRADIENT if op == UNPREPARED else op for op in operators}
        spellings = {op: _fastest_first(table) for op, table in _spellings(f, g, x, v, compile).items() if op in wanted}
        through_di = _di_side(backend, f, g, x, v, operators, block=False)
        case = _spelled(spellings, through_di)
        case.breakdown = _breakdown(f, backend, x, block=False) if GRADIENT in operators else {}
        return case

    return build


def _natives(compiled: bool) -> dict[str, str]:
    how = "the fastest of {} (each evaluated{})".format
    under = ", under mx.compile" if compiled else ""
    return {
        GRADIENT: how("mx.grad(f), mx.value_and_grad(f), mx.vjp(f)", under),
        VALUE_AND_GRADIENT: how("mx.value_and_grad(f), mx.vjp(f)", under),
        JACOBIAN: how("mx.vmap over mx.vjp(g) rows, mx.vmap over mx.jvp(g) columns", under),
        PUSHFORWARD: how("mx.jvp(g, [x], [v])", under),
        PULLBACK: how("mx.vjp(g, [x], [v])", under),
        HVP: how("mx.jvp(mx.grad(f)), mx.vjp(mx.grad(f))", under),
        HESSIAN: how("mx.vmap over mx.jvp(mx.grad(f)), mx.vmap over mx.vjp(mx.grad(f))", under),
    }


ENGINES = {
    "mlx": Engine("AutoMLX()", _natives(False), _mlx(False), "mlx"),
    "mlx-compile": Engine("AutoMLX(compile=True)", _natives(True), _mlx(True), "mlx"),
}
"""MLX's rows, plugged into :data:`bench.cases.ENGINES`."""
