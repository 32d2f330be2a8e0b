"""MLX's engine in detail: its operators against analytic derivatives and MLX's own
transforms, its array family and namespace, its compiled semantics (traces
counted), ``DifferentiateWith`` in both directions, and ``di`` inside MLX's own
transforms (``mx.grad``, ``mx.vmap``, ``mx.compile``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from transform_cases import OPERATORS, T, X, appliers, compositions, curve, di_function, prepare, scalar, vector

import di
from di.backends.registry import get_adapter
from di.families import family_of, get_family

mx = pytest.importorskip("mlx.core")


pytestmark = pytest.mark.usefixtures("mlx_compiling")  # (compilation is off elsewhere in the suite)


EAGER, COMPILED = di.AutoMLX(), di.AutoMLX(compile=True)
BOTH = [pytest.param(EAGER, id="mlx"), pytest.param(COMPILED, id="mlx-compile")]


def sin_x(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x)


def close(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    np.testing.assert_allclose(np.array(actual, dtype=np.float64), np.asarray(expected), rtol=rtol, atol=atol)


# --- operators: analytic derivatives, MLX's own calls, families and dtypes -----------------------


@pytest.mark.parametrize("backend", BOTH)
def test_operators_against_analytic_derivatives_in_float64(backend: di.AbstractBackend) -> None:
    x = np.array([0.3, -1.2, 2.5])
    gradient = np.cos(x) * x + np.sin(x)
    hessian = np.diag(2 * np.cos(x) - np.sin(x) * x)
    assert di.gradient(sin_x, backend, x).dtype == np.float64  # float64 kept, never truncated
    close(di.gradient(sin_x, backend, x), gradient)
    close(di.hessian(sin_x, backend, x), hessian)
    close(di.hvp(sin_x, backend, x, (T,))[0], hessian @ T)
    jac = di.jacobian(lambda x: di.array_namespace(x).sin(x) * x, backend, x)
    close(jac, np.diag(gradient))
    close(di.pushforward(lambda x: di.array_namespace(x).sin(x) * x, backend, x, (T,))[0], gradient * T)
    close(di.pullback(lambda x: di.array_namespace(x).sin(x) * x, backend, x, (T,))[0], gradient * T)
    close(di.derivative(curve, backend, 0.7), [np.cos(0.7) * 0.7 + np.sin(0.7), 3 * 0.49])
    close(di.second_derivative(curve, backend, 0.7), [2 * np.cos(0.7) - np.sin(0.7) * 0.7, 6 * 0.7])


@pytest.mark.parametrize("backend", BOTH)
def test_operators_agree_with_mlx_own_transforms_in_mlx_arrays(backend: di.AbstractBackend) -> None:
    x, t = mx.array(X, dtype=mx.float32), mx.array(T, dtype=mx.float32)

    def native_vector(x: Any) -> Any:
        return mx.sin(x) * x

    g = di.gradient(sin_x, backend, x)
    assert isinstance(g, mx.array) and g.dtype == mx.float32  # MLX in, MLX out
    close(g, mx.grad(lambda x: mx.sum(mx.sin(x) * x))(x))
    value, g = di.value_and_gradient(sin_x, backend, x)
    close(value, mx.sum(mx.sin(x) * x))
    close(di.pushforward(vector, backend, x, (t,))[0], mx.jvp(native_vector, [x], [t])[1][0])
    close(di.pullback(vector, backend, x, (t,))[0], mx.vjp(native_vector, [x], [t])[1][0])
    grad = mx.grad(lambda x: mx.sum(mx.sin(x) * x))
    close(di.hvp(sin_x, backend, x, (t,))[0], mx.jvp(grad, [x], [t])[1][0])
    rows = mx.vmap(lambda c: mx.vjp(native_vector, [x], [c])[1][0])(mx.eye(3))
    close(di.jacobian(vector, backend, x), rows)


@pytest.mark.parametrize("backend", BOTH)
def test_second_order_through_a_primitive_without_a_jvp_falls_back_to_reverse_mode(
    backend: di.AbstractBackend,
) -> None:
    # MLX has no JVP of cumulative products ("JVP is not implemented for cumulative prod/min/max"):
    # forward over reverse is refused, and reverse over reverse gives the same products
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.cumulative_prod(x))

    x, t = np.array([0.5, 1.5, 2.0]), np.array([1.0, 0.3, -0.7])
    a, b, c = x
    expected = np.array([[0.0, 1.0 + c, b], [1.0 + c, 0.0, a], [b, a, 0.0]])  # f = a + ab + abc
    close(di.hessian(f, backend, x), expected)
    (hv,) = di.hvp(f, backend, x, (t,))
    close(hv, expected @ t)


def test_batched_tangents_pytree_x_has_aux_and_contexts() -> None:
    for backend in (EAGER, COMPILED):
        tangents = (T, 2 * T, -T)
        products = di.pushforward(vector, backend, X, tangents)
        for t, product in zip(tangents, products):
            close(product, (np.cos(X) * X + np.sin(X)) * t)
        params = {"w": np.array([0.5, -1.0]), "b": np.array(0.25)}
        data = np.array([[1.0, 2.0], [3.0, -1.0]])

        def loss(p: Any, data: Any) -> Any:
            xp = di.array_namespace(p["w"])
            return xp.sum(xp.tanh(data @ p["w"] + p["b"]) ** 2)

        g = di.gradient(loss, backend, params, di.Constant(data))
        z = np.tanh(data @ params["w"] + params["b"])
        inner = 2 * z * (1 - z**2)
        close(g["w"], data.T @ inner)
        close(g["b"], inner.sum())

        def with_aux(x: Any) -> Any:
            xp = di.array_namespace(x)
            return xp.sum(x**2), {"norm": xp.sqrt(xp.sum(x**2)), "note": "ok"}

        g, aux = di.gradient(with_aux, backend, X, has_aux=True)
        close(g, 2 * X)
        assert aux["note"] == "ok" and isinstance(aux["norm"], np.ndarray)
        close(aux["norm"], np.linalg.norm(X))
        (products, aux) = di.pullback(lambda x: (vector(x), x[0]), backend, X, (T,), has_aux=True)
        close(aux, X[0])


@pytest.mark.parametrize("backend", BOTH)
def test_cache_is_written_and_traced(backend: di.AbstractBackend) -> None:
    def cached(x: Any, buffer: Any) -> Any:
        xp = di.array_namespace(x)
        buffer[...] = xp.sin(x)
        return xp.sum(buffer * x)

    buffer = np.zeros(3)
    close(di.gradient(cached, backend, X, di.Cache(buffer)), np.cos(X) * X + np.sin(X))
    close(buffer, np.sin(X))  # f's last write lands in the caller's buffer


def test_complex64_x_follows_the_convention_and_complex128_is_refused_clearly() -> None:
    def real_sin(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.real(xp.sum(xp.sin(x)))

    z = np.array([1.0 + 1.0j, 2.0 - 0.5j], np.complex64)
    np.testing.assert_allclose(di.gradient(real_sin, EAGER, z), np.conj(np.cos(z)), rtol=1e-5)
    with pytest.raises(di.UnsupportedOperatorError, match="complex64"):
        di.gradient(real_sin, EAGER, z.astype(np.complex128))


# --- family and namespace ---------------------------------------------------------------------------


def test_family_detects_converts_and_keeps_dtypes() -> None:
    family = get_family("mlx")
    for dtype, mlx_dtype in ((np.float64, mx.float64), (np.float32, mx.float32), (np.float16, mx.float16)):
        array = family.from_numpy(np.arange(3, dtype=dtype))
        assert family_of(array) == "mlx" and array.dtype == mlx_dtype
        back = family.to_numpy(array)
        assert back.dtype == dtype and back.flags.writeable
    out = mx.zeros(3)
    assert family.write_out(out, mx.ones(3)) is out and out.tolist() == [1.0, 1.0, 1.0]
    assert family.describe_dtype(mx.float64) == "float64"
    assert not family.takes_dtype(np.longdouble) and family.takes_dtype(np.float64)


def test_dlpack_shares_mlx_arrays_with_torch() -> None:
    torch = pytest.importorskip("torch")
    x = mx.array([1.0, 2.0, 3.0])
    g = di.gradient(sin_x, di.AutoTorch(), x)
    assert isinstance(g, mx.array)
    close(g, np.cos(X * 0 + [1, 2, 3]) * [1, 2, 3] + np.sin([1, 2, 3]))
    assert torch.from_dlpack(get_family("mlx").dlpack_source(x)).tolist() == [1.0, 2.0, 3.0]


def test_namespace_is_mlx_with_a_dtype_keeping_asarray() -> None:
    xp = di.array_namespace(mx.ones(2))
    assert xp.sin is mx.sin and xp.concat is mx.concat
    assert xp.asarray(np.zeros(2)).dtype == mx.float64  # mx.array(...) alone would truncate to float32
    close(xp.hypot(mx.array([3.0]), mx.array([4.0])), [5.0])
    seen = []

    def f(x: Any) -> Any:
        seen.append(di.array_namespace(x))
        return mx.sum(x)

    mx.grad(f)(mx.ones(2))  # traced values get the same namespace
    assert seen[0] is xp


def test_reductions_of_an_empty_array_agree_with_numpy_without_running_mlxs_reduction() -> None:
    # MLX's CPU reduction of an empty axis of a non-contiguous array reads past its plan:
    # `mx.sum(mx.zeros((0, 4)).T, axis=1)` hangs or answers garbage, as an AutoSparse test
    # of an empty x did now and then. The namespace answers these without it.
    xp = di.array_namespace(mx.ones(2))
    empty = np.zeros((0, 4))
    for name in ("sum", "prod", "mean", "var", "std", "all", "any", "count_nonzero"):
        for axis in (None, 0, 1, (0, 1)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's mean of nothing
                expected = getattr(np, name)(empty.T, axis=axis)
            result = getattr(xp, name)(xp.asarray(empty).T, axis=axis)
            assert result.shape == np.shape(expected), (name, axis)
            np.testing.assert_array_equal(np.array(result), expected)
    assert xp.sum(mx.zeros((0,), dtype=mx.int32)).dtype == mx.int32
    close(xp.linalg.vector_norm(xp.asarray(empty).T, axis=1), np.zeros(4))
    close(xp.linalg.matrix_norm(xp.asarray(empty)), 0.0)
    gradient = mx.grad(lambda x: xp.sum(xp.sum(x.T, axis=1) + 1.0))(mx.zeros((0, 4), dtype=mx.float64))
    assert gradient.shape == (0, 4) and gradient.dtype == mx.float64


# --- compiled semantics: traces counted ---------------------------------------------------------------


def test_compiled_programs_trace_once_per_signature_with_constants_as_inputs() -> None:
    maker = get_adapter(COMPILED).maker

    def scaled(x: Any, c: Any, k: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x) * c) * k

    prep = di.prepare_gradient(scaled, COMPILED, X, di.Constant(np.ones(3)), di.Constant(2.0))
    before = maker.traces
    for i in range(5):
        c = np.full(3, float(i))
        g = di.gradient(scaled, prep, COMPILED, X + i, di.Constant(c), di.Constant(0.5 * i))
        close(g, np.cos(X + i) * c * 0.5 * i)
    assert maker.traces - before == 1  # array and float Constants are inputs: one trace for all


@pytest.mark.parametrize("backend", BOTH)
def test_the_common_call_runs_the_engines_function_directly(
    backend: di.AbstractBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An MLX x without contexts skips the general path (conversions, scope, static
    values: counted by its in_transform calls); a NumPy x, a context or a caller's
    transform takes it, with the same derivatives, and a compiled program traces once."""
    from di.engines.mlx import programs

    general: list[Any] = []
    in_transform = programs.in_transform
    monkeypatch.setattr(programs, "in_transform", lambda x: general.append(x) or in_transform(x))
    x, t = mx.array(X), mx.array(T)
    maker = get_adapter(backend).maker
    prep = di.prepare_gradient(sin_x, backend, x)
    pulled = di.prepare_pullback(vector, backend, x, (t,))
    scales = (1.0, 2.0, 3.0)
    pulled_back = [di.pullback(vector, backend, scale * X, (T,))[0] for scale in scales]  # (NumPy: the general path)
    assert general
    general.clear()
    traces = []
    for scale, reference in zip(scales, pulled_back):
        close(di.gradient(sin_x, prep, backend, scale * x), np.cos(scale * X) * scale * X + np.sin(scale * X))
        (product,) = di.pullback(vector, pulled, backend, scale * x, (t,))
        close(product, reference)
        assert product.__class__ is mx.array
        traces.append(maker.traces)
    assert general == []
    assert traces[0] == traces[-1]  # compiled: each program traced once (at preparation or its first call)
    second = mx.grad(lambda x: di.gradient(sin_x, prep, backend, x)[0])(x)  # inside mx.grad: the general path
    close(second, di.hessian(sin_x, backend, X)[0])
    assert general


