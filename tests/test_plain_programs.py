"""The plain form of each operator computes its result and nothing it would drop.

Counted, never timed: evaluations of ``f`` by finite differences, calls of ``f``
by eager torch (one batched evaluation for several tangents), and which primitive
program the generic fallbacks run. The compiled backends' programs are checked by
counting their outputs in ``tests/test_compiled.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import di
from di.backends.capabilities import Capabilities
from di.backends.protocol import Adapter, Programs
from di.backends.registry import register_backend
from di.contexts import Context
from di.engines.finitediff.adapter import FiniteDiffAdapter


class Counted:
    """``f`` counting its evaluations."""

    def __init__(self, f: Callable[..., Any]) -> None:
        self.f, self.calls = f, 0

    def __call__(self, x: Any, *values: Any) -> Any:
        self.calls += 1
        return self.f(x, *values)


def cube_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**3)


def cube(x: Any) -> Any:
    return x**3


N = 3
X = np.array([0.5, -1.0, 2.0])
T = np.array([1.0, 2.0, -1.0])
S = np.array(0.7)

# operator, its value_and_* form, f, x, tangents, f's evaluations by the plain and by the full form
# (central differences, n = 3), and the expected plain result
FINITE_DIFFERENCE_CASES = [
    ("gradient", "value_and_gradient", cube_sum, X, None, 2 * N, 2 * N + 1, 3 * X**2),
    ("pushforward", "value_and_pushforward", cube, X, (T,), 2, 3, (3 * X**2 * T,)),
    ("jacobian", "value_and_jacobian", cube, X, None, 2 * N, 2 * N + 1, np.diag(3 * X**2)),
    ("pullback", "value_and_pullback", cube, X, (T,), 2 * N, 2 * N + 1, (3 * X**2 * T,)),
    ("hvp", "gradient_and_hvp", cube_sum, X, (T,), 4 * N, 6 * N + 1, (6 * X * T,)),
    ("hessian", "value_gradient_and_hessian", cube_sum, X, None, 4 * N * N, 4 * N * N + 2 * N + 1, np.diag(6 * X)),
    ("derivative", "value_and_derivative", cube, S, None, 2, 3, 3 * S**2),
    ("second_derivative", "value_derivative_and_second_derivative", cube, S, None, 3, 5, 6 * S),
]


@pytest.mark.parametrize(
    ("plain", "full", "f", "x", "tangents", "plain_calls", "full_calls", "expected"),
    FINITE_DIFFERENCE_CASES,
    ids=[case[0] for case in FINITE_DIFFERENCE_CASES],
)
def test_finite_differences_plain_form_skips_what_it_drops(
    plain: str,
    full: str,
    f: Callable[..., Any],
    x: Any,
    tangents: Any,
    plain_calls: int,
    full_calls: int,
    expected: Any,
) -> None:
    backend, counted = di.AutoFiniteDiff(), Counted(f)
    args = (x,) if tangents is None else (x, tangents)
    prep = getattr(di, f"prepare_{plain}")(counted, backend, *args)
    counted.calls = 0
    result = getattr(di, plain)(counted, prep, backend, *args)
    assert counted.calls == plain_calls
    counted.calls = 0
    combined = getattr(di, full)(counted, prep, backend, *args)
    assert counted.calls == full_calls
    for got in (result, combined[-1]):
        for got_leaf, expected_leaf in zip(got if tangents else (got,), expected if tangents else (expected,)):
            np.testing.assert_allclose(got_leaf, expected_leaf, rtol=1e-5, atol=1e-6)


def test_finite_differences_plain_hvp_still_checks_f_without_a_gradient() -> None:
    """With only zero tangents no gradient evaluates f: f is evaluated once to check it."""
    vector_output = {"on": False}

    def f(x: Any) -> Any:
        return cube(x) if vector_output["on"] else cube_sum(x)

    backend, zero = di.AutoFiniteDiff(), (np.zeros(3),)
    prep = di.prepare_hvp(f, backend, X, zero)
    np.testing.assert_allclose(di.hvp(f, prep, backend, X, zero)[0], np.zeros(3))
    vector_output["on"] = True
    with pytest.raises(di.InvalidOutputError, match="hvp needs f to return a real scalar"):
        di.hvp(f, prep, backend, X, zero)


# --- eager torch: several tangents, one evaluation --------------------------------------


def test_torch_plain_hvp_and_pushforward_evaluate_f_once_for_several_tangents() -> None:
    torch = pytest.importorskip("torch")
    backend = di.AutoTorch()
    x = torch.tensor(X)
    tx = (torch.tensor(T), torch.ones(3, dtype=torch.float64))
    counted = Counted(cube_sum)
    prep = di.prepare_hvp(counted, backend, x, tx)
    counted.calls = 0
    hvps = di.hvp(counted, prep, backend, x, tx)
    assert counted.calls == 1  # double backward: one gradient, one backward of it per tangent
    counted.calls = 0
    g, hvps_too = di.gradient_and_hvp(counted, prep, backend, x, tx)
    assert counted.calls == 1  # the gradient comes with the products (it was a second evaluation)
    for t, hv, hv_too in zip(tx, hvps, hvps_too):
        torch.testing.assert_close(hv, 6 * x * t)
        torch.testing.assert_close(hv_too, 6 * x * t)
    torch.testing.assert_close(g, 3 * x**2)

    counted = Counted(cube)
    prep = di.prepare_pushforward(counted, backend, x, tx)
    counted.calls = 0
    dys = di.pushforward(counted, prep, backend, x, tx)
    assert counted.calls == 1
    for t, dy in zip(tx, dys):
        torch.testing.assert_close(dy, 3 * x**2 * t)


# --- the generic fallbacks run the plain primitive ----------------------------------------


@dataclasses.dataclass(frozen=True)
class OnePrimitive(di.AbstractBackend):
    """A backend whose adapter implements one primitive only (``pullback`` or
    ``pushforward``), by finite differences, recording which program runs."""

    primitive: str = "pullback"


RUNS: list[str] = []


def _recorded(programs: Programs) -> Programs:
    def record(name: str, program: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            RUNS.append(name)
            return program(*args)

        return run

    return {name: record(name, program) for name, program in programs.items()}


class PullbackOnlyAdapter(Adapter):
    capabilities = Capabilities(family="numpy", aux=frozenset({"pullback"}))

    def prepare_pullback_programs(
        self, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        engine = FiniteDiffAdapter(di.AutoFiniteDiff())
        return _recorded(engine.prepare_pullback_programs(f, x, ty, contexts, has_aux=has_aux))


class PushforwardOnlyAdapter(Adapter):
    capabilities = Capabilities(family="numpy", aux=frozenset({"pushforward"}))

    def prepare_pushforward_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        engine = FiniteDiffAdapter(di.AutoFiniteDiff())
        return _recorded(engine.prepare_pushforward_programs(f, x, tx, contexts, has_aux=has_aux))


class OnePrimitiveAdapter(Adapter):
    """Dispatches to the pullback-only or the pushforward-only adapter."""

    def __new__(cls, backend: OnePrimitive) -> Any:  # type: ignore[misc]
        chosen = PullbackOnlyAdapter if backend.primitive == "pullback" else PushforwardOnlyAdapter
        return chosen(backend)


register_backend(OnePrimitive, OnePrimitiveAdapter)

FALLBACK_CASES = [
    ("gradient", "value_and_gradient", cube_sum, X, None, 3 * X**2),
    ("jacobian", "value_and_jacobian", cube, X, None, np.diag(3 * X**2)),
    ("pushforward", "value_and_pushforward", cube, X, (T,), (3 * X**2 * T,)),
    ("pullback", "value_and_pullback", cube, X, (T,), (3 * X**2 * T,)),
    ("derivative", "value_and_derivative", cube, S, None, 3 * S**2),
]


@pytest.mark.parametrize("primitive", ["pullback", "pushforward"])
@pytest.mark.parametrize(
    ("plain", "full", "f", "x", "tangents", "expected"), FALLBACK_CASES, ids=[case[0] for case in FALLBACK_CASES]
)
def test_fallback_plain_form_runs_the_plain_primitive(
    primitive: str, plain: str, full: str, f: Callable[..., Any], x: Any, tangents: Any, expected: Any
) -> None:
    backend = OnePrimitive(primitive)
    args = (x,) if tangents is None else (x, tangents)
    prep = getattr(di, f"prepare_{plain}")(f, backend, *args)
    RUNS.clear()
    result = getattr(di, plain)(f, prep, backend, *args)
    assert RUNS and set(RUNS) == {primitive}  # never value_and_<primitive>
    RUNS.clear()
    combined = getattr(di, full)(f, prep, backend, *args)
    assert RUNS and set(RUNS) <= {primitive, f"value_and_{primitive}"}
    for got in (result, combined[-1]):
        for got_leaf, expected_leaf in zip(got if tangents else (got,), expected if tangents else (expected,)):
            np.testing.assert_allclose(got_leaf, expected_leaf, rtol=1e-5, atol=1e-6)
