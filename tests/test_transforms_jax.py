"""``di`` inside JAX's own transforms: ``jit``, ``vmap``, ``grad``, ``jacfwd``/``jacrev``,
``lax.scan`` and ``while_loop`` bodies, ``shard_map``.

Every declared composition of the JAX adapter (``COMPOSITIONS`` in
``di/engines/jax/adapter.py``, which the documentation's table shows) runs here:
each operator, prepared strictly outside the transform and unprepared, on
``AutoJAX(jit=False/True)``, ``AutoSparse`` over it and ``SecondOrder(JAX, JAX)``,
agrees with the native JAX composition; each refusal is a ``di`` error naming the
transform. Also: higher order, strict preps comparing abstract values (weak type,
per-example shape), one compiled program, x64 scopes inside traces, sharding
(4 virtual CPU devices, in a subprocess: the flag must precede importing JAX).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from transform_cases import (
    OPERATORS,
    T,
    X,
    appliers,
    compositions,
    curve,
    di_function,
    operators_of,
    prepare,
    scalar,
    vector,
)

import di

jax = pytest.importorskip("jax")
jnp = jax.numpy

BACKENDS = [
    di.AutoJAX(),
    di.AutoJAX(jit=True),
    di.AutoSparse(di.AutoJAX()),
    di.SecondOrder(di.AutoJAX(), di.AutoJAX()),
]
IDS = ["jax", "jax-jit", "sparse-jax", "second-order-jax"]


APPLY = appliers("jax")
"""Each declared transform applied to a function of ``x`` (a vector), as a user would."""

NATIVE: dict[str, Callable[[Any], Any]] = {
    "gradient": lambda x: jax.grad(scalar)(x),
    "derivative": lambda x: jax.jacfwd(curve)(x[0]),
    "jacobian": lambda x: jax.jacfwd(vector)(x),
    "pushforward": lambda x: jax.jvp(vector, (x,), (jnp.asarray(T, x.dtype),))[1],
    "pullback": lambda x: jax.vjp(vector, x)[1](jnp.asarray(T, x.dtype))[0],
    "hvp": lambda x: jax.jvp(jax.grad(scalar), (x,), (jnp.asarray(T, x.dtype),))[1],
    "hessian": lambda x: jax.hessian(scalar)(x),
    "second_derivative": lambda x: jax.jacfwd(jax.jacfwd(curve))(x[0]),
}
"""The native JAX composition each operator must agree with."""


@functools.cache
def _native(transform: str, operator: str) -> np.ndarray:
    """The native composition's result at ``X`` (and ``T``), computed once for the four backends."""
    x = jnp.asarray(X, jnp.float32)
    return np.asarray(APPLY[transform](NATIVE[operator], x))


def _cases() -> list[Any]:
    return [
        pytest.param(backend, composition.transform, operator, id=f"{name}-{composition.transform}-{operator}")
        for backend, name in zip(BACKENDS, IDS)
        for composition in compositions(backend)
        for operator in operators_of(backend)
    ]


def _composition(backend: Any, transform: str) -> Any:
    return next(c for c in compositions(backend) if c.transform == transform)


def test_every_declared_transform_is_tested() -> None:
    assert {c.transform for c in compositions(di.AutoJAX())} == set(APPLY)
    assert set(NATIVE) == set(OPERATORS)


