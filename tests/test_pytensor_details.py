"""PyTensor in detail: operators against analytic derivatives and PyTensor's own
compiled ``pytensor.gradient`` functions, its namespace, its compile semantics
(counted compiles, never timings), its refusals, and ``DifferentiateWith`` in both
directions against the outer engine differentiating the same ``f`` natively.

Most tests use ``FAST_COMPILE`` (milliseconds to compile); one runs PyTensor's
default mode (Numba).
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pytest

import di

pytensor = pytest.importorskip("pytensor")
pt = pytest.importorskip("pytensor.tensor")
gradient_module = pytest.importorskip("pytensor.gradient")

from di.engines.pytensor import graphs  # noqa: E402

FAST = di.AutoPyTensor(mode="FAST_COMPILE")
X = np.array([0.3, -1.2, 0.7])
T = np.array([1.0, 0.5, -2.0])


def scalar(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * xp.exp(x))


def vector(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.concat([xp.sin(x), x[:2] * x[1:]])


def curve(t: Any) -> Any:
    xp = di.array_namespace(t)
    return xp.stack([xp.sin(t), t**3])


def scalar_gradient(x: np.ndarray) -> np.ndarray:
    return np.exp(x) * (np.sin(x) + np.cos(x))


def scalar_hessian(x: np.ndarray) -> np.ndarray:
    return np.diag(2 * np.exp(x) * np.cos(x))


def vector_jacobian(x: np.ndarray) -> np.ndarray:
    jac = np.zeros((5, 3))
    jac[:3] = np.diag(np.cos(x))
    jac[3, 0], jac[3, 1], jac[4, 1], jac[4, 2] = x[1], x[0], x[2], x[1]
    return jac


def native(expression: Any, x_var: Any, *inputs: Any) -> Any:
    """A compiled PyTensor function of a graph written with pytensor.gradient."""
    return pytensor.function([x_var, *inputs], expression, mode="FAST_COMPILE")


# --- operators: analytic and native --------------------------------------------------------


def test_first_order_operators_match_analytic_and_native_pytensor() -> None:
    x_var = pt.tensor("x", dtype="float64", shape=(3,))
    y = scalar(x_var)
    np.testing.assert_allclose(di.gradient(scalar, FAST, X), scalar_gradient(X), rtol=1e-13)
    np.testing.assert_allclose(
        di.gradient(scalar, FAST, X), native(gradient_module.grad(y, x_var), x_var)(X), rtol=1e-14
    )
    value, grad = di.value_and_gradient(scalar, FAST, X)
    assert value.shape == () and np.isclose(value, np.sum(np.sin(X) * np.exp(X)))
    np.testing.assert_allclose(grad, scalar_gradient(X), rtol=1e-13)

    jac = di.jacobian(vector, FAST, X)
    np.testing.assert_allclose(jac, vector_jacobian(X), rtol=1e-13)
    v = vector(x_var)
    reference = native(gradient_module.jacobian(v, x_var, vectorize=True), x_var)(X)
    np.testing.assert_allclose(jac, reference, rtol=1e-14)

    (dy, dy2) = di.pushforward(vector, FAST, X, (T, 2 * T))  # batched tangents
    np.testing.assert_allclose(dy, vector_jacobian(X) @ T, rtol=1e-13)
    np.testing.assert_allclose(dy2, 2 * vector_jacobian(X) @ T, rtol=1e-13)
    t_var = pt.tensor("t", dtype="float64", shape=(3,))
    rop = native(gradient_module.Rop(v, x_var, t_var), x_var, t_var)(X, T)
    np.testing.assert_allclose(dy, rop, rtol=1e-14)

    w = np.arange(5.0)
    (dx,) = di.pullback(vector, FAST, X, (w,))
    np.testing.assert_allclose(dx, w @ vector_jacobian(X), rtol=1e-13)
    w_var = pt.tensor("w", dtype="float64", shape=(5,))
    lop = native(gradient_module.Lop(v, x_var, w_var), x_var, w_var)(X, w)
    np.testing.assert_allclose(dx, lop, rtol=1e-14)

    t0 = np.array(0.4)
    np.testing.assert_allclose(di.derivative(curve, FAST, t0), [np.cos(0.4), 3 * 0.4**2], rtol=1e-13)
    np.testing.assert_allclose(di.second_derivative(curve, FAST, t0), [-np.sin(0.4), 6 * 0.4], rtol=1e-13)


def test_second_order_operators_match_analytic_and_native_pytensor() -> None:
    x_var = pt.tensor("x", dtype="float64", shape=(3,))
    y = scalar(x_var)
    hessian = di.hessian(scalar, FAST, X)
    np.testing.assert_allclose(hessian, scalar_hessian(X), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(hessian, native(gradient_module.hessian(y, x_var), x_var)(X), rtol=1e-14)
    (hv,) = di.hvp(scalar, FAST, X, (T,))
    np.testing.assert_allclose(hv, scalar_hessian(X) @ T, rtol=1e-13)
    t_var = pt.tensor("t", dtype="float64", shape=(3,))
    reference = native(gradient_module.hessian_vector_product(y, x_var, t_var), x_var, t_var)(X, T)
    np.testing.assert_allclose(hv, reference, rtol=1e-14)
    value, grad, hess = di.value_gradient_and_hessian(scalar, FAST, X)
    assert np.isclose(value, np.sum(np.sin(X) * np.exp(X)))
    np.testing.assert_allclose(grad, scalar_gradient(X), rtol=1e-13)
    np.testing.assert_allclose(hess, hessian, rtol=1e-14)


def test_the_default_mode_runs_the_compiled_program_directly_with_the_functions_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PyTensor's default linker (Numba in 3.0) compiles and agrees, and its compiled
    program is called without pytensor.function's Python around it
    (di.engines.pytensor.direct): this fails when PyTensor's JIT linker changes the
    layout it reads, and the fallback (the function's own call) takes over."""
    from di.engines.pytensor.direct import direct_call

    backend = di.AutoPyTensor()
    prep = di.prepare_pushforward(vector, backend, X, (T,))
    (entry,) = prep.programs["pushforward"].compiled.values()
    assert entry.direct is not None
    through_function: list[Any] = []
    function = entry.function
    monkeypatch.setattr(entry, "function", lambda *args: through_function.append(args) or function(*args))
    first = di.pushforward(vector, prep, backend, X, (T,))
    second = di.pushforward(vector, prep, backend, 2 * X, (T,))
    np.testing.assert_allclose(first[0], vector_jacobian(X) @ T, rtol=1e-13)
    np.testing.assert_allclose(second[0], vector_jacobian(2 * X) @ T, rtol=1e-13)
    assert not np.shares_memory(first[0], second[0])  # each call's own output, as the function's call returns
    assert through_function == []
    monkeypatch.setattr(entry, "direct", None)  # the fallback: the function's call, the same results
    np.testing.assert_allclose(di.pushforward(vector, prep, backend, X, (T,))[0], first[0], rtol=0)
    assert len(through_function) == 1
    fast_compile = pytensor.function([x_var := pt.vector("x")], [2 * x_var], mode="FAST_COMPILE")
    assert direct_call(fast_compile) is None  # another linker: the function's own call
    scale = pytensor.shared(np.array(2.0))
    with_shared = pytensor.function([x_var], [scale * x_var])  # (the default linker)
    assert direct_call(with_shared) is None  # an implicit input, the shared value: the function passes it
    assert direct_call(pytensor.function([x_var], [3.0 * x_var])) is not None


