"""Sparsity detection by tracing: ``f`` is traced once with JAX and its jaxpr is
interpreted with *index sets*.

Every value of the program carries a boolean ``(size, n)`` CSR matrix ``D``:
``D[k, j]`` is set when element ``k`` of the value may depend on input ``j``.
Each primitive maps its operands' matrices to its outputs' (elementwise
operations take the union of their operands' rows, a reduction the union over the
reduced elements, a data movement the rows of the elements it moves, a matrix
product the unions along the contraction, masked by the zeros of a constant
operand), and the output's matrix is the Jacobian's pattern. Sets are sparse
matrices, not Python sets, so a program on ``n = 1e4`` inputs is interpreted in
milliseconds per primitive.

Values that do not depend on ``x`` and are known (literals, arrays ``f`` closes
over, and what is computed from them) are evaluated, so the zeros of a constant
matrix or mask and the indices of a ``gather`` are read exactly. Contexts are
*not* known values: their value may change between calls.

What is not followed exactly is followed conservatively: a loop (``while``,
``scan``) or a primitive this module does not know makes every element of its
outputs depend on every input its operands depend on, and a note says so. The
pattern can be denser than the truth, never sparser.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from di.sparse.jaxpr import loops
from di.sparse.jaxpr.custom import CUSTOM, rule_dependencies
from di.sparse.jaxpr.folds import (
    _FOLD_LIMIT,
    _KRON_LIMIT,
    CALLS,
    CUMULATIVE,
    ELEMENTWISE,
    LOOPS,
    MOVES,
    NUMPY_FOLDS,
    REDUCTIONS,
    SCATTERS,
    ZERO_DERIVATIVE,
)
from di.sparse.jaxpr.moves import MoveRules
from di.sparse.jaxpr.values import (
    DenseDependencies,
    _all_of,
    _broadcast,
    _gather_rows,
    _index_array,
    _lines,
    _selected,
    _take_rows,
    _union,
    _Value,
    entry_budget,
)
from di.sparse.patterns import Detection, canonical, dense_pattern, empty_pattern

__all__ = ["interpret"]


ENTRY_BUDGET_FACTOR = 16
"""The interpreter stops when one value's dependency matrix would hold more entries
than this many dense patterns (and than :data:`ENTRY_BUDGET_MINIMUM`): the
pattern is then taken as dense. A nearly dense Hessian's gradient program
broadcasts each cotangent, which depends on every input, over a matrix of
values (INTEQNELS, n = 502: 126 million entries in one value, a minute to
follow, where the answer is 99.6% dense)."""

ENTRY_BUDGET_MINIMUM = 2**24
"""The fewest entries the budget allows (about 64 MB of indices): a small pattern
is always followed exactly."""

# --- the interpreter ------------------------------------------------------------------------


class _Interpreter(MoveRules):
    def __init__(self, n: int) -> None:
        self.n = n
        self.notes: list[str] = []

    def note(self, name: str, why: str) -> None:
        line = f"{name}: {why}"
        if line not in self.notes:
            self.notes.append(line)

    # --- running a jaxpr ---

    def run(self, jaxpr: Any, consts: Sequence[Any], inputs: Sequence[_Value]) -> list[_Value]:
        from jax.extend.core import Literal

        env: dict[Any, _Value] = {}
        for var, const in zip(jaxpr.constvars, consts):
            env[var] = self.known(var.aval, np.asarray(const))
        for var, value in zip(jaxpr.invars, inputs):
            env[var] = value

        def read(var: Any) -> _Value:
            if isinstance(var, Literal):
                return self.known(var.aval, np.asarray(var.val))
            return env[var]

        for eqn in jaxpr.eqns:
            values = [read(v) for v in eqn.invars]
            outputs = self.equation(eqn, values)
            for var, value in zip(eqn.outvars, outputs):
                env[var] = value
        return [read(v) for v in jaxpr.outvars]

    def known(self, aval: Any, value: np.ndarray | None) -> _Value:
        return _Value(None, value, tuple(aval.shape), _is_floating(aval.dtype))

    def equation(self, eqn: Any, values: list[_Value]) -> list[_Value]:
        avals = [v.aval for v in eqn.outvars]
        shapes = [tuple(a.shape) for a in avals]
        floating = [_is_floating(a.dtype) for a in avals]
        sub = _sub_jaxpr(eqn) if eqn.primitive.name in CALLS else None
        if eqn.primitive.name in CUSTOM and any(v.deps is not None for v in values):
            # Differentiated through its rule: the rule's dependencies, with the primal's.
            deps = rule_dependencies(eqn, values, self.n, _interpreted, self.note)
            if sub is not None:
                deps = [_union(p.deps, d) for p, d in zip(self.run(sub[0], sub[1], values), deps)]
            return [
                _Value(d if fl and d is not None and d.nnz else None, None, s, fl)
                for d, s, fl in zip(deps, shapes, floating)
            ]
        if sub is not None and len(sub[0].invars) == len(values):
            # Sub-programs are interpreted (their constants folded in NumPy), never compiled.
            return self.run(sub[0], sub[1], values)
        if eqn.primitive.name in LOOPS and not all(v.deps is None and v.const is not None for v in values):
            outputs = loops.loop(self, eqn, values, shapes)
            return [
                _Value(o.deps if fl and o.deps is not None and o.deps.nnz else None, o.const, s, fl)
                for o, s, fl in zip(outputs, shapes, floating)
            ]
        if all(v.deps is None for v in values):
            constants = self.fold(eqn, values)
            return [_Value(None, c, s, fl) for c, s, fl in zip(constants, shapes, floating)]
        deps = self.dependencies(eqn, values, shapes)
        return [
            _Value(d if fl and d is not None and d.nnz else None, None, s, fl)
            for d, s, fl in zip(deps, shapes, floating)
        ]

    def fold(self, eqn: Any, values: list[_Value]) -> list[np.ndarray | None]:
        """Evaluate an equation whose operands are all known (and small enough)."""
        n_out = len(eqn.outvars)
        if any(v.const is None for v in values) or any(
            math.prod(tuple(v.aval.shape)) > _FOLD_LIMIT for v in eqn.outvars
        ):
            return [None] * n_out
        constants = [v.const for v in values]
        in_numpy = NUMPY_FOLDS.get(eqn.primitive.name)
        try:
            if in_numpy is not None:
                dtype = np.dtype(eqn.outvars[0].aval.dtype)
                return [np.asarray(in_numpy(eqn.params, *constants)).astype(dtype, copy=False)]
            # Anything else is evaluated by JAX itself (one small compile per primitive and shape).
            result = eqn.primitive.bind(*constants, **eqn.params)
        except Exception:
            return [None] * n_out
        results = result if eqn.primitive.multiple_results else [result]
        return [np.asarray(r) for r in results]

    # --- the rules ---

    def dependencies(self, eqn: Any, values: list[_Value], shapes: list[tuple[int, ...]]) -> list[Any]:
        name = eqn.primitive.name
        params = eqn.params
        n = self.n
        if name in ZERO_DERIVATIVE:
            return [None] * len(shapes)
        if name == "mul":
            return [self.multiply(values, shapes[0])]
        if name == "select_n":
            return [self.select(eqn, values, shapes[0])]
        if name == "optimization_barrier":
            return [v.deps for v in values]
        if name in ELEMENTWISE:
            deps = None
            for value in values:
                deps = _union(deps, _broadcast(value, shapes[0], n))
            return [deps]
        if name in REDUCTIONS:
            return [self.reduce(values[0], tuple(params["axes"]), shapes[0])]
        if name in CUMULATIVE:
            return [self.cumulative(values[0], int(params["axis"]), bool(params["reverse"]))]
        if name == "dot_general":
            return [self.dot_general(values, params, shapes[0])]
        if name == "split":
            return self.split(values[0], int(params["axis"]), tuple(params["sizes"]))
        if name == "unstack":
            return self.unstack(values[0], int(params["axis"]))
        if name == "sort":
            return self.sort(values, int(params["dimension"]))
        moved = self.numpy_move(name, params, values, shapes[0])
        if moved is not False:
            return [moved]
        if name == "pad" and values[1].deps is None:
            return [self.pad(values[0], params["padding_config"], shapes[0])]
        if name == "dynamic_slice" and all(v.const is not None for v in values[1:]):
            return [self.dynamic_slice(values[0], values[1:], tuple(params["slice_sizes"]))]
        if name in MOVES:
            return [self.bound_move(eqn, values, shapes[0])]
        if name in SCATTERS:
            return [self.scatter(eqn, values, shapes[0])]
        if name == "cond":
            return self.cond(eqn, values, shapes)
        sub = _sub_jaxpr(eqn) if name in CALLS else None
        if sub is not None:
            jaxpr, consts = sub
            if len(jaxpr.invars) == len(values):
                return [v.deps for v in self.run(jaxpr, consts, values)]
        self.note(name, "unknown to TracerSparsity: every output element taken to depend on every input")
        return [_all_of(values, math.prod(s), n) for s in shapes]

    def multiply(self, values: list[_Value], shape: tuple[int, ...]) -> sp.csr_array | None:
        """Elementwise product, where a known zero factor removes the other's dependencies."""
        deps = None
        for index, value in enumerate(values):
            part = _broadcast(value, shape, self.n)
            if part is None:
                continue
            for other in values[:index] + values[index + 1 :]:
                if other.const is not None and other.deps is None:
                    zero = np.broadcast_to(other.const == 0, shape).reshape(-1)
                    if zero.any():
                        keep = sp.diags_array((~zero).astype(bool), format="csr", dtype=bool)
                        part = sp.csr_array(keep @ part)
            deps = _union(deps, part)
        return deps

    def select(self, eqn: Any, values: list[_Value], shape: tuple[int, ...]) -> sp.csr_array | None:
        predicate, cases = values[0], values[1:]
        if predicate.const is not None:
            return self.bound_move(eqn, values, shape)
        deps = None
        for case in cases:
            deps = _union(deps, _broadcast(case, shape, self.n))
        return deps

    def reduce(self, value: _Value, axes: tuple[int, ...], shape: tuple[int, ...]) -> sp.csr_array | None:
        if value.deps is None:
            return None
        kept = [d for d in range(len(value.shape)) if d not in axes]
        coordinates = np.indices(value.shape).reshape(len(value.shape), value.size)  # (0, 1) for a 0-d value
        if kept:
            out_index = np.ravel_multi_index(tuple(coordinates[d] for d in kept), tuple(value.shape[d] for d in kept))
        else:
            out_index = np.zeros(value.size, dtype=np.int64)
        return _gather_rows(value.deps, out_index, np.arange(value.size), math.prod(shape))

    def cumulative(self, value: _Value, axis: int, reverse: bool) -> sp.csr_array | None:
        if value.deps is None:
            return None
        length = value.shape[axis]
        lines = _lines(value.shape, axis)
        later, earlier = np.tril_indices(length)  # output `later` depends on input `earlier`
        if reverse:
            later, earlier = earlier, later
        out_rows = lines[:, later].reshape(-1)
        in_rows = lines[:, earlier].reshape(-1)
        return _gather_rows(value.deps, out_rows, in_rows, value.size)

    def dot_general(self, values: list[_Value], params: dict[str, Any], shape: tuple[int, ...]) -> Any:
        lhs, rhs = values
        (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = params["dimension_numbers"]
        lhs_free = [d for d in range(len(lhs.shape)) if d not in lhs_contract and d not in lhs_batch]
        rhs_free = [d for d in range(len(rhs.shape)) if d not in rhs_contract and d not in rhs_batch]
        batch = math.prod(lhs.shape[d] for d in lhs_batch)
        contract = math.prod(lhs.shape[d] for d in lhs_contract)
        n_lhs_free = math.prod(lhs.shape[d] for d in lhs_free)
        n_rhs_free = math.prod(rhs.shape[d] for d in rhs_free)
        lhs_order = (*lhs_batch, *lhs_free, *lhs_contract)
        rhs_order = (*rhs_batch, *rhs_contract, *rhs_free)
        lhs_index = np.transpose(_index_array(lhs.shape), lhs_order).reshape(batch, n_lhs_free, contract)
        rhs_index = np.transpose(_index_array(rhs.shape), rhs_order).reshape(batch, contract, n_rhs_free)
        lhs_mask = _nonzero_mask(lhs, lhs_order, (batch, n_lhs_free, contract))
        rhs_mask = _nonzero_mask(rhs, rhs_order, (batch, contract, n_rhs_free))
        size = math.prod(shape)
        deps = None
        if lhs.deps is not None:
            # out[b, i, j] depends on lhs[b, i, k] wherever rhs[b, k, j] may be nonzero.
            blocks = [
                (np.eye(n_lhs_free, dtype=bool), _block(rhs_mask, b, (n_rhs_free, contract), transpose=True))
                for b in range(batch)
            ]
            selector = self.kron_blocks(blocks)
            if selector is None:
                return _all_of(values, size, self.n)
            deps = _selected(selector, _take_rows(lhs.deps, lhs_index.reshape(-1)))
        if rhs.deps is not None:
            # out[b, i, j] depends on rhs[b, k, j] wherever lhs[b, i, k] may be nonzero.
            blocks = [
                (_block(lhs_mask, b, (n_lhs_free, contract), transpose=False), np.eye(n_rhs_free, dtype=bool))
                for b in range(batch)
            ]
            selector = self.kron_blocks(blocks)
            if selector is None:
                return _all_of(values, size, self.n)
            deps = _union(deps, _selected(selector, _take_rows(rhs.deps, rhs_index.reshape(-1))))
        return deps

    def split(self, value: _Value, axis: int, sizes: tuple[int, ...]) -> list[Any]:
        if value.deps is None:
            return [None] * len(sizes)
        bounds = np.cumsum((0, *sizes))
        pieces = np.split(_index_array(value.shape), bounds[1:-1], axis=axis)
        return [_take_rows(value.deps, piece) for piece in pieces]

    def unstack(self, value: _Value, axis: int) -> list[Any]:
        if value.deps is None:
            return [None] * value.shape[axis]
        pieces = np.moveaxis(_index_array(value.shape), axis, 0)
        return [_take_rows(value.deps, piece) for piece in pieces]

    def sort(self, values: list[_Value], axis: int) -> list[Any]:
        """Sorting permutes each line along ``axis`` by the keys: every output element
        may be any element of its line (its derivative is the one it landed on)."""
        out: list[Any] = []
        for value in values:
            if value.deps is None or not value.floating:
                out.append(None)
                continue
            lines = _lines(value.shape, axis)
            length = value.shape[axis]
            out_rows = np.repeat(lines, length, axis=1).reshape(-1)
            in_rows = np.tile(lines, (1, length)).reshape(-1)
            out.append(_gather_rows(value.deps, out_rows, in_rows, value.size))
        return out

    def kron_blocks(self, blocks: list[tuple[Any, Any]]) -> sp.csr_array | None:
        """``block_diag(kron(a_b, c_b))``, or ``None`` when it would be too large."""
        entries = sum(_nnz(a) * _nnz(c) for a, c in blocks)
        if entries > _KRON_LIMIT:
            return None
        parts = [sp.kron(sp.csr_array(a), sp.csr_array(c), format="csr") for a, c in blocks]
        if len(parts) == 1:
            return sp.csr_array(parts[0], dtype=bool)
        return sp.csr_array(sp.block_diag(parts, format="csr"), dtype=bool)

    def cond(self, eqn: Any, values: list[_Value], shapes: list[tuple[int, ...]]) -> list[Any]:
        branches = eqn.params["branches"]
        index, operands = values[0], values[1:]
        if index.const is not None:
            chosen = int(np.clip(int(np.asarray(index.const)), 0, len(branches) - 1))
            branches = [branches[chosen]]
        deps: list[Any] = [None] * len(shapes)
        for branch in branches:
            outputs = self.run(branch.jaxpr, branch.consts, operands)
            deps = [_union(d, o.deps) for d, o in zip(deps, outputs)]
        return deps


def _nnz(matrix: Any) -> int:
    return int(matrix.nnz) if sp.issparse(matrix) else int(np.count_nonzero(matrix))


def _nonzero_mask(value: _Value, order: tuple[int, ...], shape: tuple[int, int, int]) -> np.ndarray | None:
    """Where a known operand is nonzero, in (batch, rows, cols) order; ``None`` if unknown."""
    if value.const is None or value.deps is not None:
        return None
    return np.transpose(np.asarray(value.const) != 0, order).reshape(shape)


def _block(mask: np.ndarray | None, b: int, shape: tuple[int, int], transpose: bool) -> Any:
    """Batch ``b`` of a known operand's nonzero mask (transposed if asked), or all
    ones of ``shape`` when the operand is unknown."""
    if mask is None:
        return np.ones(shape, dtype=bool)
    return sp.csr_array(mask[b].T if transpose else mask[b])


def _sub_jaxpr(eqn: Any) -> tuple[Any, list[Any]] | None:
    from jax.extend.core import ClosedJaxpr, Jaxpr

    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        sub = eqn.params.get(key)
        if isinstance(sub, ClosedJaxpr):
            return sub.jaxpr, list(sub.consts)
        if isinstance(sub, Jaxpr):
            return sub, []
    return None


def _is_floating(dtype: Any) -> bool:
    return bool(np.issubdtype(np.dtype(dtype), np.inexact)) if str(dtype) != "bfloat16" else True


# --- entry points ------------------------------------------------------------------------


def _interpreted(n: int, jaxpr: Any, consts: Sequence[Any], inputs: Sequence[_Value]) -> tuple[list[_Value], list[str]]:
    """The outputs of ``jaxpr`` on ``inputs`` by an interpreter over ``n`` inputs, and its notes."""
    interpreter = _Interpreter(n)
    return interpreter.run(jaxpr, consts, inputs), interpreter.notes


def interpret(closed_jaxpr: Any, n: int, differentiated: int = 0) -> Detection:
    """The pattern of a closed jaxpr's first output with respect to its input number
    ``differentiated`` (every other input is an unknown value that depends on nothing).

    Args:
        closed_jaxpr: from ``jax.make_jaxpr``.
        n: the size of the differentiated input.
        differentiated: which input is ``x``.

    Returns:
        The :class:`Detection`.
    """
    interpreter = _Interpreter(n)
    jaxpr = closed_jaxpr.jaxpr
    output_aval = jaxpr.outvars[0].aval
    dense_shape = (math.prod(tuple(output_aval.shape)), n)
    inputs = []
    for position, var in enumerate(jaxpr.invars):
        shape = tuple(var.aval.shape)
        if position == differentiated:
            deps = sp.csr_array(sp.identity(n, dtype=bool, format="csr"))
            inputs.append(_Value(deps, None, shape, True))
        else:
            inputs.append(_Value(None, None, shape, _is_floating(var.aval.dtype)))
    try:
        with entry_budget(max(ENTRY_BUDGET_MINIMUM, ENTRY_BUDGET_FACTOR * math.prod(dense_shape))):
            (output, *_) = interpreter.run(jaxpr, closed_jaxpr.consts, inputs)
    except DenseDependencies:
        interpreter.note(
            "dependencies",
            f"a value of the program depends on more inputs than {ENTRY_BUDGET_FACTOR} dense patterns hold: "
            "the pattern is taken as dense (pass KnownSparsity(pattern) where it is not)",
        )
        return Detection(dense_pattern(dense_shape), interpreter.notes, output_aval)
    if output.deps is None:
        pattern = empty_pattern((output.size, n))
    else:
        pattern = canonical(output.deps)
    return Detection(pattern, interpreter.notes, output_aval)
