"""AutoJAX details: JAX's refusals inside f as di errors, contexts under jit,
what eager JAX lets through."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import di

jax = pytest.importorskip("jax")

JIT = di.AutoJAX(jit=True)
EAGER = di.AutoJAX()


def branch_on_context(x: Any, a: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * x) * a if a > 0.5 else xp.sum(x**3)


def branch_on_x(x: Any, a: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * x) * a if xp.sum(x) > 0 else xp.sum(x**3)


def as_vector(f: Callable[..., Any]) -> Callable[..., Any]:
    def vector(x: Any, a: Any) -> Any:
        return x * f(x, a)

    return vector


X = np.array([1.0, 2.0])
T = (np.array([1.0, 0.0]),)
CALLS: dict[str, Callable[..., Any]] = {
    "gradient": lambda f, b, *c: di.gradient(f, b, X, *c),
    "hessian": lambda f, b, *c: di.hessian(f, b, X, *c),
    "hvp": lambda f, b, *c: di.hvp(f, b, X, T, *c)[0],
    "jacobian": lambda f, b, *c: di.jacobian(as_vector(f), b, X, *c),
    "pushforward": lambda f, b, *c: di.pushforward(as_vector(f), b, X, T, *c)[0],
    "pullback": lambda f, b, *c: di.pullback(as_vector(f), b, X, (np.ones(2),), *c)[0],
    "derivative": lambda f, b, *c: di.derivative(f, b, 1.5, *c),
    "second_derivative": lambda f, b, *c: di.second_derivative(f, b, 1.5, *c),
}


@pytest.mark.parametrize("operator", sorted(CALLS))
def test_an_if_on_a_traced_float_context_names_the_context(operator: str) -> None:
    """Under jit a float context is traced: an if on it raised JAX's raw
    TracerBoolConversionError, pointing into di ("values[0]"). Now an
    InvalidOutputError naming context 1 and the remedies; static=True works."""
    with pytest.raises(di.InvalidOutputError, match="f used context 1 in Python control flow") as caught:
        CALLS[operator](branch_on_context, JIT, di.Constant(1.0))
    assert isinstance(caught.value.__cause__, jax.errors.TracerBoolConversionError)
    message = str(caught.value)
    assert "di.Constant(value, static=True)" in message and "xp.where" in message and "AutoJAX()" in message
    assert "computed from x" not in message and "values[0]" not in message
    expected = CALLS[operator](branch_on_context, EAGER, di.Constant(1.0))
    got = CALLS[operator](branch_on_context, JIT, di.Constant(1.0, static=True))
    np.testing.assert_allclose(got, expected)


@pytest.mark.parametrize("operator", sorted(CALLS))
def test_an_if_on_x_under_jit_is_explained_and_runs_eagerly(operator: str) -> None:
    with pytest.raises(di.InvalidOutputError, match="f used a value computed from x in Python control flow") as caught:
        CALLS[operator](branch_on_x, JIT, di.Constant(1.0))
    assert isinstance(caught.value.__cause__, jax.errors.TracerBoolConversionError)
    assert "xp.where" in str(caught.value) and "AutoJAX() (not compiled)" in str(caught.value)
    # eager AutoJAX runs the if (jacobian's choice of mode used to trace f abstractly, and failed)
    expected = CALLS[operator](branch_on_x, di.AutoFiniteDiff(), di.Constant(1.0))
    np.testing.assert_allclose(CALLS[operator](branch_on_x, EAGER, di.Constant(1.0)), expected, rtol=1e-5, atol=1e-5)


def test_eager_jacobian_of_an_f_branching_on_x() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return x**2 if xp.sum(x) > 0 else x

    np.testing.assert_allclose(di.jacobian(f, EAGER, X), np.diag(2 * X))


def test_float_of_a_float_context_under_jit_blames_the_context_not_x() -> None:
    def f(x: Any, n: int, a: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x[:n] ** 2) * float(a)

    with pytest.raises(di.InvalidOutputError, match="f turned context 2 into a Python number with float") as caught:
        di.gradient(f, JIT, X, di.Constant(2), di.Constant(3.0))  # context 1 is static: 2 is traced
    assert isinstance(caught.value.__cause__, jax.errors.ConcretizationTypeError)
    assert "computed from x" not in str(caught.value)
    g = di.gradient(f, JIT, X, di.Constant(2), di.Constant(3.0, static=True))
    np.testing.assert_allclose(g, 6 * X)


def test_float_of_x_under_jit_still_blames_x() -> None:
    def f(x: Any, a: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**2) * float(xp.sum(x) * a)

    with pytest.raises(di.InvalidOutputError, match="f turned a value computed from x into a Python number"):
        di.gradient(f, JIT, X, di.Constant(1.0))


def test_a_pytree_context_under_jit_traces_floats_and_compiles_ints_and_strings_in() -> None:
    traces = []

    def f(x: Any, o: Any) -> Any:
        traces.append(o["method"])
        assert isinstance(o["n"], int) and isinstance(o["method"], str)
        xp = di.array_namespace(x)
        return xp.sum(x[: o["n"]] ** 2) * o["scale"]

    x = np.arange(12.0)
    prep = di.prepare_gradient(f, JIT, x, di.Constant({"n": 1, "scale": 1.0, "method": "fast"}))
    assert len(traces) == 1
    for scale in (2.0, 3.0):  # a float leaf is traced: the same program
        g = di.gradient(f, prep, JIT, x, di.Constant({"n": 1, "scale": scale, "method": "fast"}))
        np.testing.assert_allclose(g, [0.0] + [0.0] * 11)
    g = di.gradient(f, prep, JIT, x, di.Constant({"n": 3, "scale": 3.0, "method": "fast"}))
    np.testing.assert_allclose(g, [0.0, 6.0, 12.0] + [0.0] * 9)
    assert len(traces) == 2  # a new int leaf: one compile
    di.gradient(f, prep, JIT, x, di.Constant({"n": 3, "scale": 1.0, "method": "slow"}))
    di.gradient(f, prep, JIT, x, di.Constant({"n": 1, "scale": 1.0, "method": "fast"}))
    assert len(traces) == 3  # a new string: one more; the first set again: none


def test_static_leaves_of_a_pytree_context_are_counted_and_named() -> None:
    """Counted from the preparation's value, and named as context 1 in an hvp,
    whose program takes tangents before the contexts (it said context 2)."""

    def f(x: Any, o: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x[: o["n"]] ** 3)

    x, t = np.ones(12), (np.ones(12),)
    prep = di.prepare_hvp(f, JIT, x, t, di.Constant({"n": 1}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        for n in range(2, 9):
            di.hvp(f, prep, JIT, x, t, di.Constant({"n": n}))
    with pytest.warns(di.RecompileWarning, match="context 1's leaves that are not arrays .* 9 distinct values"):
        (hv,) = di.hvp(f, prep, JIT, x, t, di.Constant({"n": 9}))
    np.testing.assert_allclose(hv, [6.0] * 9 + [0.0] * 3)


def test_a_static_context_of_an_hvp_is_named_by_its_own_number() -> None:
    def f(x: Any, n: int) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x[:n] ** 3)

    x, t = np.ones(12), (np.ones(12),)
    prep = di.prepare_hvp(f, JIT, x, t, di.Constant(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        for n in range(2, 9):
            di.hvp(f, prep, JIT, x, t, di.Constant(n))
    with pytest.warns(di.RecompileWarning, match="context 1 is compiled in .* 9 distinct values"):
        di.hvp(f, prep, JIT, x, t, di.Constant(9))


def item_of_a_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**2) * xp.sum(x).item()


def test_item_passes_eager_jax_as_in_jax_grad_and_jit_refuses_it() -> None:
    """docs/faq.md: eager JAX hands .item() the value being differentiated at
    (Tracer.to_concrete_value), as jax.grad does, so the derivative treats it as
    a constant (the true gradient is [26, 38, 50]); jit refuses it, and so does
    eager jacobian's abstract look at f before choosing its mode."""
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(di.gradient(item_of_a_sum, EAGER, x), np.asarray(jax.grad(item_of_a_sum)(x)))
    np.testing.assert_allclose(di.gradient(item_of_a_sum, EAGER, x), 2 * x * 6.0)
    with pytest.raises(di.InvalidOutputError, match=r"computed from x into a Python number with \.item\(\)"):
        di.gradient(item_of_a_sum, JIT, x)
    with pytest.raises(di.InvalidOutputError, match=r"\.item\(\)"):
        di.jacobian(lambda x: x * item_of_a_sum(x), EAGER, x)


