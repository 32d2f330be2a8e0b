"""Engines' refusals inside f read as di errors: forward mode through a JAX
custom_vjp rule or an autograd primitive without a forward rule, a NumPy scalar
type on an autograd value, and outputs autograd did not trace from x."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, backend_params

import di

X = np.array([0.3, -1.2, 2.5])
T = np.array([1.0, 0.5, -0.25])
S = np.array(0.7)


def _raises_own(
    call: Callable[[], Any], kind: type[BaseException] | tuple[type[BaseException], ...], message: str
) -> None:
    """``call`` raises f's own ``kind`` error as it is: no di error, no translation."""
    with pytest.raises(kind, match=message) as info:
        call()
    assert not isinstance(info.value, di.DIError)


# --- JAX: forward mode through a custom_vjp rule -------------------------------------------------

JAX_BACKENDS = [b for b in BACKENDS if isinstance(b, di.AutoJAX)]


def _custom_vjp() -> Callable[[Any], Any]:
    """sin(x) with a custom_vjp rule giving 3 x g (not cos): results follow the rule."""
    import jax

    @jax.custom_vjp
    def rule(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(x)

    def forward(x: Any) -> tuple[Any, Any]:
        xp = di.array_namespace(x)
        return xp.sin(x), x

    def backward(x: Any, g: Any) -> tuple[Any]:
        return (3.0 * x * g,)

    rule.defvjp(forward, backward)
    return rule


FORWARD_CALLS: dict[str, Callable[[Callable[[Any], Any], di.AbstractBackend], Any]] = {
    "pushforward": lambda f, b: di.pushforward(f, b, X, (T,)),
    "value_and_pushforward": lambda f, b: di.value_and_pushforward(f, b, X, (T,)),
    "derivative": lambda f, b: di.derivative(f, b, S),
    "value_and_derivative": lambda f, b: di.value_and_derivative(f, b, S),
    "jacobian": lambda f, b: di.jacobian(f, b, X),
    "value_and_jacobian": lambda f, b: di.value_and_jacobian(f, b, X),
    "second_derivative": lambda f, b: di.second_derivative(f, b, S),
    "prepared pushforward": lambda f, b: di.pushforward(f, di.prepare_pushforward(f, b, X, (T,)), b, X, (T,)),
}


@pytest.mark.parametrize("call", list(FORWARD_CALLS), ids=list(FORWARD_CALLS))
@pytest.mark.parametrize("backend", backend_params(JAX_BACKENDS))
def test_jax_forward_mode_through_a_custom_vjp_rule_is_refused_by_name(backend: di.AutoJAX, call: str) -> None:
    rule = _custom_vjp()
    with pytest.raises(di.UnsupportedOperatorError, match=r"jax\.custom_vjp rule") as info:
        FORWARD_CALLS[call](rule, backend)
    message = str(info.value)
    operator = call.split()[-1].removeprefix("value_and_")
    assert message.startswith(f"{operator} cannot differentiate f with {backend!r}")
    assert "jax.custom_jvp" in message
    assert isinstance(info.value.__cause__, (TypeError, NotImplementedError))
    assert not isinstance(info.value.__cause__, di.DIError)
    if operator == "jacobian":
        assert "mode='reverse'" in message and "no more elements than f's output" in message


@pytest.mark.parametrize("backend", backend_params(JAX_BACKENDS))
def test_jax_custom_vjp_remedies_named_by_the_refusal_follow_the_rule(backend: di.AutoJAX) -> None:
    rule = _custom_vjp()
    reverse = di.AutoJAX(jit=backend.jit, mode="reverse")
    forward = di.AutoJAX(jit=backend.jit, mode="forward")
    with pytest.raises(di.UnsupportedOperatorError, match="mode='reverse'"):
        di.jacobian(rule, forward, X)
    np.testing.assert_allclose(di.jacobian(rule, reverse, X), np.diag(3.0 * X))
    np.testing.assert_allclose(di.pullback(rule, backend, X, (T,))[0], 3.0 * X * T)
    np.testing.assert_allclose(di.jacobian(rule, reverse, S), 3.0 * S)  # the derivative's remedy

    def scalar(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(rule(x))

    # second_derivative's remedies: d/dx (3 x) = 3
    np.testing.assert_allclose(di.hessian(scalar, backend, S), 3.0)
    np.testing.assert_allclose(di.jacobian(lambda x: di.jacobian(rule, reverse, x), reverse, S), 3.0)
    # and the reverse-mode operators were never refused
    np.testing.assert_allclose(di.gradient(scalar, backend, X), 3.0 * X)
    np.testing.assert_allclose(di.hvp(scalar, backend, X, (T,))[0], 3.0 * T)


@pytest.mark.parametrize("backend", backend_params(JAX_BACKENDS))
def test_jax_f_raising_its_own_type_errors_keeps_them(backend: di.AutoJAX) -> None:
    import jax

    rule = _custom_vjp()

    def own_type_error(x: Any) -> Any:
        raise TypeError("mine")

    def own_not_implemented(x: Any) -> Any:
        raise NotImplementedError("mine too")

    def calls_jvp_itself(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(jax.jvp(rule, (x,), (x,))[1])

    _raises_own(lambda: di.pushforward(own_type_error, backend, X, (T,)), TypeError, "mine")
    _raises_own(lambda: di.derivative(own_not_implemented, backend, S), NotImplementedError, "mine too")
    # f's own jax.jvp under a reverse-mode operator: JAX's refusal is f's, kept as it is
    _raises_own(lambda: di.gradient(calls_jvp_itself, backend, X), (TypeError, NotImplementedError), "custom_(vjp|lin)")


# --- autograd: a primitive without a forward rule; np.float64 on a box -----------------------------

AUTOGRAD = [b for b in BACKENDS if isinstance(b, di.AutoAutograd)]


def _vjp_only() -> Callable[[Any], Any]:
    """An autograd primitive sin with a reverse rule giving 3 g and no forward rule."""
    from autograd.extend import defvjp, primitive

    @primitive
    def vjp_only(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(x)

    defvjp(vjp_only, lambda ans, x: lambda g: 3.0 * g)
    return vjp_only  # type: ignore[no-any-return]


@pytest.mark.parametrize("call", ["pushforward", "value_and_pushforward", "derivative", "value_and_derivative"])
@pytest.mark.parametrize("backend", backend_params(AUTOGRAD))
def test_autograd_forward_mode_through_a_vjp_only_primitive_is_refused_by_name(
    backend: di.AutoAutograd, call: str
) -> None:
    vjp_only = _vjp_only()
    with pytest.raises(di.UnsupportedOperatorError, match="no forward one") as info:
        FORWARD_CALLS[call](vjp_only, backend)
    message = str(info.value)
    assert message.startswith(f"{backend!r} cannot differentiate f in forward mode: f calls vjp_only")
    assert "autograd.extend.defjvp" in message and "ask for pullback" in message
    assert type(info.value.__cause__) is NotImplementedError
    # the remedies: reverse mode runs the rule
    np.testing.assert_allclose(di.pullback(vjp_only, backend, X, (T,))[0], 3.0 * T)
    np.testing.assert_allclose(di.jacobian(vjp_only, backend, X), 3.0 * np.eye(3))


@pytest.mark.parametrize("backend", backend_params(AUTOGRAD))
def test_autograd_f_raising_its_own_errors_keeps_them(backend: di.AutoAutograd) -> None:
    def own_not_implemented(x: Any) -> Any:
        raise NotImplementedError("JVP of nothing wrt argnums (0,) not defined")

    def own_value_error(x: Any) -> Any:
        raise ValueError("setting an array element with a sequence.")

    # the same words under a reverse-mode operator are f's own
    _raises_own(lambda: di.pullback(own_not_implemented, backend, X, (T,)), NotImplementedError, "JVP of nothing")
    _raises_own(lambda: di.gradient(own_value_error, backend, X), ValueError, "setting an array element")


SCALAR_CALLS: dict[str, Callable[[Callable[[Any], Any], di.AbstractBackend], Any]] = {
    "gradient": lambda f, b: di.gradient(f, b, X),
    "value_and_gradient": lambda f, b: di.value_and_gradient(f, b, X),
    "hvp": lambda f, b: di.hvp(f, b, X, (T,)),
    "hessian": lambda f, b: di.hessian(f, b, X),
}


@pytest.mark.parametrize("scalar_type", [np.float64, np.float32])
@pytest.mark.parametrize("call", list(SCALAR_CALLS))
@pytest.mark.parametrize("backend", backend_params(AUTOGRAD))
def test_autograd_a_numpy_scalar_type_on_a_traced_value_is_refused_as_float(
    backend: di.AutoAutograd, call: str, scalar_type: Any
) -> None:
    def as_numpy_scalar(x: Any) -> Any:
        xp = di.array_namespace(x)
        return scalar_type(xp.sum(x**2))

    with pytest.raises(di.InvalidOutputError, match=r"into a Python number with float\(\)") as info:
        SCALAR_CALLS[call](as_numpy_scalar, backend)
    assert str(info.value).startswith(f"{call.removeprefix('value_and_')} cannot differentiate f with {backend!r}")
    assert type(info.value.__cause__) is ValueError


# --- autograd: an array output cut off from the trace --------------------------------------------

ARRAY_CALLS: dict[str, Callable[[Callable[[Any], Any], di.AbstractBackend], Any]] = {
    "pullback": lambda f, b: di.pullback(f, b, X, (T,)),
    "value_and_pullback": lambda f, b: di.value_and_pullback(f, b, X, (T,)),
    "jacobian": lambda f, b: di.jacobian(f, b, X),
    "value_and_jacobian": lambda f, b: di.value_and_jacobian(f, b, X),
    "pushforward": lambda f, b: di.pushforward(f, b, X, (T,)),
    "prepared pullback": lambda f, b: di.pullback(f, di.prepare_pullback(f, b, X, (T,)), b, X, (T,)),
}


def _cut_off(x: Any) -> Any:
    """sin(x) computed from the value inside autograd's box: untraced, so no derivative."""
    from autograd.tracer import getval

    xp = di.array_namespace(x)
    return xp.sin(getval(x))


def _constant(x: Any) -> Any:
    """Constant in x but computed from it: its derivatives are zeros."""
    return x * 0.0 + 1.5


@pytest.mark.parametrize("call", list(ARRAY_CALLS))
@pytest.mark.parametrize("backend", backend_params(AUTOGRAD))
def test_autograd_an_array_output_cut_off_from_x_is_refused_not_zeros(backend: di.AutoAutograd, call: str) -> None:
    with pytest.raises(di.InvalidOutputError, match="not computed from x, so it carries no derivative") as info:
        ARRAY_CALLS[call](_cut_off, backend)
    operator = call.split()[-1].removeprefix("value_and_")
    assert str(info.value).startswith(f"{operator} cannot differentiate f with {backend!r}")
    assert "array of shape (3,)" in str(info.value)
    # a constant f computed from x: zeros, as before
    results = ARRAY_CALLS[call](_constant, backend)
    derivative = results[-1] if call.startswith("value_and") else results
    derivative = derivative[0] if isinstance(derivative, tuple) else derivative
    np.testing.assert_array_equal(derivative, np.zeros_like(derivative))


@pytest.mark.parametrize("backend", backend_params(AUTOGRAD))
def test_autograd_second_derivative_of_an_output_traced_by_the_outer_pass_only_is_refused(
    backend: di.AutoAutograd,
) -> None:
    # second_derivative nests two traces: x._value is the outer pass's box, traced by that one only
    def outer_only(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(x._value) if hasattr(x, "_value") else xp.sin(x)

    with pytest.raises(di.InvalidOutputError, match="not computed from x"):
        di.second_derivative(outer_only, backend, S)
    np.testing.assert_allclose(di.second_derivative(lambda x: x * x, backend, S), 2.0)
