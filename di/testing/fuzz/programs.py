"""The programs the fuzzer draws: chains of array-API operations on a vector, and
their inputs (``x`` as an array, a pytree or a scalar; two contexts; tangents)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import di

__all__ = ["DTYPES", "FORMS", "OPERATIONS", "Inputs", "Program", "run_program"]

Operation = Callable[[Any, Any, Any], Any]
"""``(xp, v, matrix) -> v``: one step of a program on a vector of the program's size."""


def _half_sum(xp: Any, v: Any, a: Any) -> Any:
    half = v.shape[0] // 2
    return xp.concat([v[:half] + v[half : 2 * half], v[half:]])


def _stacked(xp: Any, v: Any, a: Any) -> Any:
    rows = xp.stack([v, v * 0.5 + 1.0])
    return xp.sum(rows, axis=0) * 0.5


def _rows(xp: Any, v: Any) -> Any:
    return xp.reshape(v, (2, v.shape[0] // 2))


def _reshaped(xp: Any, v: Any, a: Any) -> Any:
    return xp.reshape(xp.flip(_rows(xp, v), axis=1), (v.shape[0],))


def _row_norms(xp: Any, v: Any, a: Any) -> Any:
    rows = _rows(xp, v)
    return xp.reshape(rows / (xp.linalg.vector_norm(rows, axis=1, keepdims=True) + 1.0), (v.shape[0],))


def _interleaved(xp: Any, v: Any, a: Any) -> Any:
    return xp.concat([v[1::2], v[::2] * 0.5])


OPERATIONS: dict[str, Operation] = {
    "sin": lambda xp, v, a: xp.sin(v),
    "tanh": lambda xp, v, a: xp.tanh(v),
    "exp": lambda xp, v, a: xp.exp(v * 0.3),
    "square": lambda xp, v, a: v * v * 0.5,
    "softplus": lambda xp, v, a: xp.log(1.0 + xp.exp(v * 0.5)),
    "hypot": lambda xp, v, a: xp.sqrt(v * v + 1.0),
    "cube": lambda xp, v, a: v**3 * 0.1,
    "scaled_sum": lambda xp, v, a: v + xp.sum(v) * 0.1,
    "mean": lambda xp, v, a: v - xp.mean(v),
    "prod": lambda xp, v, a: v * xp.prod(xp.tanh(v) * 0.2 + 1.0),
    "max": lambda xp, v, a: v + xp.max(v) * 0.1,
    "roll": lambda xp, v, a: xp.concat([v[1:], v[:1]]),
    "flip": lambda xp, v, a: xp.flip(v),
    "interleave": _interleaved,
    "take": lambda xp, v, a: xp.take(v, xp.flip(xp.arange(v.shape[0]))) * 0.5 + v,
    "half_sum": _half_sum,
    "stack": _stacked,
    "reshape": _reshaped,
    "row_mean": lambda xp, v, a: v + xp.concat([xp.mean(_rows(xp, v), axis=0)] * 2) * 0.2,
    "where": lambda xp, v, a: xp.where(xp.arange(v.shape[0]) % 2 == 0, v * 2.0, v),
    "matmul": lambda xp, v, a: a @ v,
    "normalize": lambda xp, v, a: v / xp.sqrt(xp.sum(v * v) + 1.0),
    "vector_norm": lambda xp, v, a: v * (xp.linalg.vector_norm(v) * 0.1 + 1.0),
    "row_norms": _row_norms,
    "matrix_norm": lambda xp, v, a: v * (xp.linalg.matrix_norm(_rows(xp, v)) * 0.1 + 1.0),
    "cumulative_sum": lambda xp, v, a: xp.cumulative_sum(v) * 0.3,
}
"""Every operation a program draws from, by name."""

OUTPUTS = ("scalar", "vector")
FORMS = ("array", "pytree", "scalar")
"""How ``x`` is given: a vector; a pytree ``{"a": first half, "b": (second half,)}``
of it; a 0-d ``t``, the program then running on ``t * (matrix[0] * 0.5 + 1)``
(derivative, second_derivative)."""

DTYPES = ("float64", "float32")
"""The dtypes programs are drawn in (a quarter of them float32: every array input
in that dtype, the reference in float64 at the same rounded inputs, the results
required in it too). The hook for complex numbers: a complex dtype added here
needs :meth:`Program.inputs` to draw complex values and the reference
(:mod:`di.testing.fuzz.reference`) to differentiate along real and imaginary parts;
every other part of the fuzzer reads the dtype from the inputs."""


@dataclass(frozen=True)
class Inputs:
    """A program's arguments: ``x`` in its form, the contexts, a tangent like ``x``
    and a cotangent like the output."""

    x: Any
    matrix: np.ndarray
    scale: np.ndarray
    tangent: Any
    cotangent: np.ndarray


@dataclass(frozen=True)
class Program:
    """One random program: its operations, output kind, size, seed and input form.

    Called as ``program(x, matrix, scale)``: ``matrix`` and ``scale`` are its
    contexts (an array and a 0-d array, passed as :class:`di.Constant`).

    Attributes:
        steps: the operations' names, applied in order.
        output: ``"scalar"`` (``scale * sum(v ** 2) / n``: gradient, hvp,
            hessian) or ``"vector"`` (``scale * v``: jacobian, pushforward,
            pullback).
        size: the length of the vector (even).
        seed: the seed of the inputs.
        form: how ``x`` is given (one of :data:`FORMS`).
        dtype: one of :data:`DTYPES`.
    """

    steps: tuple[str, ...]
    output: str
    size: int
    seed: int
    form: str = "array"
    dtype: str = "float64"

    def __call__(self, x: Any, matrix: Any, scale: Any) -> Any:
        """The program, on any engine's arrays (``xp = di.array_namespace(...)``)."""
        return run_program(self.steps, self.output, x, matrix, scale, self.form, self.size)

    def inputs(self) -> Inputs:
        """The arguments: the vector in [0.2, 1.2] (away from zero, where no step
        is singular), a well-conditioned matrix, ``scale`` in [0.5, 1.5], each in
        the program's dtype (drawn in float64, then rounded)."""
        if self.dtype not in DTYPES:
            raise ValueError(f"Program(dtype={self.dtype!r}): the fuzzer draws {DTYPES}")
        rng = np.random.default_rng(self.seed)
        dtype = np.dtype(self.dtype)
        vector = rng.uniform(0.2, 1.2, self.size).astype(dtype)
        matrix = (np.eye(self.size) * 0.5 + rng.normal(0.0, 0.2, (self.size, self.size))).astype(dtype)
        scale = np.asarray(rng.uniform(0.5, 1.5), dtype=dtype)
        tangent = rng.normal(0.0, 1.0, self.size).astype(dtype)
        cotangent = rng.normal(0.0, 1.0, self.size).astype(dtype)
        if self.form == "scalar":
            t = np.asarray(0.6 + 0.4 * vector[0], dtype=dtype)
            return Inputs(t, matrix, scale, np.asarray(tangent[0]), cotangent)
        return Inputs(self.shape_x(vector), matrix, scale, self.shape_x(tangent), cotangent)

    def shape_x(self, vector: np.ndarray) -> Any:
        """The vector in the program's form (``x``'s structure)."""
        if self.form == "pytree":
            half = self.size // 2
            return {"a": vector[:half], "b": (vector[half:],)}
        return vector

    def smaller(self) -> list[Program]:
        """The programs one step simpler: a step fewer, a smaller size, an array
        ``x`` for a pytree one (for shrinking a disagreement)."""
        candidates = [self._with(steps=self.steps[:i] + self.steps[i + 1 :]) for i in range(len(self.steps))]
        if self.size > 2:
            candidates.append(self._with(size=self.size - 2))
        if self.form == "pytree":
            candidates.append(self._with(form="array"))
        return candidates

    def _with(self, **changes: Any) -> Program:
        fields = {name: getattr(self, name) for name in ("steps", "output", "size", "seed", "form", "dtype")}
        return Program(**{**fields, **changes})


def run_program(
    steps: Sequence[str], output: str, x: Any, matrix: Any, scale: Any, form: str = "array", size: int | None = None
) -> Any:
    """Run ``steps`` on ``x`` (with ``matrix`` and ``scale`` as contexts), returning
    a scalar or the vector. ``size``: the vector's length as a Python int, which a
    scalar output is divided by (``v.shape[0]`` where not given: on PyTensor a
    variable of an intermediate, an int64 that makes a float32 output float64,
    PyTensor's own promotion, which the float32 programs are not about)."""
    if form == "pytree":
        xp = di.array_namespace(x["a"], matrix)
        v = xp.concat([x["a"], x["b"][0]])
    elif form == "scalar":
        xp = di.array_namespace(x, matrix)
        v = (matrix[0] * 0.5 + 1.0) * x
    else:
        xp = di.array_namespace(x, matrix)
        v = x
    for step in steps:
        v = OPERATIONS[step](xp, v, matrix)
    if output == "scalar":
        return scale * xp.sum(v * v) / (v.shape[0] if size is None else size)
    return scale * v
