"""The fuzzer's reference: high-accuracy finite differences of a program run on
NumPy, for every operator, laid out as ``di`` lays out its results (flattened leaf
by leaf, :func:`flat`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from di.testing.fuzz.programs import Program

__all__ = ["OPERATORS", "flat", "leaves", "reference"]

OPERATORS: dict[str, tuple[str, ...]] = {
    "scalar": ("gradient", "value_and_gradient", "hvp", "hessian"),
    "vector": ("jacobian", "value_and_jacobian", "pushforward", "pullback"),
}
"""The operators of each output kind (for an array or pytree ``x``)."""
CURVE_OPERATORS = ("derivative", "second_derivative")
"""The operators of a scalar ``x``, either output kind."""


def leaves(value: Any) -> list[np.ndarray]:
    """The arrays of a result, leaf by leaf (a dict's in key order, a tuple's in
    order), each as it is (its own dtype).

    Examples:
        >>> import numpy as np
        >>> from di.testing.fuzz.reference import leaves
        >>> [leaf.dtype.name for leaf in leaves({"b": (np.float32(1.0),), "a": np.zeros(2)})]
        ['float64', 'float32']
    """
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in leaves(value[key])]
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in leaves(item)]
    return [np.asarray(value)]


def flat(value: Any) -> np.ndarray:
    """Every number of a result, leaf by leaf (:func:`leaves`), as one float64 vector."""
    return np.concatenate([leaf.astype(np.float64).reshape(-1) for leaf in leaves(value)] or [np.zeros(0)])


def _richardson(function: Callable[[np.ndarray], Any], x: np.ndarray) -> np.ndarray:
    """Jacobian of ``function`` at the vector ``x`` by central differences
    extrapolated twice (error about h**6): one row per flattened output entry."""
    columns = []
    for i in range(x.size):

        def difference(h: float, i: int = i) -> np.ndarray:
            up, down = x.copy(), x.copy()
            up[i] += h
            down[i] -= h
            return (flat(function(up)) - flat(function(down))) / (2 * h)

        h = 1e-3  # small: a step across a kink (max at two close entries) would make the reference wrong
        d1, d2, d3 = difference(h), difference(h / 2), difference(h / 4)
        r1, r2 = (4 * d2 - d1) / 3, (4 * d3 - d2) / 3
        columns.append((16 * r2 - r1) / 15)
    return np.stack(columns, axis=-1)


def _leaf_columns(program: Program, matrix: np.ndarray) -> np.ndarray:
    """A Jacobian's columns in ``di``'s layout for ``x``'s form (one block per leaf,
    each flattened): a pytree's leaves hold consecutive columns."""
    if program.form != "pytree":
        return matrix.reshape(-1)
    half = program.size // 2
    return np.concatenate([matrix[:, :half].reshape(-1), matrix[:, half:].reshape(-1)])


def reference(program: Program, operator: str) -> np.ndarray:
    """The result of ``operator`` for ``program`` at its inputs, flattened as
    :func:`flat` flattens ``di``'s (``value_and_*``: the value first; ``hvp``,
    ``pushforward`` and ``pullback`` along the inputs' tangent or cotangent)."""
    inputs = program.inputs()
    # in float64 at the program's (rounded) inputs, whatever its dtype
    matrix, scale = inputs.matrix.astype(np.float64), inputs.scale.astype(np.float64)
    vector = flat(inputs.x)

    def run(v: np.ndarray) -> Any:
        x = v.reshape(()) if program.form == "scalar" else program.shape_x(v)
        return program(x, matrix, scale)

    jacobian = _richardson(run, vector)
    if operator in ("gradient", "derivative", "jacobian"):
        return _leaf_columns(program, jacobian) if operator == "jacobian" else jacobian.reshape(-1)
    if operator in ("value_and_gradient", "value_and_jacobian"):
        derivative = _leaf_columns(program, jacobian) if operator == "value_and_jacobian" else jacobian.reshape(-1)
        return np.concatenate([flat(run(vector)), derivative])
    if operator == "pushforward":
        return jacobian @ flat(inputs.tangent)
    if operator == "pullback":
        return inputs.cotangent @ jacobian
    if operator == "second_derivative":
        return _richardson(lambda v: _richardson(run, v).reshape(-1), vector).reshape(-1)
    hessian = _richardson(lambda v: _richardson(run, v).reshape(-1), vector)
    if operator == "hvp":
        return hessian @ flat(inputs.tangent)
    if operator == "hessian":
        return hessian.reshape(-1)
    raise ValueError(f"reference: no operator {operator!r}")