@pytest.mark.parametrize(("backend", "transform", "operator"), _cases())
def test_operator_inside_transform_agrees_with_jax(backend: Any, transform: str, operator: str) -> None:
    composition = _composition(backend, transform)
    assert composition.composes(operator)
    apply = APPLY[transform]
    x, t = jnp.asarray(X, jnp.float32), jnp.asarray(T, jnp.float32)
    expected = _native(transform, operator)
    prep = prepare(operator, backend, x, t)  # strict, made outside the transform
    prepared = apply(di_function(operator, backend, prep, t), x)
    assert isinstance(prepared, jax.Array)
    np.testing.assert_allclose(np.asarray(prepared), expected, rtol=2e-5, atol=1e-6)
    assert composition.composes("unprepared")
    unprepared = apply(di_function(operator, backend, None, t), x)
    np.testing.assert_allclose(np.asarray(unprepared), expected, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("transform", list(APPLY))
def test_same_point_preps_are_refused_inside_transforms(transform: str) -> None:
    composition = _composition(di.AutoJAX(), transform)
    assert not composition.composes("same point")
    backend = di.AutoJAX()
    x, t = jnp.asarray(X, jnp.float32), jnp.asarray(T, jnp.float32)
    prep = di.prepare_pullback_same_point(vector, backend, x, (t,))

    def at_point(x: Any) -> Any:
        return di.pullback(vector, prep, backend, x, (t,))[0]

    with pytest.raises(di.UnsupportedOperatorError, match="same-point") as caught:
        APPLY[transform](at_point, x)
    assert transform in str(caught.value)
    with pytest.raises(di.UnsupportedOperatorError, match="same-point"):
        APPLY[transform](lambda x: di.prepare_pullback_same_point(vector, backend, x, (t,)).operator, x)


@pytest.mark.parametrize("transform", list(APPLY))
def test_cache_contexts_compose(transform: str) -> None:
    """JAX passes a Cache as an immutable array: inside transforms too."""
    assert _composition(di.AutoJAX(), transform).composes("Cache")

    def with_cache(x: Any, buffer: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x) * x) + 0.0 * xp.sum(buffer)

    x = jnp.asarray(X, jnp.float32)
    cache = di.Cache(jnp.zeros(3, jnp.float32))
    prep = di.prepare_gradient(with_cache, di.AutoJAX(jit=True), x, cache)
    result = APPLY[transform](lambda x: di.gradient(with_cache, prep, di.AutoJAX(jit=True), x, cache), x)
    np.testing.assert_allclose(np.asarray(result), np.asarray(APPLY[transform](NATIVE["gradient"], x)), rtol=2e-5)


# --- the error names the transform, and says what to do ------------------------------------------


@pytest.mark.parametrize(
    ("transform", "shown"),
    [
        ("jax.jit", "jax.jit"),
        ("jax.vmap", "jax.vmap"),
        ("jax.grad", "jax.grad"),
        ("jax.jacfwd", "jax.jacfwd"),
        ("jax.jacrev", "jax.jacrev"),
        ("jax.lax.scan", "jax.lax.scan"),
        ("jax.lax.while_loop", "jax.lax.while_loop"),
        ("jax.shard_map", "jax.shard_map"),
    ],
)
def test_refusals_name_the_transform(transform: str, shown: str) -> None:
    x, t = jnp.asarray(X, jnp.float32), jnp.asarray(T, jnp.float32)
    prep = di.prepare_pullback_same_point(vector, di.AutoJAX(), x, (t,))
    with pytest.raises(di.UnsupportedOperatorError) as caught:
        APPLY[transform](lambda x: di.pullback(vector, prep, di.AutoJAX(), x, (t,))[0], x)
    assert shown in str(caught.value)


@pytest.mark.parametrize("transform", ["jax.jit", "jax.vmap", "jax.grad"])
def test_other_engines_refuse_jax_tracers_up_front(transform: str) -> None:
    x = jnp.asarray(X, jnp.float32)
    for backend in (di.AutoFiniteDiff(), di.AutoAutograd(), di.AutoTorch()):
        if not backend.is_installed:
            continue
        with pytest.raises(di.InvalidInputError, match="is traced by jax") as caught:
            APPLY[transform](lambda x, backend=backend: di.gradient(scalar, backend, x), x)
        assert transform in str(caught.value)


# --- strict preps compare abstract values -------------------------------------------------------------


def test_a_strict_prep_compares_the_per_example_shape_under_vmap() -> None:
    backend = di.AutoJAX(jit=True)
    prep = di.prepare_gradient(scalar, backend, jnp.zeros(3, jnp.float32))
    batch = jnp.stack([jnp.asarray(X, jnp.float32)] * 2)
    np.testing.assert_allclose(
        jax.vmap(lambda x: di.gradient(scalar, prep, backend, x))(batch), jax.vmap(jax.grad(scalar))(batch), rtol=1e-6
    )
    with pytest.raises(di.PreparationMismatchError) as caught:  # vmapped over the other axis: (2,) per example
        jax.vmap(lambda x: di.gradient(scalar, prep, backend, x), in_axes=1)(batch)
    report = str(caught.value)
    assert "prepared jax float32 (3,)" in report and "given jax float32 (2,) (traced by jax.vmap)" in report