def test_an_error_inside_the_direct_program_is_pytensors_own() -> None:
    from pytensor.raise_op import Assert

    def checked(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(Assert("x must stay below 10")(x, xp.all(x < 10.0)) ** 2)

    backend = di.AutoPyTensor()
    prep = di.prepare_gradient(checked, backend, X)
    assert next(iter(prep.programs["gradient"].compiled.values())).direct is not None
    np.testing.assert_allclose(di.gradient(checked, prep, backend, X), 2 * X)
    with pytest.raises(AssertionError, match="x must stay below 10"):
        di.gradient(checked, prep, backend, X + 20.0)


def test_pytree_x_aux_and_float32() -> None:
    def loss(params: Any) -> Any:
        xp = di.array_namespace(params["w"])
        return xp.sum(params["w"] ** 2) * params["b"], {"b": params["b"] * 1.0, "note": "seen"}

    params = {"w": np.array([1.0, 2.0]), "b": np.array(3.0)}
    grad, aux = di.gradient(loss, FAST, params, has_aux=True)
    np.testing.assert_allclose(grad["w"], [6.0, 12.0])
    np.testing.assert_allclose(grad["b"], 5.0)
    assert aux["note"] == "seen" and np.asarray(aux["b"]) == 3.0

    x32 = X.astype(np.float32)
    g32 = di.gradient(lambda x: di.array_namespace(x).sum(x * 0.1 + x**2), FAST, x32)
    assert g32.dtype == np.float32  # a Python float in f takes x's precision (floatX follows x)
    np.testing.assert_allclose(g32, 0.1 + 2 * x32, rtol=1e-6)


def test_a_float32_pullback_takes_its_cotangent_in_float32_where_pytensor_upcasts_y() -> None:
    """``x / x.shape[0]`` with a float32 ``x`` of 1e5 elements is float64 in
    PyTensor (the int32 length upcasts it): the compiled pullback takes the
    cotangent in x's dtype, as the native spelling does, so no call converts it
    (the cotangent once went in as float64: 2.2x the native call at n = 1e5)."""

    def upcast(x: Any) -> Any:
        xp = di.array_namespace(x)
        return x * x * x - x * xp.sum(x * x) / x.shape[0]

    n = 100_000
    x = np.linspace(0.1, 1.0, n).astype(np.float32)
    w = np.linspace(-1.0, 1.0, n).astype(np.float32)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    expected = 3 * x64**2 * w64 - (x64 @ x64) / n * w64 - 2 * x64 * (x64 @ w64) / n
    prep = di.prepare_pullback(upcast, FAST, x, (w,))
    (entry,) = prep.programs["pullback"].compiled.values()
    assert [str(d) for d in entry.tangent_dtypes] == ["float32"]
    value, (first,) = di.value_and_pullback(upcast, FAST, x, (w,))
    assert value.dtype == np.float64  # PyTensor's own output dtype, kept
    (prepared,) = di.pullback(upcast, prep, FAST, x, (w,))
    (in_y_dtype,) = di.pullback(upcast, FAST, x, (w64,))  # a cotangent in y's dtype: cast, the same result
    for dx in (first, prepared, in_y_dtype):
        assert dx.dtype == np.float32
        np.testing.assert_allclose(dx, expected, rtol=2e-5, atol=2e-6)


# --- the namespace --------------------------------------------------------------------------


def test_the_namespace_maps_the_array_api_onto_pytensor() -> None:
    x_var = pt.tensor("x", dtype="float64", shape=(3,))
    xp = di.array_namespace(x_var)
    assert xp.__name__ == "di.engines.pytensor.namespace"
    assert di.array_namespace(x_var, np.ones(3)) is xp  # NumPy arrays mix with the variables
    expression = xp.sum(xp.concat([xp.multiply(x_var, 2.0), xp.permute_dims(xp.reshape(x_var, (3, 1)), (1, 0))[0]]))
    value = expression.eval({x_var: X})
    np.testing.assert_allclose(value, 3 * X.sum())

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.where(x > 0, xp.square(x), xp.negative(x))) + xp.max(xp.atan(x))

    expected = np.where(X > 0, 2 * X, -1.0)
    expected[np.argmax(np.arctan(X))] += 1 / (1 + X[np.argmax(np.arctan(X))] ** 2)
    np.testing.assert_allclose(di.gradient(f, FAST, X), expected, rtol=1e-13)


