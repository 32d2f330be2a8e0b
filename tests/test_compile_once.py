"""A loop that calls one form of an operator compiles once (issue 23).

``prepare_*`` compiles the plain operator's program ahead of time and the
``value_and_*`` one on its first call; ``prepare_*(..., value=True)`` does the
reverse. Either prep serves both forms. Compiles are counted, never timed: traces
of ``f`` on JAX (a Python side effect in ``f`` runs once per trace), graphs handed
to a recording ``torch.compile`` backend on torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import di

CUBE_X = np.array([0.5, -1.0, 2.0])
TANGENT = np.array([1.0, 2.0, -1.0])


def counting(counter: list[int] | None, vector: bool = False) -> Callable[..., Any]:
    """``sum(x**3)`` (``x**3`` with ``vector``), counting its traces in ``counter``
    (``None``: no side effect, which torch.compile would guard on and recompile for)."""

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        if counter is not None:
            counter[0] += 1
        return x**3 if vector else xp.sum(x**3)

    return f


def _expected(family: str, x: np.ndarray, v: np.ndarray) -> dict[str, Any]:
    """Analytic results of each operator family's plain and combined forms for
    ``sum(x**3)`` (``x**3`` for the vector operators; ``x**3`` of a scalar for the
    derivatives), as ``(y, result)`` flattened to one list of arrays."""
    y, g = np.sum(x**3), 3 * x**2
    return {
        "gradient": ([g], [y, g]),
        "jacobian": ([np.diag(g)], [x**3, np.diag(g)]),
        "pushforward": ([g * v], [x**3, g * v]),
        "pullback": ([g * v], [x**3, g * v]),
        "hvp": ([6 * x * v], [g, 6 * x * v]),
        "hessian": ([np.diag(6 * x)], [y, g, np.diag(6 * x)]),
        "derivative": ([3 * x[0] ** 2], [x[0] ** 3, 3 * x[0] ** 2]),
        "second_derivative": ([6 * x[0]], [x[0] ** 3, 3 * x[0] ** 2, 6 * x[0]]),
    }[family]


FAMILIES = {
    # family: (plain, combined, vector f, tangents)
    "gradient": ("gradient", "value_and_gradient", False, False),
    "jacobian": ("jacobian", "value_and_jacobian", True, False),
    "pushforward": ("pushforward", "value_and_pushforward", True, True),
    "pullback": ("pullback", "value_and_pullback", True, True),
    "hvp": ("hvp", "gradient_and_hvp", False, True),
    "hessian": ("hessian", "value_gradient_and_hessian", False, False),
    "derivative": ("derivative", "value_and_derivative", True, False),
    "second_derivative": ("second_derivative", "value_derivative_and_second_derivative", True, False),
}


def _flat(result: Any) -> list[np.ndarray]:
    if isinstance(result, tuple):
        return [leaf for item in result for leaf in _flat(item)]
    return [np.asarray(result)]


def _loop(
    family: str, backend: Any, to_array: Callable[[np.ndarray], Any], counter: list[int], value: bool, form: int
) -> tuple[int, int, list[np.ndarray]]:
    """Prepare (``value``), then call form ``form`` (0 plain, 1 combined) three
    times: the compiles (``counter``) in preparation and in the loop, and the last
    result. ``f`` counts its own traces unless ``backend`` is given the counter."""
    plain, combined, vector, with_tangents = FAMILIES[family]
    scalar = family in ("derivative", "second_derivative")
    counts_itself = not isinstance(backend, di.AutoTorch)
    f = counting(counter if counts_itself else None, vector)
    x = to_array(np.asarray(CUBE_X[0]) if scalar else CUBE_X)
    arguments: tuple[Any, ...] = (x, (to_array(TANGENT),)) if with_tangents else (x,)
    prep = getattr(di, f"prepare_{family}")(f, backend, *arguments, value=value)
    in_preparation = counter[0]
    run = getattr(di, (plain, combined)[form])
    for _ in range(3):
        result = run(f, prep, backend, *arguments)
    return in_preparation, counter[0] - in_preparation, _flat(result)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_loop_of_one_form_traces_once_on_compiled_jax(family: str) -> None:
    jnp = pytest.importorskip("jax.numpy")
    backend = di.AutoJAX(jit=True)
    expected = _expected(family, CUBE_X, TANGENT)
    for value, form in ((True, 1), (False, 0)):
        counter = [0]
        in_preparation, in_loop, result = _loop(family, backend, jnp.asarray, counter, value, form)
        assert in_preparation >= 1 and in_loop == 0, (value, in_preparation, in_loop)
        for got, want in zip(result, expected[form]):
            np.testing.assert_allclose(got, want, rtol=1e-5)
    # the form not compiled ahead of time still runs from the same prep, compiled when first used
    counter = [0]
    in_preparation, in_loop, result = _loop(family, backend, jnp.asarray, counter, True, 0)
    assert in_loop >= 1
    for got, want in zip(result, expected[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_the_default_prep_compiles_the_combined_form_on_its_first_call() -> None:
    """The other half of the contract: without ``value=True`` a ``value_and_*``
    loop pays a second compile (which is what ``value=True`` is for)."""
    jnp = pytest.importorskip("jax.numpy")
    counter = [0]
    in_preparation, in_loop, _ = _loop("gradient", di.AutoJAX(jit=True), jnp.asarray, counter, False, 1)
    assert in_preparation >= 1 and in_loop >= 1


def _recording(counter: list[int]) -> Callable[..., Any]:
    """A ``torch.compile`` backend that counts the graphs it is given and runs them eagerly."""

    def backend(graph: Any, example_inputs: Any) -> Any:
        counter[0] += 1
        return graph.forward

    return backend


@pytest.mark.parametrize("family", ["gradient", "pullback", "jacobian"])
def test_a_loop_of_one_form_compiles_once_on_compiled_torch(family: str) -> None:
    torch = pytest.importorskip("torch")
    expected = _expected(family, CUBE_X, TANGENT)
    for value, form in ((True, 1), (False, 0)):
        torch._dynamo.reset()
        graphs = [0]
        backend = di.AutoTorch(compile=True, compile_options={"backend": _recording(graphs)})
        in_preparation, in_loop, result = _loop(family, backend, torch.from_numpy, graphs, value, form)
        assert (in_preparation, in_loop) == (1, 0), value
        for got, want in zip(result, expected[form]):
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_the_default_torch_prep_compiles_the_combined_form_on_its_first_call() -> None:
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    graphs = [0]
    backend = di.AutoTorch(compile=True, compile_options={"backend": _recording(graphs)})
    in_preparation, in_loop, result = _loop("gradient", backend, torch.from_numpy, graphs, False, 1)
    assert (in_preparation, in_loop) == (1, 1)
    for got, want in zip(result, _expected("gradient", CUBE_X, TANGENT)[1]):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("family", ["pushforward", "pullback", "hvp"])
def test_one_tangent_of_any_family_or_call_path_traces_once_on_compiled_jax(family: str) -> None:
    """The compiled program of one tangent takes it bare (a tuple of one costs jit
    more to flatten): the preparation, the strict runner, a loose prep's program
    (any family's tangent, converted) and the unprepared call (whose first call of
    a signature prepares) all pass it alike, so none traces ``f`` again."""
    jnp = pytest.importorskip("jax.numpy")
    backend = di.AutoJAX(jit=True)
    counter = [0]
    f = counting(counter, vector=family != "hvp")
    x, tangent = jnp.asarray(CUBE_X), jnp.asarray(TANGENT)
    run = getattr(di, family)
    expected: Any = _expected(family, CUBE_X, TANGENT)
    want = expected[0][0]

    def traces(prep: Any, each: Any) -> int:
        before = counter[0]
        result = run(f, backend, x, (each,)) if prep is None else run(f, prep, backend, x, (each,))
        assert isinstance(result, tuple) and len(result) == 1
        np.testing.assert_allclose(np.asarray(result[0]), want, rtol=1e-5)
        return counter[0] - before

    strict = getattr(di, f"prepare_{family}")(f, backend, x, (tangent,))
    loose = getattr(di, f"prepare_{family}")(f, backend, x, (tangent,), strict=False)
    assert counter[0] >= 2
    tangents: list[Any] = [tangent, TANGENT]
    torch = _optional("torch")
    if torch is not None:
        tangents.append(torch.asarray(TANGENT, dtype=torch.float32))
    for _ in range(2):
        assert traces(strict, tangent) == 0
        for each in tangents:
            assert traces(loose, each) == 0, type(each)
    assert traces(None, tangent) >= 1  # (a new prep for the cache)
    assert traces(None, tangent) == 0


def _optional(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        return None
