"""How the jaxpr interpreter follows data movements (:class:`MoveRules`): each
output element of a reshape, broadcast, transpose, slice, concatenation, pad,
dynamic slice, gather or scatter depends on what the elements moved into it
depend on, found by moving an index array (with NumPy, or with the primitive
itself on element numbers) instead of the values.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp

from di.sparse.jaxpr.folds import numpy_pad
from di.sparse.jaxpr.values import _all_of, _empty, _gather_rows, _index_array, _take_rows, _union, _Value

__all__ = ["MoveRules"]


class MoveRules:
    """The rules of data movements: an output element takes the dependencies of
    the element it was moved from (reshapes, broadcasts, slices, concatenations,
    pads and dynamic slices by moving an index array with NumPy; gathers and
    other movements by running the primitive on element numbers; scatters by the
    landing places of their updates). Indices that depend on the inputs are
    bounded conservatively, with a note.

    Attributes:
        n: the size of the differentiated input (the columns of every matrix).
    """

    n: int

    def note(self, name: str, why: str) -> None:
        """Say how ``name`` was followed (the interpreter collects the notes)."""
        raise NotImplementedError

    def numpy_move(self, name: str, params: dict[str, Any], values: list[_Value], shape: tuple[int, ...]) -> Any:
        """Reshapes, broadcasts, transposes, slices and concatenations, by moving an
        index array with numpy. ``False`` when ``name`` is not one of them."""
        if name == "concatenate":
            present = [v for v in values]
            offsets = np.cumsum([0] + [v.size for v in present])
            pieces = [_index_array(v.shape) + offset for v, offset in zip(present, offsets)]
            source = np.concatenate(pieces, axis=int(params["dimension"]))
            stacked = sp.vstack([v.deps if v.deps is not None else _empty(v.size, self.n) for v in present])
            return _take_rows(sp.csr_array(stacked), source)
        if name == "stack":
            offsets = np.cumsum([0] + [v.size for v in values])
            pieces = [_index_array(v.shape) + offset for v, offset in zip(values, offsets)]
            source = np.stack(pieces, axis=int(params["axis"]))
            stacked = sp.vstack([v.deps if v.deps is not None else _empty(v.size, self.n) for v in values])
            return _take_rows(sp.csr_array(stacked), source)
        value = values[0] if values else None
        if value is None:
            return False
        index = _index_array(value.shape)
        if name == "reshape":
            dimensions = params.get("dimensions")
            if dimensions is not None:
                index = np.transpose(index, dimensions)
            source = index.reshape(params["new_sizes"])
        elif name == "broadcast_in_dim":
            dims = tuple(params["broadcast_dimensions"])
            target = tuple(params["shape"])
            expanded = [value.shape[dims.index(d)] if d in dims else 1 for d in range(len(target))]
            source = np.broadcast_to(index.reshape(expanded), target)
        elif name == "transpose":
            source = np.transpose(index, params["permutation"])
        elif name == "squeeze":
            source = index.reshape(shape)
        elif name == "expand_dims":
            source = index.reshape(shape)
        elif name == "rev":
            source = np.flip(index, axis=tuple(params["dimensions"]))
        elif name == "tile":
            source = np.tile(index, tuple(params["reps"]))
        elif name == "slice":
            strides = params.get("strides") or (1,) * len(value.shape)
            source = index[
                tuple(
                    slice(start, limit, step)
                    for start, limit, step in zip(params["start_indices"], params["limit_indices"], strides)
                )
            ]
        else:
            return False
        if value.deps is None:
            return None
        return _take_rows(value.deps, source)

    def pad(self, value: _Value, config: Any, shape: tuple[int, ...]) -> sp.csr_array | None:
        """``lax.pad`` by a value that depends on nothing: padding has no dependencies."""
        if value.deps is None:
            return None
        source = numpy_pad(_index_array(value.shape), -1, config)
        return _take_rows(value.deps, source)

    def dynamic_slice(self, value: _Value, starts: list[_Value], sizes: tuple[int, ...]) -> sp.csr_array | None:
        """``lax.dynamic_slice`` at known starts (clamped into bounds, as lax does)."""
        if value.deps is None:
            return None
        slices = tuple(
            slice(start, start + size)
            for start, size in (
                (int(np.clip(int(np.asarray(s.const)), 0, dim - size)), size)
                for s, size, dim in zip(starts, sizes, value.shape)
            )
        )
        return _take_rows(value.deps, _index_array(value.shape)[slices])

    def bound_move(self, eqn: Any, values: list[_Value], shape: tuple[int, ...]) -> sp.csr_array | None:
        """A data movement evaluated on index arrays: floating operands are replaced
        by their element numbers (1-based, all operands numbered in turn), the
        others must be known; each output element then names its source."""
        operands: list[Any] = []
        stacked: list[sp.csr_array] = []
        offset = 0
        for value in values:
            if value.floating:
                operands.append((_index_array(value.shape) + offset + 1).astype(np.int32))
                stacked.append(value.deps if value.deps is not None else _empty(value.size, self.n))
                offset += value.size
            elif value.const is not None:
                operands.append(value.const)
            else:
                self.note(eqn.primitive.name, "indices that depend on the inputs: bounded conservatively")
                return _all_of(values, math.prod(shape), self.n)
        try:
            with warnings.catch_warnings():  # a NaN fill value cast to the integer numbering: never a source
                warnings.simplefilter("ignore", RuntimeWarning)
                moved = np.asarray(eqn.primitive.bind(*operands, **eqn.params)).astype(np.int64).reshape(-1)
        except Exception as err:
            self.note(eqn.primitive.name, f"could not follow it exactly ({type(err).__name__}): bounded conservatively")
            return _all_of(values, math.prod(shape), self.n)
        source = np.where((moved >= 1) & (moved <= offset), moved - 1, -1)
        return _take_rows(sp.csr_array(sp.vstack(stacked)), source)

    def scatter(self, eqn: Any, values: list[_Value], shape: tuple[int, ...]) -> sp.csr_array | None:
        """``operand`` with ``updates`` combined into it at constant indices: each
        output element depends on its operand element and on every update landing
        on it. Landing places come from the transpose of a scatter-add (a gather)."""
        operand, indices, updates = values[0], values[1], values[2]
        if indices.const is None or len(values) != 3:
            self.note(eqn.primitive.name, "indices that depend on the inputs: bounded conservatively")
            return _all_of(values, math.prod(shape), self.n)
        try:
            landing = _landing_places(eqn, operand.shape, indices.const, updates.shape)
        except Exception as err:
            self.note(eqn.primitive.name, f"could not follow it exactly ({type(err).__name__}): bounded conservatively")
            return _all_of(values, math.prod(shape), self.n)
        deps = operand.deps
        if updates.deps is not None:
            landed = landing >= 1
            deps = _union(
                deps,
                _gather_rows(updates.deps, landing[landed] - 1, np.flatnonzero(landed), math.prod(shape)),
            )
        return deps


def _landing_places(eqn: Any, operand_shape: tuple[int, ...], indices: Any, updates_shape: tuple[int, ...]) -> Any:
    """For each update element, the 1-based flat index of the operand element it
    lands on (0 when dropped), from the transpose of a scatter-add with the same
    dimension numbers."""
    import jax
    import jax.numpy as jnp

    params = eqn.params
    dtype = jnp.float64 if math.prod(operand_shape) >= 2**24 else jnp.float32
    zeros = jnp.zeros(operand_shape, dtype)

    def scatter_add(updates: Any) -> Any:
        return jax.lax.scatter_add(
            zeros,
            indices,
            updates,
            params["dimension_numbers"],
            indices_are_sorted=params.get("indices_are_sorted", False),
            unique_indices=params.get("unique_indices", False),
            mode=params.get("mode"),
        )

    transpose = jax.linear_transpose(scatter_add, jax.ShapeDtypeStruct(updates_shape, dtype))
    numbers = jnp.arange(1, math.prod(operand_shape) + 1, dtype=dtype).reshape(operand_shape)
    (landing,) = transpose(numbers)
    return np.rint(np.asarray(landing)).astype(np.int64).reshape(-1)
