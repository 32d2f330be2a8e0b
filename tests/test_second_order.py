"""SecondOrder(outer, inner): the pairs that compute second order, and the clear
refusal, at preparation, of the pairs whose outer engine cannot trace the inner one."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from conftest import ENGINES, backend_id, capabilities

import di
from di.backends.registry import get_adapter
from di.second_order.strategy import supported_pairs
from di.testing import approximates

pytest.importorskip("jax")
pytest.importorskip("torch")
pytest.importorskip("autograd")

PAIRS = [(outer, inner) for outer in ENGINES for inner in ENGINES]


def _outer_differentiates(outer: Any, inner: Any) -> bool:
    """What the outer engine declares it differentiates (Capabilities.differentiates): any
    program (it only evaluates them), the programs of adapters of its own class (it traces
    them), or none."""
    declared = capabilities(outer).differentiates
    return declared == "any" or (declared == "own" and type(get_adapter(outer)) is type(get_adapter(inner)))


SUPPORTED = {pair for pair in PAIRS if _outer_differentiates(*pair)}


def energy(x: Any) -> Any:
    return di.array_namespace(x).sum(x**3) + x[0] * x[1]


def cube(t: Any) -> Any:
    return t**3


X = np.array([1.0, 2.0, 3.0])
HESSIAN = np.diag(6 * X) + np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


def pair_id(pair: tuple[Any, Any]) -> str:
    return f"{backend_id(pair[0])}-over-{backend_id(pair[1])}"


def test_supported_pairs_are_those_the_outer_engine_differentiates() -> None:
    assert set(supported_pairs(ENGINES)) == SUPPORTED
    # among the built-in engines: finite differences over anything, JAX over JAX
    built_in = [di.AutoJAX(), di.AutoTorch(), di.AutoAutograd(), di.AutoFiniteDiff()]
    expected = {(di.AutoJAX(), di.AutoJAX()), *((di.AutoFiniteDiff(), inner) for inner in built_in)}
    assert {pair for pair in SUPPORTED if set(pair) <= set(built_in)} == expected
    assert (di.AutoJAX(jit=True), di.AutoJAX()) in supported_pairs([di.AutoJAX(jit=True), di.AutoJAX()])


@pytest.mark.parametrize("pair", sorted(SUPPORTED, key=pair_id), ids=pair_id)
def test_a_supported_pair_computes_the_hessian_hvp_and_second_derivative(pair: tuple[Any, Any]) -> None:
    backend = di.SecondOrder(*pair)
    nested_differences = approximates(pair[1])
    tolerance = {"rtol": 1e-3, "atol": 1e-3} if nested_differences else {"rtol": 1e-5, "atol": 1e-5}
    np.testing.assert_allclose(di.hessian(energy, backend, X), HESSIAN, **tolerance)
    tangent = np.array([1.0, -1.0, 0.5])
    np.testing.assert_allclose(di.hvp(energy, backend, X, (tangent,))[0], HESSIAN @ tangent, **tolerance)
    np.testing.assert_allclose(di.second_derivative(cube, backend, 2.0), 12.0, **tolerance)


@pytest.mark.parametrize("pair", [p for p in PAIRS if p not in SUPPORTED], ids=pair_id)
@pytest.mark.parametrize("operator", ["hvp", "hessian", "second_derivative"])
def test_an_unsupported_pair_is_refused_at_preparation_naming_both_engines(
    pair: tuple[Any, Any], operator: str
) -> None:
    backend = di.SecondOrder(*pair)
    arguments: tuple[Any, ...] = {
        "hvp": (energy, backend, X, (np.ones(3),)),
        "hessian": (energy, backend, X),
        "second_derivative": (cube, backend, 2.0),
    }[operator]
    with pytest.raises(di.UnsupportedOperatorError) as raised:
        getattr(di, f"prepare_{operator}")(*arguments)
    message = str(raised.value)
    assert repr(pair[0]) in message and repr(pair[1]) in message
    assert f"cannot compute {operator}" in message
    assert "SecondOrder(AutoFiniteDiff(), AutoJAX())" in message  # the pairs that work


def test_jax_over_torch_hessian_is_refused_not_an_attribute_error() -> None:
    # Before: AttributeError: LinearizeTracer has no attribute __dlpack_device__.
    with pytest.raises(di.UnsupportedOperatorError, match=r"AutoJAX.*AutoTorch"):
        di.hessian(energy, di.SecondOrder(di.AutoJAX(), di.AutoTorch()), X)


def test_torch_over_torch_second_derivative_is_refused_not_silently_wrong() -> None:
    # Before: the inner gradient program detached x, and the outer jvp returned a wrong value.
    with pytest.raises(di.UnsupportedOperatorError):
        di.second_derivative(cube, di.SecondOrder(di.AutoTorch(), di.AutoTorch()), 2.0)


@pytest.mark.parametrize("pair", [p for p in PAIRS if p not in SUPPORTED][:3], ids=pair_id)
def test_first_order_operators_of_a_refused_pair_use_the_inner_backend(pair: tuple[Any, Any]) -> None:
    gradient = di.gradient(energy, di.SecondOrder(*pair), X)
    np.testing.assert_allclose(gradient, 3 * X**2 + np.array([X[1], X[0], 0.0]), rtol=1e-6)


def test_a_planning_backend_cannot_be_a_part_of_second_order() -> None:
    with pytest.raises(di.UnsupportedOperatorError, match="candidates instead"):
        di.prepare_hessian(energy, di.SecondOrder(di.AutoFiniteDiff(), di.AutoFastest()), X)


def scaled_energy(x: Any, a: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(a * x**3) + x[0] * x[1]


@pytest.mark.parametrize("inner", ENGINES, ids=backend_id)
@pytest.mark.parametrize("operator", ["hvp", "hessian"])
def test_float32_survives_finite_differences_over_every_engine(inner: Any, operator: str) -> None:
    """The caller's float32 goes through a float64 outer engine and any inner one:
    no mixed-precision engine error, no engine warning, float32 results close to
    the exact ones (the inner gradient is computed in float64)."""
    backend = di.SecondOrder(di.AutoFiniteDiff(), inner)
    x, a = X.astype(np.float32), np.float32(1.0) * np.ones(3, dtype=np.float32)
    tangent = np.array([1.0, -1.0, 0.5], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if operator == "hvp":
            (result,) = di.hvp(scaled_energy, backend, x, (tangent,), di.Constant(a))
            expected = HESSIAN @ tangent
        else:
            result = di.hessian(scaled_energy, backend, x, di.Constant(a))
            expected = HESSIAN
    assert result.dtype == np.float32
    tolerance = 1e-3 if approximates(inner) else 1e-5
    np.testing.assert_allclose(result, expected, rtol=tolerance, atol=tolerance)


def test_float32_matrix_constant_through_finite_differences_over_torch() -> None:
    """A float32 matrix Constant meets the float64 points finite differences
    evaluate at: the inner engine must see one precision (torch's addmv refuses
    Double with Float)."""
    m = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, -1.0], [0.5, -1.0, 4.0]], dtype=np.float32)

    def quadratic(x: Any, m: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * (m @ x)) / 2

    x, tangent = X.astype(np.float32), np.ones(3, dtype=np.float32)
    (result,) = di.hvp(quadratic, di.SecondOrder(di.AutoFiniteDiff(), di.AutoTorch()), x, (tangent,), di.Constant(m))
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, (m + m.T) / 2 @ tangent, rtol=1e-5)


def one_element_cube_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.reshape(xp.sum(x**3), (1,))


def scalar_cube(t: Any) -> Any:
    xp = di.array_namespace(t)
    return xp.multiply(t, t * t)


def described(value: Any) -> tuple[Any, ...]:
    """What the value contract fixes: class, shape, dtype, writability."""
    return (
        type(value),
        np.shape(value),
        np.asarray(value).dtype,
        getattr(value, "flags", None) and value.flags.writeable,
    )


@pytest.mark.parametrize("pair", sorted(SUPPORTED, key=pair_id), ids=pair_id)
def test_the_value_of_the_combined_forms_follows_the_output_rules(pair: tuple[Any, Any]) -> None:
    """The value SecondOrder prepends follows the rules of its inner backend alone: a
    one-element loss gives a 0-d value (it came back shaped (1,)), and a Python float
    x a writable 0-d NumPy float64 array (an (FD, FD) or (FD, autograd) pair gave a
    read-only numpy.float64 scalar)."""
    backend, alone = di.SecondOrder(*pair), pair[1]
    x = np.array([1.0, 2.0])
    y, _, _ = di.value_gradient_and_hessian(one_element_cube_sum, backend, x)
    assert described(y) == described(di.value_gradient_and_hessian(one_element_cube_sum, alone, x)[0])
    assert described(y) == (np.ndarray, (), np.float64, True)
    np.testing.assert_allclose(y, 9.0)
    y, _, _ = di.value_derivative_and_second_derivative(scalar_cube, backend, 2.0)
    assert described(y) == described(di.value_derivative_and_second_derivative(scalar_cube, alone, 2.0)[0])
    assert described(y) == (np.ndarray, (), np.float64, True)
    np.testing.assert_allclose(y, 8.0)


def _coupled_exp(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.exp(x)) + xp.sum(x[:-1] * x[1:] ** 2)


def _coupled_exp_in_float32(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.astype(_coupled_exp(x), xp.float32)


def test_finite_differences_of_a_finite_difference_gradient_step_for_its_error() -> None:
    """SecondOrder(FD, FD) (SecondOrder()'s default) differentiates a gradient that
    is itself a finite difference, about eps**(2/3) off: the outer steps now follow
    that error, as they follow a float32 output's. With float64's first-order steps
    the hessian of a float32 f read [[0, 0], [0, 2.64]] (exact diag [1.65, 2.72]) and
    a float64 f's was 7.4e-6 off (now 2e-7)."""
    x = np.array([0.5, 1.0, -0.3])
    exact = np.diag(np.exp(x))
    exact += np.diag(2 * x[1:], 1) + np.diag(2 * x[1:], -1) + np.diag(np.r_[0.0, 2 * x[:-1]])
    tangent = (np.array([1.0, -1.0, 0.5]),)
    backend = di.SecondOrder(di.AutoFiniteDiff(), di.AutoFiniteDiff())
    for f, atol in ((_coupled_exp, 1e-6), (_coupled_exp_in_float32, 5e-3)):
        np.testing.assert_allclose(di.hessian(f, backend, x), exact, atol=atol)
        np.testing.assert_allclose(di.hvp(f, backend, x, tangent)[0], exact @ tangent[0], atol=atol)
    np.testing.assert_allclose(di.second_derivative(scalar_cube, backend, 1.5), 9.0, rtol=1e-6)
