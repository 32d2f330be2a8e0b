"""Loops in the jaxpr interpreter: ``scan`` (``fori_loop`` with a static trip
count is one) and ``while``.

A loop whose trip count is known (a ``scan``'s length, a ``while`` whose
condition reads only known values: a ``fori_loop`` counter) is unrolled on the
index sets, one iteration at a time, which is exact; iterations stop early once
the carry repeats (same dependencies, same known values) and nothing new comes
in. Past :data:`UNROLL_LIMIT` iterations, or when the trip count depends on
``x``, the carry is bounded by a fixed point: the union of its dependencies over
any number of iterations, reached when one more iteration adds nothing (at most
one iteration per input, since sets only grow). That bound holds for every trip
count, and a note says it was used.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["UNROLL_LIMIT", "loop"]

UNROLL_LIMIT = 512
"""Iterations unrolled exactly before a loop is bounded by a fixed point."""


def _same(a: Any, b: Any) -> bool:
    """Whether two interpreter values carry the same dependencies and known value."""
    if (a.deps is None) != (b.deps is None):
        return False
    if a.deps is not None and (a.deps != b.deps).nnz:
        return False
    if (a.const is None) != (b.const is None):
        return False
    return a.const is None or bool(np.array_equal(a.const, b.const))


def _merged(interpreter: Any, a: Any, b: Any) -> Any:
    """The union of two carries: dependencies joined, a known value kept only if equal."""
    from di.sparse.jaxpr.values import _union, _Value

    const = a.const if a.const is not None and b.const is not None and np.array_equal(a.const, b.const) else None
    return _Value(_union(a.deps, b.deps), const, a.shape, a.floating)


def _unknown(value: Any) -> Any:
    from di.sparse.jaxpr.values import _Value

    return _Value(value.deps, None, value.shape, value.floating)


def _slice(value: Any, t: int) -> Any:
    """Element ``t`` along the leading axis of a scanned input."""
    from di.sparse.jaxpr.values import _index_array, _take_rows, _Value

    shape = value.shape[1:]
    deps = None if value.deps is None else _take_rows(value.deps, _index_array(value.shape)[t])
    const = None if value.const is None else np.asarray(value.const)[t]
    return _Value(deps, const, shape, value.floating)


def _union_of_slices(value: Any) -> Any:
    """Every element along the leading axis at once (for the fixed point)."""
    from di.sparse.jaxpr.values import _gather_rows, _index_array, _Value

    shape = value.shape[1:]
    if value.deps is None:
        return _Value(None, None, shape, value.floating)
    size = math.prod(shape)
    index = _index_array(value.shape).reshape(value.shape[0], size)
    out_rows = np.tile(np.arange(size), value.shape[0])
    return _Value(_gather_rows(value.deps, out_rows, index.reshape(-1), size), None, shape, value.floating)


def _stacked(interpreter: Any, pieces: list[Any], shape: tuple[int, ...], floating: bool) -> Any:
    """``ys`` from its per-iteration pieces, leading axis first (known if every piece is)."""
    from di.sparse.jaxpr.values import _empty, _Value

    const = None
    if pieces and all(p.const is not None and p.deps is None for p in pieces):
        const = np.stack([np.asarray(p.const) for p in pieces])
    if all(p.deps is None for p in pieces):
        return _Value(None, const, shape, floating)
    blocks = [p.deps if p.deps is not None else _empty(p.size, interpreter.n) for p in pieces]
    return _Value(sp.csr_array(sp.vstack(blocks)), None, shape, floating)


def _fixed_point(interpreter: Any, step: Any, carry: list[Any]) -> list[Any]:
    """Carry values stable under ``carry <- carry | step(carry)`` (known values dropped)."""
    carry = [_unknown(c) for c in carry]
    for _ in range(interpreter.n + 2):
        new = [_unknown(_merged(interpreter, c, o)) for c, o in zip(carry, step(carry))]
        if all(_same(a, b) for a, b in zip(carry, new)):
            return new
        carry = new
    return carry  # pragma: no cover - sets of at most n inputs grow at most n times


def _scan(interpreter: Any, eqn: Any, values: list[Any], shapes: list[tuple[int, ...]]) -> list[Any]:
    params = eqn.params
    body = params["jaxpr"]
    n_consts, n_carry, length = int(params["num_consts"]), int(params["num_carry"]), int(params["length"])
    consts, carry, xs = values[:n_consts], values[n_consts : n_consts + n_carry], values[n_consts + n_carry :]
    order = range(length - 1, -1, -1) if params.get("reverse") else range(length)
    ys: list[list[Any]] = [[] for _ in shapes[n_carry:]]
    inputs_vary = any(x.deps is not None for x in xs)
    done = 0
    for t in order:
        if done >= UNROLL_LIMIT:
            break
        outputs = interpreter.run(body.jaxpr, body.consts, [*consts, *carry, *[_slice(x, t) for x in xs]])
        new_carry, pieces = outputs[:n_carry], outputs[n_carry:]
        for store, piece in zip(ys, pieces):
            store.append(piece)
        done += 1
        repeated = all(_same(a, b) for a, b in zip(carry, new_carry))
        carry = new_carry
        if repeated and not inputs_vary and not any(x.const is not None for x in xs):
            # Every later iteration is this one again.
            for store in ys:
                store.extend([store[-1]] * (length - done))
            done = length
            break
    if done < length:
        interpreter.note("scan", f"unrolled {done} of {length} iterations; the rest bounded by a fixed point")
        merged_xs = [_union_of_slices(x) for x in xs]

        def step(c: list[Any]) -> list[Any]:
            return interpreter.run(body.jaxpr, body.consts, [*consts, *c, *merged_xs])[:n_carry]

        carry = _fixed_point(interpreter, step, carry)
        outputs = interpreter.run(body.jaxpr, body.consts, [*consts, *carry, *merged_xs])
        for store, piece in zip(ys, outputs[n_carry:]):
            store.extend([piece] * (length - done))
    if params.get("reverse"):
        ys = [store[::-1] for store in ys]
    floating = [_is_floating(v.aval.dtype) for v in eqn.outvars[n_carry:]]
    return [*carry, *[_stacked(interpreter, st, s, fl) for st, s, fl in zip(ys, shapes[n_carry:], floating)]]


def _condition(interpreter: Any, eqn: Any, consts: list[Any], carry: list[Any]) -> bool | None:
    """The ``while`` condition on this carry, when it reads only known values."""
    cond = eqn.params["cond_jaxpr"]
    (result,) = interpreter.run(cond.jaxpr, cond.consts, [*consts, *carry])
    return None if result.const is None else bool(np.asarray(result.const))


def _while(interpreter: Any, eqn: Any, values: list[Any]) -> list[Any]:
    params = eqn.params
    body = params["body_jaxpr"]
    n_cond, n_body = int(params["cond_nconsts"]), int(params["body_nconsts"])
    cond_consts, body_consts, carry = values[:n_cond], values[n_cond : n_cond + n_body], values[n_cond + n_body :]
    for _ in range(UNROLL_LIMIT):
        going = _condition(interpreter, eqn, cond_consts, carry)
        if going is None:
            break
        if not going:
            return carry
        carry = interpreter.run(body.jaxpr, body.consts, [*body_consts, *carry])
    interpreter.note("while", "a trip count that depends on x (or is long): bounded by a fixed point")

    def step(c: list[Any]) -> list[Any]:
        return interpreter.run(body.jaxpr, body.consts, [*body_consts, *c])

    return _fixed_point(interpreter, step, carry)


def _is_floating(dtype: Any) -> bool:
    return bool(np.issubdtype(np.dtype(dtype), np.inexact)) if str(dtype) != "bfloat16" else True


def loop(interpreter: Any, eqn: Any, values: list[Any], shapes: list[tuple[int, ...]]) -> list[Any]:
    """The outputs (interpreter values: dependencies and known values) of a ``scan``
    or ``while`` equation."""
    if eqn.primitive.name == "scan":
        return _scan(interpreter, eqn, values, shapes)
    return _while(interpreter, eqn, values)