def test_static_constants_compile_once_per_value_and_warn_on_a_storm() -> None:
    maker = get_adapter(COMPILED).maker

    def power(x: Any, n: int) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**n)

    prep = di.prepare_gradient(power, COMPILED, X, di.Constant(2))
    before = maker.traces
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in [2, 3, 2, 3, *range(4, 12)]:
            close(di.gradient(power, prep, COMPILED, X, di.Constant(n)), n * X ** (n - 1))
    assert 10 <= maker.traces - before <= 11  # one per distinct n (MLX may trace the first again)
    assert any(issubclass(w.category, di.RecompileWarning) for w in caught)


def test_a_retrace_storm_warns_then_stops() -> None:
    prep = di.prepare_gradient(sin_x, COMPILED, np.ones(2), strict=False)  # a loose prep: any shape goes
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(di.RecompileLimitError, match="traced f again"):
            for n in range(3, 40):
                close(di.gradient(sin_x, prep, COMPILED, np.ones(n)), np.full(n, np.cos(1.0) + np.sin(1.0)))
    assert any(issubclass(w.category, di.RecompileWarning) for w in caught)


def test_a_python_value_of_x_under_compile_is_a_di_error_and_runs_eagerly() -> None:
    def branching(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**2) if float(x[0]) > 0 else xp.sum(x**3)

    with pytest.raises(di.InvalidOutputError, match=r"AutoMLX\(\) \(compile=False\)"):
        di.gradient(branching, COMPILED, X)
    close(di.gradient(branching, EAGER, X), 2 * X)