def test_a_strict_prep_compares_dtype_and_weak_type() -> None:
    backend = di.AutoJAX()
    prep = di.prepare_derivative(curve, backend, jnp.asarray(0.5, jnp.float32))  # a strong float32
    assert not jnp.asarray(0.5, jnp.float32).aval.weak_type
    np.testing.assert_allclose(
        jax.jit(lambda s: di.derivative(curve, prep, backend, s))(jnp.asarray(0.5, jnp.float32)),
        jax.jacfwd(curve)(jnp.asarray(0.5, jnp.float32)),
        rtol=1e-6,
    )
    with pytest.raises(di.PreparationMismatchError, match="weakly typed"):
        jax.jit(lambda s: di.derivative(curve, prep, backend, s))(0.5)  # a Python float: weakly typed
    with jax.enable_x64(True), pytest.raises(di.PreparationMismatchError, match="float64"):
        jax.jit(lambda s: di.derivative(curve, prep, backend, s))(jnp.asarray(0.5, jnp.float64))


# --- higher order, one program, x64 -------------------------------------------------------------


@pytest.mark.parametrize("backend", [di.AutoJAX(), di.AutoJAX(jit=True)], ids=["jax", "jax-jit"])
def test_grad_of_a_function_calling_gradient_gives_jax_hvps(backend: Any) -> None:
    x, v = jnp.asarray(X, jnp.float32), jnp.asarray(T, jnp.float32)
    prep = di.prepare_gradient(scalar, backend, x)

    def directional(x: Any) -> Any:
        return jnp.vdot(di.gradient(scalar, prep, backend, x), v)

    np.testing.assert_allclose(jax.grad(directional)(x), jax.hessian(scalar)(x) @ v, rtol=1e-5)
    np.testing.assert_allclose(
        jax.jacfwd(jax.grad(directional))(x), jax.jacfwd(jax.grad(lambda x: jax.grad(scalar)(x) @ v))(x), rtol=1e-5
    )


def test_a_jitted_loop_of_prepared_calls_is_one_program() -> None:
    """f is traced once per compile: the loop compiles to one program, and later
    calls run it without tracing again."""
    traces = []

    def counted(x: Any) -> Any:
        traces.append(type(x).__name__)
        return scalar(x)

    backend = di.AutoJAX(jit=True)
    x = jnp.asarray(X, jnp.float32)
    prep = di.prepare_gradient(counted, backend, x)
    traces.clear()

    @jax.jit
    def descend(x: Any) -> Any:
        def step(x: Any, _: Any) -> Any:
            y, g = di.value_and_gradient(counted, prep, backend, x)
            return x - 0.1 * g, y

        return jax.lax.scan(step, x, None, length=50)

    final, values = descend(x)
    first = len(traces)
    descend(x + 1.0)
    assert len(traces) == first, "a second call traced f again"
    assert first <= 2, traces
    expected = x
    for _ in range(50):
        expected = expected - 0.1 * jax.grad(scalar)(expected)
    np.testing.assert_allclose(final, expected, rtol=1e-4)
    assert values.shape == (50,)


