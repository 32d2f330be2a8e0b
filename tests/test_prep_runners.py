"""The preparation's own work and the prepared runners made from one template: every shape of
runner (strict or not, with tangents or not, with 0, 1 or 2 contexts) computes the right values and
refuses what it must; runners of one shape share their compiled code, and a traceback through one
shows its line; one preparation resolves its backend once and asks x's array family once."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, backend_id

import di

X = np.array([1.0, 2.0, 3.0])
A = np.array([0.5, -1.0, 2.0])


def weighted(x: Any, *values: Any) -> Any:
    """``sum(x**3) * prod(values)`` (an array value enters elementwise): gradient
    ``3 x**2 * prod(values)``, Hessian ``diag(6 x * prod(values))``."""
    xp = di.array_namespace(x)
    y = x**3
    for value in values:
        y = y * value
    return xp.sum(y)


def squares(x: Any, *values: Any) -> Any:
    """``x**2 * prod(values)``: Jacobian ``diag(2 x * prod(values))``."""
    xp = di.array_namespace(x)
    y = xp.square(x)
    for value in values:
        y = y * value
    return y


def _weights(count: int) -> tuple[list[di.Constant], np.ndarray]:
    """``count`` Constants (an array, then a float) and their product."""
    contexts = [di.Constant(A), di.Constant(3.0)][:count]
    product = np.ones(3)
    for context in contexts:
        product = product * context.value
    return contexts, product


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "loose"])
@pytest.mark.parametrize("count", [0, 1, 2])
def test_every_runner_shape_without_tangents_computes_and_refuses(count: int, strict: bool) -> None:
    backend = di.AutoFiniteDiff()
    contexts, product = _weights(count)
    prep = di.prepare_gradient(weighted, backend, np.zeros(3), *contexts, strict=strict)
    np.testing.assert_allclose(di.gradient(weighted, prep, backend, X, *contexts), 3 * X**2 * product, rtol=1e-6)
    y, g = di.value_and_gradient(weighted, prep, backend, X, *contexts)
    np.testing.assert_allclose(y, np.sum(X**3 * product), rtol=1e-12)
    np.testing.assert_allclose(g, 3 * X**2 * product, rtol=1e-6)
    with pytest.raises(di.PreparationMismatchError, match=r"f\s+differs"):
        di.gradient(squares, prep, backend, X, *contexts)
    with pytest.raises(di.PreparationMismatchError, match=r"backend\s+differs"):
        di.gradient(weighted, prep, di.AutoFiniteDiff(method="forward"), X, *contexts)
    if strict:
        with pytest.raises(di.PreparationMismatchError, match=r"x\s+differs.*\(3,\).*\(4,\)"):
            di.gradient(weighted, prep, backend, np.ones(4), *contexts)
        for index in range(count):  # a Cache where a Constant was prepared
            swapped = [*contexts[:index], di.Cache(contexts[index].value), *contexts[index + 1 :]]
            with pytest.raises(di.PreparationMismatchError, match=rf"context {index + 1}\s+differs"):
                di.gradient(weighted, prep, backend, X, *swapped)


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "loose"])
@pytest.mark.parametrize("count", [0, 1, 2])
@pytest.mark.parametrize("tangents", [1, 2])
def test_every_runner_shape_with_tangents_computes_and_refuses(tangents: int, count: int, strict: bool) -> None:
    backend = di.AutoFiniteDiff()
    contexts, product = _weights(count)
    basis = tuple(np.eye(3)[i] for i in range(tangents))
    pullback = di.prepare_pullback(squares, backend, np.zeros(3), basis, *contexts, strict=strict)
    hvp = di.prepare_hvp(weighted, backend, np.zeros(3), basis, *contexts, strict=strict)
    results = di.pullback(squares, pullback, backend, X, basis, *contexts)
    products = di.hvp(weighted, hvp, backend, X, basis, *contexts)
    assert len(results) == len(products) == tangents
    for i in range(tangents):
        np.testing.assert_allclose(results[i], 2 * X * product * basis[i], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(products[i], 6 * X * product * basis[i], rtol=1e-4, atol=1e-6)
    with pytest.raises(di.InvalidInputError, match=r"ty must be a tuple, not a list"):
        di.pullback(squares, pullback, backend, X, list(basis), *contexts)  # (a list: strict or not, said so)
    with pytest.raises(di.PreparationMismatchError, match=r"f\s+differs"):
        di.hvp(squares, hvp, backend, X, basis, *contexts)
    if strict:
        with pytest.raises(di.PreparationMismatchError, match=r"ty\s+differs"):
            di.pullback(squares, pullback, backend, X, (*basis, basis[0]), *contexts)
        for index in range(count):
            swapped = [*contexts[:index], di.Cache(contexts[index].value), *contexts[index + 1 :]]
            with pytest.raises(di.PreparationMismatchError, match=rf"context {index + 1}\s+differs"):
                di.hvp(weighted, hvp, backend, X, basis, *swapped)


def test_runners_of_one_shape_share_their_code_and_a_traceback_shows_their_line() -> None:
    backend = di.AutoFiniteDiff()
    first = di.prepare_gradient(weighted, backend, np.zeros(3), di.Constant(A))
    second = di.prepare_gradient(squares, backend, np.zeros(5), di.Constant(np.ones(5)))
    other = di.prepare_gradient(weighted, backend, np.zeros(3), di.Constant(A), strict=False)
    code = first.runners["gradient"].__code__
    assert second.runners["gradient"].__code__ is code
    assert other.runners["gradient"].__code__ is not code

    def failing(x: Any) -> Any:
        xp = di.array_namespace(x)
        if float(x[0]) > 100.0:
            raise ValueError("f's own error")
        return xp.sum(x**2)

    prep = di.prepare_gradient(failing, backend, X)
    with pytest.raises(ValueError, match="f's own error") as raised:
        di.gradient(failing, prep, backend, np.array([1000.0, 0.0, 0.0]))
    frames = [frame for frame in traceback.extract_tb(raised.value.__traceback__) if frame.name.startswith("run_")]
    assert [frame.line for frame in frames] == ["return program(x)"], frames


# --- what one preparation asks -------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_preparation_resolves_its_backend_once(backend: di.AbstractBackend, monkeypatch: Any) -> None:
    """The strategy and the adapter of a selector are asked for once (the registry hashes the
    selector each time; prepare_operator asked twice for both)."""
    from di.operators import prepare

    asked: list[str] = []
    for name in ("get_adapter", "get_strategy"):
        original = getattr(prepare, name)
        monkeypatch.setattr(prepare, name, lambda b, name=name, original=original: asked.append(name) or original(b))
    prep = di.prepare_gradient(weighted, backend, np.zeros(3))
    assert sorted(asked) == ["get_adapter", "get_strategy"]
    np.testing.assert_allclose(np.asarray(di.gradient(weighted, prep, backend, X)), 3 * X**2, rtol=1e-5)


@pytest.fixture
def questions_about(monkeypatch: Any) -> Callable[[Any], list[str]]:
    """``questions_about(x)``: the list of the questions (``family_of``, ``is_pytree``) the
    preparation and operator layers ask of ``x`` from then on, named by the module asking."""
    asked: list[str] = []
    target: list[Any] = [None]
    di.prepare_hvp(weighted, di.AutoFiniteDiff(), np.zeros(3), (X,), di.Constant(A))  # (every module of both imported)
    for module in [m for name, m in list(sys.modules.items()) if name.startswith(("di.prep", "di.operators"))]:
        for question in ("family_of", "is_pytree"):
            original = getattr(module, question, None)
            if original is None:
                continue

            def asking(value: Any, original: Any = original, label: str = f"{module.__name__}.{question}") -> Any:
                if value is target[0]:
                    asked.append(label)
                return original(value)

            monkeypatch.setattr(module, question, asking)

    def about(x: Any) -> list[str]:
        asked.clear()
        target[0] = x
        return asked

    return about


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_preparation_asks_the_family_of_an_array_x_once(backend: di.AbstractBackend, questions_about: Any) -> None:
    """Its facts are found once and handed along (with a Constant, the two layers asked these
    questions of x 20 to 23 times, in seven modules)."""
    x = np.zeros(3)
    asked = questions_about(x)
    prep = di.prepare_gradient(weighted, backend, x, di.Constant(A))
    assert asked == ["di.prep.facts.family_of"], asked
    np.testing.assert_allclose(
        np.asarray(di.gradient(weighted, prep, backend, X, di.Constant(A))), 3 * X**2 * A, rtol=1e-5
    )


def test_a_program_checked_by_its_executable_calls_what_the_executables_cell_holds() -> None:
    # an executable compiled by its first call puts the compiled one in its cell: later
    # calls go to it directly, and its refusals still mean other arguments
    from di.prep.own_checks import ArgumentsRejected, checked_by_executable, compiling_again

    calls: list[str] = []

    def compiled(x: Any) -> Any:
        calls.append("compiled")
        if not isinstance(x, int):
            raise TypeError("compiled for int")
        return x + 1

    def compiling(x: Any) -> Any:
        calls.append("compiling")
        cell[0] = compiled
        return compiled(x)

    cell: list[Any] = [compiling]
    compiling.cell = cell  # type: ignore[attr-defined]
    run = checked_by_executable(compiling, lambda x: x + 0.5)
    assert (run(1), run(2)) == (2, 3)
    assert calls == ["compiling", "compiled", "compiled"]
    with pytest.raises(ArgumentsRejected):
        run(1.0)
    with compiling_again():
        assert run(1.0) == 1.5