# --- DifferentiateWith in both directions -----------------------------------------------------------


def test_mlx_hosts_a_jax_and_a_torch_function() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    torch = pytest.importorskip("torch")
    x = mx.array(X, dtype=mx.float32)
    expected = mx.grad(lambda x: mx.sum(mx.sin(x) * x) * 2)(x)
    for f, inner in (
        (lambda x: jnp.sum(jnp.sin(x) * x), di.AutoJAX()),
        (lambda x: torch.sum(torch.sin(x) * x), di.AutoTorch()),
    ):
        g = di.DifferentiateWith(f, inner)
        close(mx.grad(lambda x, g=g: g(x) * 2)(x), expected)
        (_,), (tangent,) = mx.jvp(g, [x], [mx.array(T, dtype=mx.float32)])
        close(tangent, mx.jvp(lambda x: mx.sum(mx.sin(x) * x), [x], [mx.array(T, dtype=mx.float32)])[1][0])
    g = di.DifferentiateWith(lambda x: jnp.sum(jnp.sin(x) * x), di.AutoJAX())
    with pytest.raises(di.UnsupportedOperatorError, match=r"mx\.compile or mx\.vmap"):
        mx.compile(mx.grad(g))(x)


def test_mlx_differentiates_inside_jax_torch_and_autograd() -> None:
    g = di.DifferentiateWith(lambda x: mx.sum(mx.sin(x) * x), EAGER)
    expected = 2 * (np.cos(X) * X + np.sin(X))
    jax = pytest.importorskip("jax")
    close(jax.grad(lambda x: g(x) * 2)(jax.numpy.asarray(X, dtype=jax.numpy.float32)), expected)
    torch = pytest.importorskip("torch")
    t = torch.tensor(X, requires_grad=True)
    (g(t) * 2).backward()
    close(t.grad, expected)
    autograd = pytest.importorskip("autograd")
    close(autograd.grad(lambda x: g(x) * 2)(X), expected)