@pytest.mark.parametrize("batched", [False, True], ids=["jit", "jit-of-vmap"])
def test_an_unprepared_compiled_call_inside_a_transform_compiles_only_the_callers_program(batched: bool) -> None:
    """Preparing on tracers (an unprepared call inside the transform) must not compile
    AutoJAX(jit=True)'s own program ahead of time: no call would run it, the caller's
    trace compiles it in. One XLA compile: the caller's."""
    compiles: list[str] = []

    def count(event: str, duration: float, **kwargs: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    backend = di.AutoJAX(jit=True)
    x = jnp.asarray(np.stack([X, 2 * X]) if batched else X, jnp.float32)
    batch: Callable[[Any], Any] = jax.vmap if batched else (lambda fn: fn)
    caller = jax.jit(batch(lambda x: di.gradient(scalar, backend, x)))
    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        got = caller(x)
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    np.testing.assert_allclose(got, batch(jax.grad(scalar))(x), rtol=1e-6)
    assert len(compiles) == 1, compiles


@pytest.mark.parametrize("backend", [di.AutoJAX(), di.AutoJAX(jit=True)], ids=["jax", "jax-jit"])
def test_x64_scopes_inside_a_float32_trace_change_nothing(backend: Any) -> None:
    """A float64 NumPy Constant makes di enter jax.enable_x64 inside the caller's
    float32 jit trace: the results equal the call outside the trace, and the
    caller's own float32 code around it is untouched."""

    def weighted(x: Any, c: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x) * c)

    c = np.array([1.0, 2.0, 3.0])  # float64
    x = jnp.asarray(X, jnp.float32)
    eager = di.value_and_gradient(weighted, backend, x, di.Constant(c))

    def caller(x: Any) -> Any:
        y, g = di.value_and_gradient(weighted, backend, x, di.Constant(c))
        return y, g, jnp.sum(x * np.float32(0.5)) + jnp.asarray(np.arange(3.0)).sum()

    jitted = jax.jit(caller)(x)
    plain = caller(x)
    for got, want in zip(jitted[:2], eager):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert jitted[2].dtype == plain[2].dtype == jnp.float32
    assert not jax.config.jax_enable_x64


def test_results_inside_a_transform_stay_jax_values_for_numpy_constants() -> None:
    seen = []
    a = np.array([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0]], dtype=np.float32)

    def quadratic(x: Any, a: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * (a @ x))

    def inner(x: Any) -> Any:
        g = di.gradient(quadratic, di.AutoJAX(), x, di.Constant(a))
        seen.append(type(g))
        return g

    result = jax.jit(inner)(jnp.asarray(X, jnp.float32))
    assert issubclass(seen[0], jax.core.Tracer)
    np.testing.assert_allclose(result, 2 * a @ X, rtol=1e-6)


# --- has_aux under jit: the non-array part of aux belongs to the program that ran ---------------------


def _per_element(x: Any) -> Any:
    """A scalar with an aux whose structure depends on x's shape: one array per element."""
    xp = di.array_namespace(x)
    return xp.sum(x * x), {"n": x.shape[0], "parts": [x[i] * 1 for i in range(x.shape[0])]}


def _per_element_vector(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.multiply(x, x), {"n": x.shape[0], "parts": [x[i] * 1 for i in range(x.shape[0])]}


_AUX_OPERATORS = {
    "gradient": (_per_element, di.prepare_gradient, di.gradient, lambda out: out[1]),
    "value_and_gradient": (_per_element, di.prepare_gradient, di.value_and_gradient, lambda out: out[0][1]),
    "jacobian": (_per_element_vector, di.prepare_jacobian, di.jacobian, lambda out: out[1]),
    "value_and_jacobian": (_per_element_vector, di.prepare_jacobian, di.value_and_jacobian, lambda out: out[0][1]),
}


@pytest.mark.parametrize("operator", list(_AUX_OPERATORS))
def test_aux_of_a_non_strict_compiled_prep_follows_the_shape_of_each_call(operator: str) -> None:
    f, prepare_op, op, aux_of = _AUX_OPERATORS[operator]
    backend = di.AutoJAX(jit=True)
    prep = prepare_op(f, backend, np.zeros(3), has_aux=True, strict=False)
    for n in (3, 4, 3, 5, 4, 3):
        x = np.arange(1.0, n + 1.0)
        aux = aux_of(op(f, prep, backend, x, has_aux=True))
        assert aux["n"] == n
        assert len(aux["parts"]) == n
        np.testing.assert_array_equal(np.stack(aux["parts"]), x)


def test_aux_with_a_static_context_follows_each_value_and_shape() -> None:
    def f(x: Any, k: int) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * x) * k, {"k": k, "n": x.shape[0]}

    backend = di.AutoJAX(jit=True)
    prep = di.prepare_gradient(f, backend, np.zeros(3), di.Constant(2), has_aux=True, strict=False)
    for n, k in [(3, 2), (4, 2), (3, 5), (3, 2), (4, 5), (4, 2)]:
        g, aux = di.gradient(f, prep, backend, np.ones(n), di.Constant(k), has_aux=True)
        assert aux == {"k": k, "n": n}
        np.testing.assert_allclose(g, 2.0 * k * np.ones(n))