def test_a_square_jacobian_under_jit_takes_the_mode_xla_costs_less() -> None:
    """A square jacobian under jit compiles both modes at preparation and keeps the
    one of smaller estimated memory traffic (XLA's cost analysis), saying which in
    prep.info: reverse for the coupled cubic (forward was 4.5x jax.jacrev at n = 1e3,
    its batched jvp splitting XLA's fusions), forward for an elementwise f (both
    estimates tie; reverse there is 10-50x slower). f is traced once per candidate
    at preparation (and once by the shape look before), never by a plain call; the
    results are the forward-mode jacobian's."""
    traced = []

    def coupled_cubic(x: Any) -> Any:
        traced.append(1)
        xp = di.array_namespace(x)
        return x * x * x - x * xp.sum(x * x) / x.shape[0]

    def elementwise(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(x) * x

    x = jax.numpy.asarray(np.random.default_rng(0).uniform(-1.0, 1.0, 100).astype("float32"))
    prep = di.prepare_jacobian(coupled_cubic, JIT, x)
    assert prep.info.program.startswith("jax.jacrev") and "XLA's cost analysis" in prep.info.program
    jacobians = [di.jacobian(coupled_cubic, prep, JIT, x) for _ in range(3)]
    y, jacobian = di.value_and_jacobian(coupled_cubic, prep, JIT, x)
    assert len(traced) == 3 + 1  # the shape look and both candidates; value_and_jacobian's on its first call
    x_np = np.asarray(x, dtype=np.float64)
    expected = np.diag(3 * x_np**2 - np.sum(x_np**2) / 100) - 2 * np.outer(x_np, x_np) / 100
    for result in (*jacobians, jacobian):
        np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y, x_np**3 - x_np * np.sum(x_np**2) / 100, rtol=1e-5, atol=1e-6)
    prep = di.prepare_jacobian(elementwise, JIT, x)
    assert prep.info.program.startswith("jax.jacfwd") and "XLA's cost analysis" in prep.info.program
    np.testing.assert_allclose(
        di.jacobian(elementwise, prep, JIT, x), np.diag(np.cos(x_np) * x_np + np.sin(x_np)), rtol=1e-5, atol=1e-6
    )
    # a mode the caller names is compiled alone
    traced.clear()
    named = di.prepare_jacobian(coupled_cubic, di.AutoJAX(jit=True, mode="forward"), x)
    assert "cost analysis" not in (named.info.program or "") and len(traced) == 1  # (its compile: no shape look)