def test_second_derivatives_through_g_are_refused_both_ways_never_zero() -> None:
    # g's derivative rules are computed outside the outer engine's graph: none can differentiate them
    # again. MLX as the host used to give zeros; each way is now one di error naming the remedy, and
    # the remedy it names (di directly on f with g's backend, or SecondOrder) gives the outer engine's
    # native Hessian.
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = np.array(X, dtype=np.float32)
    hessian = np.diag(2 * np.cos(X) - X * np.sin(X))
    hosted = di.DifferentiateWith(lambda x: jnp.sum(jnp.sin(x) * x), di.AutoJAX())

    def calls_g(x: Any) -> Any:
        return hosted(x) * 1.0

    second_order = {
        "hessian": lambda: di.hessian(calls_g, EAGER, x),
        "hvp": lambda: di.hvp(calls_g, EAGER, x, (np.ones(3, np.float32),)),
        "second_derivative": lambda: di.second_derivative(lambda s: hosted(s * mx.ones(3)), EAGER, 0.7),
        "mx.jvp of mx.grad": lambda: mx.jvp(mx.grad(calls_g), [mx.array(x)], [mx.ones(3)]),
        "mx.grad of mx.grad": lambda: mx.grad(lambda x: mx.sum(mx.grad(calls_g)(x)))(mx.array(x)),
    }
    for name, call in second_order.items():
        with pytest.raises(di.UnsupportedOperatorError, match=r"inside MLX: a second derivative through g") as info:
            call()
        assert "di.hessian(f, AutoJAX" in str(info.value), name
    close(di.gradient(calls_g, EAGER, x), np.sin(X) + X * np.cos(X))  # first order still runs through g
    close(di.hessian(calls_g, di.SecondOrder(di.AutoFiniteDiff(), EAGER), x), hessian, rtol=1e-2, atol=1e-2)
    native = jax.hessian(lambda x: jnp.sum(jnp.sin(x) * x))(jnp.asarray(X))

    guest = di.DifferentiateWith(lambda x: mx.sum(mx.sin(x) * x), EAGER)  # MLX inside JAX and torch
    with pytest.raises(di.UnsupportedOperatorError, match=r"inside JAX: a second derivative through g"):
        jax.hessian(guest)(jnp.asarray(x))
    pytest.importorskip("torch")
    with pytest.raises(di.UnsupportedOperatorError, match=r"inside torch: a second derivative through g"):
        di.hvp(guest, di.AutoTorch(), X, (np.ones(3),))
    close(di.hessian(sin_x, EAGER, x), native)  # the remedy: MLX's own Hessian of f