@pytest.mark.parametrize("backend", [di.AutoJAX(), di.AutoJAX(jit=True)], ids=["jax", "jax-jit"])
def test_an_array_of_another_family_in_aux_comes_back_as_on_every_backend(backend: Any) -> None:
    torch = pytest.importorskip("torch")

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * x), {"w": torch.arange(x.shape[0], dtype=torch.float64), "y": x * 2}

    x = np.array([0.5, 1.0], dtype=np.float32)
    g, aux = di.gradient(f, backend, x, has_aux=True)
    _, want = di.gradient(f, di.AutoFiniteDiff(), x, has_aux=True)
    assert type(aux["w"]) is type(want["w"]) is np.ndarray
    assert aux["w"].dtype == want["w"].dtype == np.float64
    np.testing.assert_array_equal(aux["w"], want["w"])
    assert type(aux["y"]) is np.ndarray and aux["y"].dtype == np.float32
    np.testing.assert_allclose(aux["y"], 2 * x, rtol=1e-6)
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6)


def test_constant_arrays_in_aux_keep_their_dtype_and_are_fresh_on_every_compiled_call() -> None:
    torch = pytest.importorskip("torch")

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        n = x.shape[0]
        return xp.sum(x * x), {"np": np.arange(float(n)), "torch": torch.arange(n), "note": "ok"}

    backend = di.AutoJAX(jit=True)
    prep = di.prepare_gradient(f, backend, np.zeros(2, np.float32), has_aux=True, strict=False)
    for n in (2, 3, 2):
        first = di.gradient(f, prep, backend, np.ones(n, np.float32), has_aux=True)[1]
        assert first["np"].dtype == np.float64 and first["torch"].dtype == np.int64
        np.testing.assert_array_equal(first["np"], np.arange(float(n)))
        np.testing.assert_array_equal(first["torch"], np.arange(n))
        first["np"][:] = -1.0
        first["torch"][:] = -1
        second = di.gradient(f, prep, backend, np.ones(n, np.float32), has_aux=True)[1]
        np.testing.assert_array_equal(second["np"], np.arange(float(n)))
        np.testing.assert_array_equal(second["torch"], np.arange(n))
        assert second["note"] == "ok"


# --- sharding: 4 virtual CPU devices, in a fresh process ----------------------------------------------

_SHARDING = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import di

    def f(x):
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x) * x)

    assert len(jax.devices()) == 4
    mesh = Mesh(np.array(jax.devices()), ("d",))
    sharding = NamedSharding(mesh, P("d"))
    x = jax.device_put(jnp.arange(8.0, dtype=jnp.float32), sharding)
    expected = np.asarray(jax.grad(f)(x))
    for backend in (di.AutoJAX(), di.AutoJAX(jit=True)):
        prep = di.prepare_gradient(f, backend, jnp.zeros(8, jnp.float32))
        g = jax.jit(lambda x: di.gradient(f, prep, backend, x))(x)
        assert g.sharding == x.sharding, g.sharding
        np.testing.assert_allclose(g, expected, rtol=1e-6)
        g = di.gradient(f, prep, backend, x)
        assert g.sharding == x.sharding, g.sharding
        block = di.prepare_gradient(f, backend, jnp.zeros(2, jnp.float32))
        body = jax.shard_map(lambda b: di.gradient(f, block, backend, b), mesh=mesh, in_specs=P("d"), out_specs=P("d"))
        g = jax.jit(body)(x)
        assert g.sharding == x.sharding, g.sharding
        np.testing.assert_allclose(g, expected, rtol=1e-6)
        unprepared = jax.shard_map(lambda b: di.gradient(f, backend, b), mesh=mesh, in_specs=P("d"), out_specs=P("d"))
        np.testing.assert_allclose(jax.jit(unprepared)(x), expected, rtol=1e-6)
    print("sharded ok")
    """
)


def test_sharded_inputs_keep_their_sharding_and_shard_map_bodies_call_di() -> None:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _SHARDING], capture_output=True, text=True, env=env, cwd=root, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sharded ok" in done.stdout
