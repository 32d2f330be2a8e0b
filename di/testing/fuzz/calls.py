"""How the fuzzer calls ``di``: each operator on a backend, unprepared, prepared at
another point, through :class:`di.AutoSparse`, or inside one of the engine's own
transforms (those its adapter declares with a ``run`` hook, read from the
registry), and how a result is compared with the reference."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import di
from di.backends.engine import load
from di.backends.registry import get_adapter
from di.backends.selectors import AbstractBackend
from di.backends.transforms import Composition
from di.families import converter
from di.testing.arrays import to_numpy
from di.testing.fuzz.programs import Program
from di.testing.fuzz.reference import flat, leaves, reference
from di.testing.tolerances import default_tolerances

__all__ = ["BASIC_MODES", "DtypeMismatch", "call", "check", "compare", "inside", "inside_modes", "tolerance"]

BASIC_MODES = ("unprepared", "prepared", "sparse")
"""The modes every engine is called in (``sparse``: a prep of
``di.AutoSparse(backend)``, for jacobian and hessian). The others name a transform
(``"jax.jit"``: prepared outside, called inside; ``"jax.jit, unprepared"``)."""

UNPREPARED = ", unprepared"
SECOND_ORDER = ("hvp", "hessian", "second_derivative")


class DtypeMismatch(AssertionError):
    """A result (or a part of one) in another dtype than the program's ``x``: a
    float32 ``x`` must get float32 results, on every engine and in every mode."""


def _aspect(operator: str) -> str:
    return operator.removeprefix("value_and_")


@functools.cache
def inside(backend: AbstractBackend) -> dict[str, Composition]:
    """The transforms of ``backend``'s engine that a call can be run inside (the
    compositions its adapter declares with a ``run`` hook), by name."""
    try:
        declared = get_adapter(backend).capabilities
    except di.DIError:
        return {}
    return {composition.transform: composition for composition in declared.compositions if composition.run}


def inside_modes(backend: AbstractBackend, operator: str) -> list[str]:
    """The transform modes ``operator`` can be called in on ``backend``."""
    modes = []
    for name, composition in inside(backend).items():
        if composition.composes(_aspect(operator)):
            modes.append(name)
            if composition.composes("unprepared"):
                modes.append(name + UNPREPARED)
    return modes


def _tree(function: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _tree(function, item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_tree(function, item) for item in value)
    return function(value)


def _numpy(value: Any) -> Any:
    if hasattr(value, "toarray"):  # a sparse matrix
        value = value.toarray()
    elif hasattr(value, "to_dense") and getattr(value, "is_sparse", False):
        value = value.to_dense()
    return to_numpy(value)


def _arguments(program: Program, operator: str, moved: bool) -> tuple[Any, tuple[Any, ...], tuple[Any, ...]]:
    """``(x, tangents, contexts)`` of a call; ``moved``: at another point and other
    context values (where a prep is made)."""
    inputs = program.inputs()
    x, matrix, scale = inputs.x, inputs.matrix, inputs.scale
    if moved:
        x = _tree(lambda leaf: leaf * 0.5 + 0.3, x)
        matrix, scale = matrix * 0.9, scale * 1.1
    tangents: tuple[Any, ...] = ()
    if operator in ("hvp", "pushforward"):
        tangents = ((inputs.tangent,),)
    elif operator == "pullback":
        tangents = ((inputs.cotangent,),)
    return x, tangents, (di.Constant(matrix), di.Constant(np.asarray(scale)))


def call(operator: str, program: Program, backend: AbstractBackend, mode: str) -> np.ndarray:
    """``operator`` of ``program`` at its inputs on ``backend`` in ``mode``, flattened
    as the reference is (:func:`di.testing.fuzz.reference.flat`)."""
    run_on = di.AutoSparse(backend) if mode == "sparse" else backend
    operate = getattr(di, operator)
    x, tangents, contexts = _arguments(program, operator, moved=False)
    transform = inside(backend).get(mode.removesuffix(UNPREPARED))
    if transform is not None:
        to_engine = _tree_converter(get_adapter(backend).capabilities.family)
        x, tangents = to_engine(x), to_engine(tangents)
    prep: tuple[Any, ...] = ()
    if mode != "unprepared" and not mode.endswith(UNPREPARED):
        moved_x, moved_tangents, moved_contexts = _arguments(program, operator, moved=True)
        if transform is not None:
            moved_x, moved_tangents = to_engine(moved_x), to_engine(moved_tangents)
        prepare = getattr(di, f"prepare_{_aspect(operator)}")
        prep = (prepare(program, run_on, moved_x, *moved_tangents, *moved_contexts),)

    def compute(x: Any) -> Any:
        return operate(program, *prep, run_on, x, *tangents, *contexts)

    result = compute(x) if transform is None else load(transform.run)(compute, x)
    if operator in ("hvp", "pushforward", "pullback"):
        result = result[0]
    result = _tree(_numpy, result)
    wrong = sorted({str(leaf.dtype) for leaf in leaves(result) if leaf.dtype != np.dtype(program.dtype)})
    if wrong:
        raise DtypeMismatch(f"{operator} {mode} on {backend!r}: a result in {', '.join(wrong)}, x in {program.dtype}")
    return flat(result)


def _tree_converter(family: str) -> Any:
    convert = converter("numpy", family)
    return lambda value: _tree(convert, value)


def tolerance(backend: AbstractBackend, operator: str, dtype: str = "float64") -> tuple[float, float]:
    """``(rtol, atol)`` for ``backend``'s ``operator`` in ``dtype``: di's rule
    (:func:`di.testing.default_tolerances`), no tighter than the reference's
    own error."""
    order = 2 if operator in SECOND_ORDER else 1
    rtol, atol = default_tolerances(backend, np.dtype(dtype), order=order)
    return max(rtol, 1e-6), max(atol, 1e-7)


def compare(
    got: np.ndarray, expected: np.ndarray, backend: AbstractBackend, operator: str, dtype: str = "float64"
) -> tuple[float, float]:
    """``(largest difference, what is allowed)``, on the problem's scale (x and its
    data are of order one: a result near zero, as a Hessian along a direction f does
    not change in, is compared with that scale, not with itself)."""
    rtol, atol = tolerance(backend, operator, dtype)
    scale = max(float(np.max(np.abs(expected), initial=0.0)), 1.0)
    if got.shape != expected.shape:
        return float("inf"), atol + rtol * scale
    return float(np.max(np.abs(got - expected), initial=0.0)), atol + rtol * scale


def check(program: Program, operator: str, backend: AbstractBackend, mode: str = "unprepared") -> None:
    """Assert that ``backend``'s ``operator`` of ``program`` in ``mode`` agrees with the
    reference (what a finding's ready-to-paste test calls).

    Raises:
        AssertionError: it does not (the difference and what is allowed).
        DtypeMismatch: a result is in another dtype than ``x``.

    Examples:
        >>> import di
        >>> from di.testing.fuzz import Program, check
        >>> check(Program(("sin", "matmul"), "scalar", 4, 1), "gradient", di.AutoFiniteDiff(), "prepared")
    """
    expected = reference(program, operator)
    got = call(operator, program, backend, mode)
    worst, allowed = compare(got, expected, backend, operator, program.dtype)
    assert worst <= allowed, f"{operator} {mode} on {backend!r}: largest difference {worst:.3g}, allowed {allowed:.3g}"