# --- compile semantics ----------------------------------------------------------------------


class Counting:
    def __init__(self, f: Any) -> None:
        self.f, self.calls = f, 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.f(*args)


def weighted(x: Any, a: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(a * x**2)


def test_f_runs_once_per_signature_and_traced_constants_are_read() -> None:
    f = Counting(weighted)
    prep = di.prepare_gradient(f, FAST, X, di.Constant(np.ones(3)))
    assert f.calls == 1  # applied once, to symbolic inputs, at preparation
    for scale in (1.0, 2.0, 3.0):
        np.testing.assert_allclose(di.gradient(f, prep, FAST, X, di.Constant(scale * np.ones(3))), 2 * scale * X)
    assert f.calls == 1  # a new Constant value is an input of the compiled function
    # a float Constant is traced too: no compile per value
    f_float = Counting(weighted)
    prep = di.prepare_gradient(f_float, FAST, X, di.Constant(2.0))
    for scale in (2.0, 5.0):
        np.testing.assert_allclose(di.gradient(f_float, prep, FAST, X, di.Constant(scale)), 2 * scale * X)
    assert f_float.calls == 1
    # a non-strict prep compiles once per new shape
    loose = di.prepare_gradient(f, FAST, X, di.Constant(np.ones(3)), strict=False)
    f.calls = 0
    di.gradient(f, loose, FAST, np.ones(4), di.Constant(np.ones(4)))
    di.gradient(f, loose, FAST, 2 * np.ones(4), di.Constant(np.ones(4)))
    assert f.calls == 1


def test_a_constant_compiled_in_is_part_of_the_signature() -> None:
    f = Counting(weighted)
    weights = np.array([1.0, 2.0, 3.0])
    prep = di.prepare_gradient(f, FAST, X, di.Constant(weights, static=True))
    np.testing.assert_allclose(di.gradient(f, prep, FAST, X, di.Constant(weights, static=True)), 2 * weights * X)
    assert f.calls == 1
    other = 2 * weights  # another value compiles again (it is a constant of the graph), never read stale
    np.testing.assert_allclose(di.gradient(f, prep, FAST, X, di.Constant(other, static=True)), 2 * other * X)
    assert f.calls == 2
    di.gradient(f, prep, FAST, X, di.Constant(weights, static=True))
    assert f.calls == 2  # compiled once per value


def test_a_retrace_storm_warns_then_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graphs, "COMPILE_LIMIT", 10)

    def power(x: Any, k: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**k)

    prep = di.prepare_gradient(power, FAST, X, di.Constant(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(2, 10):
            di.gradient(power, prep, FAST, X, di.Constant(k))
    assert any(issubclass(w.category, di.RecompileWarning) for w in caught)
    with pytest.raises(di.RecompileLimitError, match="10 different signatures"), warnings.catch_warnings():
        warnings.simplefilter("ignore", di.RecompileWarning)
        for k in range(10, 14):
            di.gradient(power, prep, FAST, X, di.Constant(k))


# --- refusals -------------------------------------------------------------------------------


def test_python_control_flow_on_x_is_refused_naming_the_graph_fixes() -> None:
    def branchy(x: Any) -> Any:
        return x[0] * 2 if x[0] > 0 else x[0]

    with pytest.raises(di.InvalidOutputError, match=r"pytensor\.ifelse") as raised:
        di.gradient(branchy, FAST, X)
    assert "AutoPyTensor" in str(raised.value) and "xp.where" in str(raised.value)


def test_cache_float_and_complex_are_refused_clearly() -> None:
    with pytest.raises(di.UnsupportedContextError, match="symbolic variables"):
        di.gradient(lambda x, c: (x**2).sum(), FAST, X, di.Cache(np.zeros(3)))
    with pytest.raises(di.InvalidOutputError, match=r"float\(\)"):
        di.jacobian(lambda x: x * float(x[0]), FAST, X)
    with pytest.raises(di.UnsupportedOperatorError, match="complex x"):
        di.gradient(scalar, FAST, X.astype(np.complex128))
    with pytest.raises(di.InvalidOptionError, match="modes"):
        di.AutoPyTensor(mode="fast")


# --- the recursion limit ------------------------------------------------------------------------


def test_the_recursion_limit_is_raised_only_while_a_graph_is_built() -> None:
    # a fresh interpreter: di's import of PyTensor is the first (this one's raised the limit already)
    script = """
import json, sys
import numpy as np
import di
seen = []

def energy(x):
    seen.append(sys.getrecursionlimit())
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) ** 2)

before = sys.getrecursionlimit()
backend = di.AutoPyTensor(mode="FAST_COMPILE")
prep = di.prepare_gradient(energy, backend, np.array([0.5, 1.0]))
after_prepare = sys.getrecursionlimit()
g = di.gradient(energy, prep, backend, np.array([0.5, 1.0]))
print(json.dumps({"before": before, "inside": seen, "after": [after_prepare, sys.getrecursionlimit()],
                  "pytensor": "pytensor" in sys.modules, "g": g.tolist()}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["pytensor"] and report["before"] < 3000
    assert report["inside"] and all(limit == 3000 for limit in report["inside"])  # PyTensor's own, while f builds
    assert report["after"] == [report["before"]] * 2  # put back: PyTensor's import raised it for good
    np.testing.assert_allclose(report["g"], np.sin(2 * np.array([0.5, 1.0])), rtol=1e-12)


def test_a_limit_set_above_pytensors_is_kept() -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(5000)
    try:
        seen = []

        def energy(x: Any) -> Any:
            seen.append(sys.getrecursionlimit())
            return di.array_namespace(x).sum(x**2)

        np.testing.assert_allclose(di.gradient(energy, FAST, np.array([2.0, 5.0])), [4.0, 10.0])
        assert seen == [5000] and sys.getrecursionlimit() == 5000
    finally:
        sys.setrecursionlimit(limit)


# --- DifferentiateWith: PyTensor outside ------------------------------------------------------


def wave(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sin(x) * x + x**2


def calling(g: Any) -> Any:
    def outer(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.tanh(g(x)) * 3.0)

    return outer


@pytest.mark.parametrize("inner", ["jax", "torch", "autograd"])
def test_g_as_a_pytensor_op_matches_pytensor_differentiating_f_natively(inner: str) -> None:
    pytest.importorskip(inner)
    g = di.DifferentiateWith(wave, di.backend(inner))
    for operator in (di.gradient, di.hessian):
        if operator is di.hessian:
            with pytest.raises(di.UnsupportedOperatorError, match="second derivative through g"):
                operator(calling(g), FAST, X)
            continue
        np.testing.assert_allclose(operator(calling(g), FAST, X), operator(calling(wave), FAST, X), rtol=1e-12)
    (forward,) = di.pushforward(g, FAST, X, (T,))  # the Op's pushforward: the inner pushforward
    np.testing.assert_allclose(forward, di.pushforward(wave, FAST, X, (T,))[0], rtol=1e-12)


def test_pytensor_grad_of_a_graph_holding_g() -> None:
    """PyTensor's own transforms compose with g: pytensor.grad, Lop and Rop of a graph
    a user builds around it."""
    g = di.DifferentiateWith(wave, di.AutoTorch() if _has("torch") else di.AutoFiniteDiff())
    x_var = pt.tensor("x", dtype="float64", shape=(3,))
    t_var = pt.tensor("t", dtype="float64", shape=(3,))
    cost = pt.sum(g(x_var) ** 2)
    graph = gradient_module.grad(cost, x_var)
    rop = gradient_module.Rop(g(x_var), x_var, t_var)
    compiled = pytensor.function([x_var, t_var], [graph, rop], mode="FAST_COMPILE")
    got_grad, got_rop = compiled(X, T)
    reference = pytensor.function(
        [x_var, t_var],
        [gradient_module.grad(pt.sum(wave(x_var) ** 2), x_var), gradient_module.Rop(wave(x_var), x_var, t_var)],
        mode="FAST_COMPILE",
    )(X, T)
    np.testing.assert_allclose(got_grad, reference[0], rtol=1e-6)
    np.testing.assert_allclose(got_rop, reference[1], rtol=1e-6)


# --- DifferentiateWith: PyTensor inside --------------------------------------------------------


def test_pytensor_as_the_inner_backend_inside_jax_torch_and_autograd() -> None:
    g = di.DifferentiateWith(wave, FAST)
    expected = np.asarray(di.gradient(calling(wave), FAST, X))
    if _has("jax"):
        import jax
        import jax.numpy as jnp

        with jax.enable_x64(True):
            got = jax.grad(calling(g))(jnp.asarray(X))
            np.testing.assert_allclose(np.asarray(got), np.asarray(jax.grad(calling(wave))(jnp.asarray(X))))
            np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12)
    if _has("torch"):
        import torch

        x = torch.tensor(X, requires_grad=True)
        calling(g)(x).backward()
        reference = torch.tensor(X, requires_grad=True)
        calling(wave)(reference).backward()
        torch.testing.assert_close(x.grad, reference.grad)
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)
    if _has("autograd"):
        import autograd

        got = autograd.grad(calling(g))(X)
        np.testing.assert_allclose(got, autograd.grad(calling(wave))(X), rtol=1e-12)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# --- strategies over PyTensor --------------------------------------------------------------------


def energy(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**4) / 4 + x[0] * x[1]


def test_second_order_pairs_over_pytensor() -> None:
    """PyTensor as the inner backend of SecondOrder (an outer engine that only evaluates its
    compiled gradient); never as the outer one (its graph cannot take another engine's program:
    the adapter declares ``differentiates="none"``, which SecondOrder reads)."""
    x = np.array([1.0, 2.0])
    hessian = np.array([[3.0, 1.0], [1.0, 12.0]])
    x_var = pt.tensor("x", dtype="float64", shape=(2,))
    native_hessian = native(gradient_module.hessian(energy(x_var), x_var), x_var)(x)
    np.testing.assert_allclose(native_hessian, hessian, rtol=1e-12)
    pair = di.SecondOrder(di.AutoFiniteDiff(), FAST)
    np.testing.assert_allclose(di.hessian(energy, pair, x), native_hessian, rtol=1e-5, atol=1e-6)
    (hv,) = di.hvp(energy, pair, x, (np.array([1.0, 0.0]),))
    np.testing.assert_allclose(hv, native_hessian[:, 0], rtol=1e-5, atol=1e-6)
    from di.backends.registry import get_adapter

    # (SecondOrder's refusal of PyTensor as the outer backend is tested with every other unsupported
    # pair in tests/test_second_order.py: building its message imports every engine, TensorFlow too)
    assert get_adapter(FAST).capabilities.differentiates == "none"


def test_sparse_and_fastest_over_pytensor() -> None:
    def chain(x: Any) -> Any:
        xp = di.array_namespace(x)
        return x[1:] * x[:-1] + xp.sin(x[1:])

    x = np.linspace(0.0, 1.0, 6)
    x_var = pt.tensor("x", dtype="float64", shape=(6,))
    dense = native(gradient_module.jacobian(chain(x_var), x_var), x_var)(x)  # PyTensor's own Jacobian
    sparse = di.jacobian(chain, di.AutoSparse(FAST), x)
    assert sparse.nnz == 10
    np.testing.assert_allclose(sparse.toarray(), dense, rtol=1e-12)
    sparse_hessian = di.hessian(energy, di.AutoSparse(FAST), np.array([1.0, 2.0]))
    np.testing.assert_allclose(sparse_hessian.toarray(), [[3.0, 1.0], [1.0, 12.0]], rtol=1e-12)
    fastest = di.AutoFastest(candidates=[FAST, di.AutoFiniteDiff()], budget_s=0.05)
    prep = di.prepare_gradient(energy, fastest, np.array([1.0, 2.0]))
    np.testing.assert_allclose(di.gradient(energy, prep, fastest, np.array([1.0, 2.0])), [3.0, 9.0], rtol=1e-6)
    from di.backends.selectors import engine_of

    assert engine_of(FAST).fastest == ("pytensor(mode='FAST_COMPILE')",)  # what AutoFastest measures by default


@pytest.mark.parametrize("scan", [True, False])
def test_a_large_jacobian_times_both_graphs_and_names_the_one_it_keeps(
    scan: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From MEASURED_MIN_SIZE elements (256; 8 here, to keep the test fast) the Jacobian
    compiles PyTensor's vectorized pullbacks and a scan of pullbacks, times both at
    preparation (the verdict is given here: the test reads no clock) and keeps the
    faster, saying which in prep.info; smaller x and an f with aux build the
    vectorized graph alone. The results are the Jacobian either way."""
    from di.backends import choosing
    from di.engines.pytensor import jacobians

    timed: list[int] = []

    def verdict(default: Any, other: Any, at_most: float) -> tuple[bool, float]:
        timed.append(1)
        np.testing.assert_allclose(other(), default(), rtol=1e-6)  # (both graphs, at x)
        return scan, 0.5 if scan else 1.5

    monkeypatch.setattr(choosing, "faster_of", verdict)
    monkeypatch.setattr(jacobians, "MEASURED_MIN_SIZE", 8)

    def cubic(x: Any) -> Any:
        xp = di.array_namespace(x)
        return x * x * x - x * xp.sum(x * x) / x.shape[0]

    x = np.random.default_rng(0).uniform(-1.0, 1.0, 8)
    expected = np.diag(3 * x**2 - np.sum(x**2) / 8) - 2 * np.outer(x, x) / 8
    prep = di.prepare_jacobian(cubic, FAST, x)
    assert len(timed) == 1
    assert prep.info.program.startswith(f"pytensor.gradient.jacobian(vectorize={not scan})")
    assert "timing both compiled programs" in prep.info.program
    np.testing.assert_allclose(di.jacobian(cubic, prep, FAST, x), expected, rtol=1e-12, atol=1e-14)
    y, jacobian = di.value_and_jacobian(cubic, prep, FAST, x)
    np.testing.assert_allclose(jacobian, expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(y, cubic(x), rtol=1e-14)
    timed.clear()
    for small_or_aux in (
        di.prepare_jacobian(cubic, FAST, x[:7]),
        di.prepare_jacobian(lambda x: (cubic(x), {"n": 1}), FAST, x, has_aux=True),
    ):
        assert small_or_aux.info.program is None
    assert not timed