@pytest.mark.parametrize("reverse", [True, False])
def test_a_hessian_under_jit_times_both_programs_and_names_the_one_it_keeps(
    reverse: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Hessian under jit of at least 64 elements compiles forward over reverse and
    reverse over reverse, times both at preparation (here the timing's verdict is
    given, so the test reads no clock) and keeps the faster, saying which and why in
    prep.info: XLA's cost analysis ties them (the same bytes) where reverse over reverse
    ran in 0.3x (sum(x**2)) to 12x (sum(sin(x) x)) of the other's time. f is traced
    once per candidate; the results are that spelling's, to the last bit."""
    from di.backends import choosing

    timed: list[int] = []

    def verdict(default: Any, other: Any, at_most: float) -> tuple[bool, float]:
        timed.append(1)
        default(), other()  # (both run: the compiled programs, not f)
        return reverse, 0.5 if reverse else 1.5

    monkeypatch.setattr(choosing, "faster_of", verdict)
    traced = []

    def f(x: Any) -> Any:
        traced.append(1)
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x) * x) + xp.sum(x * x) ** 2

    x = jax.numpy.asarray(np.random.default_rng(0).uniform(-1.0, 1.0, 64).astype("float32"))
    prep = di.prepare_hessian(f, JIT, x)
    assert len(traced) == 2 and len(timed) == 1
    spelling = "jacrev(jacrev(f))" if reverse else "jax.hessian"
    assert prep.info.program.startswith(spelling) and "timing both compiled programs" in prep.info.program
    native = jax.jit(jax.jacrev(jax.jacrev(f)) if reverse else jax.hessian(f))
    np.testing.assert_array_equal(di.hessian(f, prep, JIT, x), native(x))
    y, g, hessian = di.value_gradient_and_hessian(f, prep, JIT, x)
    np.testing.assert_allclose(hessian, native(x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(g, jax.grad(f)(x), rtol=1e-6)
    np.testing.assert_allclose(y, f(x), rtol=1e-6)


def test_a_hessian_is_not_timed_small_eager_or_calling_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below 64 elements, eager, or where f calls back into Python (which the timing
    would run at preparation), the Hessian is jax.hessian alone, with nothing timed."""
    from di.backends import choosing

    timed: list[int] = []

    def never(default: Any, other: Any, at_most: float) -> tuple[bool, float]:
        timed.append(1)
        return True, 0.5

    monkeypatch.setattr(choosing, "faster_of", never)
    traced, called_back = [], []

    def f(x: Any) -> Any:
        traced.append(1)
        return jax.numpy.sum(x**3)

    def reported(x: Any) -> Any:
        jax.debug.callback(lambda value: called_back.append(value), x[0])
        return jax.numpy.sum(x**3)

    small = jax.numpy.linspace(0.0, 1.0, 63, dtype="float32")
    large = jax.numpy.linspace(0.0, 1.0, 64, dtype="float32")
    for function, backend, x in ((f, JIT, small), (f, EAGER, large), (reported, JIT, large)):
        traced.clear()
        prep = di.prepare_hessian(function, backend, x)
        assert prep.info.program is None and len(traced) <= 1 and not called_back and not timed
        np.testing.assert_allclose(di.hessian(function, prep, backend, x), np.diag(6 * np.asarray(x)), atol=1e-5)
    assert called_back  # (the callback runs in the calls)