# --- di inside MLX's own transforms ----------------------------------------------------------------

_XM, _TM = mx.array(X, dtype=mx.float32), mx.array(T, dtype=mx.float32)


APPLY = appliers("mx")
_GRAD = mx.grad(lambda x: mx.sum(mx.sin(x) * x))
NATIVE: dict[str, Callable[[Any], Any]] = {
    "gradient": _GRAD,
    "derivative": lambda x: mx.jvp(lambda s: mx.stack([mx.sin(s) * s, s**3]), [x[0]], [mx.array(1.0)])[1][0],
    "jacobian": lambda x: mx.vmap(lambda c: mx.vjp(lambda x: mx.sin(x) * x, [x], [c])[1][0])(mx.eye(3)),
    "pushforward": lambda x: mx.jvp(lambda x: mx.sin(x) * x, [x], [_TM])[1][0],
    "pullback": lambda x: mx.vjp(lambda x: mx.sin(x) * x, [x], [_TM])[1][0],
    "hvp": lambda x: mx.jvp(_GRAD, [x], [_TM])[1][0],
    "hessian": lambda x: mx.vmap(lambda t: mx.jvp(_GRAD, [x], [t])[1][0])(mx.eye(3)),
    "second_derivative": lambda x: mx.jvp(
        lambda s: mx.jvp(lambda s: mx.stack([mx.sin(s) * s, s**3]), [s], [mx.array(1.0)])[1][0],
        [x[0]],
        [mx.array(1.0)],
    )[1][0],
}


def test_every_declared_transform_is_tested() -> None:
    assert {c.transform for c in compositions(EAGER)} == set(APPLY)
    assert set(NATIVE) == set(OPERATORS)


@pytest.mark.parametrize("operator", list(OPERATORS))
@pytest.mark.parametrize("transform", list(APPLY))
@pytest.mark.parametrize("backend", BOTH)
def test_operator_inside_transform_agrees_with_mlx(backend: di.AbstractBackend, transform: str, operator: str) -> None:
    composition = next(c for c in compositions(backend) if c.transform == transform)
    assert composition.composes(operator) and composition.composes("unprepared")
    apply = APPLY[transform]
    t = _TM
    expected = apply(NATIVE[operator], _XM)
    prep = prepare(operator, backend, _XM, t)
    close(apply(di_function(operator, backend, prep, t), _XM), expected, rtol=1e-4, atol=1e-5)
    close(apply(di_function(operator, backend, None, t), _XM), expected, rtol=1e-4, atol=1e-5)


def test_second_derivatives_through_di_gradient() -> None:
    hessian = mx.vmap(lambda t: mx.jvp(lambda x: di.gradient(scalar, EAGER, x), [_XM], [t])[1][0])(mx.eye(3))
    close(hessian, NATIVE["hessian"](_XM), rtol=1e-4, atol=1e-5)


# --- strategies over MLX ------------------------------------------------------------------------------


def energy(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**4) / 4 + x[0] * x[1]


def test_second_order_pairs_over_mlx() -> None:
    x = np.array([1.0, 2.0])
    hessian = np.array([[3.0, 1.0], [1.0, 12.0]])
    for outer in (EAGER, COMPILED, di.AutoFiniteDiff()):
        close(di.hessian(energy, di.SecondOrder(outer, EAGER), x), hessian, rtol=1e-5, atol=1e-5)
    close(di.hvp(energy, di.SecondOrder(COMPILED, COMPILED), x, (np.array([1.0, 0.0]),))[0], hessian[:, 0])
    with pytest.raises(di.UnsupportedOperatorError, match="cannot differentiate the programs"):
        di.hessian(energy, di.SecondOrder(di.AutoJAX(), EAGER), x)


def test_sparse_and_fastest_over_mlx() -> None:
    def chain(x: Any) -> Any:
        xp = di.array_namespace(x)
        return x[1:] * x[:-1] + xp.sin(x[1:])

    x = np.linspace(0.0, 1.0, 6)
    dense = di.jacobian(chain, EAGER, x)
    for backend in (EAGER, COMPILED):
        sparse = di.jacobian(chain, di.AutoSparse(backend), x)
        assert sparse.nnz == 10
        close(sparse.toarray(), dense)
        with pytest.raises(di.UnsupportedOperatorError, match="dense_result=True"):
            di.jacobian(chain, di.AutoSparse(backend), mx.array(x))
        result = di.jacobian(chain, di.AutoSparse(backend, dense_result=True), mx.array(x, dtype=mx.float32))
        assert isinstance(result, mx.array)
        close(result, dense, rtol=1e-4, atol=1e-5)
    fastest = di.AutoFastest(candidates=[EAGER, COMPILED], budget_s=0.05)
    prep = di.prepare_gradient(energy, fastest, np.array([1.0, 2.0]))
    close(di.gradient(energy, prep, fastest, np.array([1.0, 2.0])), [1.0 + 2.0, 8.0 + 1.0])
